/* huge.c: blocks with their own mapping (at least the huge threshold, or
 * grown past TA_REALLOC_MAP, 8 MiB, by realloc), recorded in an
 * open-addressing hash table (address -> sizes) under _ta_huge_lock,
 * grown with mremap. A freed mapping waits in a small cache for reuse
 * (resident, so reusing it costs no page faults) until the purge delay
 * passes or the cache is over its budget, then is unmapped. The budget is
 * the arena's: huge blocks count in the heap's high-water mark, and the
 * cache holds what the retain limit leaves after the arena's free
 * resident pages (_ta_arena_huge_budget), so a program that frees a
 * 64 MiB block and asks for another reuses it, as one with 64 MiB spans
 * does. */

typedef struct _ta_huge_s {
  uintptr_t addr;    /* 0 empty, 1 deleted */
  size_t mapped;     /* bytes mapped (a multiple of the OS page) */
  size_t requested;  /* bytes asked for */
  size_t align;      /* alignment asked for (mremap keeps only OS pages) */
  uint32_t tag;      /* the tag it is charged to */
  uint32_t cut;      /* the mapping it is a piece of (_ta_huge_cache_cut_locked), 0 if none */
  bool primed;       /* its pages were resident or brought in before the
                        program had them (arena.c, density, as TA_PF_PRIMED):
                        its residency says nothing of the program's use */
} _ta_huge_t;

static pthread_mutex_t TA_LOCK _ta_huge_lock = PTHREAD_MUTEX_INITIALIZER;
static _ta_huge_t *_ta_huge_tab;
static size_t _ta_huge_cap, _ta_huge_used, _ta_huge_tomb;
static _Atomic(size_t) _ta_huge_bytes;
/* _ta_huge_bytes: mapped bytes of live huge blocks, written under
 * _ta_huge_lock, read by the arena's retain limit without it. */

#define TA_HUGE_DELETED ((uintptr_t)1)

/* The cache of freed mappings (_ta_huge_lock). */
#define TA_HUGE_CACHE 16
typedef struct {
  void *addr;
  size_t mapped;
  uint64_t freed_at_ms;
  uint32_t cut;      /* as _ta_huge_t's */
} _ta_huge_cached_t;
static _ta_huge_cached_t _ta_huge_cache[TA_HUGE_CACHE];
static size_t _ta_huge_ncached, _ta_huge_cached_bytes;
static _Atomic(size_t) _ta_huge_any_cached; /* a lock-free hint: _ta_huge_ncached != 0 */

/* The cache's size is published for the arena, whose retain limit it
 * shares (_ta_retain_limit_pages). */
static void _ta_huge_cache_publish_locked(void) {
  atomic_store_explicit(&_ta_huge_cached_pages, _ta_huge_cached_bytes >> TA_PAGE_SHIFT, memory_order_relaxed);
  atomic_store_explicit(&_ta_huge_any_cached, _ta_huge_ncached, memory_order_relaxed);
  if (_ta_books) atomic_store_explicit(&_ta_books->huge_cached, _ta_huge_cached_bytes, memory_order_relaxed);
}

/* Pieces of one mapping. A cached mapping a block takes part of is cut:
 * the part and the rest keep the number of the cut (the mapping's, if it
 * was already a piece), and so does every piece mremap leaves alone (a
 * remapped one loses it: moved or shrunk, the place it left may come back
 * as another mapping; grown in place, over room that was free, it may now
 * end where another mapping begins). Two pieces of one cut side by side
 * are one mapping to the kernel, so a block grows into the cached piece
 * after its end in place (_ta_huge_cache_join_locked); a mapping that only
 * lies next to it is never taken (mremap of the two would fail). Numbers
 * wrap after 2^32 cuts; a stale one also needs the exact address to
 * match. */
static uint32_t _ta_huge_cuts; /* _ta_huge_lock */

/* Take take bytes (a multiple of the OS page, at most its length) off the
 * front of cached mapping i: what is left stays cached, as freed when it
 * was. */
