/* arena.c: address space and spans. Arenas are reserved up front; spans of
 * whole pages are carved from them (best fit from free bins, else fresh pages
 * from the top), split and coalesced, and their memory purged back to the OS
 * after a delay. Everything here runs under _ta_arena_lock.
 *
 * Invariants (checked by _ta_arena_check):
 *   pages in use + pages in free spans == top, per arena
 *   a free span is in exactly one bin, and on the dirty list iff DIRTY
 *   no two free spans are adjacent (coalescing is eager)
 *   every page of an in-use span has head_off == distance to its head;
 *   the last page of a free span has head_off == distance to its head */

_ta_arena_t _ta_arenas[TA_MAX_ARENAS];
_Atomic(size_t) _ta_narenas;
static pthread_mutex_t TA_LOCK _ta_arena_lock = PTHREAD_MUTEX_INITIALIZER;

/* Signal handlers (types.h, error policy): a handler that interrupts its
 * thread while it holds the arena lock, and allocates or frees, must not
 * wait for that lock (it would wait forever). _ta_tls_arena is set before
 * the lock is taken and cleared after it is released, so such a handler
 * sees it: its span allocation fails (its malloc then maps the block on
 * its own: _ta_malloc_beside_arena), its span free is deferred until the
 * interrupted section releases the lock. Purging's system calls run with
 * the lock released and the flag clear (_ta_unlock_purge). */
static __thread volatile int _ta_tls_arena; /* plain int: a signal handler on this thread reads it */
#define TA_DEFERRED 32
static __thread _ta_page_t *volatile _ta_tls_deferred[TA_DEFERRED];
static __thread volatile int _ta_tls_ndeferred;
static void _ta_span_free(_ta_page_t *h);

/* Take the arena lock, unless this thread holds it (a signal handler). */
static inline bool _ta_arena_lock_take(void) {
  if (ta_unlikely(_ta_tls_arena)) return false;
  _ta_tls_arena = 1;
  _ta_mutex_lock(&_ta_arena_lock);
  return true;
}

static void _ta_arena_free_deferred(void) {
  while (_ta_tls_ndeferred > 0) {
    int k = _ta_tls_ndeferred - 1;
    _ta_page_t *h = _ta_tls_deferred[k];
    _ta_tls_ndeferred = k;
    _ta_span_free(h);
  }
}

static inline void _ta_arena_lock_drop(void) {
  _ta_mutex_unlock(&_ta_arena_lock);
  _ta_tls_arena = 0;
  if (ta_unlikely(_ta_tls_ndeferred)) _ta_arena_free_deferred();
}

/* Free spans are filed by state, resident (dirty) or purged and fresh
 * (clean), then by length: an exact bin for each length up to TA_BINS
 * pages, and a bin for everything longer. */
#define TA_BINS 64                          /* exact bins for spans of 1..64 pages */
static _ta_pageq_t _ta_bins[2][TA_BINS + 1]; /* [dirty][i]; [.][TA_BINS]: longer */
static uint64_t _ta_bin_mask[2];            /* [dirty] bit i: bin i (i+1 pages) non-empty */
static _ta_page_t *_ta_dirty_first, *_ta_dirty_last; /* oldest first */
static size_t _ta_dirty_pages;        /* pages in dirty free spans */
static size_t _ta_dirty_res;          /* OS pages of them resident, at most or guessed */
static size_t _ta_dirty_unmeasured;   /* dirty spans whose count is a guess (TA_PF_UNMEASURED) */
static size_t _ta_dirty_unsure;       /* their pages not counted: all but the guess */
#define TA_OS_PER_PAGE (TA_PAGE_SIZE / TA_OS_PAGE)
static size_t _ta_used_pages;         /* pages in spans in use */
static size_t _ta_side_carved;        /* bytes of side arrays carved from their chunks (below) */
static size_t _ta_moved_maps;         /* bytes of the maps of units moved into that a bit was ever set in (units moved into, below) */
static bool _ta_moved_used[TA_MAX_ARENAS]; /* arena i's map counted in _ta_moved_maps */
static _Atomic(bool) _ta_emptied_used[TA_MAX_ARENAS]; /* a bit was set in arena i's emptied map (counted to its top) */
static size_t _ta_used_hwm;           /* high-water mark of _ta_used_pages, decaying */
static size_t _ta_recent_big;         /* the largest span allocated in the last TA_RECENT_MS */
static uint64_t _ta_recent_big_ms;    /* when it was */
#define TA_RECENT_MS 1000

static inline size_t _ta_page_index(const _ta_arena_t *a, const _ta_page_t *pg) {
  return (size_t)(pg - a->pages);
}

/* ---- arenas ------------------------------------------------------------- */

/* The map of units moved into of an arena of size bytes (arena.c, units
 * moved into): a bit a 2 MiB unit, and one more at each end (the arena's
 * base is 64 KiB-aligned). */
static inline size_t _ta_moved_map_bytes(size_t size) { return ((size >> TA_PMD_SHIFT) + 2 + 63) / 64 * sizeof(uint64_t); }
/* The map of spans emptied by other threads of an arena of size bytes: a
 * bit a page (arena.c, pages emptied by other threads). */
static inline size_t _ta_emptied_map_bytes(size_t size) { return ((size >> TA_PAGE_SHIFT) + 63) / 64 * sizeof(uint64_t); }

static bool _ta_arena_add_locked(size_t want) {
  size_t n = atomic_load_explicit(&_ta_narenas, memory_order_relaxed);
  if (n >= TA_MAX_ARENAS) return false;
  size_t min = 64 * TA_MiB;
  for (size_t size = want; size >= min; size /= 2) {
    size_t npages = size >> TA_PAGE_SHIFT;
    size_t dbytes = _ta_align_up(npages * sizeof(_ta_page_t), TA_OS_PAGE);
    size_t mbytes = _ta_moved_map_bytes(size) + _ta_emptied_map_bytes(size);
    void *d = _ta_os_reserve(dbytes + mbytes, TA_OS_PAGE);
    if (!d) continue;
    void *base = _ta_os_reserve(size, TA_PAGE_SIZE);
    /* blocks lie below 2^48: xthread_free keeps a count above them (types.h) */
    if (base && (uintptr_t)base + size > TA_XF_ONE) { _ta_os_release(base, size); base = NULL; }
    if (!base) { _ta_os_release(d, dbytes + mbytes); continue; }
    _ta_os_name(base, size, TA_ARENA_NAME);
    _ta_os_name(d, dbytes + mbytes, "tagalloc page descriptors");
    _ta_arena_t *a = &_ta_arenas[n];
    a->base = base;
    a->size = size;
    a->npages = npages;
    a->top = 0;
    a->pages = d;
    a->moved = (uint64_t *)((uint8_t *)d + dbytes);
    a->emptied = (uint64_t *)((uint8_t *)a->moved + _ta_moved_map_bytes(size));
    /* Publish: readers check index < _ta_narenas before using the slot. */
    atomic_store_explicit(&_ta_narenas, n + 1, memory_order_release);
    return true;
  }
  return false;
}

static bool _ta_arena_init(void) {
  if (!_ta_arena_lock_take()) return false;
  bool ok = atomic_load(&_ta_narenas) > 0 || _ta_arena_add_locked(_ta_opt.arena_reserve);
  _ta_arena_lock_drop();
  return ok;
}

static _ta_page_t *_ta_page_of_slow(const void *p) {
  size_t n = atomic_load_explicit(&_ta_narenas, memory_order_acquire);
  for (size_t i = 1; i < n; i++) {
    _ta_arena_t *a = &_ta_arenas[i];
    uintptr_t off = (uintptr_t)p - (uintptr_t)a->base;
    if (off < a->size) {
      _ta_page_t *pg = &a->pages[off >> TA_PAGE_SHIFT];
      return pg - pg->head_off;
    }
  }
  return NULL;
}

/* ---- free-span bins and the dirty list ---------------------------------- */

static inline size_t _ta_bin_of(size_t npages) { return npages <= TA_BINS ? npages - 1 : TA_BINS; }

static void _ta_q_push(_ta_pageq_t *q, _ta_page_t *pg) {
  pg->prev = NULL;
  pg->next = q->first;
  if (q->first) q->first->prev = pg; else q->last = pg;
  q->first = pg;
  q->count++;
}

static void _ta_q_remove(_ta_pageq_t *q, _ta_page_t *pg) {
  if (pg->prev) pg->prev->next = pg->next; else q->first = pg->next;
  if (pg->next) pg->next->prev = pg->prev; else q->last = pg->prev;
  pg->next = pg->prev = NULL;
  q->count--;
}

/* Count dirty span pg in the dirty totals (sign 1) or take it out (-1),
 * as its length, resident count and flags say now: whoever changes one
 * of them takes the span out first and counts it again after. */
static void _ta_dirty_account(const _ta_page_t *pg, int sign) {
  size_t unsure = (pg->flags & TA_PF_UNMEASURED) ? (size_t)pg->npages * TA_OS_PER_PAGE - pg->resident : 0;
  _ta_dirty_pages += (size_t)sign * pg->npages; /* modular: -1 subtracts */
  _ta_dirty_res += (size_t)sign * pg->resident;
  _ta_dirty_unmeasured += (size_t)sign * ((pg->flags & TA_PF_UNMEASURED) != 0);
  _ta_dirty_unsure += (size_t)sign * unsure;
}

static void _ta_dirty_remove(_ta_page_t *pg) {
  if (!(pg->flags & TA_PF_DIRTY)) return;
  if (pg->dprev) pg->dprev->dnext = pg->dnext; else _ta_dirty_first = pg->dnext;
  if (pg->dnext) pg->dnext->dprev = pg->dprev; else _ta_dirty_last = pg->dprev;
  pg->dnext = pg->dprev = NULL;
  _ta_dirty_account(pg, -1);
}

static void _ta_dirty_append(_ta_page_t *pg, uint64_t now) {
  pg->freed_at_ms = now;
  pg->dnext = NULL;
  pg->dprev = _ta_dirty_last;
  if (_ta_dirty_last) _ta_dirty_last->dnext = pg; else _ta_dirty_first = pg;
  _ta_dirty_last = pg;
  _ta_dirty_account(pg, 1);
}

/* OS pages of dirty spans that may be resident: the counts, and every
 * page a guess left out (a bound, for the books and the purger). */
static inline size_t _ta_dirty_bound(void) { return _ta_dirty_res + _ta_dirty_unsure; }

