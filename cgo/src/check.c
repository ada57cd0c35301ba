/* check.c: the checking build (cc -DTA_CHECK=1; tagalloc run --check), a layer
 * over the public entry points for debugging sessions: block canaries,
 * freed-memory poisoning and delayed reuse, chosen by TAGALLOC_CHECK (a sum
 * of TA_CHK_*). The ordinary build compiles none of it.
 *
 * A live block, as the program sees it (with canaries):
 *   [0, req)              the program's bytes (malloc_usable_size says req)
 *   [req, usable - 16)    TA_CANARY_BYTE
 *   [usable - 16, usable) the trailer: req, and req sealed with the address
 * The core is asked for req + 16 bytes (32 at least), so every block has at
 * least 16 guard bytes after the requested ones, and the trailer never
 * overlaps the free-list words [0, 16) of a small block.
 * A freed block (in quarantine, or on a free list of its span):
 *   [0, 8)  TA_POISON_BYTE in quarantine, the free-list link after it
 *   [8, 16) the free key (_ta_block_t)
 *   [16, usable) TA_POISON_BYTE. Small spans poison their blocks when they
 *   are carved, so every free block of a small span holds poison.
 * What is checked, where:
 *   free, realloc, malloc_usable_size: the canaries and the trailer (an
 *     overrun); the free key with a poisoned trailer is a double free.
 *   malloc and the rest, handing out a small block: its poison (a write
 *     after free, however long ago).
 *   a block leaving the quarantine: its poison and key (a write after free
 *     while it was held).
 * A violation prints "tagalloc: CALL(ADDRESS): what: byte OFFSET is 0xGOT,
 * expected 0xWANT (block of N bytes requested, U usable, tag "T")" and aborts.
 *
 * Quarantine: a FIFO ring of freed small and large blocks (one for the
 * process, under _ta_quar_lock, a leaf lock: no other lock is taken while
 * it is held), TAGALLOC_CHECK_QUARANTINE bytes in all; a block over a quarter of
 * that is not held. A block is freed in the books when it enters (the heap
 * walk leaves quarantined blocks out, so tagalloc_check_books holds) and
 * goes back to its span, without being counted again, when it leaves. Huge
 * blocks (own mappings) get canaries but go back at once (unmapped, or
 * cached for reuse by huge.c): writes after their free are not caught. realloc
 * always moves a block of the arena, so a stale pointer to the old one hits
 * poison; it keeps the block's tag. */

#if TA_CHECK

#define TA_CHK_CANARY 1     /* canaries after each block */
#define TA_CHK_POISON 2     /* poison in freed blocks */
#define TA_CHK_QUARANTINE 4 /* delayed reuse */
#define TA_CANARY_BYTE 0xcb
#define TA_POISON_BYTE 0xdf
#define TA_TRAILER 16
#define TA_QUAR_CAP ((size_t)1 << 18) /* entries (4 MiB of 16-byte blocks) */

static inline bool _ta_chk(unsigned bit) { return (_ta_opt.check & bit) != 0; }

/* The first offset in [from, to) of p whose byte is not b, or to. */
static size_t _ta_first_not(const uint8_t *p, size_t from, size_t to, uint8_t b) {
  const uint64_t w = 0x0101010101010101ULL * b;
  size_t i = from;
  for (; i < to && (i & 7); i++)
    if (p[i] != b) return i;
  for (; i + 32 <= to; i += 32) { /* 32 bytes a step */
    uint64_t v[4];
    memcpy(v, p + i, 32);
    if (((v[0] ^ w) | (v[1] ^ w) | (v[2] ^ w) | (v[3] ^ w)) != 0) break;
  }
  for (; i + 8 <= to; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    if (v != w) break;
  }
  for (; i < to; i++)
    if (p[i] != b) return i;
  return to;
}

static const char *_ta_check_tag_name(uint32_t tag) {
  return _ta_tag_names && tag < TA_TAG_SLOTS ? _ta_tag_names[tag].name : "?";
}

/* ---- hooks of the lower layers -------------------------------------------------- */

