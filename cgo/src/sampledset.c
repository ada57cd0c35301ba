/* sampledset.c: which blocks are sampled (TA_SAMPLING builds): the set of
 * their addresses, looked up without the lock by frees (a seqlock), and
 * each page's filter of the sampled blocks it holds, so that frees into
 * other pages never look at the set. Marking and unmarking a block does
 * both (sample lock held). */

#if TA_SAMPLING

/* Addresses of live sampled blocks: open addressing with linear probing,
 * grown (rehashed into a mapping twice the size) at half full. Removing an
 * address shifts the rest of its cluster back over it, so there are no
 * tombstones: under --stacks full every block passes through the set, and
 * tombstones had it rehashing in place again and again (23% of python's
 * CPU time under --stacks full went to the set, 13-17% after). */
#define TA_SET_EMPTY 0
static uintptr_t *_ta_set;
static size_t _ta_set_cap;

/* A free looks its block up without the lock first (_ta_set_lookup): on a
 * page that holds a sampled block, most frees are of other blocks, and
 * taking the lock for each was most of what sampling cost a program that
 * allocates small blocks (small_random, larson: threads queued on it).
 * Writers (under the lock) make the sequence odd while they change the
 * set, readers retry or take the lock when it moved (a seqlock); entries
 * and the table are read and written as relaxed atomics. A table the set
 * outgrew is purged, not unmapped: a reader may still be in it (it reads
 * zeros there, and the sequence tells it to look again). */
static struct {
  uint64_t seq; /* the seqlock's sequence */
  size_t live;  /* addresses in the set */
} TA_ALONE _ta_set_w; /* what writers change, apart from what lookups read */

static inline void _ta_set_write_begin(void) {
  __atomic_store_n(&_ta_set_w.seq, _ta_set_w.seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
static inline void _ta_set_write_end(void) { __atomic_store_n(&_ta_set_w.seq, _ta_set_w.seq + 1, __ATOMIC_RELEASE); }
static inline uintptr_t _ta_set_at(size_t j) { return __atomic_load_n(&_ta_set[j], __ATOMIC_RELAXED); }
static inline void _ta_set_put(size_t j, uintptr_t a) { __atomic_store_n(&_ta_set[j], a, __ATOMIC_RELAXED); }

/* a's home slot in a table of cap slots */
static inline size_t _ta_set_home(uintptr_t a, size_t cap) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1); }

/* The slot of a in table t of cap slots, or the empty slot that ends its
 * cluster: every lookup's probe, locked or not (at most cap steps: a
 * reader without the lock may see slots change under it). */
static inline size_t _ta_set_probe(uintptr_t *t, size_t cap, uintptr_t a) {
  size_t j = _ta_set_home(a, cap);
  for (size_t k = 0; k < cap; k++, j = (j + 1) & (cap - 1)) {
    uintptr_t v = __atomic_load_n(&t[j], __ATOMIC_RELAXED);
    if (v == a || v == TA_SET_EMPTY) break;
  }
  return j;
}

/* Start loading a's slot, without the lock, well before a lookup under it
 * (the set is far larger than the caches under --stacks full: its misses
 * were most of what marking a block cost; a sample prefetches while it
 * unwinds the stack). The table and its size are read
 * relaxed and may be a grow apart: a prefetch of the wrong line is only a
 * wasted load. */
static inline void _ta_set_prefetch(uintptr_t a) {
  uintptr_t *t = __atomic_load_n(&_ta_set, __ATOMIC_RELAXED);
  size_t cap = __atomic_load_n(&_ta_set_cap, __ATOMIC_RELAXED);
  if (t) __builtin_prefetch(t + _ta_set_home(a, cap), 1);
}

/* Without the lock: whether a is in the set (TA_SET_IN, TA_SET_OUT), or
 * TA_SET_UNSURE if writers kept changing the set while we looked (then
 * look under the lock). An answer is the set as it was at some moment
 * during the call; only a thread that owns block a adds or removes it. */
enum { TA_SET_OUT, TA_SET_IN, TA_SET_UNSURE };
static int _ta_set_lookup(uintptr_t a) {
  for (int tries = 0; tries < 3; tries++) {
    uint64_t s = __atomic_load_n(&_ta_set_w.seq, __ATOMIC_ACQUIRE);
    if (s & 1) continue; /* a writer is at it */
    /* the size first: a table is never smaller than the size stored after
     * it (grow stores the table, then releases the size), so the probe
     * stays inside whichever table it reads */
    size_t cap = __atomic_load_n(&_ta_set_cap, __ATOMIC_ACQUIRE);
    uintptr_t *t = __atomic_load_n(&_ta_set, __ATOMIC_RELAXED);
    bool found = t && cap && __atomic_load_n(&t[_ta_set_probe(t, cap, a)], __ATOMIC_RELAXED) == a;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&_ta_set_w.seq, __ATOMIC_RELAXED) == s) return found ? TA_SET_IN : TA_SET_OUT;
  }
  return TA_SET_UNSURE;
}