/* Pages' worth of resident memory in dirty spans, at most (rounded up). */
static inline size_t _ta_dirty_resident_pages(void) { return (_ta_dirty_res + TA_OS_PER_PAGE - 1) / TA_OS_PER_PAGE; }

/* File free span h in the bin of its length, or take it out. */
static inline unsigned _ta_bin_set(const _ta_page_t *h) { return (h->flags & TA_PF_DIRTY) != 0; }
static void _ta_bin_add(_ta_page_t *h) {
  size_t b = _ta_bin_of(h->npages);
  unsigned d = _ta_bin_set(h);
  _ta_q_push(&_ta_bins[d][b], h);
  if (b < TA_BINS) _ta_bin_mask[d] |= (uint64_t)1 << b;
}
static void _ta_bin_del(_ta_page_t *h) {
  size_t b = _ta_bin_of(h->npages);
  unsigned d = _ta_bin_set(h);
  _ta_q_remove(&_ta_bins[d][b], h);
  if (b < TA_BINS && _ta_bins[d][b].first == NULL) _ta_bin_mask[d] &= ~((uint64_t)1 << b);
}

/* Record a free span at pages [idx, idx+npages) of arena a and file it;
 * if dirty, at most res OS pages of it are resident. */
static _ta_page_t *_ta_free_span_insert(size_t ai, size_t idx, size_t npages, uint8_t flags, size_t res, uint64_t now) {
  _ta_arena_t *a = &_ta_arenas[ai];
  _ta_page_t *h = &a->pages[idx];
  h->kind = TA_KIND_FREE;
  h->head_off = 0;
  h->npages = (uint32_t)npages;
  h->arena = (uint32_t)ai;
  h->start = a->base + (idx << TA_PAGE_SHIFT);
  h->flags = flags;
  atomic_store_explicit(&h->heap, NULL, memory_order_relaxed);
  h->dnext = h->dprev = NULL;
  h->resident = (flags & TA_PF_DIRTY) ? (res < npages * TA_OS_PER_PAGE ? res : npages * TA_OS_PER_PAGE) : 0;
  if (npages > 1) {
    _ta_page_t *last = &a->pages[idx + npages - 1];
    last->kind = TA_KIND_INNER;
    last->head_off = (uint32_t)(npages - 1);
  }
  _ta_bin_add(h);
  if (flags & TA_PF_DIRTY) _ta_dirty_append(h, now);
  return h;
}

static void _ta_free_span_remove(_ta_page_t *h) {
  _ta_bin_del(h);
  _ta_dirty_remove(h);
  h->flags &= (uint8_t)~TA_PF_DIRTY;
  h->kind = TA_KIND_INNER; /* no longer a head until someone makes it one */
  h->head_off = 1;         /* provisional: callers rewrite every page they use */
}

static void _ta_free_range_locked(size_t ai, size_t idx, size_t n, uint8_t flags, size_t res, uint64_t now);

/* Is a free span in state flags, res of its n pages' OS pages resident,
 * dirty and known resident throughout? */
static inline bool _ta_res_whole(uint8_t flags, size_t res, size_t n) {
  return (flags & (TA_PF_DIRTY | TA_PF_UNMEASURED)) == TA_PF_DIRTY && res == n * TA_OS_PER_PAGE;
}

/* The resident count of k of the n pages of a free span in state *flags
 * that holds res OS pages: exact if it is resident throughout or not at
 * all, else its share, a guess (*flags gets TA_PF_UNMEASURED). Parts of a
 * split each kept the whole count before, a bound that grew with every
 * split, until the retain limit purged pages no span held. */
static size_t _ta_share_res(uint8_t *flags, size_t res, size_t n, size_t k) {
  if (!(*flags & TA_PF_DIRTY)) return 0;
  if (!(*flags & TA_PF_UNMEASURED) && (res == 0 || res >= n * TA_OS_PER_PAGE)) return res ? k * TA_OS_PER_PAGE : 0;
  *flags |= TA_PF_UNMEASURED;
  return (res * k + n - 1) / n;
}

/* ---- purging -------------------------------------------------------------- */

/* Pages of heap: spans in use plus huge blocks. */
static inline size_t _ta_heap_pages(void) {
  return _ta_used_pages + (atomic_load_explicit(&_ta_huge_bytes, memory_order_relaxed) >> TA_PAGE_SHIFT);
}
static inline void _ta_note_hwm(void) {
  size_t u = _ta_heap_pages();
  if (u > _ta_used_hwm) _ta_used_hwm = u;
}

/* Note a span of npages allocated now: the largest of the last
 * TA_RECENT_MS is the size the program is likely to ask for again. */
static void _ta_note_recent_big(size_t npages, uint64_t now) {
  if (npages >= _ta_recent_big || now - _ta_recent_big_ms > TA_RECENT_MS) {
    _ta_recent_big = npages;
    _ta_recent_big_ms = now;
  }
}

/* How much free memory may stay resident. Freed memory is kept for reuse
 * while in-use plus free stays under the high-water mark of in-use memory
 * (so peak RSS is about the peak of the heap, as with a heap that never
 * returns memory). And twice the largest span asked for in the last
 * second is kept even above the high-water mark: a program that frees a
 * big block and asks for another keeps the pages to put it in (a loop of
 * two 5-25 MiB blocks faulted on every page of every block without it,
 * 30x tcmalloc's faults). retain_min is always allowed. Spans free for
 * longer than the purge delay go regardless, and the mark decays as they
 * go: a program that frees most of its heap gets its RSS back within a
 * few purge delays, from the purger if it makes no call (purger.c). Until
 * the purger, a heap fallen below a quarter of its mark kept no more than
 * itself or those two spans, to give the RSS back at once; a program
 * whose heap swings (4 live blocks of 64 KiB-64 MiB) then faulted its
 * big blocks in again and again: 222k faults, now 156k. */
static _Atomic(size_t) _ta_huge_cached_pages; /* huge.c's cache, free and resident like dirty pages */

/* Room the program has shown it needs. A heap that turns over (blocks
 * freed and others of other sizes taken, as buffers grown by realloc do:
 * each fits only blocks the others left) reuses free spans of one to
 * three times its size, more than the high-water rule leaves: the limit
 * purged them, and the arena took clean pages for the next spans, which
 * fault again (8 buffers grown to 1-4 MiB: 33k faults; with a 64 MiB
 * retain_min 8.7k, mimalloc's 8.3k). So the limit learns: when a span
 * must come from clean pages (purged or fresh) within TA_RECENT_MS of a
 * purge the limit made, the pages it will fault are added to a bonus on
 * the limit. They are all of a small span's (carved, and written, as it
 * fills) and the density's share of a large one's (the share of big
 * blocks' pages programs touch, below): a program that touches its big
 * blocks at the ends (64 slots of 64 KiB-4 MiB) faults two pages a block
 * on clean pages as on kept ones, and counting every page of its spans
 * kept 3.4 MiB more for no fault fewer. Bounding what is learned by what
 * the limit had purged resident in that second lost half the gain (8
 * buffers: 15.4k faults, 9.8k without the bound, 22.0k without the
 * rule). The bonus is capped at half the high-water
 * mark (RSS stays under 1.5 times the heap's peak), halves at most once a
 * purge delay while spans are purged for age, and is dropped by
 * tagalloc_purge: a program that stops turning over gets its memory back
 * within a few purge delays. Under the arena lock. */
#define TA_DENSE 224             /* 7/8: dense (described with the density, below) */
static unsigned _ta_density;     /* the share of big blocks' pages touched, of 256 (defined here, described with the density) */
static size_t _ta_retain_bonus;  /* pages */
static uint64_t _ta_learn_until; /* a second after the limit last purged: clean spans taken before it are learned */
static uint64_t _ta_decayed_ms;  /* when the bonus last decayed */

/* A span of npages (of kind) is taken from clean pages. */
static inline void _ta_retain_learn(size_t npages, uint8_t kind, uint64_t now) {
  if (now >= _ta_learn_until) return;
  size_t c = kind == TA_KIND_SMALL ? npages : (npages * _ta_density + 255) / 256;
  size_t b = _ta_retain_bonus + c, cap = _ta_used_hwm / 2;
  _ta_retain_bonus = b < cap ? b : cap;
}

static size_t _ta_retain_limit_pages(uint64_t now) {
  size_t lim = _ta_opt.retain_min >> TA_PAGE_SHIFT;
  _ta_note_hwm(); /* huge blocks change the heap without the arena */
  size_t used = _ta_heap_pages();
  size_t room = _ta_used_hwm > used ? _ta_used_hwm - used : 0;
  size_t recent = now - _ta_recent_big_ms <= TA_RECENT_MS ? _ta_recent_big : 0;
  if (room < 2 * recent) room = 2 * recent;
  room += _ta_retain_bonus;
  size_t cached = atomic_load_explicit(&_ta_huge_cached_pages, memory_order_relaxed);
  room = room > cached ? room - cached : 0; /* the huge cache holds that part */
  return room > lim ? room : lim;
}

/* Huge blocks live outside the arena but under the same policy: one of
 * npages allocated counts towards the heap's high-water mark and the
 * largest recent span (TA_RECENT_MS); one being freed (freed, freed_bytes;
 * the program's, so no other thread touches it meanwhile) is measured
 * for the density; the cache of freed huge mappings may hold what the
 * retain limit leaves after the dirty pages (bytes). A signal handler
 * inside arena work (the lock is its thread's) gets retain_min. Takes the
 * arena lock: call without the huge lock. */
static size_t _ta_measure_locked(void *p, size_t bytes, int div);
static size_t _ta_arena_huge_budget(size_t alloc_pages, void *freed, size_t freed_bytes) {
  if (!_ta_arena_lock_take()) return _ta_opt.retain_min;
  if (freed) (void)_ta_measure_locked(freed, freed_bytes, 4);
  uint64_t now = _ta_now_ms();
  if (alloc_pages) {
    _ta_note_hwm();
    _ta_note_recent_big(alloc_pages, now);
  }
  size_t lim = _ta_retain_limit_pages(now) + atomic_load_explicit(&_ta_huge_cached_pages, memory_order_relaxed);
  size_t res = _ta_dirty_resident_pages();
  size_t room = lim > res ? (lim - res) << TA_PAGE_SHIFT : 0;
  _ta_arena_lock_drop();
  return room > _ta_opt.retain_min ? room : _ta_opt.retain_min;
}

static size_t _ta_last_freed_res; /* OS pages of the span the program freed last that were resident (arena lock) */

#define TA_PURGE_BATCH 32
static size_t _ta_purging_pages; /* pages in spans being purged */
static void _ta_dirty_measure_locked(_ta_page_t *h);

