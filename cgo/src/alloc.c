/* alloc.c: the public entry points (malloc and the rest of what glibc
 * exports), their fast paths, and errno and NULL as glibc sets them. */

#include <stdlib.h>
#include <unistd.h>

#include "../include/tagalloc.h"

/* ---- internal entry points (shared by every public one) ------------------ */

/* The requested size of block idx of small span pg (with
 * TAGALLOC_REQUESTED); _ta_slop_req of block b. */
static inline size_t _ta_slop_req_at(const _ta_page_t *pg, size_t idx) { return pg->block_size - _ta_slop_get(pg, idx); }
static inline size_t _ta_slop_req(const _ta_page_t *pg, const void *b) { return _ta_slop_req_at(pg, _ta_block_index(pg, b)); }

/* malloc's class argument for a size whose page was found by the size
 * (heap->small[]): its class is the page's when the page has a free
 * block, else the size's, computed then (the slow path: _ta_class_for). */
#define TA_CLASS_BY_SIZE UINT32_MAX
static inline unsigned _ta_class_for(unsigned c, size_t size) { return c == TA_CLASS_BY_SIZE ? _ta_class_of(size) : c; }

/* Everything but the common case of the fast path below, for h's page pg
 * of class c (or TA_CLASS_BY_SIZE): a page that keeps requested sizes or
 * holds another tag's blocks, or no free block at hand. Out of line, so
 * the fast path needs neither size nor class once it has its page. A
 * thread that switches tags comes here on every malloc after a switch:
 * for a size found by its slot, the class formula runs only when there
 * is no free block (many_tags: 13 instructions less a malloc). */
TA_NOINLINE static void *_ta_malloc_rest(_ta_heap_t *h, _ta_page_t *pg, unsigned c, size_t size) {
  _ta_block_t *b = pg->free;
  if (b == NULL) return _ta_malloc_slow(h, _ta_class_for(c, size), size);
  ta_assert(c == TA_CLASS_BY_SIZE || c == pg->sclass);
  c = pg->sclass; /* a page with a free block: its class, on a line at hand */
  if (ta_unlikely(!_ta_take_retag(h, pg, c, b))) return _ta_take_refused(h, pg, b);
  if (pg->slop) _ta_take_requested(h, pg, c, b, size);
  return b;
}

/* A block just taken took its counters past their high-water mark: the
 * sole holder's case of _ta_ctr_rise inline (every malloc of a growing
 * heap comes here), the rest through it. */
TA_NOINLINE static void *_ta_took_rising(_ta_heap_t *h, void *b) {
  if (ta_likely(_ta_ctr_rise_sole(h->ctr)) || _ta_ctr_rise(h->ctr)) return b;
  return _ta_take_refused(h, _ta_page_of(b), b); /* a budget's: its page is the direct one */
}

/* malloc's fast path from pg, h's page of class c (direct[c]) or of the
 * size (its small[] slot, c TA_CLASS_BY_SIZE). */
static inline __attribute__((always_inline)) void *_ta_malloc_unsampled_from(_ta_heap_t *h, _ta_page_t *pg, unsigned c, size_t size) {
  _ta_block_t *b = pg->free;
  /* a page keeping requested sizes is mixed: the tag compare fails */
  if (ta_likely(b != NULL && pg->ctr == h->ctr)) {
    if (_ta_take(h, pg, b)) return _ta_took_rising(h, b); /* a tail call: the fast path stays a leaf */
    return b;
  }
  return _ta_malloc_rest(h, pg, c, size);
}

static inline void *_ta_malloc_class_unsampled(unsigned c, size_t size) {
  _ta_heap_t *h = _ta_tls_heap;
  return _ta_malloc_unsampled_from(h, h->direct[c], c, size);
}

#if TA_SAMPLING
/* Everything but the common case of _ta_malloc_from below: out of line,
 * so that case stays a leaf without a frame. */
TA_NOINLINE static void *_ta_malloc_class_sampling(unsigned c, size_t size) {
  void *p = _ta_malloc_class_unsampled(c, size);
  return _ta_sample_alloc(p, size, _ta_tls_heap->ctr->tag);
}

/* The same fast path, counted down (sample.c). The common case (a free
 * block at hand, no requested sizes kept, the countdown not crossing
 * zero) is the unsampled fast path and one subtraction more. */
static inline __attribute__((always_inline)) void *_ta_malloc_from(_ta_heap_t *h, _ta_page_t *pg, unsigned c, size_t size) {
  int64_t left = _ta_sample_left - _ta_counted(size);
  _ta_block_t *b = pg->free;
  if (ta_likely(b != NULL && left >= 0 && pg->ctr == h->ctr)) {
    _ta_sample_left = left;
    if (_ta_take(h, pg, b)) return _ta_took_rising(h, b);
    return b;
  }
  return _ta_malloc_class_sampling(_ta_class_for(c, size), size);
}
#else
#define _ta_malloc_from _ta_malloc_unsampled_from
#endif

/* A small block of class c. */
static inline void *_ta_malloc_class(unsigned c, size_t size) {
  _ta_heap_t *h = _ta_tls_heap;
  return _ta_malloc_from(h, h->direct[c], c, size);
}