static void _ta_huge_cache_cut_locked(size_t i, size_t take) {
  _ta_huge_cached_t *c = &_ta_huge_cache[i];
  _ta_huge_cached_bytes -= take;
  if (take == c->mapped) {
    memmove(c, c + 1, (_ta_huge_ncached - i - 1) * sizeof(*c));
    _ta_huge_ncached--;
    return;
  }
  if (!c->cut && !(c->cut = ++_ta_huge_cuts)) c->cut = ++_ta_huge_cuts;
  c->addr = (uint8_t *)c->addr + take;
  c->mapped -= take;
}

/* Take cached mappings out that are too old, or all of them, or the oldest
 * while over budget (bytes: _ta_arena_huge_budget); returns how many were
 * put in out (to unmap unlocked). */
static size_t _ta_huge_cache_expire_locked(bool all, uint64_t now, size_t budget, _ta_huge_cached_t *out) {
  size_t n = 0;
  for (size_t i = 0; i < _ta_huge_ncached;) {
    _ta_huge_cached_t *c = &_ta_huge_cache[i];
    bool over = _ta_huge_cached_bytes > budget && i == 0;
    if (all || over || now - c->freed_at_ms >= _ta_opt.purge_delay_ms) {
      out[n++] = *c;
      _ta_huge_cache_cut_locked(i, c->mapped); /* the rest keep their order, oldest first */
      continue;
    }
    i++;
  }
  return n;
}

static void _ta_huge_unmap_all(const _ta_huge_cached_t *v, size_t n) {
  for (size_t i = 0; i < n; i++) _ta_os_release(v[i].addr, v[i].mapped);
}

/* A cached mapping for need bytes starting at a multiple of align (a power
 * of two), or NULL. For a buffer realloc is growing (growing): the
 * largest, at most 8 times need, whole: it grows into the room without a
 * system call or a fault, where a best fit would grow by mremap onto
 * fresh pages while a bigger resident mapping waits in the cache to be
 * unmapped (a loop of buffers grown to 1-4 MiB and freed faulted 23k
 * pages in huge mappings). Otherwise the best fit, of which need bytes
 * are taken and the rest, if 1 MiB or more, stays cached (a mapping is
 * only pages: its parts are unmapped, or taken, on their own); if none
 * fits, the largest of a quarter of need or more, smaller than need (*mapped says how
 * much: the caller grows it with mremap, so its resident pages serve,
 * moved, and only the rest faults). A loop of 64 KiB-64 MiB blocks mapped
 * 800 MiB afresh while 32 MiB mappings sat in the cache, and gave 64 MiB
 * ones to 32 MiB blocks. */
static void *_ta_huge_cache_take_locked(size_t need, size_t align, bool growing, size_t *mapped, uint32_t *cut) {
  size_t best = TA_HUGE_CACHE, most = growing ? need * 8 : SIZE_MAX, under = TA_HUGE_CACHE;
  if (growing && most / need != 8u) most = SIZE_MAX;
  for (size_t i = 0; i < _ta_huge_ncached; i++) {
    size_t m = _ta_huge_cache[i].mapped;
    if (((uintptr_t)_ta_huge_cache[i].addr & (align - 1)) != 0) continue;
    if (m < need) { /* mremap moves to OS-page alignment only */
      if (!growing && m >= need / 4 && align <= TA_OS_PAGE && (under == TA_HUGE_CACHE || m > _ta_huge_cache[under].mapped)) under = i;
      continue;
    }
    if (m > most) continue;
    if (best == TA_HUGE_CACHE || (growing ? m > _ta_huge_cache[best].mapped : m < _ta_huge_cache[best].mapped)) best = i;
  }
  if (best == TA_HUGE_CACHE) best = under;
  if (best == TA_HUGE_CACHE) return NULL;
  _ta_huge_cached_t *c = &_ta_huge_cache[best];
  void *p = c->addr;
  /* A growing buffer takes twice what it needs, the rest stays cached
   * where the buffer can take it back as it grows (_ta_huge_cache_join):
   * taken whole, a 4 MiB mapping held a buffer that stopped at 1.5 MiB,
   * its resident pages out of every limit's reach. */
  size_t take = growing ? _ta_align_up(2 * need, TA_OS_PAGE) : need;
  uint32_t had = c->cut;
  bool part = take >= need && c->mapped >= take + TA_MiB; /* a rest of 1 MiB or more stays */
  *mapped = part ? take : c->mapped;
  _ta_huge_cache_cut_locked(best, *mapped);
  *cut = part ? _ta_huge_cache[best].cut : had; /* the cut just made, or the whole's */
  return p;
}