/* A small block goes on a free list through the core (alloc.c's free paths,
 * internal frees included): poison all but its free-list words. */
static void _ta_check_poison_block(void *b, size_t usable) {
  if (_ta_chk(TA_CHK_POISON) && usable > 16) memset((uint8_t *)b + 16, TA_POISON_BYTE, usable - 16);
}

/* n fresh blocks of bsize bytes from first (page.c, carving). */
static void _ta_check_poison_carved(uint8_t *first, uint32_t n, uint32_t bsize) {
  if (!_ta_chk(TA_CHK_POISON) || bsize <= 16) return;
  for (uint32_t i = 0; i < n; i++) memset(first + (size_t)i * bsize + 16, TA_POISON_BYTE, bsize - 16);
}

/* ---- the blocks the checks look at -------------------------------------------- */

typedef struct {
  _ta_ptr_kind_t kind;
  _ta_page_t *pg; /* small, large */
  size_t usable;
  uint32_t tag;
} _ta_cblk_t;

/* What p is; aborts naming fn if it is no block of ours (any interior
 * pointer, from any thread, in this build). */
static _ta_cblk_t _ta_check_find(const char *fn, void *p) {
  _ta_cblk_t c = {TA_PTR_BAD, NULL, 0, TA_TAG_UNTAGGED};
  size_t mapped = 0;
  if (!_ta_ensure_init()) _ta_bad_pointer(fn, p);
  c.kind = _ta_classify(p, &c.pg, &mapped);
  if (c.kind == TA_PTR_BAD) _ta_bad_pointer(fn, p);
  c.usable = _ta_usable(c.kind, c.pg, mapped);
  if (c.kind == TA_PTR_HUGE) {
    _ta_mutex_lock(&_ta_huge_lock);
    _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
    if (e) c.tag = e->tag;
    _ta_mutex_unlock(&_ta_huge_lock);
  } else {
    c.tag = _ta_block_tag(c.pg, p);
  }
  return c;
}

static inline uint64_t _ta_check_seal(const void *p) {
  uint64_t x = ((uintptr_t)p ^ _ta_free_key) * 0x9E3779B97F4A7C15ULL;
  return x ^ (x >> 31);
}

static void _ta_check_trailer(const void *p, size_t req, uint8_t out[TA_TRAILER]) {
  uint64_t t[2] = {req, req ^ _ta_check_seal(p)};
  memcpy(out, t, TA_TRAILER);
}

TA_COLD static void _ta_check_bad_byte(const char *fn, const void *p, const char *what, size_t off, unsigned want,
                                       size_t req, const _ta_cblk_t *c, const char *when) {
  _ta_fatal("%s(%p): %s: byte %zu is 0x%x, expected 0x%x (block of %zu bytes requested, %zu usable, tag \"%s\"%s)", fn,
            p, what, off, (unsigned)((const uint8_t *)p)[off], want, req, c->usable, _ta_check_tag_name(c->tag), when);
}

TA_COLD static void _ta_check_double_free_at(const char *fn, const void *p, const _ta_cblk_t *c) {
  _ta_fatal("%s(%p): double free (the block is already free; %zu bytes usable, tag \"%s\")", fn, p, c->usable,
            _ta_check_tag_name(c->tag));
}

/* ---- the quarantine ---------------------------------------------------------------- */

typedef struct {
  void *p;
  size_t usable;
} _ta_qent_t;

static pthread_mutex_t TA_LOCK _ta_quar_lock = PTHREAD_MUTEX_INITIALIZER;
static _ta_qent_t *_ta_quar; /* TA_QUAR_CAP entries, mapped on first use */
static size_t _ta_quar_head, _ta_quar_n, _ta_quar_bytes;
/* This thread holds _ta_quar_lock: a free from a signal handler that
 * interrupted it does not wait for it (the block is not held). */
static __thread bool _ta_quar_busy;