/* Cut the last cut pages off dirty span h (measured, 15/16 resident or
 * more, of TA_PURGE_CUT_SPAN pages or more) for a purge: h stays where it is on
 * the dirty list (its age is its own), in the bin of its new length, with
 * its share of the resident count (a guess unless it was resident
 * throughout); the tail becomes a PURGING span. A span resident but for
 * one page of 825 went whole before (the next 20 MiB block faulted all of
 * it in again). */
#define TA_PURGE_CUT_SPAN 64 /* pages (4 MiB): smaller spans go whole, the oldest first, as they did */
static _ta_page_t *_ta_dirty_cut_tail_locked(_ta_page_t *h, size_t cut) {
  _ta_arena_t *a = &_ta_arenas[h->arena];
  size_t n = h->npages, keep = n - cut, idx = _ta_page_index(a, h);
  _ta_bin_del(h);
  _ta_dirty_account(h, -1);
  h->resident = _ta_share_res(&h->flags, h->resident, n, keep);
  h->npages = (uint32_t)keep;
  _ta_dirty_account(h, 1);
  _ta_bin_add(h);
  if (keep > 1) {
    a->pages[idx + keep - 1].kind = TA_KIND_INNER;
    a->pages[idx + keep - 1].head_off = (uint32_t)(keep - 1);
  }
  _ta_page_t *t = &a->pages[idx + keep];
  t->kind = TA_KIND_PURGING;
  t->head_off = 0;
  t->npages = (uint32_t)cut;
  t->arena = h->arena;
  t->start = h->start + (keep << TA_PAGE_SHIFT);
  t->flags = 0;
  t->dnext = t->dprev = NULL;
  atomic_store_explicit(&t->heap, NULL, memory_order_relaxed);
  if (cut > 1) a->pages[idx + n - 1].head_off = (uint32_t)(cut - 1);
  return t;
}

/* Pick the dirty spans to purge: older than the delay, or the oldest beyond
 * the retain limit (all of them if all). The limit is on what is resident,
 * and a span it would purge whose count is a bound (TA_PF_UNMEASURED) is
 * measured first: one that holds no resident page (say, a large block
 * the program never touched) costs nothing to keep, and stays until it is
 * old. The picked spans leave the bins as PURGING. */
static size_t _ta_purge_pick_locked(bool all, uint64_t now, _ta_page_t **batch) {
  size_t limit = all ? 0 : _ta_retain_limit_pages(now), n = 0;
  /* The block freed last is spared by the limit (not by age): a program
   * that frees a block and allocates another of like size reuses it
   * without page faults. Bounded by 4 * retain_min. What is spared is
   * the block, not the free span it joined: the span it lies in (the
   * newest on the dirty list) is passed over, and the limit grows by
   * the block's resident pages. A span was spared whole or not at all,
   * so a 25 MiB block that joined its free neighbours into 53 MiB lost
   * its spare: two 5-25 MiB blocks replacing each other faulted 39k
   * pages (tcmalloc 26k), 19k with it. */
  _ta_page_t *spare = NULL;
  if (!all && _ta_dirty_last && _ta_last_freed_res * TA_OS_PAGE <= 4 * _ta_opt.retain_min) {
    spare = _ta_dirty_last;
    size_t res = spare->resident < _ta_last_freed_res ? spare->resident : _ta_last_freed_res;
    limit += (res + TA_OS_PER_PAGE - 1) / TA_OS_PER_PAGE;
  }
  /* Counts that are bounds first: the limit may be met without a purge. */
  for (_ta_page_t *h = all ? NULL : _ta_dirty_first; h && _ta_dirty_unmeasured && _ta_dirty_resident_pages() > limit; h = h->dnext)
    if ((h->flags & TA_PF_UNMEASURED) && h != spare) _ta_dirty_measure_locked(h);
  _ta_page_t *next;
  if (all) _ta_retain_bonus = 0;
  for (_ta_page_t *h = _ta_dirty_first; h && n < TA_PURGE_BATCH; h = next) {
    next = h->dnext;
    bool old = now - h->freed_at_ms >= _ta_opt.purge_delay_ms;
    if (!all && !old) {
      size_t res = _ta_dirty_resident_pages();
      if (res <= limit) break;
      if (h == spare || h->resident == 0) continue;
      _ta_learn_until = now + TA_RECENT_MS; /* the limit purges it, or its tail */
      /* Over the limit by less than this span holds: only its tail goes
       * (a 132 MiB span purged whole for being 9 pages over made a loop of
       * 64 KiB-64 MiB blocks fault 480 MiB more than it needed to). */
      size_t cut = res - limit;
      if ((h->flags & TA_PF_UNMEASURED) == 0 && 16 * h->resident >= 15 * (size_t)h->npages * TA_OS_PER_PAGE && h->npages >= TA_PURGE_CUT_SPAN &&
          h->npages >= 2 * cut) {
        _ta_page_t *t = _ta_dirty_cut_tail_locked(h, cut);
        _ta_purging_pages += cut;
        batch[n++] = t;
        continue;
      }
    }
    if (old) { /* decay the high-water mark, and the bonus at most once a delay */
      size_t u = _ta_heap_pages();
      if (_ta_used_hwm > u) _ta_used_hwm = u + (_ta_used_hwm - u) / 2;
      if (now - _ta_decayed_ms >= _ta_opt.purge_delay_ms) _ta_retain_bonus /= 2, _ta_decayed_ms = now;
    }
    size_t np = h->npages;
    _ta_free_span_remove(h);
    h->kind = TA_KIND_PURGING;
    h->head_off = 0;
    h->npages = (uint32_t)np;
    _ta_purging_pages += np;
    batch[n++] = h;
  }
  return n;
}

/* Release the arena lock, purging what is due without holding it (madvise
 * can take milliseconds), then file the purged spans as clean. */
/* Publish the arena's figures in the books (under the arena lock). */
static void _ta_books_publish_arena_locked(void) {
  if (!_ta_books) return;
  size_t top = 0, n = atomic_load_explicit(&_ta_narenas, memory_order_relaxed);
  for (size_t i = 0; i < n; i++) top += _ta_arenas[i].top;
  atomic_store_explicit(&_ta_books->spans_in_use, (uint64_t)_ta_used_pages << TA_PAGE_SHIFT, memory_order_relaxed);
  atomic_store_explicit(&_ta_books->spans_free_resident,
                        ((uint64_t)_ta_dirty_bound() * TA_OS_PAGE) + ((uint64_t)_ta_purging_pages << TA_PAGE_SHIFT),
                        memory_order_relaxed);
  atomic_store_explicit(&_ta_books->arena_touched, (uint64_t)top << TA_PAGE_SHIFT, memory_order_relaxed);
  size_t emptied = 0; /* the OS pages of the emptied maps' words up to each arena's top, once one was written */
  for (size_t i = 0; i < n; i++) {
    if (!atomic_load_explicit(&_ta_emptied_used[i], memory_order_relaxed)) continue;
    uintptr_t from = (uintptr_t)_ta_arenas[i].emptied, to = from + _ta_emptied_map_bytes((size_t)_ta_arenas[i].top << TA_PAGE_SHIFT);
    emptied += _ta_align_up(to, TA_OS_PAGE) - (from & ~(uintptr_t)(TA_OS_PAGE - 1));
  }
  atomic_store_explicit(&_ta_books->descriptors, (uint64_t)top * sizeof(_ta_page_t) + _ta_side_carved + _ta_moved_maps + emptied,
                        memory_order_relaxed);
}

/* ---- units moved into ---------------------------------------------------------- */

/* A page move (below) leaves its destination a mapping of its own: the
 * moved range keeps the file offset it came with, so it joins no
 * neighbour, and each move adds up to two mappings to the arena's. An
 * arena keeps a bit for each 2 MiB unit of its range (counted from
 * base's 2 MiB boundary down) that pages moved into. A purge of a span
 * that wholly holds such a unit maps the span's 2 MiB-aligned part afresh
 * instead of purging it in place (_ta_os_renew: a fresh mapping there
 * joins the ones around it again) and clears those units' bits. Moves
 * wait while TA_MOVED_MAX bits are set (4 GiB moved into and not purged
 * whole since: at most twice that many more mappings, far under the
 * kernel's 65,530); they used to stop after 2,048 in the process's life,
 * which a long-running program reaches (a loop of 4 live blocks of
 * 64 KiB-64 MiB moves 80-130 times in 30,000 rounds). A unit purged in
 * two parts keeps its bit. The fresh mapping costs the purge no more
 * than an madvise would (64 MiB resident: 5.3-5.7 ms either way on the
 * 2-core VM). */
#define TA_MOVED_MAX 2048
#define TA_PMD ((size_t)1 << TA_PMD_SHIFT)
static size_t _ta_moved_units; /* arena lock: the bits set, in every arena */

/* The 2 MiB-aligned whole-2-MiB part of [p, p + pages): its first page
 * index from p, its length in pages (0 if none). */
static inline size_t _ta_pmd_part(const uint8_t *p, size_t pages, size_t *len) {
  uintptr_t a = _ta_align_up((uintptr_t)p, TA_PMD), e = ((uintptr_t)p + (pages << TA_PAGE_SHIFT)) & ~(uintptr_t)(TA_PMD - 1);
  *len = e > a ? (e - a) >> TA_PAGE_SHIFT : 0;
  return (a - (uintptr_t)p) >> TA_PAGE_SHIFT;
}

static inline size_t _ta_unit_of(const _ta_arena_t *a, const uint8_t *p) {
  return ((uintptr_t)p >> TA_PMD_SHIFT) - ((uintptr_t)a->base >> TA_PMD_SHIFT);
}

/* Set (set) or clear the bits of the units of [p, p + pages), whole
 * units; how many changed. */
static size_t _ta_moved_flip_locked(_ta_arena_t *a, const uint8_t *p, size_t pages, bool set) {
  size_t changed = 0;
  for (size_t u = _ta_unit_of(a, p), e = u + (pages >> (TA_PMD_SHIFT - TA_PAGE_SHIFT)); u < e; u++) {
    uint64_t bit = (uint64_t)1 << (u % 64);
    if (((a->moved[u / 64] & bit) != 0) == set) continue;
    a->moved[u / 64] ^= bit;
    changed++;
  }
  return changed;
}

/* Clear the bits of the units span h wholly holds: true if any was set
 * (the purge then maps them afresh). */