/* A small block for size <= TA_SMALL_MAX: its page by the size (types.h). */
static inline void *_ta_malloc_by_size(size_t size) {
  _ta_heap_t *h = _ta_tls_heap;
  return _ta_malloc_from(h, h->small[_ta_small_slot(size)], TA_CLASS_BY_SIZE, size);
}

/* Large span pg is resident throughout: primed, and counted so when freed
 * (claim_res: no guess, no measure). */
static void _ta_large_resident(_ta_page_t *pg) {
  pg->flags = TA_PF_PRIMED;
  pg->claim_res = (size_t)pg->npages * TA_OS_PER_PAGE;
}

/* Bring [from, from+bytes) of large span pg in with one system call: then
 * it is resident throughout. */
static void _ta_large_populate(_ta_page_t *pg, size_t from, size_t bytes) {
  _ta_os_populate(pg->start + from, bytes);
  _ta_large_resident(pg);
}

/* A new large block of size bytes in span pg, claimed in state (arena.c,
 * density): populate it if the program is dense, unless its pages are
 * all resident; with clean pages, leave one in TA_PROBE to fault. Only a
 * block of clean pages left to fault shows, when freed, how much of it
 * the program touched: the others are marked primed (the span is ours;
 * the arena reads its flags when it is freed). */
static void _ta_large_prime(_ta_page_t *pg, size_t size, uint8_t state) {
  bool fill = (state & TA_PF_RESIDENT) ? false : (state & TA_PF_ZERO) ? _ta_arena_populate_next() : _ta_arena_dense();
  if (!(state & TA_PF_ZERO)) pg->flags = TA_PF_PRIMED;
  if (fill) _ta_large_populate(pg, 0, _ta_align_up(size, TA_OS_PAGE));
}

/* Large: size bytes asked in a span of whole pages holding room bytes
 * (room >= size: realloc's room to grow, below), aligned to align (a
 * power of two). */
static void *_ta_malloc_large(size_t size, size_t room, size_t align, bool zero) {
  size_t npages = room ? (room + TA_PAGE_SIZE - 1) >> TA_PAGE_SHIFT : 1;
  size_t ap = align > TA_PAGE_SIZE ? align >> TA_PAGE_SHIFT : 1;
  uint8_t state = 0;
  _ta_page_t *pg = _ta_span_alloc(npages, ap, (size + TA_PAGE_SIZE - 1) >> TA_PAGE_SHIFT, &state);
  if (ta_unlikely(!pg && _ta_tls_arena)) /* a signal handler inside arena work */
    return _ta_huge_alloc(size, align, zero, false, _ta_current_tag());
  if (!pg) return NULL;
  pg->requested = size;
  pg->block_size = (uint32_t)0; /* large: usable size is npages pages */
  pg->used = 1;
  pg->tag = _ta_current_tag();
  if (ta_unlikely(!_ta_count_alloc(pg->tag, (size_t)pg->npages << TA_PAGE_SHIFT, size))) { /* a budget refused it */
    _ta_span_free(pg);
    errno = ENOMEM;
    return NULL;
  }
  if (npages >= TA_MEASURE_PAGES) _ta_large_prime(pg, size, state);
  if (zero && !(state & TA_PF_ZERO)) memset(pg->start, 0, size);
  return pg->start;
}

/* Above the small classes (size bytes asked, room bytes held: room >=
 * size): a large span, or from the huge threshold on (an option: read
 * after initialization) a mapping of its own. */
static void *_ta_malloc_big_unsampled(size_t size, size_t room, size_t align, bool zero) {
  if (!_ta_ensure_init()) {
    errno = ENOMEM;
    return NULL;
  }
  return size >= _ta_opt.huge_threshold ? _ta_huge_alloc(size, align, zero, false, _ta_current_tag())
                                        : _ta_malloc_large(size, room, align, zero);
}

/* The same, counted down by the sampler (sample.c). */
static void *_ta_malloc_big(size_t size, size_t room, size_t align, bool zero) {
  void *p = _ta_malloc_big_unsampled(size, room, align, zero);
  return _ta_sample_alloc(p, size, _ta_current_tag());
}

static inline void *_ta_malloc(size_t size) {
  if (ta_likely(size <= TA_SMALL_MAX)) return _ta_malloc_by_size(size);
  if (ta_likely(size <= TA_MAX_SMALL)) return _ta_malloc_class(_ta_class_of(size), size);
  if (ta_unlikely(size > TA_MAX_REQUEST)) {
    errno = ENOMEM;
    return NULL;
  }
  return _ta_malloc_big(size, size, TA_OS_PAGE, false);
}

static void *_ta_malloc_aligned(size_t align, size_t size) {
  if (align <= TA_MIN_ALIGN) return _ta_malloc(size);
  if (size > TA_MAX_REQUEST || align > TA_MAX_REQUEST / 2) {
    errno = ENOMEM;
    return NULL;
  }
  if (align <= TA_PAGE_SIZE && size <= TA_MAX_SMALL) {
    /* A class whose size is a multiple of align has every block aligned,
     * since spans start on page boundaries. Powers of two are classes. */
    unsigned c = _ta_class_of(size < align ? align : size);
    while (c < TA_NUM_CLASSES && _ta_classes[c].size % align != 0) c++;
    if (c < TA_NUM_CLASSES) return _ta_malloc_class(c, size);
  }
  return _ta_malloc_big(size, size, align, false);
}

