/* page.c: small spans. Carving blocks lazily, collecting the lists freed
 * into by other threads (xthread_free), and the
 * lock-free cross-thread free. */

_ta_page_t _ta_page_empty; /* free == NULL: every malloc through it is slow */

/* Carve up to 4 KiB worth of blocks (at least one) onto the free list, in
 * address order, so a new span costs memory only as it is used; a span
 * that came resident throughout (TA_PF_RESIDENT: taken from freed spans
 * still in memory) costs none more, and is carved whole at once. Carving
 * 4 KiB at a time sent every fourth malloc of 1 KiB blocks down the slow
 * path while a batch filled pages the arena had just taken back (simple:
 * 195M -> 177M instructions under cachegrind, RSS unchanged). */
static void _ta_page_extend(_ta_page_t *pg) {
  uint32_t bsize = pg->block_size;
  uint32_t n = (pg->flags & TA_PF_RESIDENT) ? UINT32_MAX : bsize >= 4096 ? 1 : 4096 / bsize;
  if (n > (uint32_t)pg->reserved - pg->capacity) n = (uint32_t)pg->reserved - pg->capacity;
  ta_assert(n > 0);
  uint8_t *first = pg->start + (size_t)pg->capacity * bsize;
  uint8_t *p = first;
#if TA_CHECK
  _ta_check_poison_carved(first, n, bsize); /* a free block holds poison, fresh or not */
#endif
  for (uint32_t i = 1; i < n; i++, p += bsize) ((_ta_block_t *)p)->next = (_ta_block_t *)(p + bsize);
  ((_ta_block_t *)p)->next = pg->free;
  pg->free = (_ta_block_t *)first;
  /* read by other threads validating a pointer they free (_ta_classify) */
  __atomic_store_n(&pg->capacity, (uint16_t)(pg->capacity + n), __ATOMIC_RELAXED);
}

/* Ask for p's line, to be written (b->key at the next malloc): a block
 * another thread freed was last written there, and fetching it while the
 * program works on this block takes its miss off the next malloc's chain
 * (each pop loads the next block's address from the block). Harmless on
 * NULL. */
static inline __attribute__((always_inline)) void _ta_prefetch_w(const void *p) {
#if defined(__x86_64__)
  /* gcc's __builtin_prefetch(p, 1) is a prefetch for reading without
   * -mprfchw; prefetchw is a hint NOP on CPUs without it. The address in a
   * register, not an "m" operand: that would tell the compiler p is not
   * NULL. */
  __asm__("prefetchw (%0)" : : "r"(p));
#else
  __builtin_prefetch(p, 1);
#endif
}

/* Hand out b, the first free block of pg, a page of h whose
 * tag is the thread's current one (pg->ctr is h->ctr, or b's entry on a
 * mixed page: _ta_page_retag), and count it in that tag's counters
 * (h->ctr: a tag switch is one store of that pointer). True if the
 * counters passed their high-water mark: the caller then calls
 * _ta_ctr_rise (after the block is out, so the fast path can make it a
 * tail call). */
static inline __attribute__((always_inline)) bool _ta_take(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b) {
  _ta_ctr_t *ct = h->ctr;
  _ta_block_t *next = b->next;
  pg->free = next;
  _ta_prefetch_w(next);
  b->key = 0;
  pg->used++;
  uint64_t bsize = pg->block_size; /* its class's size, on a line at hand */
  ta_assert(bsize == _ta_classes[pg->sclass].size);
  TA_BOOK_ADD(ct->alloc_blocks, 1);
  TA_BOOK_ADD(ct->alloc_bytes, bsize);
  return ta_unlikely(TA_BOOK_SUB_NEG(ct->headroom, bsize));
}

/* Make ct's tag the tag of b, the free block of pg (class c, of the
 * calling thread's heap) about to be handed out. A page whose blocks in
 * use all have one tag keeps it in pg->tag alone, with pg->ctr its owner's
 * counters for it, and the fast paths only compare pg->ctr with the
 * thread's heap->ctr. An empty page takes any tag, and a page of ct's tag
 * takes ct (it was abandoned and adopted, or ct's thread switched tags and
 * back). Else the page turns mixed: every carved block's entry of tags[]
 * gets the page's tag, then pg->tag becomes TA_TAG_MIXED (a release: a
 * thread that frees one of its blocks and sees it mixed sees the entries)
 * and pg->ctr NULL, and each block handed out from then on has its entry
 * written, until the page is empty. A page that keeps requested sizes is
 * mixed from the start, for good: the fast paths never take it (ctr is
 * NULL), so they need not test pg->slop. The tag is always right before
 * the block is popped: a fork or a signal between the two finds a free
 * block with a fresh entry, never a handed-out block with a stale one. */