static bool _ta_moved_take_locked(const _ta_page_t *h) {
  if (_ta_moved_units == 0) return false;
  size_t len, off = _ta_pmd_part(h->start, h->npages, &len);
  if (len == 0) return false;
  size_t n = _ta_moved_flip_locked(&_ta_arenas[h->arena], h->start + (off << TA_PAGE_SHIFT), len, false);
  _ta_moved_units -= n;
  return n != 0;
}

/* Purge the pages of span h (the caller's, out of every list); renew:
 * map its 2 MiB-aligned part afresh (_ta_moved_take_locked said so). */
static void _ta_span_purge(const _ta_page_t *h, bool renew) {
  uint8_t *end = h->start + ((size_t)h->npages << TA_PAGE_SHIFT);
  if (!renew) {
    _ta_os_purge(h->start, (size_t)(end - h->start));
    return;
  }
  size_t len, off = _ta_pmd_part(h->start, h->npages, &len);
  uint8_t *mid = h->start + (off << TA_PAGE_SHIFT), *mid_end = mid + (len << TA_PAGE_SHIFT);
  if (mid > h->start) _ta_os_purge(h->start, (size_t)(mid - h->start));
  _ta_os_renew(mid, (size_t)(mid_end - mid), TA_ARENA_NAME);
  if (end > mid_end) _ta_os_purge(mid_end, (size_t)(end - mid_end));
}

static _Atomic(size_t) _ta_arena_dirty_bytes; /* _ta_dirty_bound() in bytes, for the purger (purger.c) */
static void _ta_purger_kick(void);

static void _ta_unlock_purge(bool all, uint64_t now) {
  _ta_page_t *batch[TA_PURGE_BATCH];
  bool renew[TA_PURGE_BATCH];
  _ta_books_publish_arena_locked();
  for (;;) {
    size_t n = _ta_purge_pick_locked(all, now, batch);
    if (n == 0) {
      atomic_store_explicit(&_ta_arena_dirty_bytes, _ta_dirty_bound() * TA_OS_PAGE, memory_order_seq_cst);
      _ta_arena_lock_drop();
      _ta_purger_kick();
      return;
    }
    /* The system calls run without the lock, and a signal handler arriving
     * meanwhile (they are where signals land) may take it: the batch is
     * this thread's, out of every free list until it is put back below. */
    for (size_t i = 0; i < n; i++) renew[i] = _ta_moved_take_locked(batch[i]);
    _ta_mutex_unlock(&_ta_arena_lock);
    _ta_tls_arena = 0;
    for (size_t i = 0; i < n; i++) _ta_span_purge(batch[i], renew[i]);
    _ta_tls_arena = 1;
    _ta_mutex_lock(&_ta_arena_lock);
    for (size_t i = 0; i < n; i++) {
      _ta_page_t *h = batch[i];
      _ta_arena_t *a = &_ta_arenas[h->arena];
      _ta_purging_pages -= h->npages;
      h->kind = TA_KIND_INNER;
      _ta_free_range_locked(h->arena, (size_t)(h - a->pages), h->npages, TA_PF_ZERO, 0, now);
    }
    _ta_books_publish_arena_locked();
    if (n < TA_PURGE_BATCH) {
      _ta_arena_lock_drop();
      return;
    }
  }
}

static void _ta_arena_purge(bool all) {
  if (!_ta_arena_lock_take()) return; /* a signal handler: not now */
  _ta_unlock_purge(all, _ta_now_ms());
}

/* ---- pages emptied by other threads -------------------------------------------
 * A small span every block of which other threads freed is empty, and
 * only its owner gave it back: at its next malloc of the class that
 * found it (heap.c), or its heap walk. An owner that sleeps (a producer
 * whose consumers freed all it made, waiting for more work in a call we
 * do not see) held it for good: 1 GiB of 1 KiB blocks one thread made
 * and another freed stayed resident (as with mimalloc, jemalloc and
 * tcmalloc; glibc kept half). Now the free that makes a page's remote
 * count every block it has (page.c, _ta_free_remote_push) sets the
 * page's bit in its arena's emptied map (a hint: the page may be
 * collected, given back and used again before anyone looks) and wakes
 * the purger. At each of its looks (every half purge delay) the purger,
 * under the arena lock (no span in use is given back meanwhile, so none
 * changes class or kind), takes each bit's page as it finds it. Still a
 * small span whose remote list holds every one of its blocks (then no
 * block is out, none is on the owner's own list, and the owner touches
 * none of them before it takes the list), it is marked seen
 * (TA_XF_SEEN, in the word, by compare-and-swap: a collect clears it);
 * seen at the look before and still so, its pages are purged where they
 * are: TA_XF_PURGING, madvise, TA_XF_PURGED. The page stays on its
 * owner's lists; whoever collects it next (page.c, _ta_page_collect)
 * waits out TA_XF_PURGING, and finding TA_XF_PURGED takes every block
 * back without the list (its memory is zero now) and carves the page
 * anew, or gives it back as fresh pages. So a page its owner keeps using
 * (it collects it within the delay) is never purged, and one left alone
 * is purged one to two looks after it was emptied (the arena's rule for
 * free spans: older than the purge delay, they go). The lock stays held
 * through the system calls, a batch at a time: a fork (its prepare takes
 * the lock) never copies a page mid-purge, which the child, without a
 * purger, would wait on for good. Not in the checking build: its collect
 * walks every list. */
#define TA_EMPTIED_BATCH 16       /* spans a batch, */
#define TA_EMPTIED_BATCH_PAGES 32 /* or 2 MiB of them: the lock is held through their madvise */
static _Atomic(size_t) _ta_emptied_pending; /* bits set in the emptied maps (the purger's) */

/* Page pg of arena ai (the caller read ai before its push: only the
 * descriptor's address is used after it, which never moves): a push just
 * made its remote list every block of it. */
static void _ta_emptied_note(size_t ai, const _ta_page_t *pg) {
#if TA_CHECK
  (void)ai, (void)pg;
#else
  size_t idx = _ta_page_index(&_ta_arenas[ai], pg);
  uint64_t bit = (uint64_t)1 << (idx % 64);
  if (!atomic_load_explicit(&_ta_emptied_used[ai], memory_order_relaxed)) atomic_store_explicit(&_ta_emptied_used[ai], true, memory_order_relaxed);
  if (!(__atomic_fetch_or(&_ta_arenas[ai].emptied[idx / 64], bit, __ATOMIC_RELAXED) & bit))
    atomic_fetch_add_explicit(&_ta_emptied_pending, 1, memory_order_seq_cst); /* against the purger's last look */
#endif
}

/* Purge batch[0..n) (each marked TA_XF_PURGING), under the lock, and
 * mark each purged. Nothing but a push changes a word so marked (its
 * collect waits): a push since (a double free) cleared the mark and
 * leaves the word to the owner's collect, which aborts. */
static void _ta_emptied_purge_locked(_ta_page_t **batch, size_t n) {
  for (size_t i = 0; i < n; i++) _ta_os_purge(batch[i]->start, (size_t)batch[i]->npages << TA_PAGE_SHIFT);
  for (size_t i = 0; i < n; i++) {
    uintptr_t x = atomic_load_explicit(&batch[i]->xthread_free, memory_order_relaxed);
    if (x & TA_XF_PURGING)
      atomic_compare_exchange_strong_explicit(&batch[i]->xthread_free, &x, (x & ~(uintptr_t)TA_XF_PURGING) | TA_XF_PURGED,
                                              memory_order_release, memory_order_relaxed);
  }
}

/* The purger's look at the pages other threads' frees emptied. */
static void _ta_emptied_purge(void) {
  if (atomic_load_explicit(&_ta_emptied_pending, memory_order_relaxed) == 0) return;
  if (!_ta_arena_lock_take()) return;
  _ta_page_t *batch[TA_EMPTIED_BATCH];
  size_t n = 0, pages = 0, na = atomic_load_explicit(&_ta_narenas, memory_order_relaxed);
  for (size_t ai = 0; ai < na; ai++) {
    _ta_arena_t *a = &_ta_arenas[ai];
    for (size_t w = 0; w < (a->top + 63) / 64; w++) {
      for (uint64_t m = __atomic_load_n(&a->emptied[w], __ATOMIC_RELAXED); m; m &= m - 1) {
        uint64_t bit = m & -m;
        /* cleared first: a push that empties the page again from here on
         * sets it again, and counts it */
        __atomic_fetch_and(&a->emptied[w], ~bit, __ATOMIC_RELAXED);
        atomic_fetch_sub_explicit(&_ta_emptied_pending, 1, memory_order_relaxed);
        _ta_page_t *pg = &a->pages[w * 64 + (size_t)__builtin_ctzll(bit)];
        if (pg->kind != TA_KIND_SMALL) continue;
        /* a count only after the page's setup (which another thread may be
         * doing, outside the lock, on a span just taken): its blocks were
         * handed out, then pushed; so reserved is read only then */
        uintptr_t x = atomic_load_explicit(&pg->xthread_free, memory_order_acquire);
        if (_ta_xf_count(x) == 0 || _ta_xf_count(x) != pg->reserved || _ta_xf_gone(x)) continue;
        if (!(x & TA_XF_SEEN)) { /* first look: again at the next */
          if (atomic_compare_exchange_strong_explicit(&pg->xthread_free, &x, x | TA_XF_SEEN, memory_order_relaxed, memory_order_relaxed))
            _ta_emptied_note(ai, pg);
          continue;
        }
        if (!atomic_compare_exchange_strong_explicit(&pg->xthread_free, &x, (x & ~(uintptr_t)TA_XF_SEEN) | TA_XF_PURGING, memory_order_acquire,
                                                     memory_order_relaxed))
          continue; /* collected meanwhile */
        batch[n++] = pg;
        pages += pg->npages;
        if (n == TA_EMPTIED_BATCH || pages >= TA_EMPTIED_BATCH_PAGES) {
          _ta_emptied_purge_locked(batch, n);
          n = pages = 0;
        }
      }
    }
  }
  _ta_emptied_purge_locked(batch, n);
  _ta_arena_lock_drop();
}

/* ---- spans ------------------------------------------------------------------ */

/* Make pages [idx, idx+npages) of arena ai one span in use, res of its
 * OS pages resident at most. */