static bool _ta_set_grow(void) {
  /* first a page: 4096 slots were 8 pages a process that took a sample
   * touched one by one, hashed (a fault of about 14 us each, 2-core VM) */
  size_t cap = _ta_set_cap ? _ta_set_cap * 2 : TA_OS_PAGE / sizeof(uintptr_t);
  uintptr_t *old = _ta_set, *nt = _ta_os_map(cap * sizeof(uintptr_t), TA_OS_PAGE);
  if (!nt) return false;
  size_t oldcap = _ta_set_cap;
  for (size_t i = 0; i < oldcap; i++) { /* atomics: a reader may see nt before the sequence moves */
    uintptr_t a = old[i];
    if (a == TA_SET_EMPTY) continue;
    size_t j = _ta_set_home(a, cap);
    while (__atomic_load_n(&nt[j], __ATOMIC_RELAXED) != TA_SET_EMPTY) j = (j + 1) & (cap - 1);
    __atomic_store_n(&nt[j], a, __ATOMIC_RELAXED);
  }
  _ta_set_write_begin();
  __atomic_store_n(&_ta_set, nt, __ATOMIC_RELAXED);
  __atomic_store_n(&_ta_set_cap, cap, __ATOMIC_RELEASE); /* after the table: _ta_set_lookup */
  _ta_set_write_end();
  if (old) _ta_os_purge(old, oldcap * sizeof(uintptr_t)); /* not unmapped: readers */
  return true;
}

static bool _ta_set_add(uintptr_t a) {
  if ((_ta_set_w.live + 1) * 2 > _ta_set_cap && !_ta_set_grow()) return false;
  size_t j = _ta_set_probe(_ta_set, _ta_set_cap, a);
  if (_ta_set[j] == a) return false; /* already there: not counted twice */
  _ta_set_write_begin();
  _ta_set_put(j, a);
  _ta_set_write_end();
  _ta_set_w.live++;
  return true;
}

static bool _ta_set_has(uintptr_t a) { return _ta_set_cap && _ta_set_at(_ta_set_probe(_ta_set, _ta_set_cap, a)) == a; }

/* Remove a; false if it was not there. */
static bool _ta_set_remove(uintptr_t a) {
  if (!_ta_set_cap) return false;
  size_t m = _ta_set_cap - 1, i = _ta_set_probe(_ta_set, _ta_set_cap, a);
  if (_ta_set_at(i) != a) return false;
  /* an entry further on moves into the hole if the hole lies between its
   * home slot and where it sits, cyclically */
  _ta_set_write_begin();
  for (size_t j = (i + 1) & m; _ta_set_at(j) != TA_SET_EMPTY; j = (j + 1) & m) {
    size_t h = _ta_set_home(_ta_set_at(j), _ta_set_cap);
    if (((j - h) & m) >= ((j - i) & m)) _ta_set_put(i, _ta_set_at(j)), i = j;
  }
  _ta_set_put(i, TA_SET_EMPTY);
  _ta_set_write_end();
  _ta_set_w.live--;
  return true;
}

/* A page's sampled word: a filter of its sampled blocks, one bit of 32
 * per block, picked by hashing its address; a small span counts them
 * (nsampled, off free's line), and the filter is cleared when the count
 * comes back to 0 (a large span has one block). Free asks whether its
 * block's bit is set (TA_SAMPLED_AT) before it looks the block up in the
 * set: with one sampled block on a page, 1 free in 32 of its other blocks
 * looks. Before the filter, every free on the page left the fast path
 * (small_random: 8% of all frees, their branch mispredicted); with 16 bits
 * (and the count beside them), small_random's 2 threads looked 222k
 * blocks up for 22k sampled. */
static inline uint32_t _ta_sampled_bit(const void *p) {
  return 1u << (unsigned)((uintptr_t)p * 0x9E3779B97F4A7C15ull >> 59);
}
#define TA_SAMPLED_AT(pg, p) ((atomic_load_explicit(&(pg)->sampled, memory_order_relaxed) & _ta_sampled_bit(p)) != 0)

/* Mark p sampled (sample lock held). */
static void _ta_sample_mark(void *p) {
  if (!_ta_set_add((uintptr_t)p)) return;
  _ta_page_t *pg = _ta_page_of(p);
  if (!pg) return;
  if (pg->kind == TA_KIND_SMALL) pg->nsampled++;
  uint32_t v = atomic_load_explicit(&pg->sampled, memory_order_relaxed); /* written under the lock only */
  atomic_store_explicit(&pg->sampled, v | _ta_sampled_bit(p), memory_order_relaxed);
}

/* Unmark p if it is sampled, and say whether it was (sample lock held). */
static bool _ta_sample_unmark(void *p) {
  if (!_ta_set_remove((uintptr_t)p)) return false;
  _ta_page_t *pg = _ta_page_of(p);
  if (!pg) return true;
  if (pg->kind != TA_KIND_SMALL || --pg->nsampled == 0) /* the last: filter cleared */
    atomic_store_explicit(&pg->sampled, 0, memory_order_relaxed);
  return true;
}

#endif
