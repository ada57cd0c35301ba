/* heap.c: thread heaps, one per thread whatever its tags. The malloc slow
 * path (find a page with free blocks), returning empty pages, thread start
 * and exit (abandoning pages that still hold live blocks for another thread
 * to adopt), and the metadata allocator for heap structs. */

/* Counters no thread counts into: the empty heap's (its direct pages are
 * all empty, so no block is ever counted through it). */
static _ta_ctr_t _ta_ctr_none;
_ta_heap_t _ta_heap_empty = {.ctr = &_ta_ctr_none,
                             .direct = {[0 ... TA_NUM_CLASSES - 1] = &_ta_page_empty},
                             .small = {[0 ... TA_SMALL_SLOTS - 1] = &_ta_page_empty}};

/* Make pg class c's page of h, in direct[] and, for a class of at most
 * TA_SMALL_MAX bytes, in the slots of small[] its sizes map to (1 to 4:
 * the classes are 16, 32 and 64 bytes apart below 1 KiB). Slot by slot:
 * a signal handler's malloc meanwhile finds either page, both h's. */
static inline void _ta_direct_set(_ta_heap_t *h, unsigned c, _ta_page_t *pg) {
  h->direct[c] = pg;
  if (c > _ta_class_of(TA_SMALL_MAX)) return;
  size_t lo = c ? _ta_small_slot(_ta_classes[c - 1].size) + 1 : 0, hi = _ta_small_slot(_ta_classes[c].size);
  for (size_t i = lo; i <= hi; i++) h->small[i] = pg;
}
__thread _ta_tls_t _ta_tls = {.heap = &_ta_heap_empty};

static pthread_mutex_t TA_LOCK _ta_heaps_lock = PTHREAD_MUTEX_INITIALIZER;
static _ta_heap_t *_ta_heaps;      /* live heaps */
static _ta_heap_t *_ta_heaps_free; /* dead heaps ready for reuse (hnext) */

static pthread_mutex_t TA_LOCK _ta_aband_lock = PTHREAD_MUTEX_INITIALIZER;
static _ta_pageq_t _ta_aband[TA_NUM_CLASSES]; /* pages of exited threads */
static _Atomic(size_t) _ta_aband_count;

static pthread_mutex_t TA_LOCK _ta_meta_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t *_ta_meta_cur, *_ta_meta_end;

static pthread_key_t _ta_key;
#define TA_GC_INTERVAL_MS 250

/* Bump-allocate private metadata (under _ta_meta_lock), NULL if no memory. */
static void *_ta_private_alloc_locked(size_t size) {
  if ((size_t)(_ta_meta_end - _ta_meta_cur) < size) {
    size_t chunk = size > TA_MiB ? _ta_align_up(size, TA_MiB) : TA_MiB;
    uint8_t *p = _ta_os_reserve(chunk, TA_OS_PAGE);
    if (!p) return NULL;
    _ta_os_name(p, chunk, "tagalloc metadata");
    _ta_meta_cur = p;
    _ta_meta_end = p + chunk;
  }
  void *r = _ta_meta_cur;
  _ta_meta_cur += size;
  return r;
}

/* Bump-allocate internal metadata, never freed (only reused by type): in
 * the books region if readers must see it (records, counters; private
 * memory when the region is full), else private (heap structs). NULL if
 * no memory. */
static void *_ta_meta_alloc_in(size_t size, bool books) {
  size = _ta_align_up(size, 64);
  _ta_mutex_lock(&_ta_meta_lock);
  void *r = books ? _ta_books_alloc_locked(size) : NULL;
  if (!r) r = _ta_private_alloc_locked(size);
  _ta_mutex_unlock(&_ta_meta_lock);
  return r;
}
static void *_ta_meta_alloc(size_t size) { return _ta_meta_alloc_in(size, true); }

/* ---- page queues ------------------------------------------------------------ */

static void _ta_q_append(_ta_pageq_t *q, _ta_page_t *pg) {
  pg->next = NULL;
  pg->prev = q->last;
  if (q->last) q->last->next = pg; else q->first = pg;
  q->last = pg;
  q->count++;
}

static void _ta_q_to_front(_ta_pageq_t *q, _ta_page_t *pg) {
  if (q->first == pg) return;
  _ta_q_remove(q, pg);
  _ta_q_push(q, pg);
}

/* An empty page stays with its heap while it is the class's direct page: a
 * thread that allocates and frees one block in a loop then never touches
 * the arena. The periodic heap walk (_ta_heap_collect_all) gives back the
 * empty direct pages of classes with few blocks per span (big blocks, up to
 * 512 KiB each: the classes from TA_DENSE_CLASSES on), so a thread holds
 * them only while it keeps using them. */
static inline bool _ta_class_sparse(unsigned c) { return c >= TA_DENSE_CLASSES; }
static inline bool _ta_page_keep_empty(_ta_heap_t *h, _ta_page_t *pg) {
  return h->direct[pg->sclass] == pg;
}

