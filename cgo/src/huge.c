/* huge.c: blocks of at least the huge threshold, each its own mapping,
 * recorded in an open-addressing hash table (address -> sizes) under
 * _ta_huge_lock. Freed at once (munmap), grown with mremap. */

typedef struct _ta_huge_s {
  uintptr_t addr;    /* 0 empty, 1 deleted */
  size_t mapped;     /* bytes mapped (a multiple of the OS page) */
  size_t requested;  /* bytes asked for */
  size_t align;      /* alignment asked for (mremap keeps only OS pages) */
} _ta_huge_t;

static pthread_mutex_t _ta_huge_lock = PTHREAD_MUTEX_INITIALIZER;
static _ta_huge_t *_ta_huge_tab;
static size_t _ta_huge_cap, _ta_huge_used, _ta_huge_tomb;
static size_t _ta_huge_bytes; /* mapped bytes of live huge blocks */
static size_t _ta_huge_count;

#define TA_HUGE_DELETED ((uintptr_t)1)

static inline size_t _ta_huge_hash(uintptr_t a) {
  a >>= 12;
  a *= 0x9E3779B97F4A7C15ull;
  return (size_t)(a >> 20);
}

static _ta_huge_t *_ta_huge_find_locked(uintptr_t a) {
  if (!_ta_huge_cap) return NULL;
  size_t m = _ta_huge_cap - 1;
  for (size_t i = _ta_huge_hash(a) & m;; i = (i + 1) & m) {
    _ta_huge_t *e = &_ta_huge_tab[i];
    if (e->addr == a) return e;
    if (e->addr == 0) return NULL;
  }
}

static bool _ta_huge_grow_locked(void) {
  size_t ncap = _ta_huge_cap ? _ta_huge_cap * 2 : 1024;
  size_t bytes = ncap * sizeof(_ta_huge_t);
  _ta_huge_t *nt = _ta_os_map(bytes, TA_OS_PAGE);
  if (!nt) return false;
  _ta_os_name(nt, bytes, "tagalloc huge table");
  for (size_t i = 0; i < _ta_huge_cap; i++) {
    _ta_huge_t *e = &_ta_huge_tab[i];
    if (e->addr <= TA_HUGE_DELETED) continue;
    for (size_t j = _ta_huge_hash(e->addr) & (ncap - 1);; j = (j + 1) & (ncap - 1)) {
      if (nt[j].addr == 0) { nt[j] = *e; break; }
    }
  }
  if (_ta_huge_tab) _ta_os_release(_ta_huge_tab, _ta_huge_cap * sizeof(_ta_huge_t));
  _ta_huge_tab = nt;
  _ta_huge_cap = ncap;
  _ta_huge_tomb = 0;
  return true;
}

static bool _ta_huge_insert_locked(uintptr_t a, size_t mapped, size_t requested, size_t align) {
  if ((_ta_huge_used + _ta_huge_tomb + 1) * 2 > _ta_huge_cap && !_ta_huge_grow_locked()) return false;
  size_t m = _ta_huge_cap - 1;
  for (size_t i = _ta_huge_hash(a) & m;; i = (i + 1) & m) {
    _ta_huge_t *e = &_ta_huge_tab[i];
    if (e->addr <= TA_HUGE_DELETED) {
      if (e->addr == TA_HUGE_DELETED) _ta_huge_tomb--;
      *e = (_ta_huge_t){a, mapped, requested, align};
      _ta_huge_used++;
      _ta_huge_bytes += mapped;
      _ta_huge_count++;
      return true;
    }
  }
}

static void _ta_huge_erase_locked(_ta_huge_t *e) {
  _ta_huge_bytes -= e->mapped;
  _ta_huge_count--;
  e->addr = TA_HUGE_DELETED;
  _ta_huge_used--;
  _ta_huge_tomb++;
}

static void *_ta_huge_alloc(size_t size, size_t align, bool zero) {
  (void)zero; /* fresh mappings are zero */
  if (!_ta_ensure_init()) return NULL;
  size_t mapped = _ta_align_up(size, TA_OS_PAGE);
  if (mapped < size) { errno = ENOMEM; return NULL; }
  void *p = _ta_os_map(mapped, align);
  if (!p) {
    _ta_arena_purge(true);
    p = _ta_os_map(mapped, align);
    if (!p) { errno = ENOMEM; return NULL; }
  }
  pthread_mutex_lock(&_ta_huge_lock);
  bool ok = _ta_huge_insert_locked((uintptr_t)p, mapped, size, align);
  pthread_mutex_unlock(&_ta_huge_lock);
  if (!ok) {
    _ta_os_release(p, mapped);
    errno = ENOMEM;
    return NULL;
  }
  _ta_os_name(p, mapped, "tagalloc huge");
  return p;
}

static bool _ta_huge_lookup(const void *p, size_t *mapped, size_t *requested) {
  pthread_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  if (e) {
    if (mapped) *mapped = e->mapped;
    if (requested) *requested = e->requested;
  }
  pthread_mutex_unlock(&_ta_huge_lock);
  return e != NULL;
}

static bool _ta_huge_free(void *p) {
  pthread_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  size_t mapped = 0;
  if (e) {
    mapped = e->mapped;
    _ta_huge_erase_locked(e);
  }
  pthread_mutex_unlock(&_ta_huge_lock);
  if (!e) return false;
  _ta_os_release(p, mapped);
  return true;
}

/* Resize a huge block with mremap. NULL (block intact) if it cannot. */
static void *_ta_huge_realloc(void *p, size_t size) {
  size_t mapped = _ta_align_up(size, TA_OS_PAGE);
  pthread_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  if (!e || e->align > TA_OS_PAGE) {
    pthread_mutex_unlock(&_ta_huge_lock);
    return NULL;
  }
  size_t old = e->mapped, align = e->align;
  if (old == mapped) {
    e->requested = size;
    pthread_mutex_unlock(&_ta_huge_lock);
    return p;
  }
  _ta_huge_erase_locked(e);
  void *q = _ta_os_remap(p, old, mapped);
  bool ok = _ta_huge_insert_locked((uintptr_t)(q ? q : p), q ? mapped : old, q ? size : e->requested, align);
  pthread_mutex_unlock(&_ta_huge_lock);
  if (!ok) _ta_fatal("huge table: cannot re-record %p after mremap", q ? q : p);
  return q;
}