TA_NOINLINE static void _ta_page_mix(_ta_page_t *pg, uint32_t cur) {
  uint16_t *tags = pg->tags, t = (uint16_t)cur;
  for (size_t i = 0, n = pg->capacity; i < n; i++) tags[i] = t; /* n: not reloaded after each store */
  __atomic_store_n(&pg->tag, (uint16_t)TA_TAG_MIXED, __ATOMIC_RELEASE);
  __atomic_store_n(&pg->ctr, NULL, __ATOMIC_RELAXED);
}

static inline __attribute__((always_inline)) void _ta_page_retag(_ta_page_t *pg, unsigned c, const _ta_block_t *b, _ta_ctr_t *ct) {
  if (pg->ctr == ct) return;
  uint32_t cur = pg->tag, tag = ct->tag;
  /* used: blocks other threads freed count as used, so 0 means none is
   * out; a page keeping requested sizes stays mixed (its span's set-up) */
  if (cur == tag || (ta_unlikely(pg->used == 0) && pg->slop == NULL)) {
    __atomic_store_n(&pg->tag, (uint16_t)tag, __ATOMIC_RELEASE);
    __atomic_store_n(&pg->ctr, ct, __ATOMIC_RELAXED);
    return;
  }
  if (cur != TA_TAG_MIXED) _ta_page_mix(pg, cur);
  pg->tags[_ta_block_index_of(pg, c, b)] = (uint16_t)tag;
  atomic_signal_fence(memory_order_seq_cst);
}

/* _ta_take for the slow paths: the page may be of another tag. False if
 * a budget refused the block (_ta_take_refused undoes the take). */
static inline __attribute__((always_inline)) bool _ta_take_retag(_ta_heap_t *h, _ta_page_t *pg, unsigned c, _ta_block_t *b) {
  _ta_page_retag(pg, c, b, h->ctr);
  return !_ta_take(h, pg, b) || _ta_ctr_rise(h->ctr);
}

/* A budget refused b, just taken from pg of h's heap (budget.c): b goes
 * back to the head of pg's free list and out of the counts, as if never
 * taken; the allocation fails with ENOMEM. */
TA_NOINLINE static void *_ta_take_refused(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b) {
  _ta_ctr_t *ct = h->ctr;
  uint64_t bsize = pg->block_size;
  b->next = pg->free;
  pg->free = b;
  pg->used--;
  TA_CTR_ADD(ct->headroom, bsize);
  TA_CTR_ADD(ct->alloc_blocks, -1);
  TA_CTR_ADD(ct->alloc_bytes, -bsize);
  errno = ENOMEM;
  return NULL;
}

/* pg leaves its owner's heap (abandon, a fork child's vanished heaps): it
 * keeps its tag, but no longer names the owner's counters, which a later
 * thread may take over with the owner's record. */
static void _ta_page_disown(_ta_page_t *pg) { __atomic_store_n(&pg->ctr, NULL, __ATOMIC_RELAXED); }

/* Keep the requested size of b, just taken (TAGALLOC_REQUESTED). */
static void _ta_take_requested(_ta_heap_t *h, _ta_page_t *pg, unsigned c, _ta_block_t *b, size_t size) {
  _ta_slop_set(pg, _ta_block_index_of(pg, c, b), _ta_classes[c].size - size);
  TA_BOOK_ADD(h->ctr->alloc_req, size);
}

/* Take the blocks other threads freed into pg (owner only). The count in
 * the word says how many without a walk: when pg's own list is empty (as
 * it is when malloc runs out of blocks, and on a full page) the list
 * becomes it as it is, and the blocks' lines move to this thread one at a
 * time as malloc pops them. When they are every block in use, the page
 * is empty and is carved again (below; the caller extends it when it
 * needs a block). Otherwise the list is walked to its tail, and
 * a walk that finds another count than the word's (a cycle, as two threads
 * freeing one block at once can make) aborts. A count above used is a
 * double free either way. A cycle in a list taken without a walk hands a
 * block out more than once: the program's second free of it finds it on
 * the free list (_ta_check_double_free), and tagalloc_check's
 * _ta_page_check finds the cycle. */