/* Take empty page pg off h's lists (the caller gives it away). */
static void _ta_page_unlink(_ta_heap_t *h, _ta_page_t *pg) {
  unsigned c = pg->sclass;
  if (atomic_load_explicit(&pg->in_full, memory_order_relaxed)) {
    _ta_q_remove(&h->full[c], pg);
    atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
  } else {
    _ta_q_remove(&h->queue[c], pg);
  }
  if (h->direct[c] == pg) _ta_direct_set(h, c, &_ta_page_empty);
}

/* Release an empty small span back to the arena. */
static void _ta_page_release(_ta_heap_t *h, _ta_page_t *pg) {
  _ta_page_unlink(h, pg);
  _ta_span_free(pg);
}

/* ---- emptied pages between threads ------------------------------------------
 * A page of a dense class emptied by its owner's free goes, up to
 * TA_STASH_PAGES of them, onto a stack of its class that any thread's next
 * new page of the class takes first: carved, its free list whole, no trip
 * through the arena lock, bins and side arrays. Lock-free: pushes are
 * compare-and-swaps, takers take the whole stack with one exchange and
 * push back what they leave, so no pop can meet a page popped and pushed
 * again (ABA). Stashed pages have no owner (heap NULL, ctr NULL: no fast
 * path takes or frees into them; no block of theirs is out). The heap
 * walks and tagalloc_purge give them back to the arena. */
#define TA_STASH_PAGES 16
static _Atomic(_ta_page_t *) _ta_stash[TA_DENSE_CLASSES];
static _Atomic(unsigned) _ta_stash_n;

static void _ta_stash_push_list(unsigned c, _ta_page_t *first, _ta_page_t *last) {
  _ta_page_t *old = atomic_load_explicit(&_ta_stash[c], memory_order_relaxed);
  do {
    last->next = old;
  } while (!atomic_compare_exchange_weak_explicit(&_ta_stash[c], &old, first, memory_order_release, memory_order_relaxed));
}

/* Stash pg, an empty page its thread's free emptied, already off its
 * heap's lists, if it is of a dense class, keeps no requested sizes, and
 * the stash has room; false (pg untouched) if not. */
static bool _ta_stash_put(_ta_page_t *pg) {
  unsigned c = pg->sclass;
  if (_ta_class_sparse(c) || pg->slop || atomic_load_explicit(&pg->xthread_free, memory_order_relaxed) != 0) return false;
  if (atomic_fetch_add_explicit(&_ta_stash_n, 1, memory_order_relaxed) >= TA_STASH_PAGES) {
    atomic_fetch_sub_explicit(&_ta_stash_n, 1, memory_order_relaxed);
    return false;
  }
  __atomic_store_n(&pg->ctr, NULL, __ATOMIC_RELAXED);
  atomic_store_explicit(&pg->heap, NULL, memory_order_relaxed);
  atomic_store_explicit(&pg->in_full, TA_IN_STASHED, memory_order_relaxed); /* a free into it is a double free */
  _ta_stash_push_list(c, pg, pg);
  return true;
}

/* A stashed page of class c, or NULL. */
static _ta_page_t *_ta_stash_take(unsigned c) {
  if (atomic_load_explicit(&_ta_stash[c], memory_order_relaxed) == NULL) return NULL;
  _ta_page_t *pg = atomic_exchange_explicit(&_ta_stash[c], NULL, memory_order_acquire);
  if (!pg) return NULL;
  atomic_fetch_sub_explicit(&_ta_stash_n, 1, memory_order_relaxed);
  _ta_page_t *rest = pg->next;
  if (rest) {
    _ta_page_t *last = rest;
    while (last->next) last = last->next;
    _ta_stash_push_list(c, rest, last);
  }
  pg->next = pg->prev = NULL;
  atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
  return pg;
}

/* Give every stashed page back to the arena. */
static void _ta_stash_drain(void) {
  if (atomic_load_explicit(&_ta_stash_n, memory_order_relaxed) == 0) return;
  for (unsigned c = 0; c < TA_DENSE_CLASSES; c++) {
    _ta_page_t *pg = atomic_exchange_explicit(&_ta_stash[c], NULL, memory_order_acquire);
    while (pg) {
      _ta_page_t *next = pg->next;
      atomic_fetch_sub_explicit(&_ta_stash_n, 1, memory_order_relaxed);
      _ta_span_free(pg);
      pg = next;
    }
  }
}