/* Realloc growth beyond this moves a block to its own mapping. Below it
 * a growing block is copied into arena spans with a quarter more room,
 * which come back resident: on a VM whose page tables the hypervisor
 * shadows, a page mremap moves costs 0.5-4 us at its next touch, about a
 * copy, and the mapping's new tail faults besides (8 buffers grown by
 * realloc to 1-4 MiB: 0.62-0.67 s with 1 MiB here, 0.39 s with 8 MiB and
 * the arena keeping their spans; docs/measurements/2026-11-27-shadow-
 * paging-and-realloc.md). */
#define TA_REALLOC_MAP (8 * TA_MiB)
/* Small blocks from this size on move with room when realloc grows them
 * (_ta_realloc_rest). Below it copies are short, and the room would be
 * kept by every small string a program grows once; with a quarter more
 * room from 1 or 256 bytes realloc_chain took 10.8-15.8k faults against
 * 9.6k from 1 KiB (and 10.1k without room). */
#define TA_REALLOC_ROOM_MIN 1024

/* What an address is, for free, realloc and malloc_usable_size. */
typedef enum { TA_PTR_BAD, TA_PTR_SMALL, TA_PTR_LARGE, TA_PTR_HUGE } _ta_ptr_kind_t;

/* Classify p, in the span whose head is pg (not NULL): a block start of
 * a small or large span in use, or BAD (inside a span but not at a block
 * start, or in no span in use). *idx gets a small block's index. */
static inline _ta_ptr_kind_t _ta_classify_in(const void *p, const _ta_page_t *pg, size_t *idx) {
  if (pg->head_off != 0) return TA_PTR_BAD;
  if (pg->kind == TA_KIND_SMALL) {
    *idx = _ta_block_index(pg, p);
    return _ta_is_carved_at(pg, p, *idx) ? TA_PTR_SMALL : TA_PTR_BAD;
  }
  if (pg->kind == TA_KIND_LARGE && (const uint8_t *)p == pg->start) return TA_PTR_LARGE;
  return TA_PTR_BAD;
}

/* Classify p; pg gets its span head (small, large), huge_mapped a huge
 * block's size. Inline in its callers: malloc_usable_size, which programs
 * that count their own heap (redis: around every malloc and free) call
 * as often as malloc, paid a call and a frame for two out-parameters
 * (perf: 329 samples of redis-server here, against malloc's 86). */
static inline __attribute__((always_inline)) _ta_ptr_kind_t _ta_classify(const void *p, _ta_page_t **pgp, size_t *huge_mapped) {
  _ta_page_t *pg = _ta_page_of(p);
  *pgp = pg;
  if (!pg) return _ta_huge_lookup(p, huge_mapped) ? TA_PTR_HUGE : TA_PTR_BAD;
  size_t idx;
  return _ta_classify_in(p, pg, &idx);
}

TA_COLD static void _ta_bad_pointer(const char *fn, const void *p) {
  _ta_fatal("%s(%p): invalid pointer (never returned by malloc, already freed, or not the start of a block)", fn, p);
}

static inline size_t _ta_usable(_ta_ptr_kind_t k, _ta_page_t *pg, size_t huge_mapped) {
  switch (k) {
  case TA_PTR_SMALL: return pg->block_size;
  case TA_PTR_LARGE: return (size_t)pg->npages << TA_PAGE_SHIFT;
  case TA_PTR_HUGE: return huge_mapped;
  default: return 0;
  }
}

/* Free p, block idx of pg, a page the calling thread's heap does not
 * own (another thread's, or an exited thread's: it is not taken over
 * here, heap.c, abandoned pages). The caller found idx checking p: the
 * tag's load (an acquire) would make the compiler compute it again for
 * the tag entry, and once more for the requested size. */
static inline __attribute__((always_inline)) void _ta_free_small_remote(_ta_heap_t *h, _ta_page_t *pg, void *p, size_t idx) {
#if TA_CHECK
  _ta_check_poison_block(p, pg->block_size);
#endif
  if (TA_SAMPLED_AT(pg, p)) _ta_sample_free(p); /* before another thread can reuse it */
  /* counted before the block is given back (then it may be reused, and
   * its tag entry rewritten) */
  _ta_count_free_here(h, _ta_block_tag_at(pg, idx), pg->block_size, pg->slop ? _ta_slop_req_at(pg, idx) : 0);
  _ta_free_remote(h, pg, (_ta_block_t *)p);
}

TA_NOINLINE static void _ta_free_generic(void *p, const char *fn) {
  _ta_page_t *pg;
  switch (_ta_classify(p, &pg, NULL)) {
  case TA_PTR_SMALL:
    _ta_free_small_remote(_ta_tls_heap, pg, p, _ta_block_index(pg, p));
    return;
  case TA_PTR_LARGE:
    if (TA_SAMPLED_AT(pg, p)) _ta_sample_free(p);
    _ta_count_free(pg->tag, (size_t)pg->npages << TA_PAGE_SHIFT, pg->requested);
    _ta_span_free(pg);
    return;
  case TA_PTR_HUGE: {
    uint32_t tag;
    size_t mapped, requested;
    _ta_sample_free(p); /* huge blocks are few: always look */
    if (_ta_huge_free(p, &tag, &mapped, &requested)) {
      _ta_count_free(tag, mapped, requested);
      return;
    }
    break;
  }
  default:
    break;
  }
  _ta_bad_pointer(fn, p);
}