static void _ta_quar_fork_prepare(void) { _ta_mutex_lock(&_ta_quar_lock); }
static void _ta_quar_fork_parent(void) { _ta_mutex_unlock(&_ta_quar_lock); }
static void _ta_quar_fork_child(void) { _ta_mutex_reinit(&_ta_quar_lock); }

/* The lock is a leaf, so the order of its fork handlers against init.c's
 * does not matter. */
__attribute__((constructor)) static void _ta_check_ctor(void) {
  pthread_atfork(_ta_quar_fork_prepare, _ta_quar_fork_parent, _ta_quar_fork_child);
}

/* Is p in the quarantine? (A double free, when canaries cannot tell.) */
static bool _ta_quar_holds(const void *p) {
  bool found = false;
  _ta_quar_busy = true;
  _ta_mutex_lock(&_ta_quar_lock);
  for (size_t i = 0; i < _ta_quar_n && !found; i++) found = _ta_quar[(_ta_quar_head + i) & (TA_QUAR_CAP - 1)].p == p;
  _ta_mutex_unlock(&_ta_quar_lock);
  _ta_quar_busy = false;
  return found;
}

/* Give a freed (and counted) block back to its span, uncounted: small ones
 * through the lock-free remote list (whichever thread this is), large ones
 * to the arena. Pages of exited threads get such frees far more often than
 * in the ordinary build (the quarantine releases blocks on whichever thread
 * frees); the free that empties one gives it back (_ta_free_remote), and a
 * reclaim every 4096 releases of a thread catches any that a race left. */
static __thread uint32_t _ta_check_released;

static void _ta_check_release(void *p) {
  _ta_page_t *pg = _ta_page_of(p);
  if (pg->kind == TA_KIND_SMALL) {
    ((_ta_block_t *)p)->key = 0; /* not a double free: ours */
    _ta_free_remote(_ta_tls_heap, pg, (_ta_block_t *)p);
  } else {
    _ta_span_free(pg);
  }
  if (ta_unlikely((++_ta_check_released & 4095) == 0)) _ta_heaps_reclaim_abandoned();
}

/* p leaves the quarantine: its poison must be whole (checked again when a
 * small block is handed out: after this its span may go back to the arena
 * and be carved afresh, poisoned again, so this is the last sure look). */
static void _ta_check_evict(void *p, size_t usable) {
  if (_ta_chk(TA_CHK_POISON)) {
    const uint8_t *b = p;
    uint8_t key[8];
    memcpy(key, &_ta_free_key, 8);
    size_t bad = _ta_first_not(b, 0, 8, TA_POISON_BYTE);
    unsigned want = TA_POISON_BYTE;
    for (size_t i = 8; bad == 8 && i < 16; i++)
      if (b[i] != key[i - 8]) bad = i, want = key[i - 8];
    if (bad == 8) bad = _ta_first_not(b, 16, usable, TA_POISON_BYTE);
    if (bad < usable) {
      _ta_page_t *pg = _ta_page_of(p);
      _ta_cblk_t c = {pg->kind == TA_KIND_SMALL ? TA_PTR_SMALL : TA_PTR_LARGE, pg, usable, _ta_block_tag(pg, p)};
      _ta_fatal("free(%p): write after free: byte %zu of the freed block is 0x%x, expected 0x%x (%zu bytes usable, tag "
                "\"%s\"; found as it left the quarantine)",
                p, bad, (unsigned)b[bad], want, c.usable, _ta_check_tag_name(c.tag));
    }
  }
  _ta_check_release(p);
}

static inline size_t _ta_quar_budget(void) { return _ta_chk(TA_CHK_QUARANTINE) ? _ta_opt.check_quarantine : 0; }
static inline bool _ta_quar_takes(size_t usable) { return usable <= _ta_quar_budget() / 4; }