/* Empty direct page pg of a class with few blocks per span (big blocks)
 * stays while it is one of the last TA_KEPT_EMPTY such pages h kept, and
 * they hold at most TA_KEPT_EMPTY_BYTES beside it, or a sixteenth of the
 * arena's spans in use if that is more; the oldest go back to the arena.
 * A loop that allocates and frees blocks of some big classes keeps their
 * pages (mimalloc retires such a page after a few slow paths);
 * one that walks up the classes (a buffer grown by realloc: 1 KiB-512 KiB
 * in 57 steps) kept a span of every class it passed until the next heap
 * walk: 8.6 MiB at realloc_chain's peak, of its 40 (34 now). 8 entries and
 * 1 MiB were too few for mstress (2 threads, 8 B-64 KiB): its pages went
 * back and came again split from others' spans, 12.2 -> 14.2 MiB; and 2
 * MiB alone for large_loop (64 KiB-4 MiB blocks in 64 slots, its 24
 * classes of 64-512 KiB each a span of its own): 0.042 -> 0.047 s, RSS
 * 60.5 -> 64.1 MiB, the spans to and from the arena. Entries
 * are checked before use: a page may have been taken, or released by the
 * heap walk. */
#define TA_KEPT_EMPTY_BYTES (2 * TA_MiB)
static inline bool _ta_kept_still(_ta_heap_t *h, _ta_page_t *q) {
  return atomic_load_explicit(&q->heap, memory_order_relaxed) == h && q->kind == TA_KIND_SMALL && _ta_page_keep_empty(h, q) &&
         q->used == 0;
}
static void _ta_kept_note(_ta_heap_t *h, _ta_page_t *pg) {
  unsigned n = 0;
  size_t bytes = 0;
  for (unsigned i = 0; i < h->nkept; i++) { /* the others still kept, in order */
    _ta_page_t *q = h->kept[i];
    if (q != pg && _ta_kept_still(h, q)) {
      h->kept[n++] = q;
      bytes += (size_t)q->npages << TA_PAGE_SHIFT;
    }
  }
  unsigned drop = 0;
  size_t cap = TA_KEPT_EMPTY_BYTES;
  if (_ta_books) { /* or a sixteenth of the arena's spans in use, if more */
    size_t share = (size_t)atomic_load_explicit(&_ta_books->spans_in_use, memory_order_relaxed) / 16;
    if (share > cap) cap = share;
  }
  while (drop < n && (n - drop >= TA_KEPT_EMPTY || bytes > cap)) bytes -= (size_t)h->kept[drop++]->npages << TA_PAGE_SHIFT;
  /* The ring is whole before any page goes back: giving a span back may
   * start the purger, whose pthread_create allocates and, failing, frees,
   * and a free may come here again. Each page is looked at again before
   * it goes (such a call may have taken or released it). */
  _ta_page_t *gone[TA_KEPT_EMPTY];
  memcpy(gone, h->kept, drop * sizeof(h->kept[0]));
  memmove(h->kept, h->kept + drop, (n - drop) * sizeof(h->kept[0]));
  n -= drop;
  h->kept[n++] = pg;
  h->nkept = n;
  for (unsigned i = 0; i < drop; i++)
    if (_ta_kept_still(h, gone[i])) _ta_page_release(h, gone[i]);
}

/* pg, on h's full list, may have free blocks again: back on the queue. */
static void _ta_page_unfull(_ta_heap_t *h, _ta_page_t *pg) {
  unsigned c = pg->sclass;
  _ta_q_remove(&h->full[c], pg);
  atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
  _ta_q_append(&h->queue[c], pg);
}

/* Local free of b hit a page that keeps requested sizes, is on the full
 * list, or became empty. */
static void _ta_free_local_slow(_ta_heap_t *h, _ta_page_t *pg, void *b) {
  if (TA_SAMPLED_AT(pg, b)) _ta_sample_free(b);
  _ta_ctr_cap(h->ctr); /* the fast path adds to the headroom unchecked */
  if (pg->slop) { /* the block's entries stay until it is handed out again */
    size_t idx = _ta_block_index(pg, b);
    _ta_count_resize(_ta_block_tag_at(pg, idx), 0, 0, pg->block_size - _ta_slop_get(pg, idx), 0);
  }
  if (pg->used == 0) {
    if (!_ta_page_keep_empty(h, pg)) {
      _ta_page_unlink(h, pg);
      if (!_ta_stash_put(pg)) _ta_span_free(pg);
      return;
    }
    /* direct: biased, kept anyway; big classes' only a while */
    h->idle_pending = true; /* until the thread next waits (_ta_heap_idle) */
    if (_ta_class_sparse(pg->sclass)) _ta_kept_note(h, pg);
  }
  if (atomic_load_explicit(&pg->in_full, memory_order_relaxed)) _ta_page_unfull(h, pg);
}

/* Other threads freed into pages on the full list of class c: look again. */
static void _ta_rescan_full(_ta_heap_t *h, unsigned c) {
  atomic_exchange_explicit(&h->xfull[c], 0, memory_order_seq_cst); /* a full barrier */
  _ta_page_t *pg = h->full[c].first;
  while (pg) {
    _ta_page_t *next = pg->next;
    if (atomic_load_explicit(&pg->xthread_free, memory_order_relaxed) != 0) {
      _ta_page_collect(pg);
      if (pg->used == 0 && !_ta_page_keep_empty(h, pg)) _ta_page_release(h, pg);
      else _ta_page_unfull(h, pg);
    }
    pg = next;
  }
}