static void _ta_free_suspect(_ta_page_t *pg, _ta_block_t *b);

/* Give block b (counted) back to pg, a page of the calling thread's heap h.
 * mixed: pg may be a mixed page, so it may keep requested sizes (the fast
 * path's pages are of one tag, and never do). */
static inline __attribute__((always_inline)) void _ta_free_give_back(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b, uintptr_t key, bool mixed) {
  b->key = key;
  b->next = pg->free; /* LIFO: the next malloc of the class gets it, hot */
  pg->free = b;
  pg->used--; /* last: its flags decide the branch below (one sub, no reload) */
  if (ta_unlikely(pg->used == 0 || (mixed && pg->slop != NULL) || atomic_load_explicit(&pg->in_full, memory_order_relaxed) || TA_SAMPLED_AT(pg, b)))
    _ta_free_local_slow(h, pg, b);
}

static void _ta_free_local_other(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b);

/* free of p, whose span head the fast path found (pg; NULL: p is in no
 * span in use), when the calling thread's heap (h) does not own it: most
 * often a block of another thread's page (a consumer freeing what a
 * producer made), classified without looking the span up again.
 * Everything else goes the generic way, which names what p is. */
TA_NOINLINE static void _ta_free_other(_ta_heap_t *h, void *p, _ta_page_t *pg) {
  size_t idx;
  if (ta_likely(pg != NULL && _ta_classify_in(p, pg, &idx) == TA_PTR_SMALL)) {
    if (ta_unlikely(h == &_ta_heap_empty)) h = _ta_heap_for_free();
    _ta_free_small_remote(h, pg, p, idx);
    return;
  }
  _ta_free_generic(p, "free");
}

/* free, once p's span head pg is known (NULL: p is in no span in use). */
static inline __attribute__((always_inline)) void _ta_free_at(void *p, _ta_page_t *pg) {
  _ta_heap_t *h = _ta_tls_heap;
  _ta_ctr_t *ct = h->ctr;
  /* pg->ctr is this thread's counters of its current tag only while this
   * thread's heap owns the page, with every block out of that tag: one
   * compare for both (an atomic load: the page may be another thread's,
   * which may be retagging it). Every block is 16-aligned: a pointer that
   * is not goes the generic way, which names it (an interior pointer that
   * is aligned is not caught). */
  if (ta_likely(pg != NULL && __atomic_load_n(&pg->ctr, __ATOMIC_RELAXED) == ct && ((uintptr_t)p & 15) == 0)) {
    ta_assert(atomic_load_explicit(&pg->heap, memory_order_relaxed) == h);
    _ta_block_t *b = p;
    uintptr_t key = _ta_free_key; /* once: the counts' stores could alias it */
    if (ta_unlikely(b->key == key)) {
      _ta_free_suspect(pg, b); /* a tail call: the fast path stays a leaf */
      return;
    }
#if TA_CHECK
    _ta_check_poison_block(b, pg->block_size); /* internal frees too (check.c) */
#endif
    TA_BOOK_ADD(ct->free_blocks, 1);
    TA_BOOK_ADD(ct->headroom, pg->block_size); /* no check: _ta_ctr_cap, on slow paths */
    ta_assert(pg->slop == NULL);
    _ta_free_give_back(h, pg, b, key, false);
    return;
  }
  if (pg != NULL && atomic_load_explicit(&pg->heap, memory_order_relaxed) == h && ((uintptr_t)p & 15) == 0) {
    _ta_free_local_other(h, pg, p); /* tail calls: the fast path stays a leaf */
    return;
  }
  _ta_free_other(h, p, pg);
}

/* free of a pointer outside arena 0 (a later arena, a huge block, or not
 * ours): out of line, so that the call to find its span costs the fast
 * path no stack frame (two instructions a free). */
TA_NOINLINE static void _ta_free_far(void *p) { _ta_free_at(p, _ta_page_of_slow(p)); }

static inline __attribute__((always_inline)) void _ta_free(void *p) {
  if (ta_unlikely(p == NULL)) return;
  uintptr_t off = _ta_arena0_off(p);
  if (ta_unlikely(off >= _ta_arenas[0].size)) {
    _ta_free_far(p);
    return;
  }
  _ta_free_at(p, _ta_arena0_head(off));
}

/* A local free on a page of h that is not uniformly of the thread's
 * current tag: a mixed page, or one of another tag. Counted under the
 * block's tag; its requested bytes (if kept) by the slow path that such
 * a page always takes. */
TA_NOINLINE static void _ta_free_local_other(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b) {
  if (ta_unlikely(b->key == _ta_free_key)) {
    _ta_free_suspect(pg, b);
    return;
  }
#if TA_CHECK
  _ta_check_poison_block(b, pg->block_size);
#endif
  _ta_count_free_here(h, _ta_block_tag(pg, b), pg->block_size, 0);
  _ta_free_give_back(h, pg, b, _ta_free_key, true);
}