/* Hold freed block p; release the oldest ones beyond the budget. */
static void _ta_quarantine(void *p, size_t usable) {
  if (!_ta_quar_takes(usable) || _ta_quar_busy) {
    _ta_check_release(p);
    return;
  }
  _ta_qent_t out[16];
  size_t nout = 0, budget = _ta_quar_budget();
  _ta_quar_busy = true;
  _ta_mutex_lock(&_ta_quar_lock);
  if (!_ta_quar) {
    _ta_quar = _ta_os_reserve(TA_QUAR_CAP * sizeof(_ta_qent_t), TA_OS_PAGE);
    if (_ta_quar) _ta_os_name(_ta_quar, TA_QUAR_CAP * sizeof(_ta_qent_t), "tagalloc quarantine");
  }
  bool held = _ta_quar != NULL;
  if (held) {
    _ta_quar[(_ta_quar_head + _ta_quar_n) & (TA_QUAR_CAP - 1)] = (_ta_qent_t){p, usable};
    _ta_quar_n++;
    _ta_quar_bytes += usable;
    while (nout < 16 && (_ta_quar_bytes > budget || _ta_quar_n == TA_QUAR_CAP)) {
      out[nout] = _ta_quar[_ta_quar_head];
      _ta_quar_head = (_ta_quar_head + 1) & (TA_QUAR_CAP - 1);
      _ta_quar_n--;
      _ta_quar_bytes -= out[nout].usable;
      nout++;
    }
  }
  _ta_mutex_unlock(&_ta_quar_lock);
  _ta_quar_busy = false;
  if (!held) _ta_check_release(p);
  for (size_t i = 0; i < nout; i++) _ta_check_evict(out[i].p, out[i].usable);
}

/* tags.c's heap walk: quarantined blocks are free in the books. */
static void _ta_check_walk_quarantine(uint64_t *bytes, uint64_t *blocks, uint64_t *req) {
  _ta_quar_busy = true;
  _ta_mutex_lock(&_ta_quar_lock);
  for (size_t i = 0; i < _ta_quar_n; i++) {
    void *p = _ta_quar[(_ta_quar_head + i) & (TA_QUAR_CAP - 1)].p;
    _ta_page_t *pg = _ta_page_of(p);
    uint32_t tag = _ta_block_tag(pg, p); /* its entry stays while it is held */
    blocks[tag]--;
    if (pg->kind == TA_KIND_SMALL) {
      bytes[tag] -= pg->block_size;
      if (pg->slop) req[tag] -= _ta_slop_req(pg, p);
    } else {
      bytes[tag] -= (size_t)pg->npages << TA_PAGE_SHIFT;
      req[tag] -= pg->requested;
    }
  }
  _ta_mutex_unlock(&_ta_quar_lock);
  _ta_quar_busy = false;
}

/* ---- checked entry points ------------------------------------------------------------ */

/* What to ask the core for, for a request of n bytes. */
static inline size_t _ta_check_inner(size_t n) {
  if (!_ta_ensure_init() || !_ta_chk(TA_CHK_CANARY) || n > TA_MAX_REQUEST) return n;
  return n + TA_TRAILER < 32 ? 32 : n + TA_TRAILER;
}

/* p, just allocated by the core for a request of req bytes (fn): check the
 * poison of a small block, then arm the canaries. */
static void *_ta_check_handout(const char *fn, void *p, size_t req) {
  if (!p) return NULL;
  _ta_page_t *pg = _ta_page_of(p);
  size_t usable;
  if (pg) {
    if (pg->kind == TA_KIND_SMALL) {
      usable = pg->block_size;
      size_t bad = _ta_chk(TA_CHK_POISON) ? _ta_first_not(p, 16, usable, TA_POISON_BYTE) : usable;
      if (bad < usable) {
        _ta_cblk_t c = {TA_PTR_SMALL, pg, usable, _ta_block_tag(pg, p)};
        _ta_fatal("%s(%p): write after free: byte %zu of the freed block is 0x%x, expected 0x%x (%zu bytes usable, "
                  "tag \"%s\"; found as it was handed out again)",
                  fn, p, bad, (unsigned)((uint8_t *)p)[bad], (unsigned)TA_POISON_BYTE, c.usable,
                  _ta_check_tag_name(c.tag));
      }
    } else {
      usable = (size_t)pg->npages << TA_PAGE_SHIFT;
    }
  } else {
    usable = 0;
    _ta_huge_lookup(p, &usable);
  }
  if (_ta_chk(TA_CHK_CANARY) && usable >= req + TA_TRAILER) {
    uint8_t *b = p;
    memset(b + req, TA_CANARY_BYTE, usable - TA_TRAILER - req);
    _ta_check_trailer(p, req, b + usable - TA_TRAILER);
  }
  return p;
}