static void _ta_page_collect(_ta_page_t *pg) {
  uintptr_t w = atomic_load_explicit(&pg->xthread_free, memory_order_relaxed);
  if (w == 0) return;
  /* taken whole, but never while the purger purges the page (arena.c,
   * pages emptied by other threads): it holds the lock a few
   * microseconds a page */
  do {
    while (ta_unlikely(w & TA_XF_PURGING)) {
      TA_CPU_RELAX();
      w = atomic_load_explicit(&pg->xthread_free, memory_order_relaxed);
    }
  } while (!atomic_compare_exchange_weak_explicit(&pg->xthread_free, &w, 0, memory_order_acquire, memory_order_relaxed));
  _ta_block_t *list = _ta_xf_list(w);
  uint32_t k = _ta_xf_count(w);
  if (ta_unlikely(k > pg->used || (k == 0) != (list == NULL)))
    _ta_fatal("page %p: %u blocks freed from other threads but only %u in use (double free?)", pg->start, k, pg->used);
  if (!list) return;
  if (ta_unlikely(w & TA_XF_PURGED)) {
    /* Every block came back and the purger purged the pages: the lists
     * are gone with them (the owner's own is empty: every block was on
     * this one), and the page is carved again from zero pages, none of
     * them resident. */
    pg->free = NULL;
    pg->used = 0;
    __atomic_store_n(&pg->capacity, (uint16_t)0, __ATOMIC_RELAXED);
    uint8_t f = __atomic_load_n(&pg->flags, __ATOMIC_RELAXED) & (uint8_t)~TA_PF_RESIDENT;
    __atomic_store_n(&pg->flags, (uint8_t)(f | TA_PF_ZERO), __ATOMIC_RELAXED);
    return;
  }
  if (pg->free) {
#if !TA_CHECK
    if (k == pg->used) {
      /* Every block in use came back: the page is empty. Both lists are
       * forgotten and its blocks carved again as malloc needs them, in
       * address order, by this thread: the walk below is a cache miss a
       * block (the other thread wrote each one), 12% of many_tags' time.
       * A stale pointer into the page now lies past its carved blocks
       * (capacity, which other threads read validating a free). The
       * checking build walks: its carving checks each block's poison,
       * which a free's list link overwrote. */
      pg->free = NULL;
      pg->used = 0;
      /* What was carved stays in memory: capacity no longer bounds it.
       * A span carved whole, of blocks of at most a page (carving wrote
       * every page), is resident throughout, and is carved again whole
       * at its next malloc: 4 KiB at a time it sent every second malloc
       * of 2 KiB blocks down the slow path (many_tags: 257k carvings in
       * 2M mallocs, every page emptied and carved again each round). */
      uint8_t f = __atomic_load_n(&pg->flags, __ATOMIC_RELAXED) & (uint8_t)~TA_PF_ZERO;
      if (pg->capacity == pg->reserved && pg->block_size <= TA_OS_PAGE) f |= TA_PF_RESIDENT;
      __atomic_store_n(&pg->capacity, (uint16_t)0, __ATOMIC_RELAXED);
      __atomic_store_n(&pg->flags, f, __ATOMIC_RELAXED);
      return;
    }
#endif
    uint32_t n = 1;
    _ta_block_t *tail = list;
    while (tail->next && n <= k) {
      tail = tail->next;
      n++;
    }
    if (ta_unlikely(n != k || tail->next)) _ta_fatal("page %p: its list of blocks freed by other threads is not its count %u long (double free?)", pg->start, k);
    tail->next = pg->free;
  }
  pg->free = list;
  pg->used -= k;
}

/* b, being freed, holds the free key: if it is on one of pg's free lists
 * (the owner's own, for the owner; the list other threads free into, for
 * anyone), this is a double free (abort, naming fn); else the program's
 * data matched the key by chance. Lists are walked at most as far as the
 * page has blocks, so a corrupted list cannot hang us. */