/* ---- remote frees held (page.c, remote frees in batches) ------------------ */

/* Does a heap's chain hold b, of page pg? For the double-free check, of
 * any thread: read while their threads go on (head and page are stored
 * with release), each link checked to be a block of pg before it is
 * followed, at most TA_RCHAIN_MAX of them. */
static bool _ta_rchains_hold(const _ta_page_t *pg, const _ta_block_t *b) {
  if (!_ta_rchain_class(pg->sclass)) return false;
  bool found = false;
  _ta_mutex_lock(&_ta_heaps_lock);
  for (_ta_heap_t *h = _ta_heaps; h && !found; h = h->hnext) {
    _ta_rchain_t *s = &h->rchain[pg->sclass];
    if (__atomic_load_n(&s->pg, __ATOMIC_ACQUIRE) != pg) continue;
    const _ta_block_t *f = __atomic_load_n(&s->head, __ATOMIC_ACQUIRE);
    for (unsigned k = 0; f && k <= TA_RCHAIN_MAX && _ta_is_carved(pg, f); k++, f = f->next) found |= f == b;
  }
  _ta_mutex_unlock(&_ta_heaps_lock);
  return found;
}

/* ---- abandoned pages -------------------------------------------------------- */

/* Move pg from its abandoned list to h (the caller holds _ta_aband_lock). */
static void _ta_aband_take_locked(_ta_heap_t *h, _ta_page_t *pg) {
  _ta_q_remove(&_ta_aband[pg->sclass], pg);
  atomic_fetch_sub_explicit(&_ta_aband_count, 1, memory_order_relaxed);
  atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
  atomic_store_explicit(&pg->heap, h, memory_order_release);
}

/* Collect abandoned page pg (the lock holder's) and note its blocks in
 * use where remote frees read them. */
static void _ta_aband_collect_locked(_ta_page_t *pg) {
  _ta_page_collect(pg);
  atomic_store_explicit(&pg->aband_used, pg->used, memory_order_relaxed);
}

/* Take a page of class c left by an exited thread that has a free block
 * (looking at a few), or NULL. */
#define TA_ADOPT_SCAN 8
static _ta_page_t *_ta_adopt(_ta_heap_t *h, unsigned c) {
  if (atomic_load_explicit(&_ta_aband_count, memory_order_relaxed) == 0) return NULL;
  _ta_page_t *found = NULL;
  _ta_mutex_lock(&_ta_aband_lock);
  int scanned = 0;
  for (_ta_page_t *pg = _ta_aband[c].first; pg && scanned < TA_ADOPT_SCAN; pg = pg->next, scanned++) {
    _ta_aband_collect_locked(pg); /* pages on the list belong to the lock holder */
    if (pg->free || pg->capacity < pg->reserved) {
      found = pg;
      break;
    }
  }
  if (found) _ta_aband_take_locked(h, found);
  _ta_mutex_unlock(&_ta_aband_lock);
  return found;
}

/* Take empty abandoned page pg off its list; the caller gives its span
 * back to the arena after the lock (no block of it is out, so no free can
 * reach it). in_full is cleared first: under the lock, TA_IN_ABANDONED
 * means on a list. Never _ta_span_free under the abandoned lock: it may
 * start the purger thread, whose C library TLS is a malloc, whose slow
 * path may look for an abandoned page to adopt, under that lock (a forked
 * child of the stress test hung so, its first span free this way). */
static void _ta_aband_unlink_locked(_ta_page_t *pg) {
  _ta_q_remove(&_ta_aband[pg->sclass], pg);
  atomic_fetch_sub_explicit(&_ta_aband_count, 1, memory_order_relaxed);
  atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
}

/* Collect abandoned page pg; if it is empty, take it off its list (the
 * caller frees its span after the lock) and say so. */
static bool _ta_aband_take_empty_locked(_ta_page_t *pg) {
  _ta_aband_collect_locked(pg);
  if (pg->used != 0) return false;
  _ta_aband_unlink_locked(pg);
  return true;
}

/* A free from another thread just made abandoned page pg's remote count
 * equal its blocks in use, as read without the lock: if it is still
 * abandoned (pages on the lists belong to the lock holder) and empty
 * once collected, its span goes back to the arena. A thread that frees
 * what exited threads made (the main thread joining its workers, say)
 * does not take such a page over: it did once, allocated nothing there,
 * and kept the page, and what later threads freed into it, from every
 * thread that came next (75 MiB of RSS where glibc held 10 in 100 rounds
 * of mimalloc's stress test); and the page came back only every 250 ms,
 * from some thread's slow path. */
TA_NOINLINE static void _ta_aband_release_if_empty(_ta_page_t *pg) {
  bool empty = false;
  _ta_mutex_lock(&_ta_aband_lock);
  if (atomic_load_explicit(&pg->in_full, memory_order_relaxed) == TA_IN_ABANDONED && atomic_load_explicit(&pg->heap, memory_order_relaxed) == NULL)
    empty = _ta_aband_take_empty_locked(pg);
  _ta_mutex_unlock(&_ta_aband_lock);
  if (empty) _ta_span_free(pg);
}