static _ta_page_t *_ta_span_claim(size_t ai, size_t idx, size_t npages, uint8_t kind, uint8_t flags, size_t res) {
  _ta_arena_t *a = &_ta_arenas[ai];
  _ta_page_t *h = &a->pages[idx];
  for (size_t i = 1; i < npages; i++) {
    h[i].kind = TA_KIND_INNER;
    h[i].head_off = (uint32_t)i;
  }
  h->kind = kind;
  h->head_off = 0;
  h->npages = (uint32_t)npages;
  h->arena = (uint32_t)ai;
  h->start = a->base + (idx << TA_PAGE_SHIFT);
  h->flags = flags & (TA_PF_ZERO | TA_PF_RESIDENT);
  h->free = NULL;
  atomic_store_explicit(&h->xthread_free, 0, memory_order_relaxed);
  atomic_store_explicit(&h->in_full, 0, memory_order_relaxed);
  atomic_store_explicit(&h->heap, NULL, memory_order_relaxed);
  h->used = h->capacity = h->reserved = 0;
  h->next = h->prev = h->dnext = h->dprev = NULL;
  h->requested = 0;
  h->ctr = NULL;
  h->tag = TA_TAG_UNTAGGED;
  h->tags = NULL;
  if (kind == TA_KIND_LARGE) h->claim_res = res < npages * TA_OS_PER_PAGE ? res : npages * TA_OS_PER_PAGE;
  h->slop = NULL;
  _ta_used_pages += npages;
  _ta_note_hwm();
  return h;
}

/* The pages from span h's start to its first that starts a multiple of
 * align_pages pages of the address space (0 for align_pages <= 1). */
static size_t _ta_span_lead(const _ta_page_t *h, size_t align_pages) {
  if (align_pages <= 1) return 0;
  uintptr_t start = (uintptr_t)h->start, al = (uintptr_t)align_pages << TA_PAGE_SHIFT;
  return (_ta_align_up(start, al) - start) >> TA_PAGE_SHIFT;
}

/* Take npages (aligned) out of free span h, still in the bins: the pages
 * before and after stay free in the state h was in, with their shares of
 * its resident count (its flags are read before it leaves the bins, which
 * clears its dirty bit). */
static _ta_page_t *_ta_span_split_claim(_ta_page_t *h, size_t npages, size_t align_pages, uint8_t kind, uint64_t now) {
  _ta_arena_t *a = &_ta_arenas[h->arena];
  size_t ai = h->arena, idx = _ta_page_index(a, h), n = h->npages;
  uint8_t flags = h->flags, rflags = flags;
  size_t res = h->resident;
  _ta_free_span_remove(h);
  size_t lead = _ta_span_lead(h, align_pages);
  size_t tail = n - lead - npages;
  if (lead) _ta_free_span_insert(ai, idx, lead, rflags, _ta_share_res(&rflags, res, n, lead), now);
  if (tail) _ta_free_span_insert(ai, idx + lead + npages, tail, rflags, _ta_share_res(&rflags, res, n, tail), now);
  if (_ta_res_whole(flags, res, n)) flags |= TA_PF_RESIDENT;
  return _ta_span_claim(ai, idx + lead, npages, kind, flags, _ta_share_res(&rflags, res, n, npages));
}

/* Do the free pages from page j of arena a on reach page end: free spans
 * side by side (a dirty and a clean one lie unjoined), then perhaps the
 * arena's untouched top? */
static bool _ta_free_reach_locked(const _ta_arena_t *a, size_t j, size_t end) {
  while (j < end && j < a->top && a->pages[j].kind == TA_KIND_FREE && a->pages[j].head_off == 0) j += a->pages[j].npages;
  return j >= end || (j == a->top && end <= a->npages);
}

/* Take pages [j, end) of arena ai out of the free spans that hold them
 * (the last one in part) and the top (_ta_free_reach_locked said they are
 * free). True if every page taken is known resident (dirty spans resident
 * throughout). */
static bool _ta_free_take_locked(size_t ai, size_t j, size_t end, uint64_t now) {
  _ta_arena_t *a = &_ta_arenas[ai];
  size_t clean = 0; /* pages taken from clean spans or the top: they fault */
  bool whole = end <= a->top;
  while (j < end && j < a->top) {
    _ta_page_t *r = &a->pages[j];
    size_t rn = r->npages;
    uint8_t rflags = r->flags;
    size_t rres = r->resident;
    if (!(rflags & TA_PF_DIRTY)) clean += j + rn > end ? end - j : rn;
    whole = whole && _ta_res_whole(rflags, rres, rn);
    _ta_free_span_remove(r);
    if (j + rn > end) _ta_free_span_insert(ai, end, j + rn - end, rflags, _ta_share_res(&rflags, rres, rn, j + rn - end), now);
    j += rn;
  }
  if (end > a->top) {
    clean += end - (j > a->top ? j : a->top);
    a->top = end;
  }
  /* A run after a dirty span and a large block grown in place fault on
   * these as a clean span would: the limit learns from them the same way.
   * It learned from whole clean spans only, and a buffer realloc grows
   * took the purged tails the limit cut, and the purged spans after it,
   * without the limit learning (8 buffers grown to 1-4 MiB: 12.9k faults,
   * 10.6k now, mimalloc 8.3k; peak RSS 35.5 -> 35.9 MiB, glibc 33.8). */
  if (clean) _ta_retain_learn(clean, TA_KIND_LARGE, now);
  return whole;
}

/* Page moves. A big block that must come on clean pages (they would be
 * populated or fault) while free resident (dirty) spans wait elsewhere
 * takes their pages instead: the page tables move into its range
 * (_ta_os_move), and the parts they left are clean, as if purged. The
 * program's RSS does not grow by what moved, and those pages do not
 * fault; a dirty span's address no longer decides whether its pages are
 * used again. Without it a loop of 4 live blocks of 64 KiB-64 MiB
 * written through kept 34 MiB of dirty spans that no new block fitted
 * beside at its peak (204 MiB, glibc's 172; 176 with moves, and 46k
 * faults instead of 73k, in less time).
 * Only whole 2 MiB that are 2 MiB-aligned at both ends move: their page
 * tables move whole (32-194 us a MiB on the 2-core VM). Moved a page at
 * a time it was 976 us a MiB, no better than populating (1.1-1.5 ms),
 * and this VM's shadowed page tables charge moved pages again at their
 * next touch: every span moved so made the loop above slower (0.67 ->
 * 0.79 s) and two 5-25 MiB blocks replacing each other fault more.
 * Only while the program is dense (its new blocks are populated, so
 * their pages are written anyway); only into the pages the block asked
 * for (not realloc's room beyond them); from dirty spans resident
 * throughout, the largest part that fits first, at most TA_MOVES a
 * block. The moves run without the arena lock, the spans out of the
 * bins as PURGING meanwhile, as a purge's do. Each move splits the
 * arena's mapping until its range is purged whole (units moved into,
 * above): moves wait while TA_MOVED_MAX units are so split, and stop for
 * good at once if the kernel cannot move. */
#define TA_MOVES 8
#define TA_RUN_TRIES 64 /* dirty spans looked at, newest first (here and for runs, below) */
typedef struct {
  size_t want; /* pages of the block the moves may fill */
  int n;
  struct {
    _ta_page_t *span; /* a dirty span, PURGING while its pages move */
    size_t npages, res; /* its length and resident count */
    size_t from, len; /* the pages of it that move: 2 MiB-aligned, whole 2 MiB */
    size_t to;        /* where they go, in pages into the new span */
  } m[TA_MOVES];
} _ta_moves_t;
static bool _ta_moves_off; /* arena lock: the kernel cannot move */

/* Plan moves into the pages of new large span h from page from on. */
static void _ta_moves_plan_locked(_ta_moves_t *mv, _ta_page_t *h, size_t from) {
  if (!mv || _ta_density < TA_DENSE || _ta_moves_off) return;
  size_t end = mv->want < h->npages ? mv->want : h->npages;
  size_t units = _ta_moved_units; /* with the moves planned so far */
  while (mv->n < TA_MOVES && from < end && units < TA_MOVED_MAX) {
    size_t room, at = from + _ta_pmd_part(h->start + (from << TA_PAGE_SHIFT), end - from, &room);
    size_t cap = (TA_MOVED_MAX - units) << (TA_PMD_SHIFT - TA_PAGE_SHIFT);
    if (room > cap) room = cap;
    if (room == 0) return;
    _ta_page_t *best = NULL;
    size_t best_off = 0, best_len = 0;
    int tries = 0;
    for (_ta_page_t *d = _ta_dirty_last; d && tries < TA_RUN_TRIES; d = d->dprev, tries++) {
      if (!_ta_res_whole(d->flags, d->resident, d->npages)) continue;
      size_t len, off = _ta_pmd_part(d->start, d->npages, &len);
      if (len > room) len = room;
      if (len > best_len) best = d, best_off = off, best_len = len;
    }
    if (!best) return;
    size_t np = best->npages;
    mv->m[mv->n].span = best;
    mv->m[mv->n].npages = np;
    mv->m[mv->n].res = best->resident;
    mv->m[mv->n].from = best_off;
    mv->m[mv->n].len = best_len;
    mv->m[mv->n].to = at;
    mv->n++;
    units += best_len >> (TA_PMD_SHIFT - TA_PAGE_SHIFT);
    _ta_free_span_remove(best);
    best->kind = TA_KIND_PURGING;
    best->head_off = 0;
    best->npages = (uint32_t)np;
    _ta_purging_pages += np;
    from = at + best_len;
  }
}

/* Run the moves planned into h (the arena lock held; dropped meanwhile),
 * and file the spans they left: the parts moved clean, the rest dirty. */