static bool _ta_rchains_hold(const _ta_page_t *pg, const _ta_block_t *b);
TA_NOINLINE static void _ta_check_double_free(_ta_page_t *pg, _ta_block_t *b, const char *fn) {
  uintptr_t xf = atomic_load_explicit(&pg->xthread_free, memory_order_acquire);
  const _ta_block_t *lists[2] = {_ta_xf_list(xf), pg->free};
  bool owner = atomic_load_explicit(&pg->heap, memory_order_relaxed) == _ta_tls_heap;
  /* a stashed page's blocks are all free (its list is no one's to walk),
   * and so are those of a page the purger marked, every block on the
   * list other threads free into (arena.c: a push clears the mark) */
  bool found = atomic_load_explicit(&pg->in_full, memory_order_acquire) == TA_IN_STASHED || (xf & TA_XF_STATE);
  if (found) lists[0] = NULL; /* purged, or being purged: no list to walk */
  for (int i = 0; i < (owner ? 2 : 1); i++) { /* only the owner may read its own list */
    uint32_t steps = 0;
    for (const _ta_block_t *f = lists[i]; f && steps <= pg->reserved; f = f->next, steps++) found |= f == b;
  }
  /* and the blocks threads hold to push later (remote frees in batches) */
  if (found || _ta_rchains_hold(pg, b)) _ta_fatal("%s(%p): double free (the block is already free)", fn, (void *)b);
}

/* Push the chain first..last (n blocks of pg, linked by next, each with
 * the free key) on pg's xthread list, from a thread that does not own pg.
 * If the page sits on its owner's full list, tell the owner so it looks
 * again. The push and the in_full read are sequentially consistent,
 * pairing with the owner's store of in_full before its last collect (see
 * heap.c): either the owner sees these blocks, or this thread sees in_full
 * and sets the hint. TA_PUSH_ABANDONED: pg is an exited thread's page
 * these blocks may have emptied (the caller gives it back:
 * _ta_aband_release_if_empty); TA_PUSH_EMPTIED: a live thread's page they
 * emptied, noted for the purger (the caller wakes it, where it may). */
enum { TA_PUSH_ABANDONED = 1, TA_PUSH_EMPTIED = 2 };
static unsigned _ta_free_remote_push(_ta_page_t *pg, _ta_block_t *first, _ta_block_t *last, uint32_t n) {
  /* Read what we need before the push: once pushed, the owner may collect
   * the blocks and hand the span to someone else. Only atomics after it. */
  unsigned c = pg->sclass;
  uint32_t all = pg->reserved;
  size_t ai = pg->arena;
  uintptr_t old = atomic_load_explicit(&pg->xthread_free, memory_order_relaxed);
  do {
    last->next = _ta_xf_list(old);
  } while (!atomic_compare_exchange_weak_explicit(&pg->xthread_free, &old, (uintptr_t)first + (old & -TA_XF_ONE) + n * TA_XF_ONE,
                                                  memory_order_seq_cst, memory_order_relaxed));
  uint8_t in_full = atomic_load_explicit(&pg->in_full, memory_order_seq_cst);
  if (ta_unlikely(in_full == TA_IN_ABANDONED)) {
    /* An exited thread's page that this free may have emptied: its span
     * goes back to the arena now, for any class or size, rather than
     * wait for a thread that needs this class to adopt it (heap.c). The
     * count is compared with aband_used, not used (which an adopter may
     * be writing): the lock decides. */
    return _ta_xf_count(old) + n == atomic_load_explicit(&pg->aband_used, memory_order_relaxed) ? TA_PUSH_ABANDONED : 0;
  }
  if (in_full) {
    _ta_heap_t *h = atomic_load_explicit(&pg->heap, memory_order_acquire);
    /* Heap structs are never unmapped, so a stale owner only gets a
     * needless rescan. */
    if (h && !atomic_load_explicit(&h->xfull[c], memory_order_relaxed))
      atomic_store_explicit(&h->xfull[c], 1, memory_order_release);
  }
  /* every block of the page is free: the purger looks at it if its owner
   * does not take it back soon (arena.c, pages emptied by other threads) */
  if (_ta_xf_count(old) + n != all) return 0;
  _ta_emptied_note(ai, pg);
  return TA_PUSH_EMPTIED;
}

/* _ta_free_remote_push, and give back the exited thread's page the
 * blocks emptied. */
static void _ta_free_remote_give(_ta_page_t *pg, _ta_block_t *first, _ta_block_t *last, uint32_t n) {
  unsigned r = _ta_free_remote_push(pg, first, last, n);
  if (r == TA_PUSH_ABANDONED) _ta_aband_release_if_empty(pg);
  else if (r == TA_PUSH_EMPTIED) _ta_purger_kick();
}