/* Give the huge block at p (mapped bytes, a piece of cut) up to want
 * bytes more from the cached piece of the same cut right after it, if
 * there is one: its pages are resident and already in place, so growing
 * costs neither a system call nor a fault. What is left of that piece
 * stays cached if 1 MiB or more (else it goes too, unless exact: a
 * budgeted tag's block takes no more than its budgets admitted). Returns
 * the bytes given. */
static size_t _ta_huge_cache_join_locked(uintptr_t p, size_t mapped, uint32_t cut, size_t want, bool exact) {
  if (!cut) return 0;
  for (size_t i = 0; i < _ta_huge_ncached; i++) {
    _ta_huge_cached_t *c = &_ta_huge_cache[i];
    if (c->cut != cut || (uintptr_t)c->addr != p + mapped) continue;
    size_t take = c->mapped < want + (exact ? 0 : TA_MiB) ? c->mapped : want;
    _ta_huge_cache_cut_locked(i, take);
    _ta_huge_cache_publish_locked();
    return take;
  }
  return 0;
}

static void _ta_huge_purge(bool all) {
  _ta_huge_cached_t out[TA_HUGE_CACHE];
  size_t budget = all ? 0 : _ta_arena_huge_budget(0, NULL, 0);
  _ta_mutex_lock(&_ta_huge_lock);
  size_t n = _ta_huge_cache_expire_locked(all, _ta_now_ms(), budget, out);
  _ta_huge_cache_publish_locked();
  _ta_mutex_unlock(&_ta_huge_lock);
  _ta_huge_unmap_all(out, n);
}

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

/* A huge block came (add) or went: the total, here and in the books. */
static void _ta_huge_publish_locked(size_t mapped, bool add) {
  size_t v = atomic_load_explicit(&_ta_huge_bytes, memory_order_relaxed);
  v = add ? v + mapped : v - mapped;
  atomic_store_explicit(&_ta_huge_bytes, v, memory_order_relaxed);
  if (_ta_books) atomic_store_explicit(&_ta_books->huge_live, v, memory_order_relaxed);
}

/* Realloc's in-place path for huge blocks without the lock. A buffer that
 * realloc grows a few bytes at a time inside its mapping's room took the
 * huge lock and a table lookup each time: a third of realloc_chain's time
 * (8 buffers grown to 1-4 MiB 1-64 B at a time: 20 ns a call, mimalloc's
 * whole realloc about 5). Each thread keeps the last few huge blocks it
 * resized in place, with the table's epoch when it looked: the epoch
 * moves with every insert and erase (under the lock), so while it has
 * not moved no block was freed, moved or made, and a cached block's
 * mapping is what it was. A block handed to another thread and freed
 * there moves the epoch before the pointer can come back. Only where
 * nothing is kept per call: requested sizes not kept (TAGALLOC_REQUESTED,
 * whose counts the path would skip: the table's requested size stays
 * the last one the lock saw, added and taken away alike), no sampled
 * stacks, no checking build. */
#define TA_HUGE_RECENT 8
static _Atomic(uint64_t) _ta_huge_epoch;
typedef struct {
  uintptr_t addr;
  size_t mapped;
  uint64_t epoch;
  size_t asked; /* the last size asked of it here: growing from it stays */
} _ta_huge_recent_t;
static __thread _ta_huge_recent_t _ta_tls_huge_recent[TA_HUGE_RECENT];
static __thread unsigned _ta_tls_huge_recent_next;
#define TA_HUGE_FAST (!TA_SAMPLING && !TA_CHECK)

/* A huge block of mapped bytes, last asked to hold asked, stays where it
 * is for size bytes (need, in OS pages): it fits, and wastes less than
 * half or is growing (into room a cached mapping gave it: cutting that
 * off would unmap pages the buffer is about to fill). The locked path's
 * rule and the lock-free one's. */
static inline bool _ta_huge_stays(size_t need, size_t size, size_t mapped, size_t asked) {
  return need <= mapped && (need >= mapped / 2 || size >= asked);
}