static void _ta_moves_run_locked(_ta_moves_t *mv, _ta_page_t *h, uint64_t now) {
  int err[TA_MOVES];
  _ta_mutex_unlock(&_ta_arena_lock);
  _ta_tls_arena = 0;
  for (int i = 0; i < mv->n; i++) {
    uint8_t *to = h->start + (mv->m[i].to << TA_PAGE_SHIFT);
    err[i] = _ta_os_move(mv->m[i].span->start + (mv->m[i].from << TA_PAGE_SHIFT), to, mv->m[i].len << TA_PAGE_SHIFT);
    /* the destination may be gone: mapped afresh as a purge would (nothing
     * of the new block is there yet), named, and no hole left */
    if (err[i]) _ta_os_renew(to, mv->m[i].len << TA_PAGE_SHIFT, TA_ARENA_NAME);
  }
  _ta_tls_arena = 1;
  _ta_mutex_lock(&_ta_arena_lock);
  size_t got = 0; /* pages moved into h */
  for (int i = 0; i < mv->n; i++) {
    _ta_page_t *d = mv->m[i].span;
    size_t ai = d->arena, idx = (size_t)(d - _ta_arenas[ai].pages), np = mv->m[i].npages, res = mv->m[i].res;
    size_t from = mv->m[i].from, len = mv->m[i].len, rest = np - from - len;
    uint8_t flags = TA_PF_DIRTY; /* resident throughout when planned: its parts' shares are exact */
    _ta_purging_pages -= np;
    d->kind = TA_KIND_INNER;
    if (err[i]) { /* nothing moved: dirty again as it was; no more moves if the kernel cannot */
      if (err[i] == EINVAL || err[i] == ENOSYS) _ta_moves_off = true;
      _ta_free_range_locked(ai, idx, np, flags, res, now);
      continue;
    }
    _ta_moved_units += _ta_moved_flip_locked(&_ta_arenas[h->arena], h->start + (mv->m[i].to << TA_PAGE_SHIFT), len, true);
    if (!_ta_moved_used[h->arena]) {
      _ta_moved_used[h->arena] = true;
      _ta_moved_maps += _ta_moved_map_bytes(_ta_arenas[h->arena].size);
    }
    got += len;
    if (from) _ta_free_range_locked(ai, idx, from, flags, _ta_share_res(&flags, res, np, from), now);
    _ta_free_range_locked(ai, idx + from, len, TA_PF_ZERO, 0, now);
    if (rest) _ta_free_range_locked(ai, idx + from + len, rest, flags, _ta_share_res(&flags, res, np, rest), now);
  }
  if (got) {
    h->claim_res += got * TA_OS_PER_PAGE;
    h->flags &= (uint8_t)~(TA_PF_ZERO | TA_PF_RESIDENT);
  }
  mv->n = 0;
}

/* No single resident span holds npages: a run that starts with a
 * resident (dirty) span too small for them and goes on over the free
 * spans after it, or into the top, faults only on the pages past it. The
 * newest dirty spans are tried first (the likeliest still in the caches),
 * at most TA_RUN_TRIES of them. NULL if none reaches. */
static _ta_page_t *_ta_span_alloc_run_locked(size_t npages, uint8_t kind, uint64_t now, _ta_moves_t *mv) {
  int tries = 0;
  for (_ta_page_t *d = _ta_dirty_last; d && tries < TA_RUN_TRIES; d = d->dprev, tries++) {
    if (d->npages >= npages) continue; /* best fit's, if it did not take it */
    size_t ai = d->arena;
    _ta_arena_t *a = &_ta_arenas[ai];
    size_t idx = _ta_page_index(a, d), n = d->npages;
    if (!_ta_free_reach_locked(a, idx + n, idx + npages)) continue;
    size_t res = d->resident;
    _ta_free_span_remove(d);
    _ta_free_take_locked(ai, idx + n, idx + npages, now);
    _ta_page_t *h = _ta_span_claim(ai, idx, npages, kind, 0, res);
    _ta_moves_plan_locked(mv, h, n);
    return h;
  }
  return NULL;
}

/* Does free span h hold npages starting at a multiple of align_pages
 * pages (of the address space), where it lies? */
static bool _ta_span_fits_aligned(const _ta_page_t *h, size_t npages, size_t align_pages) {
  return _ta_span_lead(h, align_pages) + npages <= h->npages;
}

/* Spans looked at in each exact bin shorter than an aligned request's
 * bound (below): a bound on the search, not on what is found. */
#define TA_ALIGN_LOOK 8

/* The best fit for npages aligned to align_pages pages (if > 1) among the
 * free spans of one state (dirty or not): the smallest exact bin that
 * fits, else the shortest of the longer spans that fits; NULL if none
 * does. Any span of npages + align_pages - 1 holds an aligned run; a
 * shorter one may, where it lies, and is looked at first: a block of 33
 * MiB aligned to 2 MiB, freed and asked for again, was never given its
 * own span back (528 pages, where the bound asked 559), and each took
 * new pages from the top and wrote their descriptors (posix_memalign and
 * free 200 times: 15 MiB of RSS for 1 MiB of blocks, the address space
 * growing 136 MiB a round). */
static _ta_page_t *_ta_bins_best_fit(unsigned dirty, size_t npages, size_t align_pages) {
  size_t need = npages + (align_pages > 1 ? align_pages - 1 : 0);
  for (size_t b = npages; align_pages > 1 && b < need && b <= TA_BINS; b++) {
    if (!(_ta_bin_mask[dirty] >> (b - 1) & 1)) continue;
    unsigned k = 0;
    for (_ta_page_t *h = _ta_bins[dirty][b - 1].first; h && k < TA_ALIGN_LOOK; h = h->next, k++)
      if (_ta_span_fits_aligned(h, npages, align_pages)) return h;
  }
  uint64_t m = need <= TA_BINS ? _ta_bin_mask[dirty] & (~(uint64_t)0 << (need - 1)) : 0;
  if (m) return _ta_bins[dirty][__builtin_ctzll(m)].first;
  _ta_page_t *best = NULL;
  for (_ta_page_t *h = _ta_bins[dirty][TA_BINS].first; h; h = h->next) {
    if (h->npages < npages || (best && h->npages >= best->npages)) continue;
    if (h->npages < need && !_ta_span_fits_aligned(h, npages, align_pages)) continue;
    best = h;
    if (h->npages == npages) break;
  }
  return best;
}

static _ta_page_t *_ta_span_alloc_locked(size_t npages, size_t align_pages, uint8_t kind, uint64_t now, _ta_moves_t *mv) {
  size_t need = npages + (align_pages > 1 ? align_pages - 1 : 0);
  /* Resident (dirty) pages before purged or fresh (clean) ones, which
   * would fault on every page again; of each, the best fit. The exact
   * bins once held both: a span of 10 pages went to the smallest free
   * span that fit, clean or not, while dirty ones waited to be purged
   * for the retain limit (buffers grown by realloc to 1-4 MiB: 37k
   * faults, 25k with dirty first; a loop of 5-25 MiB blocks: 224 -> 199
   * MiB peak RSS, 82k -> 68k faults). */
  _ta_page_t *h = _ta_bins_best_fit(1, npages, align_pages);
  if (h) return _ta_span_split_claim(h, npages, align_pages, kind, now);
  /* No resident span holds it: one that holds part of it, and free pages
   * after it, before a span that would fault on every page. */
  if (align_pages <= 1 && (h = _ta_span_alloc_run_locked(npages, kind, now, mv))) return h;
  _ta_retain_learn(npages, kind, now); /* pages that fault: were some just purged? */
  if ((h = _ta_bins_best_fit(0, npages, align_pages))) {
    h = _ta_span_split_claim(h, npages, align_pages, kind, now);
    _ta_moves_plan_locked(mv, h, 0);
    return h;
  }
  /* Fresh pages from an arena's top (zero). */
  for (;;) {
    size_t n = atomic_load_explicit(&_ta_narenas, memory_order_relaxed);
    for (size_t ai = 0; ai < n; ai++) {
      _ta_arena_t *a = &_ta_arenas[ai];
      size_t idx = a->top;
      if (align_pages > 1) idx = _ta_align_up(idx + ((uintptr_t)a->base >> TA_PAGE_SHIFT), align_pages) - ((uintptr_t)a->base >> TA_PAGE_SHIFT);
      if (idx + npages > a->npages) continue;
      if (idx > a->top) {
        size_t gap = a->top;
        a->top = idx;
        _ta_free_range_locked(ai, gap, idx - gap, TA_PF_ZERO, 0, now);
      }
      a->top = idx + npages;
      h = _ta_span_claim(ai, idx, npages, kind, TA_PF_ZERO, 0);
      _ta_moves_plan_locked(mv, h, 0);
      return h;
    }
    size_t want = _ta_opt.arena_reserve;
    size_t bytes = (need + 1) << TA_PAGE_SHIFT;
    while (want < bytes && want * 2 > want) want *= 2;
    if (!_ta_arena_add_locked(want)) return NULL;
  }
}

/* A large span of npages (aligned to align_pages pages if > 1) for a
 * block of want pages (page moves fill no more), or NULL with errno =
 * ENOMEM; *state (if given) says whether its memory is known zero
 * (TA_PF_ZERO) or known resident throughout (TA_PF_RESIDENT). */
static _ta_page_t *_ta_span_alloc(size_t npages, size_t align_pages, size_t want, uint8_t *state) {
  if (!_ta_ensure_init() || _ta_fault()) return NULL;
  if (!_ta_arena_lock_take()) { /* a signal handler interrupted this thread's arena work */
    errno = ENOMEM;
    return NULL;
  }
  uint64_t now = _ta_now_ms();
  _ta_moves_t mv = {.want = want};
  _ta_page_t *h = _ta_span_alloc_locked(npages, align_pages, TA_KIND_LARGE, now, &mv);
  if (mv.n) _ta_moves_run_locked(&mv, h, now);
  if (h) {
    _ta_note_recent_big(npages, now);
    /* The flags of a span in use are the arena's: report them here. */
    if (state) *state = h->flags;
    h->flags = 0;
  }
  _ta_unlock_purge(false, now);
  if (!h) errno = ENOMEM;
  return h;
}

/* The state of two free spans of one state (dirty or clean) joined: zero
 * only if both are, its resident count a guess if either's is. */
static inline uint8_t _ta_join_flags(uint8_t a, uint8_t b) {
  return (uint8_t)((a & b) | ((a | b) & TA_PF_UNMEASURED));
}

/* Make pages [idx, idx+n) of arena ai free, coalescing with free
 * neighbours of the same state only: dirty with dirty, clean with clean.
 * A dirty span is then resident memory throughout, so the dirty pages the
 * retain limit counts are what is resident, and a purge never throws away
 * a freed block's pages for being joined to clean ones (a 20 MiB block
 * freed next to 18 MiB of clean pages made a 38 MiB dirty span, over the
 * limit, purged whole: a loop of two 5-25 MiB blocks faulted every page). */
static void _ta_free_range_locked(size_t ai, size_t idx, size_t n, uint8_t flags, size_t res, uint64_t now) {
  _ta_arena_t *a = &_ta_arenas[ai];
  uint8_t dirty = flags & TA_PF_DIRTY;
  if (idx > 0) {
    _ta_page_t *l = &a->pages[idx - 1];
    l -= l->head_off;
    if (l->kind == TA_KIND_FREE && l->head_off == 0 && _ta_page_index(a, l) + l->npages == idx &&
        (l->flags & TA_PF_DIRTY) == dirty) {
      size_t li = _ta_page_index(a, l);
      flags = _ta_join_flags(flags, l->flags);
      res += l->resident;
      _ta_free_span_remove(l);
      n += idx - li;
      idx = li;
    }
  }
  if (idx + n < a->top) {
    _ta_page_t *r = &a->pages[idx + n];
    if (r->kind == TA_KIND_FREE && r->head_off == 0 && (r->flags & TA_PF_DIRTY) == dirty) {
      size_t rn = r->npages;
      flags = _ta_join_flags(flags, r->flags);
      res += r->resident;
      _ta_free_span_remove(r);
      n += rn;
    }
  }
  _ta_free_span_insert(ai, idx, n, flags, res, now);
}