/* ---- remote frees in batches ---------------------------------------------- */

/* A thread that frees many blocks another thread allocated (a consumer of
 * a producer's blocks) pushed each on its page's xthread list: a locked
 * compare-and-swap a block, on a line the owner takes back at its next
 * collect. Now a heap holds, per class of small blocks (TA_DENSE_OBJECTS
 * or more a span: the first TA_DENSE_CLASSES classes), a chain of the blocks it freed of one page another live heap
 * owns (an exited thread's page is pushed to at once, below), and
 * pushes the chain at once (_ta_free_remote_push with its count) when a
 * block of another page of the class comes, when it holds TA_RCHAIN_MAX,
 * at the thread's next malloc slow path (all of its chains: a thread that
 * allocates too holds them no longer than that), at thread exit and, for
 * the threads a fork left behind, in the child. The blocks are free in
 * the books from their free on (the free counted them) and in use in
 * their page until the push, so no page holding one is given back; the
 * heap walk (tags.c) counts them free, and the double-free check looks in
 * every heap's chain of the page (heap.c, _ta_rchains_hold). A thread
 * that stops freeing and allocating holds at most a chain a class (32
 * classes), each of one page. xmalloc (2 threads, every block freed by
 * the other): 0.15-0.16 -> 0.11-0.12 s with the descriptor's lines split
 * (types.h). Not in the checking build (its frees go through the
 * quarantine). */
static inline bool _ta_rchain_class(unsigned c) { return TA_RCHAIN && c < TA_DENSE_CLASSES; }

/* Push h's chain of class c, if it holds one, and give back the exited
 * thread's page it may have emptied. */
static void _ta_rchain_flush(_ta_heap_t *h, unsigned c) {
  _ta_rchain_t *s = &h->rchain[c];
  _ta_page_t *pg = s->pg;
  if (!pg) return;
  _ta_block_t *first = s->head, *last = s->tail;
  uint32_t n = s->n;
  /* first: a signal handler's free meanwhile starts a chain of its own */
  __atomic_store_n(&s->pg, NULL, __ATOMIC_RELAXED);
  s->n = 0;
  h->rchains &= ~((uint64_t)1 << c);
  _ta_free_remote_give(pg, first, last, n);
}

static void _ta_rchain_flush_all(_ta_heap_t *h) {
  for (uint64_t m = h->rchains; m; m &= m - 1) _ta_rchain_flush(h, (unsigned)__builtin_ctzll(m));
}

/* In a fork child, the chains of heap h, whose thread did not come along
 * and may have stopped inside _ta_free_remote: each is followed
 * from its head (stored before pg), its length and tail counted again,
 * and pushed; one that does not hold up (a link outside its page) stays
 * unpushed, its blocks in use in their page (the books' resync counts
 * them so). An exited thread's page emptied this way waits for a heap
 * walk's _ta_heaps_reclaim_abandoned (no span is freed in the fork
 * handler). */
static void _ta_rchain_flush_vanished(_ta_heap_t *h) {
  h->rchains = 0;
  for (unsigned c = 0; c < TA_DENSE_CLASSES; c++) {
    _ta_rchain_t *s = &h->rchain[c];
    _ta_page_t *pg = s->pg;
    s->pg = NULL;
    if (!pg || !_ta_is_carved(pg, s->head)) continue;
    _ta_block_t *last = s->head;
    uint32_t n = 1;
    while (last->next && n <= TA_RCHAIN_MAX && _ta_is_carved(pg, last->next)) {
      last = last->next;
      n++;
    }
    if (last->next == NULL) (void)_ta_free_remote_push(pg, s->head, last, n);
  }
}

/* Free b from a thread (heap h, the calling thread's) that does not own
 * pg (or from the checking build's quarantine, any thread): held in the
 * thread's chain of its class if the chain is of pg (or empty), else the
 * chain goes first; at once if its class has no chains, the thread no
 * heap, or the page no owner. Inline in free's path for another thread's
 * block (alloc.c), as the free is counted: a call less a free. */