/* Free abandoned pages that became empty through cross-thread frees,
 * and the stashed ones (every caller is a walk or a purge). */
static void _ta_heaps_reclaim_abandoned(void) {
  _ta_stash_drain();
  if (atomic_load_explicit(&_ta_aband_count, memory_order_relaxed) == 0) return;
  _ta_page_t *empty = NULL; /* linked by next, freed after the lock */
  _ta_mutex_lock(&_ta_aband_lock);
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
    for (_ta_page_t *pg = _ta_aband[c].first, *next; pg; pg = next) {
      next = pg->next;
      if (_ta_aband_take_empty_locked(pg)) {
        pg->next = empty;
        empty = pg;
      }
    }
  }
  _ta_mutex_unlock(&_ta_aband_lock);
  while (empty) {
    _ta_page_t *next = empty->next;
    _ta_span_free(empty);
    empty = next;
  }
}

/* ---- the slow path ------------------------------------------------------------- */

static _ta_page_t *_ta_page_new(_ta_heap_t *h, unsigned c) {
  _ta_page_t *pg = _ta_adopt(h, c);
  if (!pg && !_ta_class_sparse(c) && (pg = _ta_stash_take(c)) != NULL) {
    atomic_store_explicit(&pg->heap, h, memory_order_release); /* its tag is set at the first take (_ta_page_retag) */
  } else if (!pg) {
    /* none of this class: the other classes' go back first, so the arena
     * serves this span from them rather than from memory not yet used */
    _ta_stash_drain();
    size_t n = _ta_classes[c].objects;
    size_t slop = _ta_opt.requested ? n * (_ta_classes[c].size < 65536 ? sizeof(uint16_t) : sizeof(uint32_t)) : 0;
    pg = _ta_span_alloc_small(_ta_classes[c].pages, n * sizeof(uint16_t), slop);
    if (!pg) return NULL;
    _ta_page_init_small(pg, c);
    atomic_store_explicit(&pg->heap, h, memory_order_release);
  }
  if (!pg->free) _ta_page_extend(pg);
  _ta_q_push(&h->queue[c], pg);
  return pg;
}

/* A page of class c with a free block, or NULL (out of memory). A freed
 * block anywhere in the queue comes before a block carved anew: carving
 * the first page first (as mimalloc does) let each class's carved blocks
 * grow past its high-water mark while its other pages held freed ones
 * (small_random: 7.5 MiB carved for 5.9 in use; 6.9 this way, at the same
 * speed). */
static _ta_page_t *_ta_find_page(_ta_heap_t *h, unsigned c) {
  _ta_pageq_t *q = &h->queue[c];
  if (atomic_load_explicit(&h->xfull[c], memory_order_relaxed)) _ta_rescan_full(h, c);
  _ta_page_t *carve = NULL; /* the first page with blocks still to carve */
  for (_ta_page_t *pg = q->first, *next; pg; pg = next) {
    next = pg->next;
    /* A page with free blocks keeps what others freed until it runs out:
     * then the list is taken whole, without a walk (_ta_page_collect).
     * Unless it holds every block in use: the page is empty then, and
     * takes the thread's tag without turning mixed (_ta_page_retag), its
     * blocks carved again rather than their list walked (page.c). */
    if (!pg->free || _ta_xf_count(atomic_load_explicit(&pg->xthread_free, memory_order_relaxed)) == pg->used)
      _ta_page_collect(pg);
    if (pg->free) {
      _ta_q_to_front(q, pg);
      return pg;
    }
    if (pg->capacity < pg->reserved) {
      if (!carve) carve = pg;
      continue;
    }
    /* Full: park it. Publish in_full before the last look, so a concurrent
     * remote free either lands in this collect or sees in_full. */
    _ta_q_remove(q, pg);
    atomic_store_explicit(&pg->in_full, 1, memory_order_seq_cst);
    _ta_page_collect(pg);
    if (pg->free) {
      atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
      _ta_q_push(q, pg);
      return pg;
    }
    _ta_q_push(&h->full[c], pg);
  }
  if (carve) {
    _ta_page_extend(carve);
    _ta_q_to_front(q, carve);
    return carve;
  }
  return _ta_page_new(h, c);
}

/* Walk all of h's pages: collect what others freed, move full pages that
 * have room back, and return empty pages (the direct ones too if asked). */
static void _ta_heap_collect_all(_ta_heap_t *h, bool release_direct) {
  _ta_rchain_flush_all(h); /* first: some of them may be of h's own pages (adopted) */
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
    _ta_page_t *direct = h->direct[c];
    for (_ta_page_t *pg = h->full[c].first, *next; pg; pg = next) {
      next = pg->next;
      _ta_page_collect(pg);
      if (pg->free) _ta_page_unfull(h, pg);
    }
    for (_ta_page_t *pg = h->queue[c].first, *next; pg; pg = next) {
      next = pg->next;
      _ta_page_collect(pg);
      if (pg->used == 0 && (release_direct || pg != direct || _ta_class_sparse(c)))
        _ta_page_release(h, pg); /* the direct page too: then there is none */
    }
  }
}