/* A local free of a block that holds the free key: abort if it is a
 * double free; else the program's data matched the key, so clear it and
 * free the block the usual way. */
TA_NOINLINE static void _ta_free_suspect(_ta_page_t *pg, _ta_block_t *b) {
  _ta_check_double_free(pg, b, "free");
  b->key = 0;
  _ta_free(b);
}

#if TA_SAMPLING
/* The new block realloc moves a block to (size bytes asked, room held),
 * with did (types.h): _ta_malloc without the sample hook (the sampler's
 * realloc hook decides for the block), counted down as an allocation
 * (_ta_sample_moving). The block exists, so the allocator is initialized. */
static void *_ta_malloc_moving(size_t size, size_t room) {
  void *q = room <= TA_MAX_SMALL ? _ta_malloc_class_unsampled(_ta_class_of(room), size)
                                 : _ta_malloc_big_unsampled(size, room, TA_OS_PAGE, false);
  _ta_sample_moving(q, size);
  return q;
}
#endif

/* realloc(p, size), with did (types.h; sampling builds) to say what it did
 * for the sampler: then a block it moves is left to the caller to free.
 * Builds without sampling have no did (their realloc stays as it was, an
 * argument fewer: objdump). */
#if TA_SAMPLING
#define TA_REALLOC_DID_ARG , _ta_realloc_did_t *did
#else
#define TA_REALLOC_DID_ARG
#endif
/* Large block pg (the caller's), resized in place from was usable bytes
 * to its pages now, for size bytes asked: counted, and size kept. */
static inline void *_ta_large_keep(_ta_page_t *pg, size_t was, size_t size, _ta_realloc_did_t *did) {
  size_t now = (size_t)pg->npages << TA_PAGE_SHIFT;
  TA_REALLOC_SAY(did, pg->requested, now);
  _ta_count_resize(pg->tag, was, now, pg->requested, size);
  pg->requested = size;
  return pg->start;
}

/* Does large block pg, asked to hold size bytes at its start, keep its
 * pages? If it needs them all, or grows into them (the room a move gave
 * it, _ta_realloc_rest): a buffer grown a few bytes at a time, 2,000
 * calls a page, changes only its requested size. The tests are
 * _ta_classify's for a large block. */
static inline bool _ta_large_stays(const _ta_page_t *pg, size_t size) {
  return size > TA_MAX_SMALL && size < _ta_opt.huge_threshold &&
         (((size + TA_PAGE_SIZE - 1) >> TA_PAGE_SHIFT) == pg->npages ||
          (size >= pg->requested && size <= (size_t)pg->npages << TA_PAGE_SHIFT));
}

/* The fast path's count (_ta_realloc_block below) when the block's tag
 * is not the thread's current one: p, kept, counted. */
TA_NOINLINE static void *_ta_realloc_counted(void *p, uint32_t tag, size_t bytes, size_t old_req, size_t new_req) {
  _ta_count_resize(tag, bytes, bytes, old_req, new_req);
  return p;
}

/* realloc's cases other than the common ones (_ta_realloc_block below):
 * out of line, so those need no frame. */