/* ---- side arrays ------------------------------------------------------------
 * A small span's per-block arrays (its tags, and with TAGALLOC_REQUESTED its
 * slop) are made and freed with the span, in the same section under the
 * arena lock, so a signal handler meets no other lock here than it does for
 * spans. Power-of-two buckets of 64 B .. 8 KiB (4096 blocks of 2 bytes, the
 * most a span holds) with free lists, carved from private chunks that are
 * never unmapped; a reused array keeps its stale entries (only the entries
 * of blocks handed out are read). */
#define TA_SIDE_BUCKETS 8
#define TA_SIDE_CHUNK TA_MiB
static void *_ta_side_free_list[TA_SIDE_BUCKETS];
static uint8_t *_ta_side_cur, *_ta_side_end;

static unsigned _ta_side_bucket(size_t bytes) {
  unsigned b = 0;
  while (((size_t)64 << b) < bytes) b++;
  return b;
}

static void *_ta_side_alloc_locked(size_t bytes) {
  unsigned b = _ta_side_bucket(bytes);
  if (b >= TA_SIDE_BUCKETS) return NULL;
  void *p = _ta_side_free_list[b];
  if (p) {
    _ta_side_free_list[b] = *(void **)p;
    return p;
  }
  size_t size = (size_t)64 << b;
  if ((size_t)(_ta_side_end - _ta_side_cur) < size) {
    uint8_t *c = _ta_os_reserve(TA_SIDE_CHUNK, TA_OS_PAGE);
    if (!c) return NULL;
    _ta_os_name(c, TA_SIDE_CHUNK, "tagalloc block tags");
    _ta_side_cur = c;
    _ta_side_end = c + TA_SIDE_CHUNK;
  }
  p = _ta_side_cur;
  _ta_side_cur += size;
  /* the books count what is carved, not the chunk (its untouched rest,
   * most of a 1 MiB chunk in a small program, costs no memory: it showed
   * as 1 MiB of mstress's 1.7 MiB of bookkeeping) */
  _ta_side_carved += size;
  return p;
}

static void _ta_side_free_locked(void *p, size_t bytes) {
  if (!p) return;
  unsigned b = _ta_side_bucket(bytes);
  *(void **)p = _ta_side_free_list[b];
  _ta_side_free_list[b] = p;
}

/* A span of npages for blocks of a small class, with a tags array of
 * tag_bytes and (if slop_bytes) a slop array; NULL with errno = ENOMEM. */
static _ta_page_t *_ta_span_alloc_small(size_t npages, size_t tag_bytes, size_t slop_bytes) {
  if (!_ta_ensure_init() || _ta_fault()) return NULL;
  if (!_ta_arena_lock_take()) { /* a signal handler interrupted this thread's arena work */
    errno = ENOMEM;
    return NULL;
  }
  uint64_t now = _ta_now_ms();
  _ta_page_t *h = NULL;
  uint16_t *tags = _ta_side_alloc_locked(tag_bytes);
  void *slop = tags && slop_bytes ? _ta_side_alloc_locked(slop_bytes) : NULL;
  if (tags && (slop || !slop_bytes)) h = _ta_span_alloc_locked(npages, 1, TA_KIND_SMALL, now, NULL);
  if (h) {
    h->flags &= (uint8_t)(TA_PF_ZERO | TA_PF_RESIDENT); /* how it came: _ta_page_extend, _ta_span_resident_locked */
    h->tags = tags;
    h->slop = slop;
    /* keeping requested sizes: mixed for good (its ctr stays NULL), so
     * the fast paths' compare sends every malloc and free of it out of line */
    if (slop) h->tag = TA_TAG_MIXED;
  } else {
    _ta_side_free_locked(tags, tag_bytes);
    _ta_side_free_locked(slop, slop_bytes);
  }
  _ta_unlock_purge(false, now);
  if (!h) errno = ENOMEM;
  return h;
}

/* How many OS pages of span h, being freed, are resident: a large span of
 * TA_MEASURE_PAGES or more is measured (mincore, about a microsecond a
 * MiB: the free of a block that big costs far more if it was touched),
 * a small span that came untouched counts the pages its carved blocks
 * cover (it is carved as it fills), anything else counts as all
 * resident. A large block the program touched only in part
 * then counts only what it touched against the retain limit. */
#define TA_MEASURE_PAGES 4
TA_COLD_BSS static unsigned char _ta_mincore_vec[4096]; /* under the arena lock */

/* Density: of the big blocks freed lately, the share of their pages the
 * program had touched (0..256, a moving average of the measurements, a
 * quarter weight each). Where it is high, the program writes its big
 * blocks through, and a new one's pages are brought in with one system
 * call when it is handed out (_ta_os_populate: 3-5 us a page against 14
 * for a fault on the 2-core VM) instead of a fault each. Where it is low
 * (blocks touched in part), nothing is populated. */
/* TA_DENSE and _ta_density (arena lock) are defined with the retain limit, which learns by them */
static _Atomic(unsigned) _ta_density_seen; /* a copy read without it */

/* Move the density towards res of pages: 1/div of the way, or all of it
 * for the first measure. From 0 with a quarter weight it took 8 blocks
 * written through to pass TA_DENSE, and a program whose big blocks
 * mostly reuse resident pages (4 live blocks of 64 KiB-64 MiB: 5
 * measured in 300) stayed at 213 and faulted every new page (68k faults,
 * 0.82 s; 6.4k and 0.54 s populated, tcmalloc 0.67 s). */
static bool _ta_density_known; /* arena lock */
static void _ta_density_note(size_t res, size_t pages, int div) {
  int d = (int)(res * 256 / (pages ? pages : 1)), cur = (int)_ta_density;
  _ta_density = _ta_density_known ? (unsigned)(cur + (d - cur) / div) : (unsigned)d;
  _ta_density_known = true;
  atomic_store_explicit(&_ta_density_seen, _ta_density, memory_order_relaxed);
}

/* Measure [p, p+bytes): how many of its OS pages are resident. With div,
 * the density moves 1/div of the way to it; with 0 it learns nothing (the
 * pages were resident or populated before the program had them, or the
 * span is free: their residency says nothing of the program's use). */
static size_t _ta_measure_locked(void *p, size_t bytes, int div) {
  size_t res = _ta_os_resident(p, bytes, _ta_mincore_vec, sizeof _ta_mincore_vec);
  if (div) _ta_density_note(res, bytes / TA_OS_PAGE, div);
  return res;
}

/* Should the next big block of clean pages be brought in when handed
 * out? While the program is dense, yes, except one block in TA_PROBE:
 * that one is left to fault, so its measure when freed says whether the
 * program still writes its big blocks through (populated ones, and ones
 * on pages already resident, cannot tell). */
#define TA_PROBE 8
static _Atomic(unsigned) _ta_probe;
static inline bool _ta_arena_dense(void) { return atomic_load_explicit(&_ta_density_seen, memory_order_relaxed) >= TA_DENSE; }
static inline bool _ta_arena_populate_next(void) {
  if (!_ta_arena_dense()) return false;
  return atomic_fetch_add_explicit(&_ta_probe, 1, memory_order_relaxed) % TA_PROBE != TA_PROBE - 1;
}

/* The OS pages of span h, being freed, that count as resident. A small
 * span is resident throughout (carved and written as it fills). A large
 * span of TA_MEASURE_PAGES or more that the density samples (below) is
 * measured; any other large one is guessed, and marked TA_PF_UNMEASURED
 * in *flags: what was resident when it was claimed or populated
 * (claim_res), and the density's share of the rest (a span resident
 * throughout when claimed, or populated, is so still: exact). The purge
 * measures a guess before it purges anything for the retain limit, and
 * the books count every page of it (a bound). So a program that frees big blocks it touched in part and
 * takes their pages again at once makes no system call for them (64
 * slots of 64 KiB-4 MiB blocks replacing each other, first and last byte
 * touched: a mincore on every free was 0.12 s of its 0.15 s, where glibc
 * took 0.03 s in all). */
#define TA_DENSITY_SAMPLE 4
#define TA_SPARSE 32
#define TA_WINDOW 16 /* OS pages */
static unsigned _ta_density_tick; /* arena lock */
static size_t _ta_span_resident_locked(const _ta_page_t *h, uint8_t *flags) {
  size_t pages = (size_t)h->npages * TA_OS_PER_PAGE;
  if (h->kind == TA_KIND_SMALL) {
    if (h->flags & TA_PF_ZERO) { /* came untouched: what was carved, exact if carving wrote every page */
      size_t carved = ((size_t)h->capacity * h->block_size + TA_OS_PAGE - 1) / TA_OS_PAGE;
      if (h->block_size > TA_OS_PAGE) *flags |= TA_PF_UNMEASURED;
      return carved < pages ? carved : pages;
    }
    /* came resident in part: a bound, not known resident throughout */
    if (!(h->flags & TA_PF_RESIDENT)) *flags |= TA_PF_UNMEASURED;
    return pages;
  }
  if (h->kind != TA_KIND_LARGE || h->npages < TA_MEASURE_PAGES) return pages;
  size_t base = h->claim_res < pages ? h->claim_res : pages;
  if (base == pages) return pages; /* populated, or claimed resident: exact */
  /* The density learns only from blocks left to fault (not primed), each
   * measured while it is not sparse: populating, or not, turns on it.
   * While sparse (a mincore on every free cost more than the program's
   * own work), one in TA_DENSITY_SAMPLE has TA_WINDOW pages from its
   * middle looked at, about a microsecond, and only a window mostly
   * touched has the whole block measured, and half the say: a program
   * that starts writing its blocks through is seen within a dozen frees.
   * The middle, not the start: a block written at its two ends (a
   * header, a last byte) showed its first page touched in a window of
   * 16, a density of 6% where it was 0.4%, and the guesses it made went
   * over the retain limit with a tenth of it resident: the purge then
   * measured 2.7 GiB of free spans with 2,100 mincore calls, 16 ms of a
   * 44 ms run (64 slots of 64 KiB-4 MiB blocks touched at the ends). */
  if (!(h->flags & TA_PF_PRIMED)) {
    if (_ta_density >= TA_SPARSE) return _ta_measure_locked(h->start, pages * TA_OS_PAGE, 4);
    if (_ta_density_tick++ % TA_DENSITY_SAMPLE == 0) {
      uint8_t *mid = h->start + (pages - TA_WINDOW) / 2 * TA_OS_PAGE; /* pages >= 4 * 16 */
      size_t w = _ta_os_resident(mid, TA_WINDOW * TA_OS_PAGE, _ta_mincore_vec, sizeof _ta_mincore_vec);
      if (w * 2 >= TA_WINDOW) return _ta_measure_locked(h->start, pages * TA_OS_PAGE, 2);
      _ta_density_note(w, TA_WINDOW, 4);
    }
  }
  *flags |= TA_PF_UNMEASURED;
  return base + ((pages - base) * _ta_density + 255) / 256;
}