static inline __attribute__((always_inline)) void _ta_free_remote(_ta_heap_t *h, _ta_page_t *pg, _ta_block_t *b) {
  if (ta_unlikely(b->key == _ta_free_key)) _ta_check_double_free(pg, b, "free");
  b->key = _ta_free_key;
  unsigned c = pg->sclass;
  /* An exited thread's page (no owner: abandoned) goes at once: the free
   * that empties it gives it back (_ta_free_remote_push), and a chain
   * would hold it until the thread's next free of another page or malloc
   * slow path (a main thread freeing what its exited workers made kept a
   * page of each class between rounds, and odd_test's thread-exit saw its
   * RSS plateau later and higher) */
  if (!_ta_rchain_class(c) || ta_unlikely(h == &_ta_heap_empty) || atomic_load_explicit(&pg->heap, memory_order_relaxed) == NULL) {
    _ta_free_remote_give(pg, b, b, 1);
    return;
  }
  _ta_rchain_t *s = &h->rchain[c];
  if (s->pg == pg) {
    b->next = s->head;
    /* a release: a double-free check on another thread that reads b as
     * the head reads its link (_ta_rchains_hold) */
    __atomic_store_n(&s->head, b, __ATOMIC_RELEASE);
    if (++s->n >= TA_RCHAIN_MAX) _ta_rchain_flush(h, c);
    return;
  }
  /* b starts the class's chain, then the old one (if any) is pushed: the
   * push may give a page back and start the purger, whose pthread_create
   * may free here again, and finds the chain whole */
  _ta_rchain_t old = *s;
  b->next = NULL;
  s->tail = b;
  s->n = 1;
  h->rchains |= (uint64_t)1 << c;
  __atomic_store_n(&s->head, b, __ATOMIC_RELEASE);
  __atomic_store_n(&s->pg, pg, __ATOMIC_RELEASE);
  if (old.pg) _ta_free_remote_give(old.pg, old.head, old.tail, old.n);
}

/* Set up a fresh small span for class c. */
static void _ta_page_init_small(_ta_page_t *pg, unsigned c) {
  pg->sclass = (uint8_t)c;
  pg->block_size = _ta_classes[c].size;
  pg->reserved = (uint16_t)_ta_classes[c].objects;
  pg->capacity = 0;
  pg->used = 0;
  pg->free = NULL;
}

/* Check a small span at rest: the block-count equation of types.h, and that
 * every listed block is a block of this span. */
static void _ta_page_check(const _ta_page_t *pg) {
  if (pg->kind != TA_KIND_SMALL) _ta_fatal("page %p: kind %u is not small", pg->start, pg->kind);
  size_t lim = pg->reserved, counts[2] = {0, 0};
  uintptr_t xf = atomic_load(&pg->xthread_free);
  const _ta_block_t *lists[2] = {pg->free, _ta_xf_list(xf)};
  if (_ta_xf_gone(xf)) { /* every block came back, the list purged (arena.c) */
    if (_ta_xf_count(xf) != pg->reserved || pg->used != pg->reserved || pg->free || pg->capacity != pg->reserved)
      _ta_fatal("page %p: purged as emptied, yet used %u, capacity %u, own list %p, %u freed by others of %u", pg->start, pg->used,
                pg->capacity, (void *)pg->free, _ta_xf_count(xf), pg->reserved);
    return;
  }
  for (int i = 0; i < 2; i++) {
    for (const _ta_block_t *b = lists[i]; b; b = b->next) {
      if (!_ta_is_carved(pg, b))
        _ta_fatal("page %p: list %d holds %p, not a carved block", pg->start, i, (const void *)b);
      if (++counts[i] > lim) _ta_fatal("page %p: list %d is longer than the span (%zu): a cycle?", pg->start, i, lim);
    }
  }
  /* blocks freed by other threads are still counted in used until collected */
  uint32_t used = pg->used;
  if (used + counts[0] + (pg->reserved - pg->capacity) != pg->reserved)
    _ta_fatal("page %p: used %u + free %zu + uncarved %u != reserved %u", pg->start, used, counts[0],
              (unsigned)(pg->reserved - pg->capacity), pg->reserved);
  if (counts[1] > used) _ta_fatal("page %p: %zu blocks freed by others but only %u in use", pg->start, counts[1], used);
  if (counts[1] != _ta_xf_count(xf)) /* pushes only put blocks in front of xf's */
    _ta_fatal("page %p: %zu blocks on the list freed by others, its count says %u", pg->start, counts[1], _ta_xf_count(xf));
}