static inline void _ta_huge_epoch_move_locked(void) {
  atomic_store_explicit(&_ta_huge_epoch, atomic_load_explicit(&_ta_huge_epoch, memory_order_relaxed) + 1, memory_order_release);
}

static bool _ta_huge_insert_locked(uintptr_t a, size_t mapped, size_t requested, size_t align, uint32_t tag, uint32_t cut, bool primed) {
  if ((_ta_huge_used + _ta_huge_tomb + 1) * 2 > _ta_huge_cap && !_ta_huge_grow_locked()) return false;
  size_t m = _ta_huge_cap - 1;
  for (size_t i = _ta_huge_hash(a) & m;; i = (i + 1) & m) {
    _ta_huge_t *e = &_ta_huge_tab[i];
    if (e->addr <= TA_HUGE_DELETED) {
      if (e->addr == TA_HUGE_DELETED) _ta_huge_tomb--;
      *e = (_ta_huge_t){a, mapped, requested, align, tag, cut, primed};
      _ta_huge_epoch_move_locked();
      _ta_huge_used++;
      _ta_huge_publish_locked(mapped, true);
      return true;
    }
  }
}

static void _ta_huge_erase_locked(_ta_huge_t *e) {
  _ta_huge_epoch_move_locked();
  _ta_huge_publish_locked(e->mapped, false);
  e->addr = TA_HUGE_DELETED;
  _ta_huge_used--;
  _ta_huge_tomb++;
}

static bool _ta_huge_free(void *p, uint32_t *tag, size_t *mapped_out, size_t *requested);

static void *_ta_huge_alloc(size_t size, size_t align, bool zero, bool growing, uint32_t tag) {
  if (!_ta_ensure_init()) return NULL;
  size_t need = _ta_align_up(size, TA_OS_PAGE);
  if (need < size) { errno = ENOMEM; return NULL; }
  size_t mapped = need;
  void *p = NULL;
  bool cached = false;
  uint32_t cut = 0; /* of the cached mapping it takes, unless remapped */
  if (atomic_load_explicit(&_ta_huge_any_cached, memory_order_relaxed)) {
    _ta_mutex_lock(&_ta_huge_lock);
    p = _ta_huge_cache_take_locked(need, align < TA_OS_PAGE ? TA_OS_PAGE : align, growing, &mapped, &cut);
    _ta_huge_cache_publish_locked();
    _ta_mutex_unlock(&_ta_huge_lock);
    cached = p != NULL;
  }
  size_t grown = 0; /* bytes of a cached mapping grown past its resident pages */
  if (p && mapped < need) {
    void *q = _ta_os_remap(p, mapped, need);
    cut = 0;
    if (q) {
      grown = need - mapped;
      p = q;
      mapped = need;
    } else {
      _ta_os_release(p, mapped);
      p = NULL;
      mapped = need;
      cached = false;
    }
  }
  if (!p) p = _ta_os_map(mapped, align);
  if (!p) {
    _ta_huge_purge(true);
    _ta_arena_purge(true);
    p = _ta_os_map(mapped, align);
    if (!p) { errno = ENOMEM; return NULL; }
  }
  if (cached && zero) memset(p, 0, size);
  /* arena.c, density: a cached mapping was resident, a populated one will
   * be: neither shows the program's use when freed */
  bool fill = !cached && _ta_arena_populate_next();
  _ta_mutex_lock(&_ta_huge_lock);
  bool ok = _ta_huge_insert_locked((uintptr_t)p, mapped, size, align, tag, cut, cached || fill);
  _ta_mutex_unlock(&_ta_huge_lock);
  if (!ok) {
    _ta_os_release(p, mapped);
    errno = ENOMEM;
    return NULL;
  }
  if (!cached) _ta_os_name(p, mapped, "tagalloc huge");
  (void)_ta_arena_huge_budget(mapped >> TA_PAGE_SHIFT, NULL, 0); /* the heap's mark and recent size know it */
  if (ta_unlikely(!_ta_count_alloc(tag, mapped, size))) { /* a budget refused it: back it goes */
    uint32_t t;
    size_t m, r;
    (void)_ta_huge_free(p, &t, &m, &r);
    errno = ENOMEM;
    return NULL;
  }
  if (fill) _ta_os_populate(p, need);
  if (grown && _ta_arena_dense()) _ta_os_populate((uint8_t *)p + (need - grown), grown);
  return p;
}