static _ta_heap_t *_ta_heap_init_thread(void);
static void *_ta_malloc_beside_arena(size_t size, size_t class_size); /* huge.c */

/* Set while this thread starts the purger (purger.c), its heap set aside:
 * pthread_create's mallocs and frees must not reach the heap, for the
 * start comes from a span given back, often inside a walk of the heap's
 * lists (_ta_heap_collect_all, _ta_rescan_full) that holds the next page
 * of a list. A malloc there that ran out of memory walked the heap again,
 * gave that page back, and the outer walk gave it back a second time: a
 * span freed twice (the faults-mode stress test, 1 run in ~1,400; the
 * start came inside a walk in half of the runs). Its blocks get mappings
 * of their own instead (as a signal handler's do inside arena work), and
 * its frees of the heap's blocks are remote ones. */
static __thread bool _ta_tls_heapless;

/* An idle point: the thread is about to wait on a condition variable
 * (tags.c), and may sleep long. A sleeping thread never walks its heap,
 * and keeps what it holds for its next mallocs: the empty direct page of
 * every class it used, big classes' too (_ta_kept_note), and the remote
 * frees in its chains. The workers of a pool that build and free 2,000
 * blocks of 16 B-2 KiB a task, then wait while the main thread works on
 * 16 MiB of its own (bench's pool_idle), held about a page of every class
 * each through it: peak RSS 34.5 MiB with 8 workers, 56-71 with 32 (glibc
 * 33.4 and 50). They go back here: the chains pushed, each direct page's
 * remote frees collected, and a direct page that is then empty given back
 * (O(classes), not a walk of the heap's pages: a thread that waits often,
 * with a big heap, pays little): 18.4-18.5 MiB and 26-30. Only when there may
 * be something to give: a malloc slow path (which sets the direct pages)
 * or a free that emptied a direct page since the last time, or chains
 * held. Each page given back costs the next malloc of its class a slow
 * path, about 2,100 instructions (callgrind, a timed wait that does not
 * sleep between three mallocs and frees: 600 -> 7,000 instructions a
 * round when every wait gave back), so a thread that waits for every item
 * of a queue must not give and take its pages at every item: a give-back
 * comes TA_IDLE_US after the last one, or sooner if the thread took
 * TA_IDLE_WORK malloc slow paths since, besides twice the pages that one
 * gave (which their next mallocs take again). A round of pool_idle with 2
 * workers lasts about 1.7 ms: with the time alone, a worker's wait a
 * round came 0.98 ms after its last give-back now and then, and its 40
 * pages stayed through the main thread's work (peak RSS 18.6 -> 21.3 or
 * 23.8 MiB in those runs). With whole (pthread_join, rare), the thread
 * walks its whole heap instead, unspaced (_ta_heap_collect_all: pages
 * emptied by other threads' frees go too), and that counts as the last
 * give-back. */
#define TA_IDLE_US 1000
#define TA_IDLE_WORK 16

/* The periodic walk of h (its empty pages back, the direct ones kept),
 * and of the pages exited threads left, if TA_GC_INTERVAL_MS passed since
 * the last: true if it walked. Every 256th malloc slow path looks, and an
 * idle point (below). */
static bool _ta_heap_walk_if_due(_ta_heap_t *h) {
  uint64_t now = _ta_now_ms();
  if (now - h->last_gc_ms < TA_GC_INTERVAL_MS) return false;
  h->last_gc_ms = now;
  _ta_heap_collect_all(h, false);
  _ta_heaps_reclaim_abandoned();
  return true;
}

static void _ta_heap_idle(_ta_heap_t *h, bool whole) {
  if (h == &_ta_heap_empty || _ta_tls_arena || _ta_tls_heapless) return;
  uint64_t work = h->slow_count - h->idle_slow;
  if (!whole && work == 0 && !h->idle_pending && !h->rchains) return;
  uint64_t now = _ta_now_us();
  if (!whole && work < 2 * h->idle_given + TA_IDLE_WORK && now - h->idle_us < TA_IDLE_US) return;
  h->idle_us = now;
  h->idle_slow = h->slow_count;
  h->idle_pending = false;
  h->idle_given = 0;
  if (whole) {
    _ta_heap_collect_all(h, true);
    return;
  }
  /* The periodic walk of the malloc slow path, if it is due: a thread
   * that sleeps takes no slow path, and the pages its own frees and other
   * threads' emptied between them (a producer that frees some of what it
   * makes and hands the rest on) stayed on its lists; the purger takes
   * only pages all of whose blocks other threads freed (arena.c). Its
   * direct pages stay: the loop below decides for them. */
  if (!_ta_heap_walk_if_due(h)) _ta_rchain_flush_all(h);
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
    _ta_page_t *pg = h->direct[c];
    if (pg == &_ta_page_empty) continue;
    _ta_page_collect(pg);
    if (pg->used == 0) { /* then there is none */
      _ta_page_release(h, pg);
      h->idle_given++;
    }
  }
}