/* Check live block p (c) for fn: its canaries and trailer. Returns the
 * size the program asked for. Aborts on an overrun or a double free. */
static size_t _ta_check_live(const char *fn, void *p, const _ta_cblk_t *c) {
  const uint8_t *b = p;
  bool keyed = ((const _ta_block_t *)p)->key == _ta_free_key;
  if (!_ta_chk(TA_CHK_CANARY)) {
    if (keyed) {
      if (c->kind != TA_PTR_HUGE && _ta_quar_holds(p)) _ta_check_double_free_at(fn, p, c);
      if (c->kind == TA_PTR_SMALL) _ta_check_double_free(c->pg, (_ta_block_t *)p, fn);
    }
    return c->usable;
  }
  size_t room = c->usable - TA_TRAILER;
  uint64_t t[2];
  memcpy(t, b + room, TA_TRAILER);
  uint64_t req = t[1] ^ _ta_check_seal(p); /* an overrun reaches the seal last */
  if (req > room) req = t[0];
  if (req > room) {
    if (keyed && _ta_first_not(b, room, c->usable, TA_POISON_BYTE) == c->usable) _ta_check_double_free_at(fn, p, c);
    _ta_fatal("%s(%p): buffer overrun: the check trailer (bytes %zu..%zu) is overwritten, so the requested size is "
              "lost (%zu bytes usable, tag \"%s\")",
              fn, p, room, c->usable - 1, c->usable, _ta_check_tag_name(c->tag));
  }
  size_t bad = _ta_first_not(b, req, room, TA_CANARY_BYTE);
  if (bad < room) _ta_check_bad_byte(fn, p, "buffer overrun", bad, TA_CANARY_BYTE, req, c, "");
  uint8_t want[TA_TRAILER];
  _ta_check_trailer(p, req, want);
  for (size_t i = 0; i < TA_TRAILER; i++)
    if (b[room + i] != want[i]) _ta_check_bad_byte(fn, p, "buffer overrun", room + i, want[i], req, c, "");
  return req;
}

static void _ta_check_free(const char *fn, void *p) {
  if (!p) return;
  _ta_cblk_t c = _ta_check_find(fn, p);
  _ta_check_live(fn, p, &c);
  if (c.kind == TA_PTR_HUGE) { /* its own mapping: unmapped (or cached) now */
    _ta_unchecked_free(p);
    return;
  }
  _ta_page_t *pg = c.pg;
  /* freed, as far as the books (and stacks) go */
  if (TA_SAMPLED_AT(pg, p)) _ta_sample_free(p);
  if (c.kind == TA_PTR_SMALL) _ta_count_free(c.tag, pg->block_size, pg->slop ? _ta_slop_req(pg, p) : 0);
  else _ta_count_free(c.tag, c.usable, pg->requested);
  uint8_t *b = p;
  if (_ta_chk(TA_CHK_POISON) && (c.kind == TA_PTR_SMALL || _ta_quar_takes(c.usable))) {
    memset(b, TA_POISON_BYTE, 8);
    memset(b + 16, TA_POISON_BYTE, c.usable - 16);
  } else if (_ta_chk(TA_CHK_CANARY)) {
    memset(b + c.usable - TA_TRAILER, TA_POISON_BYTE, TA_TRAILER); /* freed: tells a double free */
  }
  ((_ta_block_t *)p)->key = _ta_free_key;
  _ta_quarantine(p, c.usable);
}

static void *_ta_check_malloc(const char *fn, size_t n) {
  return _ta_check_handout(fn, _ta_unchecked_malloc(_ta_check_inner(n)), n);
}