/* A block for a signal handler that interrupted its own thread's arena work
 * (types.h, error policy): the arena lock is its thread's, so the block gets
 * a mapping of its own instead, which free and realloc find like any huge
 * block. A system call, taken only in that instant. class_size is the
 * class it would have come from: its blocks' alignment (the largest power
 * of two dividing it, up to a page) is kept, for memalign's sake. */
static void *_ta_malloc_beside_arena(size_t size, size_t class_size) {
  size_t align = class_size & -class_size;
  if (align > TA_PAGE_SIZE) align = TA_PAGE_SIZE;
  return _ta_huge_alloc(size ? size : 1, align, false, false, _ta_current_tag());
}

static bool _ta_huge_lookup(const void *p, size_t *mapped) {
  _ta_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  if (e) {
    if (mapped) *mapped = e->mapped;
  }
  _ta_mutex_unlock(&_ta_huge_lock);
  return e != NULL;
}

/* Free a huge block: into the cache if it is not too big, else unmapped. */
static bool _ta_huge_free(void *p, uint32_t *tag, size_t *mapped_out, size_t *requested) {
  _ta_huge_cached_t out[TA_HUGE_CACHE + 1];
  size_t n = 0;
  _ta_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  if (!e) {
    _ta_mutex_unlock(&_ta_huge_lock);
    return false;
  }
  size_t mapped = e->mapped;
  bool primed = e->primed;
  uint32_t cut = e->cut;
  *tag = e->tag;
  *mapped_out = mapped;
  *requested = e->requested;
  _ta_huge_erase_locked(e);
  _ta_mutex_unlock(&_ta_huge_lock);
  /* what the retain limit leaves for the cache, with this block off the
   * heap (the arena lock comes before this one); the block measured for
   * the density unless primed */
  size_t budget = _ta_arena_huge_budget(0, primed ? NULL : p, mapped);
  _ta_mutex_lock(&_ta_huge_lock);
  uint64_t now = _ta_now_ms();
  if (mapped <= budget) {
    if (_ta_huge_ncached == TA_HUGE_CACHE) { /* evict the oldest */
      out[n++] = _ta_huge_cache[0];
      _ta_huge_cache_cut_locked(0, _ta_huge_cache[0].mapped);
    }
    _ta_huge_cache[_ta_huge_ncached++] = (_ta_huge_cached_t){p, mapped, now, cut};
    _ta_huge_cached_bytes += mapped;
  } else {
    out[n++] = (_ta_huge_cached_t){p, mapped, now, cut};
  }
  n += _ta_huge_cache_expire_locked(false, now, budget, out + n);
  _ta_huge_cache_publish_locked();
  _ta_mutex_unlock(&_ta_huge_lock);
  _ta_huge_unmap_all(out, n);
  _ta_arena_purge(false); /* the heap shrank: the arena may now hold too much */
  return true;
}

/* Resize huge block p for realloc, in place or with mremap. Returns the
 * block (perhaps moved), or NULL: then *found says whether p is a huge
 * block at all, and *mapped its size, and the caller must move it (a
 * shrink to a small size, an aligned block, or mremap failing). A block
 * that grows gets an eighth more room than asked (virtual: pages cost
 * nothing until touched), so growing a few bytes at a time does not make a
 * system call per page. One lookup, one lock. A resize without a copy is
 * said in did (types.h), for the sampler. */