/* The calling thread's heap for its free of another thread's block, made
 * now if it has none: a thread that only frees (a consumer of another
 * thread's blocks) then holds its frees in chains and pushes each chain
 * with one compare-and-swap (page.c), and counts them inline, where
 * without a heap it pushed each block alone. mimalloc-bench's
 * xmalloc-test (2 threads allocating batches of 4,096 blocks of 64 B, 2
 * freeing them): 28% of the time in those pushes. &_ta_heap_empty if the
 * thread is without one on purpose (starting the purger, inside arena
 * work: a signal handler, or exiting: its heap given up), or without
 * memory. */
TA_NOINLINE static _ta_heap_t *_ta_heap_for_free(void) {
  if (_ta_tls_heapless || _ta_tls_arena || _ta_tls_exited) return &_ta_heap_empty;
  _ta_heap_t *h = _ta_heap_init_thread();
  return h ? h : &_ta_heap_empty;
}

TA_NOINLINE static void *_ta_malloc_slow(_ta_heap_t *h, unsigned c, size_t size) {
  if (ta_unlikely(h == &_ta_heap_empty)) {
    if (_ta_tls_heapless) return _ta_malloc_beside_arena(size, _ta_classes[c].size);
    h = _ta_heap_init_thread();
    if (!h) {
      errno = ENOMEM;
      return NULL;
    }
  }
  _ta_direct_set(h, c, &_ta_page_empty); /* until a page is found (a signal handler's malloc may look meanwhile) */
  if (h->rchains) _ta_rchain_flush_all(h); /* remote frees held (page.c) */
  if (ta_unlikely((++h->slow_count & 255) == 0)) (void)_ta_heap_walk_if_due(h);
  _ta_page_t *pg = _ta_find_page(h, c);
  if (ta_unlikely(!pg && _ta_tls_arena)) /* a signal handler inside arena work */
    return _ta_malloc_beside_arena(size, _ta_classes[c].size);
  if (ta_unlikely(!pg)) {
    /* Out of memory: give back everything we can, then try once more. */
    _ta_heap_collect_all(h, true);
    _ta_heaps_reclaim_abandoned();
    _ta_arena_purge(true);
    pg = _ta_find_page(h, c);
    if (!pg) {
      errno = ENOMEM;
      return NULL;
    }
  }
  _ta_direct_set(h, c, pg);
  _ta_block_t *b = pg->free;
  if (ta_unlikely(!_ta_take_retag(h, pg, c, b))) return _ta_take_refused(h, pg, b);
  if (pg->slop) _ta_take_requested(h, pg, c, b, size);
  if (ta_unlikely((h->slow_count & 1023) == 0)) _ta_tag_note(h->ctr->tag);
  _ta_ctr_cap(h->ctr); /* frees since the last slow path may have raised its headroom */
  return b;
}

/* ---- threads ------------------------------------------------------------------------ */

/* The calling thread's heap, made on its first malloc (NULL without memory). */
static _ta_heap_t *_ta_heap_init_thread(void) {
  _ta_thread_t *th = _ta_thread_self();
  if (!th) return NULL;
  if (th->heap) { /* a signal handler's malloc, while this function ran for its thread */
    _ta_tls_heap = th->heap;
    return th->heap;
  }
  _ta_ctr_t *ctr = _ta_ctr_of(th, th->tag);
  if (!ctr) return NULL;
  _ta_mutex_lock(&_ta_heaps_lock);
  _ta_heap_t *h = _ta_heaps_free;
  if (h) _ta_heaps_free = h->hnext;
  _ta_mutex_unlock(&_ta_heaps_lock);
  if (h) memset(h, 0, sizeof(*h)); /* a dead thread's */
  else if (!(h = _ta_meta_alloc_in(sizeof(_ta_heap_t), false))) return NULL;
  /* (new metadata is a fresh mapping's: zero, its pages untouched until
   * used; a memset faulted in all three pages of a heap at once) */
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) _ta_direct_set(h, c, &_ta_page_empty);
  h->last_gc_ms = _ta_now_ms();
  h->ctr = ctr;
  h->thread = th;
  _ta_mutex_lock(&_ta_heaps_lock);
  th->heap = h;
  h->hnext = _ta_heaps;
  if (_ta_heaps) _ta_heaps->hprev = h;
  _ta_heaps = h;
  _ta_mutex_unlock(&_ta_heaps_lock);
  _ta_tls_heap = h;
  return h;
}

/* Give up h: empty pages go back to the arena, the rest to the abandoned
 * lists, and the struct to the reuse list. Its counts are the thread's
 * (they stay in its record). */