TA_NOINLINE static void *_ta_realloc_rest(void *p, size_t size, _ta_realloc_did_t *did) {
  if (!p) return _ta_malloc(size);
  if (size == 0) { /* glibc: free and return NULL */
    _ta_free(p);
    return NULL;
  }
  if (size > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  _ta_page_t *pg = _ta_page_of(p);
  size_t mapped = 0;
  _ta_ptr_kind_t k;
  uint32_t tag = TA_TAG_UNTAGGED; /* the block's: realloc keeps it */
  if (pg == NULL) {
    /* Not in an arena: a huge block (one lookup does it all) or bad. */
    bool found, refused = false;
    void *q = _ta_huge_resize(p, size, &found, &mapped, &tag, &refused, did);
    if (q) return q;
    if (refused) { /* a budget's: the block stays as it was */
      errno = ENOMEM;
      return NULL;
    }
    if (!found) _ta_bad_pointer("realloc", p);
    k = TA_PTR_HUGE;
  } else {
    k = _ta_classify(p, &pg, &mapped);
    if (k == TA_PTR_SMALL || k == TA_PTR_LARGE) tag = _ta_block_tag(pg, p);
  }
  size_t usable = _ta_usable(k, pg, mapped);
  switch (k) {
  case TA_PTR_SMALL:
    /* Stay if it fits and would not waste more than half. */
    if (size <= usable && size >= usable / 2) {
      if (pg->slop) { /* the caller owns the block, so its entry too */
        size_t idx = _ta_block_index(pg, p);
        _ta_count_resize(tag, usable, usable, usable - _ta_slop_get(pg, idx), size);
        _ta_slop_set(pg, idx, usable - size);
      }
      return p;
    }
    break;
  case TA_PTR_LARGE:
    if (_ta_large_stays(pg, size)) return _ta_large_keep(pg, usable, size, did); /* not in the first arena */
    if (size > TA_MAX_SMALL && size < _ta_opt.huge_threshold) {
      size_t npages = (size + TA_PAGE_SIZE - 1) >> TA_PAGE_SHIFT;
      /* a budgeted tag's block asks its budgets before it grows */
      if (npages > pg->npages && _ta_budget_of(tag) && !_ta_ctr_admit(tag, (npages - pg->npages) << TA_PAGE_SHIFT)) {
        errno = ENOMEM;
        return NULL;
      }
      /* the span shrunk or grown where it lies (the same pages took the
       * fast path above) */
      size_t was = pg->npages;
      bool resident = false;
      if (npages < pg->npages ? _ta_span_shrink_inplace(pg, npages) : _ta_span_grow_inplace(pg, npages, &resident)) {
        /* its new pages: a buffer grown by realloc fills them (arena.c,
         * density), unless they came resident throughout: then they are
         * only counted so (realloc_chain populated 31.7k pages, 81% of
         * them resident, a system call for nothing) */
        if (npages > was && npages >= TA_MEASURE_PAGES && _ta_arena_dense()) {
          if (resident) _ta_large_resident(pg);
          else _ta_large_populate(pg, was << TA_PAGE_SHIFT, (npages - was) << TA_PAGE_SHIFT);
        }
        return _ta_large_keep(pg, usable, size, did);
      }
    }
    break;
  case TA_PTR_HUGE: /* _ta_huge_resize said: move it */
    break;
  default:
    _ta_bad_pointer("realloc", p);
  }
  /* Move it: the new block is charged to the old one's tag. */
  _ta_thread_t *th = _ta_tls_thread;
  uint32_t cur = th ? th->tag : TA_TAG_UNTAGGED;
  if (tag != cur) {
    if (!th) th = _ta_thread_self_slow();
    if (!th || !_ta_use_tag(th, tag)) {
      errno = ENOMEM;
      return NULL;
    }
  }
  void *q;
  /* A large block that grows and cannot grow in place moves with a
   * quarter more room than asked (tcmalloc's rule), which it grows into
   * without a move (the fast path above): a buffer grown a page at a
   * time moved at every page, and left a trail of freed spans one page
   * shorter than the next it wanted (8 buffers grown by realloc to 1-4
   * MiB: 25k faults, 18k with the room, peak RSS 33.3 -> 34.4 MiB). It
   * is counted as asked for size bytes in room's pages. */
  size_t room = size;
  if (k == TA_PTR_LARGE && size > usable && size < TA_REALLOC_MAP) {
    room = usable + usable / 4;
    if (room < size) room = size;
    if (room > TA_REALLOC_MAP) room = size; /* its next move is to a mapping (below), which has room */
  }
  /* A small block of TA_REALLOC_ROOM_MIN or more that grows out of its
   * class moves on a grid of four classes a doubling (1, 1.25, 1.5 and
   * 1.75 times a power of two: the odd classes, mimalloc's and
   * jemalloc's steps). The small classes are eight a doubling from 256
   * bytes, so a buffer grown a little at a time moved eight times a
   * doubling, copying 11 times its final size: realloc_chain 8 2 copied
   * 152M instructions' worth against mimalloc's 86M, 96M on the grid;
   * python_bench.py's realloc moves copied 231 MB (glibc 21 MB: it grows
   * chunks in place). A quarter more room (tcmalloc's rule) copied a
   * little less (85M) but overshoots the limits programs set at powers
   * of two: redis's 8 KiB list nodes grew from 7680 to 10240 bytes, and
   * redis-server's peak RSS rose 61.5 -> 68.9 MiB (tcmalloc 68.9, glibc
   * 62.4); on the grid a node stops at 8192. The grid's classes exist up
   * to TA_MAX_SMALL (the last class is odd), so the room never takes a
   * block past the small classes. */
  if (k == TA_PTR_SMALL && size > usable && size <= TA_MAX_SMALL && usable >= TA_REALLOC_ROOM_MIN)
    room = _ta_classes[_ta_class_of(size) | 1].size;
  if (size > usable && size >= TA_REALLOC_MAP && k != TA_PTR_HUGE) {
    /* A buffer grown by realloc past TA_REALLOC_MAP that cannot grow in
     * place gets its own mapping: from then on it grows with mremap, which
     * moves page tables instead of copying and re-faulting (glibc does the
     * same with its mmapped chunks). */
    q = _ta_huge_alloc(size, TA_OS_PAGE, false, true, tag);
  } else {
#if TA_SAMPLING
    if (did) q = _ta_malloc_moving(size, room);
    else
#endif
      q = room <= TA_MAX_SMALL ? _ta_malloc_class(_ta_class_of(room), size) : _ta_malloc_big(size, room, TA_OS_PAGE, false);
  }
  if (tag != cur) (void)_ta_use_tag(th, cur); /* its counters exist: it was current */
  if (!q) return NULL; /* p is untouched */
  memcpy(q, p, size < usable ? size : usable);
  if (TA_SAMPLING && did) {
    did->moved = true; /* the caller frees p after the sampler's hook */
    return q;
  }
  _ta_free(p);
  return q;
}

/* realloc(p, size), its common cases inline, for blocks of the first
 * arena: a small block of this thread's that still fits its class (and
 * keeps no requested sizes), and a large block that keeps its pages
 * (_ta_large_stays), whose requested size alone changes. Neither returns
 * NULL; everything else is _ta_realloc_rest's, which takes these cases
 * too. In realloc_chain (buffers grown 1-64 bytes a call) realloc took
 * about 100 instructions a call, with a frame and two calls, and now 50
 * (callgrind, memcpy aside; mimalloc 64). */
static inline void *_ta_realloc_block(void *p, size_t size TA_REALLOC_DID_ARG) {
#if !TA_SAMPLING
  _ta_realloc_did_t *const did = NULL;
#endif
  /* the first arena's blocks only (_ta_page_of's inline part): no call
   * but tail calls, so no frame */
  uintptr_t off = _ta_arena0_off(p);
  if (ta_likely(p != NULL && size - 1 < TA_MAX_REQUEST && off < _ta_arenas[0].size)) {
    _ta_page_t *pg = _ta_arena0_head(off);
    if (atomic_load_explicit(&pg->heap, memory_order_relaxed) == _ta_tls_heap) {
      size_t bs = pg->block_size;
      if (size <= bs && size >= bs / 2 && ta_likely(pg->slop == NULL)) return p;
    }
    if (pg->kind == TA_KIND_LARGE && (const uint8_t *)p == pg->start && _ta_large_stays(pg, size)) {
      size_t now = (size_t)pg->npages << TA_PAGE_SHIFT, was = pg->requested;
      TA_REALLOC_SAY(did, was, now);
      pg->requested = size;
      if (ta_likely(_ta_count_req_here(pg->tag, was, size))) return p;
      return _ta_realloc_counted(p, pg->tag, now, was, size);
    }
  }
  return _ta_realloc_rest(p, size, did);
}

#if TA_SAMPLING
/* With sampled stacks: a realloc is sampled as an allocation of size bytes
 * (sample.c), or of its growth when a large or huge block grows without a
 * copy, or of nothing when a small block stays in its class; a block it
 * moves to is not sampled on its own (_ta_malloc_moving), and the block
 * moved from is freed after the sampler's hook has said so: a sampled
 * block that moves stays sampled (the resize is reported, not its free). */
static void *_ta_realloc(void *p, size_t size) {
  if (!p || size == 0 || !TA_EV_ON()) return _ta_realloc_block(p, size, NULL);
  _ta_page_t *pg = _ta_page_of(p);
  bool maybe = !pg || TA_SAMPLED_AT(pg, p); /* p may be sampled (huge blocks: always look) */
  int64_t left = _ta_sample_left;
  _ta_realloc_did_t did = {.from = TA_REALLOC_COPIED};
  void *q = _ta_realloc_block(p, size, &did);
  if (!q) { /* p is as it was */
    _ta_sample_left = left;
    return q;
  }
  uint64_t how = 0;
  int64_t counted = _ta_counted(size);
  if (did.from != TA_REALLOC_COPIED && size >= did.from) /* a large or huge block grown in place */
    how = TA_RESIZE_GROWN, counted = (int64_t)(size - did.from);
  else if (q == p && pg && pg->kind == TA_KIND_SMALL) /* in its class */
    how = TA_RESIZE_KEPT, counted = 0;
  int64_t next = left - counted;
  if (ta_likely(!maybe && next >= 0 && _ta_sample_rng)) /* the common case: counted down, nothing to say */
    _ta_sample_left = next;
  else
    _ta_sample_realloc(p, q, size, left, counted, how, maybe, &did);
  /* the block moved from: its record (if sampled) is q's now, so its free
   * says nothing */
  if (did.moved) _ta_free(p);
  return q;
}
#else
#define _ta_realloc(p, size) _ta_realloc_block(p, size)
#endif

/* ---- the exported API ---------------------------------------------------------- */

/* In the checking build (TA_CHECK, check.c) the allocation entry points are
 * check.c's, wrapped around these (renamed _ta_unchecked_*). */
#if TA_CHECK
#define TA_API(n) TA_CAT(_ta_unchecked_, n)
#define TA_API_DECL static __attribute__((unused))
#else
#define TA_API(n) TA_NAME(n)
#define TA_API_DECL TA_EXPORT
#endif

TA_API_DECL void *TA_API(malloc)(size_t size) { return _ta_malloc(size); }

TA_API_DECL void TA_API(free)(void *p) { _ta_free(p); }

TA_API_DECL void *TA_API(calloc)(size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total) || total > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  if (total > TA_MAX_SMALL) return _ta_malloc_big(total, total, TA_OS_PAGE, true);
  void *p = total <= TA_SMALL_MAX ? _ta_malloc_by_size(total) : _ta_malloc_class(_ta_class_of(total), total);
  if (p) memset(p, 0, total);
  return p;
}