static void *_ta_huge_resize(void *p, size_t size, bool *found, size_t *mapped_out, uint32_t *tag_out, bool *refused,
                             _ta_realloc_did_t *did) {
  size_t need = _ta_align_up(size, TA_OS_PAGE);
  if (TA_HUGE_FAST && !_ta_opt.requested && size > TA_MAX_SMALL) {
    uint64_t ep = atomic_load_explicit(&_ta_huge_epoch, memory_order_acquire);
    for (unsigned i = 0; i < TA_HUGE_RECENT; i++) {
      _ta_huge_recent_t *r = &_ta_tls_huge_recent[i];
      if (r->addr != (uintptr_t)p) continue;
      if (r->epoch == ep && _ta_huge_stays(need, size, r->mapped, r->asked)) {
        r->asked = size;
        *found = true;
        *mapped_out = r->mapped;
        return p;
      }
      break;
    }
  }
  _ta_mutex_lock(&_ta_huge_lock);
  _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
  *found = e != NULL;
  if (!e) {
    _ta_mutex_unlock(&_ta_huge_lock);
    return NULL;
  }
  size_t old = e->mapped, align = e->align, oldreq = e->requested;
  uint32_t tag = e->tag;
  bool primed = e->primed;
  uint32_t cut = e->cut;
  *mapped_out = old;
  *tag_out = tag;
  if (size <= TA_MAX_SMALL || align > TA_OS_PAGE) {
    _ta_mutex_unlock(&_ta_huge_lock);
    return NULL;
  }
  if (_ta_huge_stays(need, size, old, oldreq)) {
    TA_REALLOC_SAY(did, oldreq, old);
    e->requested = size;
    if (TA_HUGE_FAST) { /* the next ones need no lock (above): its own slot, else the next in turn */
      unsigned i = 0;
      while (i < TA_HUGE_RECENT && _ta_tls_huge_recent[i].addr != (uintptr_t)p) i++;
      if (i == TA_HUGE_RECENT) i = _ta_tls_huge_recent_next++ % TA_HUGE_RECENT;
      _ta_tls_huge_recent[i] = (_ta_huge_recent_t){(uintptr_t)p, old, atomic_load_explicit(&_ta_huge_epoch, memory_order_relaxed), size};
    }
    _ta_mutex_unlock(&_ta_huge_lock);
    _ta_count_resize(tag, old, old, oldreq, size);
    return p;
  }
  size_t mapped = need > old ? _ta_align_up(need + need / 8, TA_OS_PAGE) : need;
  if (mapped < need) mapped = need;
  if (mapped > old && _ta_budget_of(tag)) {
    /* a budgeted tag's block asks its budgets before it grows, outside
     * the lock (a notify callback may run); the caller owns the block,
     * so it is where it was when the lock is taken again */
    _ta_mutex_unlock(&_ta_huge_lock);
    if (!_ta_ctr_admit(tag, mapped - old)) {
      *refused = true;
      return NULL;
    }
    _ta_mutex_lock(&_ta_huge_lock);
    e = _ta_huge_find_locked((uintptr_t)p);
  }
  _ta_huge_erase_locked(e);
  if (mapped > old) { /* the cached rest of its own mapping first */
    size_t joined = _ta_huge_cache_join_locked((uintptr_t)p, old, cut, mapped - old, _ta_budget_of(tag) != 0);
    if (joined && old + joined >= need) { /* in place: nothing to map, nothing to fault */
      bool ok = _ta_huge_insert_locked((uintptr_t)p, old + joined, size, align, tag, cut, true); /* resident before the program had them */
      _ta_mutex_unlock(&_ta_huge_lock);
      if (!ok) _ta_fatal("huge table: cannot re-record %p after joining its mapping's rest", p);
      TA_REALLOC_SAY(did, oldreq, old + joined);
      _ta_count_resize(tag, old, old + joined, oldreq, size);
      return p;
    }
    if (joined) { /* all of the rest, and it is not enough: mremap the whole */
      _ta_count_resize(tag, old, old + joined, oldreq, oldreq);
      old += joined;
      primed = true;
    }
  }
  void *q = _ta_os_remap(p, old, mapped);
  if (q) cut = 0; /* remapped: no longer a piece beside the others (above) */
  bool fill = q && need > old && _ta_arena_dense(); /* arena.c, density */
  bool ok = _ta_huge_insert_locked((uintptr_t)(q ? q : p), q ? mapped : old, q ? size : oldreq, align, tag, cut, primed || fill);
  _ta_mutex_unlock(&_ta_huge_lock);
  if (!ok) _ta_fatal("huge table: cannot re-record %p after mremap", q ? q : p);
  if (q) {
    if (fill) _ta_os_populate((uint8_t *)q + old, need - old);
    TA_REALLOC_SAY(did, oldreq, mapped);
    _ta_count_resize(tag, old, mapped, oldreq, size);
  }
  return q;
}