static void _ta_heap_abandon(_ta_heap_t *h) {
  _ta_rchain_flush_all(h);
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
    _ta_direct_set(h, c, &_ta_page_empty);
    _ta_pageq_t *qs[2] = {&h->queue[c], &h->full[c]};
    for (int i = 0; i < 2; i++) {
      while (qs[i]->first) {
        _ta_page_t *pg = qs[i]->first;
        _ta_q_remove(qs[i], pg);
        atomic_store_explicit(&pg->in_full, 0, memory_order_relaxed);
        /* one collect, under the lock: it sets aband_used before in_full
         * says abandoned; an empty page is still ours, freed after it */
        _ta_mutex_lock(&_ta_aband_lock);
        _ta_aband_collect_locked(pg);
        bool empty = pg->used == 0;
        if (!empty) {
          _ta_page_disown(pg); /* the record, with its counters, may pass to a new thread */
          atomic_store_explicit(&pg->in_full, TA_IN_ABANDONED, memory_order_release);
          atomic_store_explicit(&pg->heap, NULL, memory_order_release);
          _ta_q_push(&_ta_aband[c], pg);
          atomic_fetch_add_explicit(&_ta_aband_count, 1, memory_order_relaxed);
        }
        _ta_mutex_unlock(&_ta_aband_lock);
        if (empty) _ta_span_free(pg);
      }
    }
  }
  _ta_mutex_lock(&_ta_heaps_lock);
  if (h->hprev) h->hprev->hnext = h->hnext; else _ta_heaps = h->hnext;
  if (h->hnext) h->hnext->hprev = h->hprev;
  h->hprev = NULL;
  h->hnext = _ta_heaps_free;
  _ta_heaps_free = h;
  _ta_mutex_unlock(&_ta_heaps_lock);
}

/* In a fork child: the heaps of the threads that did not come along keep
 * their pages (other threads' blocks in them stay live, and frees into
 * them are remote), but their records may pass to the child's new
 * threads, counters and all: no page may keep naming those counters. */
static void _ta_heaps_disown_vanished(void) {
  for (_ta_heap_t *h = _ta_heaps; h; h = h->hnext) {
    if (h == _ta_tls_heap) continue;
    _ta_rchain_flush_vanished(h); /* blocks it held: free in the books, so free in their pages */
    for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
      _ta_pageq_t *qs[2] = {&h->queue[c], &h->full[c]};
      for (int i = 0; i < 2; i++)
        for (_ta_page_t *pg = qs[i]->first; pg; pg = pg->next) _ta_page_disown(pg);
    }
  }
}

/* pthread key destructor: the thread is exiting. Its heap is given up
 * (its pages go to the abandoned lists), its record stays with its
 * counts, free for a later thread. */
static void _ta_thread_done(void *arg) {
  _ta_thread_t *th = arg;
  if (!th) return;
  _ta_tls_heap = &_ta_heap_empty;
  _ta_tls_thread = NULL;
  _ta_tls_exited = true;
  /* The heap leaves the record before it is given up, under the heaps
   * lock (which fork holds): a child forked meanwhile never finds a heap
   * that is already on the reuse list in a record a new thread of its may
   * take over (that heap would be used twice). */
  _ta_mutex_lock(&_ta_heaps_lock);
  _ta_heap_t *h = th->heap;
  th->heap = NULL;
  _ta_mutex_unlock(&_ta_heaps_lock);
  _ta_tag_note(th->tag);
  if (h) _ta_heap_abandon(h);
  _ta_mutex_lock(&_ta_threads_lock);
  atomic_store_explicit(&th->live, false, memory_order_relaxed);
  _ta_mutex_unlock(&_ta_threads_lock);
}

/* Check every page of h (the calling thread's heap, at rest). */
static void _ta_heap_check(_ta_heap_t *h) {
  if (h == &_ta_heap_empty) return;
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) {
    _ta_pageq_t *qs[2] = {&h->queue[c], &h->full[c]};
    for (int i = 0; i < 2; i++) {
      size_t n = 0;
      for (_ta_page_t *pg = qs[i]->first; pg; pg = pg->next, n++) {
        if (atomic_load(&pg->heap) != h) _ta_fatal("heap %p: page %p owned by %p", (void *)h, pg->start, (void *)atomic_load(&pg->heap));
        if (pg->sclass != c) _ta_fatal("heap %p: page %p of class %u on queue %u", (void *)h, pg->start, pg->sclass, c);
        if ((atomic_load(&pg->in_full) != 0) != (i == 1)) _ta_fatal("page %p: in_full flag disagrees with its list", pg->start);
        _ta_page_check(pg);
      }
      if (n != qs[i]->count) _ta_fatal("heap %p: class %u list %d count %zu != %zu", (void *)h, c, i, qs[i]->count, n);
    }
    _ta_page_t *d = h->direct[c];
    if (d != &_ta_page_empty && atomic_load(&d->heap) != h) _ta_fatal("heap %p: direct page of class %u not owned", (void *)h, c);
  }
}