TA_API_DECL void *TA_API(realloc)(void *p, size_t size) { return _ta_realloc(p, size); }

TA_API_DECL void *TA_API(reallocarray)(void *p, size_t n, size_t size) {
  size_t total;
  if (__builtin_mul_overflow(n, size, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  return _ta_realloc(p, total);
}

static inline bool _ta_pow2(size_t a) { return a != 0 && (a & (a - 1)) == 0; }

TA_API_DECL int TA_API(posix_memalign)(void **out, size_t align, size_t size) {
  if (!_ta_pow2(align) || align % sizeof(void *) != 0) return EINVAL;
  int e = errno;
  void *p = _ta_malloc_aligned(align, size);
  if (!p) {
    errno = e; /* posix_memalign reports through its result, not errno */
    return ENOMEM;
  }
  *out = p;
  return 0;
}

TA_API_DECL void *TA_API(aligned_alloc)(size_t align, size_t size) {
  if (!_ta_pow2(align)) {
    errno = EINVAL;
    return NULL;
  }
  return _ta_malloc_aligned(align, size);
}

TA_API_DECL void *TA_API(memalign)(size_t align, size_t size) {
  /* glibc: an alignment that is not a power of two is rounded up to one. */
  if (align > TA_MAX_REQUEST / 2) {
    errno = EINVAL;
    return NULL;
  }
  if (!_ta_pow2(align)) {
    size_t a = TA_MIN_ALIGN;
    while (a < align) a <<= 1;
    align = a;
  }
  return _ta_malloc_aligned(align, size);
}

static size_t _ta_os_page_size(void) {
  static size_t ps;
  if (!ps) ps = (size_t)sysconf(_SC_PAGESIZE);
  return ps;
}

TA_API_DECL void *TA_API(valloc)(size_t size) { return _ta_malloc_aligned(_ta_os_page_size(), size); }

TA_API_DECL void *TA_API(pvalloc)(size_t size) {
  size_t ps = _ta_os_page_size();
  if (size > TA_MAX_REQUEST) {
    errno = ENOMEM;
    return NULL;
  }
  size_t n = size ? _ta_align_up(size, ps) : ps;
  return _ta_malloc_aligned(ps, n);
}

#if TA_SAMPLING
static size_t _ta_usable_of(void *p) {
  _ta_page_t *pg = NULL;
  size_t mapped = 0;
  _ta_ptr_kind_t k = _ta_classify(p, &pg, &mapped);
  return _ta_usable(k, pg, mapped);
}
#endif

TA_API_DECL size_t TA_API(malloc_usable_size)(void *p) {
  if (!p) return 0;
  _ta_page_t *pg;
  size_t mapped = 0;
  _ta_ptr_kind_t k = _ta_classify(p, &pg, &mapped);
  if (ta_unlikely(k == TA_PTR_BAD)) _ta_bad_pointer("malloc_usable_size", p);
  return _ta_usable(k, pg, mapped);
}

/* malloc_trim: return every free page we can to the OS. */
TA_EXPORT int TA_NAME(malloc_trim)(size_t pad) {
  (void)pad;
  tagalloc_purge();
  return 1;
}

/* glibc's other names for its allocator: __libc_malloc and the rest. A
 * program that defines malloc itself to wrap the C library's (a tracer, a
 * counting shim) passes its calls on to these. It took the C library's
 * blocks from them while a function it did not wrap (posix_memalign,
 * aligned_alloc) came to this library, and its free gave our block to
 * glibc's, which aborted ("free(): invalid pointer"). They are this
 * library's too now, as mimalloc's and tcmalloc's are: the wrapped calls
 * come here and are counted, and every block has one owner. In the
 * checking build they reach check.c's entry points. */
void *TA_NAME(malloc)(size_t);
void TA_NAME(free)(void *);
void *TA_NAME(calloc)(size_t, size_t);
void *TA_NAME(realloc)(void *, size_t);
void *TA_NAME(memalign)(size_t, size_t);
void *TA_NAME(valloc)(size_t);
void *TA_NAME(pvalloc)(size_t);
TA_EXPORT void *TA_NAME(__libc_malloc)(size_t size) { return TA_NAME(malloc)(size); }
TA_EXPORT void TA_NAME(__libc_free)(void *p) { TA_NAME(free)(p); }
TA_EXPORT void *TA_NAME(__libc_calloc)(size_t n, size_t size) { return TA_NAME(calloc)(n, size); }
TA_EXPORT void *TA_NAME(__libc_realloc)(void *p, size_t size) { return TA_NAME(realloc)(p, size); }
TA_EXPORT void *TA_NAME(__libc_memalign)(size_t align, size_t size) { return TA_NAME(memalign)(align, size); }
TA_EXPORT void *TA_NAME(__libc_valloc)(size_t size) { return TA_NAME(valloc)(size); }
TA_EXPORT void *TA_NAME(__libc_pvalloc)(size_t size) { return TA_NAME(pvalloc)(size); }

/* ---- tagalloc.h extras ------------------------------------------------------------ */

TA_EXPORT int tagalloc_version(void) { return TAGALLOC_VERSION; }

TA_EXPORT void tagalloc_purge(void) {
  if (atomic_load(&_ta_init_state) < 2) return;
  _ta_heap_t *h = _ta_tls_heap;
  if (h != &_ta_heap_empty) _ta_heap_collect_all(h, true);
  _ta_heaps_reclaim_abandoned();
  _ta_arena_purge(true);
  _ta_huge_purge(true);
}

/* Check every invariant the allocator can check from this thread at rest:
 * the calling thread's pages, and the arenas. Aborts with a message on a
 * broken one; returns the pages in use. For tests (TA_DEBUG builds export
 * it; the preload library keeps it too, it costs nothing unless called). */
TA_EXPORT size_t tagalloc_check(void) {
  if (atomic_load(&_ta_init_state) < 2) return 0;
  _ta_heap_check(_ta_tls_heap);
  return _ta_arena_check();
}