static void *_ta_check_realloc(const char *fn, void *p, size_t n) {
  if (!p) return _ta_check_malloc(fn, n);
  if (n == 0) { /* glibc: free and return NULL */
    _ta_check_free(fn, p);
    return NULL;
  }
  if (n > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  _ta_cblk_t c = _ta_check_find(fn, p);
  size_t old = _ta_check_live(fn, p, &c);
  size_t inner = _ta_check_inner(n);
  if (c.kind == TA_PTR_HUGE && inner >= _ta_opt.huge_threshold) /* mremap: stays huge */
    return _ta_check_handout(fn, _ta_unchecked_realloc(p, inner), n);
  /* Move it, charged to the block's tag (as realloc keeps it). */
  _ta_thread_t *th = _ta_tls_thread;
  uint32_t cur = th ? th->tag : TA_TAG_UNTAGGED;
  if (c.tag != cur) {
    if (!th) th = _ta_thread_self_slow();
    if (!th || !_ta_use_tag(th, c.tag)) {
      errno = ENOMEM;
      return NULL;
    }
  }
  void *q = _ta_unchecked_malloc(inner);
  if (c.tag != cur) (void)_ta_use_tag(th, cur); /* its counters exist: it was current */
  if (!q) return NULL; /* p is untouched */
  _ta_check_handout(fn, q, n);
  memcpy(q, p, old < n ? old : n);
  _ta_check_free(fn, p);
  return q;
}

TA_EXPORT void *TA_NAME(malloc)(size_t size) { return _ta_check_malloc("malloc", size); }

TA_EXPORT void TA_NAME(free)(void *p) { _ta_check_free("free", p); }

TA_EXPORT void *TA_NAME(calloc)(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || total > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  size_t inner = _ta_check_inner(total);
  if (inner > TA_MAX_SMALL) /* large or huge: the core zeroes (or knows it is zero) */
    return _ta_check_handout("calloc", _ta_unchecked_calloc(1, inner), total);
  void *p = _ta_check_handout("calloc", _ta_unchecked_malloc(inner), total);
  if (p) memset(p, 0, total);
  return p;
}

TA_EXPORT void *TA_NAME(realloc)(void *p, size_t size) { return _ta_check_realloc("realloc", p, size); }

TA_EXPORT void *TA_NAME(reallocarray)(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return _ta_check_realloc("reallocarray", p, total);
}

TA_EXPORT int TA_NAME(posix_memalign)(void **out, size_t align, size_t size) {
  void *p;
  int rc = _ta_unchecked_posix_memalign(&p, align, _ta_check_inner(size));
  if (rc == 0) *out = _ta_check_handout("posix_memalign", p, size);
  return rc;
}

TA_EXPORT void *TA_NAME(aligned_alloc)(size_t align, size_t size) {
  return _ta_check_handout("aligned_alloc", _ta_unchecked_aligned_alloc(align, _ta_check_inner(size)), size);
}

TA_EXPORT void *TA_NAME(memalign)(size_t align, size_t size) {
  return _ta_check_handout("memalign", _ta_unchecked_memalign(align, _ta_check_inner(size)), size);
}

TA_EXPORT void *TA_NAME(valloc)(size_t size) {
  return _ta_check_handout("valloc", _ta_unchecked_valloc(_ta_check_inner(size)), size);
}

TA_EXPORT void *TA_NAME(pvalloc)(size_t size) {
  size_t ps = _ta_os_page_size();
  if (size > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  size_t n = size ? _ta_align_up(size, ps) : ps;
  return _ta_check_handout("pvalloc", _ta_unchecked_memalign(ps, _ta_check_inner(n)), n);
}

/* The size the program asked for: what it may use (as glibc's MALLOC_CHECK_
 * does), so code that fills its block to the usable size stays in bounds. */
TA_EXPORT size_t TA_NAME(malloc_usable_size)(void *p) {
  if (!p) return 0;
  _ta_cblk_t c = _ta_check_find("malloc_usable_size", p);
  return _ta_check_live("malloc_usable_size", p, &c);
}

#endif /* TA_CHECK */