/* Measure dirty span h, whose resident count is a bound. */
static void _ta_dirty_measure_locked(_ta_page_t *h) {
  _ta_dirty_account(h, -1);
  h->resident = _ta_measure_locked(h->start, (size_t)h->npages << TA_PAGE_SHIFT, 0);
  h->flags &= (uint8_t)~TA_PF_UNMEASURED;
  _ta_dirty_account(h, 1);
}

/* Return a span in use to the arena. */
static void _ta_span_free(_ta_page_t *h) {
  if (!_ta_arena_lock_take()) { /* a signal handler: freed when the section ends */
    if (_ta_tls_ndeferred < TA_DEFERRED) {
      _ta_tls_deferred[_ta_tls_ndeferred] = h;
      _ta_tls_ndeferred = _ta_tls_ndeferred + 1;
    } /* else the span stays in use (never: TA_DEFERRED frees in one handler) */
    return;
  }
  uint64_t now = _ta_now_ms();
  ta_assert(h->kind == TA_KIND_SMALL || h->kind == TA_KIND_LARGE);
  if (h->kind == TA_KIND_SMALL) {
    _ta_side_free_locked(h->tags, (size_t)h->reserved * sizeof(uint16_t));
    _ta_side_free_locked(h->slop, _ta_slop_bytes(h));
    h->tags = NULL;
    h->slop = NULL;
  }
  _ta_arena_t *a = &_ta_arenas[h->arena];
  uint8_t flags = TA_PF_DIRTY;
  size_t res = _ta_span_resident_locked(h, &flags);
  _ta_used_pages -= h->npages;
  __atomic_store_n(&h->ctr, NULL, __ATOMIC_RELAXED); /* no thread's: a stale free never takes a fast path */
  atomic_store_explicit(&h->heap, NULL, memory_order_relaxed);
  h->kind = TA_KIND_INNER;
  /* what it touched is resident: dirty */
  _ta_free_range_locked(h->arena, _ta_page_index(a, h), h->npages, flags, res, now);
  _ta_last_freed_res = res;
  _ta_unlock_purge(false, now);
}

/* Grow a large span in place to npages if the pages after it are free;
 * *resident says whether every page it took was known resident. */
static bool _ta_span_grow_inplace(_ta_page_t *h, size_t npages, bool *resident) {
  bool ok = false;
  if (!_ta_arena_lock_take()) return false; /* a signal handler: realloc moves it */
  uint64_t now = _ta_now_ms();
  size_t ai = h->arena;
  _ta_arena_t *a = &_ta_arenas[ai];
  size_t idx = _ta_page_index(a, h), n = h->npages, extra = npages - n;
  /* The free pages right after it: one free span or more (a dirty and a
   * clean one lie side by side unjoined), then maybe the arena's top. */
  size_t end = idx + npages;
  ok = _ta_free_reach_locked(a, idx + n, end);
  if (ok) {
    *resident = _ta_free_take_locked(ai, idx + n, end, now);
    for (size_t i = n; i < npages; i++) {
      h[i].kind = TA_KIND_INNER;
      h[i].head_off = (uint32_t)i;
    }
    h->npages = (uint32_t)npages;
    _ta_used_pages += extra;
    _ta_note_hwm();
  }
  _ta_books_publish_arena_locked();
  _ta_arena_lock_drop();
  return ok;
}

/* Give the pages of a large span beyond npages back to the arena. */
static bool _ta_span_shrink_inplace(_ta_page_t *h, size_t npages) {
  if (!_ta_arena_lock_take()) return false; /* a signal handler: realloc moves it */
  uint64_t now = _ta_now_ms();
  size_t ai = h->arena;
  _ta_arena_t *a = &_ta_arenas[ai];
  size_t idx = _ta_page_index(a, h), n = h->npages, tail = n - npages;
  h->npages = (uint32_t)npages;
  if (h->claim_res > npages * TA_OS_PER_PAGE) h->claim_res = npages * TA_OS_PER_PAGE;
  _ta_used_pages -= tail;
  _ta_free_range_locked(ai, idx + npages, tail, TA_PF_DIRTY, tail * TA_OS_PER_PAGE, now);
  _ta_unlock_purge(false, now);
  return true;
}

/* ---- checks ------------------------------------------------------------------- */

/* Walk every arena and check the invariants above. Returns the number of
 * pages in use (for the accounting tests), aborts on a broken invariant. */
static size_t _ta_arena_check(void) {
  if (!_ta_arena_lock_take()) return 0;
  size_t used = 0, freep = 0, dirty = 0, nfree = 0, inbins = 0, purging = 0;
  size_t n = atomic_load(&_ta_narenas);
  for (size_t ai = 0; ai < n; ai++) {
    _ta_arena_t *a = &_ta_arenas[ai];
    int prev_free = 0; /* 0: not free; else 1 + its dirty bit (free spans join only of one state) */
    for (size_t i = 0; i < a->top;) {
      _ta_page_t *h = &a->pages[i];
      if (h->head_off != 0 || h->npages == 0 || i + h->npages > a->top)
        _ta_fatal("arena %zu page %zu: not a span head (head_off %u npages %u)", ai, i, h->head_off, h->npages);
      if (h->kind == TA_KIND_FREE) {
        if (prev_free == 1 + (h->flags & TA_PF_DIRTY)) _ta_fatal("arena %zu page %zu: adjacent free spans of one state", ai, i);
        if (!(h->flags & (TA_PF_DIRTY | TA_PF_ZERO))) _ta_fatal("arena %zu page %zu: a free span neither dirty nor zero", ai, i);
        if ((h->flags & (TA_PF_DIRTY | TA_PF_UNMEASURED)) == TA_PF_UNMEASURED) _ta_fatal("arena %zu page %zu: a clean span marked unmeasured", ai, i);
        freep += h->npages;
        nfree++;
        if (h->flags & TA_PF_DIRTY) dirty += h->npages;
        if (h->npages > 1 && h[h->npages - 1].head_off != h->npages - 1)
          _ta_fatal("arena %zu page %zu: free span's last page does not point back", ai, i);
        prev_free = 1 + (h->flags & TA_PF_DIRTY);
      } else if (h->kind == TA_KIND_SMALL || h->kind == TA_KIND_LARGE) {
        for (size_t k = 1; k < h->npages; k++)
          if (h[k].head_off != k) _ta_fatal("arena %zu page %zu: inner page %zu has head_off %u", ai, i, k, h[k].head_off);
        used += h->npages;
        prev_free = 0;
      } else if (h->kind == TA_KIND_PURGING) {
        purging += h->npages;
        prev_free = 0;
      } else {
        _ta_fatal("arena %zu page %zu: bad kind %u", ai, i, h->kind);
      }
      i += h->npages;
    }
  }
  for (unsigned d = 0; d < 2; d++)
    for (size_t b = 0; b <= TA_BINS; b++) {
      size_t c = 0;
      for (_ta_page_t *h = _ta_bins[d][b].first; h; h = h->next) {
        if (h->kind != TA_KIND_FREE || _ta_bin_of(h->npages) != b || _ta_bin_set(h) != d) _ta_fatal("bin %u/%zu holds a wrong span", d, b);
        c++;
      }
      if (c != _ta_bins[d][b].count) _ta_fatal("bin %u/%zu count %zu != %zu", d, b, _ta_bins[d][b].count, c);
      if (b < TA_BINS && (c > 0) != !!(_ta_bin_mask[d] & ((uint64_t)1 << b))) _ta_fatal("bin mask wrong at %u/%zu", d, b);
      inbins += c;
    }
  size_t dl = 0;
  for (_ta_page_t *h = _ta_dirty_first; h; h = h->dnext) dl += h->npages;
  if (inbins != nfree) _ta_fatal("free spans %zu but %zu in bins", nfree, inbins);
  size_t rl = 0, ul = 0, us = 0;
  for (_ta_page_t *h = _ta_dirty_first; h; h = h->dnext) {
    if (h->resident > (size_t)h->npages * TA_OS_PER_PAGE) _ta_fatal("dirty span %p: %zu OS pages resident of %u pages", h->start, h->resident, h->npages);
    /* a measured count is a bound: no more is resident than it says
     * (free memory is touched by no one; the OS may have taken some) */
    if (!(h->flags & TA_PF_UNMEASURED)) {
      size_t seen = _ta_os_resident(h->start, (size_t)h->npages << TA_PAGE_SHIFT, _ta_mincore_vec, sizeof _ta_mincore_vec);
      if (seen > h->resident) _ta_fatal("dirty span %p of %u pages: %zu OS pages resident, counted %zu", h->start, h->npages, seen, h->resident);
    }
    rl += h->resident;
    if (h->flags & TA_PF_UNMEASURED) {
      ul++;
      us += (size_t)h->npages * TA_OS_PER_PAGE - h->resident;
    }
  }
  if (us != _ta_dirty_unsure) _ta_fatal("dirty pages guessed not resident: list %zu, counter %zu", us, _ta_dirty_unsure);
  if (rl != _ta_dirty_res) _ta_fatal("dirty resident pages: list %zu, counter %zu", rl, _ta_dirty_res);
  if (ul != _ta_dirty_unmeasured) _ta_fatal("unmeasured dirty spans: list %zu, counter %zu", ul, _ta_dirty_unmeasured);
  if (dl != dirty || dirty != _ta_dirty_pages) _ta_fatal("dirty pages: list %zu, spans %zu, counter %zu", dl, dirty, _ta_dirty_pages);
  if (purging != _ta_purging_pages) _ta_fatal("purging pages: walk %zu, counter %zu", purging, _ta_purging_pages);
  if (used != _ta_used_pages) _ta_fatal("pages in use: walk %zu, counter %zu", used, _ta_used_pages);
  _ta_arena_lock_drop();
  return used;
}
