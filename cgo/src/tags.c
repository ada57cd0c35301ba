/* tags.c: heap-block tags (docs/ARCHITECTURE.md, D5). The tag registry (names to
 * ids, lock-free lookups), thread records and their current tag (malloc
 * writes it into the block's entry of its span's tag array, and free reads
 * it back: O(1), no lock, no hash, and no memory per tag but counters), the
 * per-(thread, tag) counters, tag inheritance by threads created inside a
 * tagged region, and the public tag API of tagalloc.h.
 *
 * Invariant: for every tag, live bytes = sum over thread records of
 * (high - headroom) = sum over the tag's live blocks of their usable size
 * (tagalloc_check's walk). */

#include <dlfcn.h>
#include <semaphore.h>
#include <sys/epoll.h>

#include "../include/tagalloc.h"

__thread _ta_thread_t *_ta_tls_thread;
__thread bool _ta_tls_exited;

/* ---- the registry ---------------------------------------------------------- */

typedef struct {
  char name[TA_TAG_NAME_MAX + 1];
} _ta_tagname_t;

#define TA_TAG_HASH 8192 /* > 2 * TA_TAG_SLOTS: probes stay short */
static _ta_tagname_t *_ta_tag_names; /* TA_TAG_SLOTS, in the books region */
TA_COLD_BSS static _Atomic(uint16_t) _ta_tag_hash[TA_TAG_HASH]; /* id + 1; 0 = empty */
static pthread_mutex_t TA_LOCK _ta_tags_lock = PTHREAD_MUTEX_INITIALIZER;
static _Atomic(uint64_t) *_ta_tag_peak; /* TA_TAG_SLOTS, in the books region */
/* Books version 5, TA_TAG_SLOTS each: a tag's holders (0, its sole
 * counter set's address, or TA_HOLDERS_MANY), and the highest upper
 * bound of its peak seen at a rise (held by several sets). */
static _Atomic(uint64_t) *_ta_tag_holders;
static _Atomic(uint64_t) *_ta_tag_peak_upper;
static _Atomic(bool) _ta_overflow_warned;
/* The overflow tag was handed out (a name past the limit, or "overflow"
 * itself): until then a fork child need not look at its books, on pages
 * of their own it would fault in (_ta_books_rebase). */
static _Atomic(bool) _ta_overflow_handed;

/* Counts of threads that could not get a record (out of memory): atomic. */
static _ta_ctr_t *_ta_ctr_fallback; /* TA_TAG_SLOTS, in the books region */

/* Every thread record, newest first, linked by next; the head lives in the
 * books (readers start there). */
static inline _ta_thread_t *_ta_threads_first(void) {
  return (_ta_thread_t *)(uintptr_t)atomic_load_explicit(&_ta_books->threads_head, memory_order_acquire);
}
static pthread_mutex_t TA_LOCK _ta_threads_lock = PTHREAD_MUTEX_INITIALIZER;

/* A tag name's hash (FNV-1a, the table's: _ta_tag_hash), a byte at a time
 * from TA_TAG_HASH_SEED. */
#define TA_TAG_HASH_SEED 2166136261u
static inline uint32_t _ta_tag_hash_step(uint32_t h, uint8_t ch) { return (h ^ ch) * 16777619u; }
static inline uint32_t _ta_tag_hashof(const char *s, size_t n) {
  uint32_t h = TA_TAG_HASH_SEED;
  for (size_t i = 0; i < n; i++) h = _ta_tag_hash_step(h, (uint8_t)s[i]);
  return h;
}

/* Length of a valid tag name, or 0: NULL, empty, longer than 63 bytes,
 * or not a path: a tag name's '/' separate the levels of a tag tree
 * (docs/tag-trees.md), so an empty level (a leading, trailing or doubled
 * '/') or a level "." or ".." is refused. *hash gets the name's
 * _ta_tag_hashof: one pass over the name checks it and hashes it (a tag
 * switch by name made three, and a fourth to compare: 8% of many_tags'
 * time, 32 threads switching among 256 tags). At most TA_TAG_NAME_MAX+1
 * bytes are read, as strnlen would. */
static inline __attribute__((always_inline)) size_t _ta_tag_scan(const char *name, uint32_t *hash) {
  if (!name) return 0;
  uint32_t h = TA_TAG_HASH_SEED;
  size_t level = 0, i = 0; /* the level being read starts at name[level] */
  for (;; i++) {
    if (i > TA_TAG_NAME_MAX) return 0;
    uint8_t ch = (uint8_t)name[i];
    if (ch == 0 || ch == '/') {
      size_t len = i - level;
      if (len == 0 || (len <= 2 && name[level] == '.' && (len == 1 || name[level + 1] == '.'))) return 0;
      if (ch == 0) break;
      level = i + 1;
    }
    h = _ta_tag_hash_step(h, ch);
  }
  *hash = h;
  return i;
}

static size_t _ta_tag_len(const char *name) {
  uint32_t h;
  return _ta_tag_scan(name, &h);
}

/* The id of name (n bytes), or -1. Lock-free: an id is published in the
 * hash only after its name is written. */
static int32_t _ta_tag_find_hashed(const char *name, size_t n, uint32_t hash) {
  for (uint32_t i = hash & (TA_TAG_HASH - 1);; i = (i + 1) & (TA_TAG_HASH - 1)) {
    uint16_t e = atomic_load_explicit(&_ta_tag_hash[i], memory_order_acquire);
    if (e == 0) return -1;
    const char *t = _ta_tag_names[e - 1].name; /* TA_TAG_NAME_MAX+1 bytes: n of them may be read */
    if (t[n] == 0 && memcmp(t, name, n) == 0) return e - 1;
  }
}

static void _ta_tag_publish_locked(uint32_t id, const char *name, size_t n, uint32_t hash) {
  memcpy(_ta_tag_names[id].name, name, n);
  _ta_tag_names[id].name[n] = 0;
  _ta_budget_tag_new_locked(id); /* before the id is found: its first set registers under its budget */
  /* Each probe is a compare-and-swap, not a load then a store (one writer:
   * the tags lock): the first touch of a page of the hash is then a write,
   * one fault, where a load mapped the zero page and the store faulted
   * again (two of a new process's first faults were these). */
  for (uint32_t i = hash & (TA_TAG_HASH - 1);; i = (i + 1) & (TA_TAG_HASH - 1)) {
    uint16_t empty = 0;
    if (atomic_compare_exchange_strong_explicit(&_ta_tag_hash[i], &empty, (uint16_t)(id + 1), memory_order_release, memory_order_relaxed))
      return;
  }
}

/* The id of name (n bytes, of hash), registered if new (tags lock held);
 * -1 past the limit. */
static int32_t _ta_tag_intern_locked(const char *name, size_t n, uint32_t hash) {
  int32_t id = _ta_tag_find_hashed(name, n, hash);
  if (id >= 0) return id;
  uint32_t next = atomic_load_explicit(&_ta_books->tag_count, memory_order_relaxed); /* ids below are valid */
  if (next > TA_MAX_TAGS) return -1;
  _ta_tag_publish_locked(next, name, n, hash);
  atomic_store_explicit(&_ta_books->tag_count, next + 1, memory_order_release);
  return (int32_t)next;
}

/* The id of name (n bytes, of hash), registering it if new; the overflow
 * tag past the limit. */
static uint32_t _ta_tag_intern(const char *name, size_t n, uint32_t hash) {
  int32_t id = _ta_tag_find_hashed(name, n, hash);
  if (id < 0) {
    _ta_mutex_lock(&_ta_tags_lock);
    id = _ta_tag_intern_locked(name, n, hash);
    if (id < 0) id = TA_TAG_OVERFLOW;
    _ta_mutex_unlock(&_ta_tags_lock);
    bool f = false;
    if (id == TA_TAG_OVERFLOW && atomic_compare_exchange_strong(&_ta_overflow_warned, &f, true))
      _ta_warn("more than %u tags: blocks of new tags are charged to \"overflow\"", (unsigned)TA_MAX_TAGS);
  }
  if (id == TA_TAG_OVERFLOW) atomic_store_explicit(&_ta_overflow_handed, true, memory_order_relaxed); /* past the limit, or by its name */
  return (uint32_t)id;
}

/* Names for the built-in tags; id 0 takes TAGALLOC_TAG's name if set. */
static void _ta_tags_init(const char *default_name) {
  uint8_t *base = (uint8_t *)_ta_books;
  _ta_tag_names = (_ta_tagname_t *)(base + _ta_books->names_off);
  _ta_tag_peak = (_Atomic(uint64_t) *)(base + _ta_books->peaks_off);
  _ta_tag_holders = (_Atomic(uint64_t) *)(base + _ta_books->holders_off);
  _ta_tag_peak_upper = (_Atomic(uint64_t) *)(base + _ta_books->peak_upper_off);
  _ta_ctr_fallback = (_ta_ctr_t *)(base + _ta_books->fallback_off);
  atomic_store(&_ta_books->tag_count, 1);
  _ta_mutex_lock(&_ta_tags_lock);
  size_t n = _ta_tag_len(default_name);
  if (default_name && !n) _ta_warn("ignoring TAGALLOC_TAG: a tag name is 1 to %u bytes", (unsigned)TA_TAG_NAME_MAX);
  if (!n) default_name = "untagged", n = 8;
  _ta_tag_publish_locked(TA_TAG_UNTAGGED, default_name, n, _ta_tag_hashof(default_name, n));
  _ta_tag_publish_locked(TA_TAG_OVERFLOW, "overflow", 8, _ta_tag_hashof("overflow", 8));
  _ta_mutex_unlock(&_ta_tags_lock);
}

/* ---- thread records and counters --------------------------------------------- */


static uint32_t _ta_current_tag(void) {
  _ta_thread_t *th = _ta_tls_thread;
  return th ? th->tag : TA_TAG_UNTAGGED;
}

/* The chunk of th's counters that holds tag's, made on its first count
 * (out of line: the look-up below stays a few instructions). */
TA_NOINLINE static _ta_ctr_t *_ta_ctr_chunk_new(_ta_thread_t *th, uint32_t tag) {
  _ta_ctr_t *chunk = _ta_meta_alloc(TA_CTR_CHUNK * sizeof(_ta_ctr_t)); /* zeroed: fresh mmap, never reused */
  if (!chunk) return NULL;
  for (uint32_t k = 0; k < TA_CTR_CHUNK; k++) chunk[k].tag = tag / TA_CTR_CHUNK * TA_CTR_CHUNK + k;
  atomic_store_explicit(&th->ctr[tag / TA_CTR_CHUNK], chunk, memory_order_release);
  return &chunk[tag % TA_CTR_CHUNK];
}

/* th's counters of tag if their chunk exists, else NULL (no allocation:
 * a free path's look-up, _ta_count_free_here). */
static inline _ta_ctr_t *_ta_ctr_find(_ta_thread_t *th, uint32_t tag) {
  _ta_ctr_t *chunk = atomic_load_explicit(&th->ctr[tag / TA_CTR_CHUNK], memory_order_relaxed);
  return chunk ? &chunk[tag % TA_CTR_CHUNK] : NULL;
}

/* th's counters for tag, or NULL (no record, or no memory for its chunk):
 * the caller then counts in the shared atomic table. */
static inline _ta_ctr_t *_ta_ctr_of(_ta_thread_t *th, uint32_t tag) {
  if (!th) return NULL;
  _ta_ctr_t *c = _ta_ctr_find(th, tag);
  if (ta_likely(c != NULL)) return c;
  return _ta_ctr_chunk_new(th, tag); /* the first count of a tag in its chunk */
}

/* always inline: the out-of-line counts (a cross-thread free, a large block) are one call, not two */
static inline __attribute__((always_inline)) _ta_ctr_t *_ta_ctr_self(uint32_t tag) { return _ta_ctr_of(_ta_thread_self(), tag); }

/* ---- peaks ----------------------------------------------------------------------- */

/* *slot = v, written only if it differs (a fork child's page not
 * written is not copied). */
static void _ta_store_if_new(_Atomic(uint64_t) *slot, uint64_t v) {
  if (atomic_load_explicit(slot, memory_order_relaxed) != v) atomic_store_explicit(slot, v, memory_order_relaxed);
}

/* Raise *slot to v (a tag's peak or its upper bound): never lowers it. */
static void _ta_peak_raise(_Atomic(uint64_t) *slot, uint64_t v) {
  uint64_t p = atomic_load_explicit(slot, memory_order_relaxed);
  while (v > p && !atomic_compare_exchange_weak_explicit(slot, &p, v, memory_order_relaxed, memory_order_relaxed)) {
  }
}

/* A set's live bytes and high-water mark as another thread reads them:
 * the mark is read again after the headroom, and the pair is taken only
 * if it did not move (its owner moves both, in an order that makes a
 * pair read this way never overstate live bytes: _ta_ctr_rise_many,
 * _ta_ctr_lower). */
static void _ta_ctr_read(_ta_ctr_t *c, int64_t *live, int64_t *high) {
  for (int i = 0;; i++) {
    uint64_t h1 = atomic_load_explicit(&c->high, memory_order_acquire);
    uint64_t d = atomic_load_explicit(&c->headroom, memory_order_acquire);
    uint64_t h2 = atomic_load_explicit(&c->high, memory_order_acquire);
    if (h1 == h2 || i == 8) {
      *live = (int64_t)(h2 - d), *high = (int64_t)h2;
      return;
    }
  }
}

/* Every counter set of tag (each thread record's, and the shared one),
 * without the records' lock: records and chunks are never freed, and
 * are published with a release. */
#define TA_FOR_EACH_CTR(tag, c, ...)                                                            \
  do {                                                                                         \
    _ta_ctr_t *c = &_ta_ctr_fallback[tag];                                                     \
    __VA_ARGS__;                                                                               \
    for (_ta_thread_t *t_ = _ta_threads_first(); t_; t_ = t_->next) {                           \
      _ta_ctr_t *chunk_ = atomic_load_explicit(&t_->ctr[(tag) / TA_CTR_CHUNK], memory_order_acquire); \
      if (!chunk_) continue;                                                                   \
      c = &chunk_[(tag) % TA_CTR_CHUNK];                                                       \
      __VA_ARGS__;                                                                             \
    }                                                                                          \
  } while (0)

/* ---- sums -------------------------------------------------------------------------- */

static _ta_sum_t _ta_tag_sum(uint32_t tag) {
  _ta_sum_t s = {0, 0, 0, 0, 0, 0, 0};
  TA_FOR_EACH_CTR(tag, c, {
    int64_t live, high;
    _ta_ctr_read(c, &live, &high);
    uint64_t a = atomic_load_explicit(&c->alloc_bytes, memory_order_relaxed);
    s.alloc_bytes += a;
    s.free_bytes += a - (uint64_t)live; /* two's complement: exact in the sum */
    s.high += (uint64_t)high;
    s.alloc_blocks += atomic_load_explicit(&c->alloc_blocks, memory_order_relaxed);
    s.free_blocks += atomic_load_explicit(&c->free_blocks, memory_order_relaxed);
    s.alloc_req += atomic_load_explicit(&c->alloc_req, memory_order_relaxed);
    s.free_req += atomic_load_explicit(&c->free_req, memory_order_relaxed);
  });
  return s;
}

/* Raise tag's bounds: live, a live total, the lower bound of its peak;
 * marks, a sum of its sets' marks, the upper (an upper bound of its live
 * bytes until a set passes its mark, which comes back here). Only for a
 * tag held by many: one set's mark is its tag's exact peak, and the
 * bounds stay 0 until a second set comes (_ta_tag_holders_many raises
 * them to that mark), so a forked child, whose rebase lowers the mark,
 * neither reads nor writes them (_ta_books_rebase). */
static void _ta_tag_raise_bounds(uint32_t tag, int64_t live, int64_t marks) {
  if (atomic_load_explicit(&_ta_tag_holders[tag], memory_order_relaxed) != TA_HOLDERS_MANY) return;
  if (live > 0) _ta_peak_raise(&_ta_tag_peak[tag], (uint64_t)live);
  if (marks > 0) _ta_peak_raise(&_ta_tag_peak_upper[tag], (uint64_t)marks);
}

/* Note tag's bounds now, reading only each set's mark and headroom (at
 * rises of a tag held by several sets, before a mark comes down, every
 * 1024th slow path and thread exits; a query notes them from its full
 * sum: _ta_tag_query). */
static void _ta_tag_note(uint32_t tag) {
  if (atomic_load_explicit(&_ta_tag_holders[tag], memory_order_relaxed) != TA_HOLDERS_MANY) return; /* (above) */
  int64_t live = 0, marks = 0;
  TA_FOR_EACH_CTR(tag, c, {
    int64_t l, h;
    _ta_ctr_read(c, &l, &h);
    live += l, marks += h;
  });
  _ta_tag_raise_bounds(tag, live, marks);
}

/* tag is held by more than one counter set from now on (cur: its holders
 * entry as last read). Its sole set's mark, until now the tag's exact
 * peak, becomes both bounds, and the set learns it is one of many. */
static void _ta_tag_holders_many(uint32_t tag, uint64_t cur) {
  while (cur != TA_HOLDERS_MANY) {
    if (atomic_compare_exchange_weak(&_ta_tag_holders[tag], &cur, TA_HOLDERS_MANY)) {
      if (cur != 0) {
        _ta_ctr_t *x = (_ta_ctr_t *)(uintptr_t)cur;
        atomic_store(&x->holder, TA_HOLDER_MANY); /* seq_cst: before its mark is read */
        int64_t h = (int64_t)atomic_load(&x->high);
        if (h > 0) {
          _ta_peak_raise(&_ta_tag_peak[tag], (uint64_t)h);
          _ta_peak_raise(&_ta_tag_peak_upper[tag], (uint64_t)h);
        }
      }
      return;
    }
  }
}

/* ct counts its first bytes: it becomes its tag's sole holder, or one of
 * many. Every path that counts calls this first (a malloc's through
 * _ta_ctr_rise: a fresh set's headroom is 0, so its first malloc rises). */
TA_NOINLINE static void _ta_ctr_register(_ta_ctr_t *ct) {
  if (atomic_load_explicit(&ct->holder, memory_order_relaxed) != TA_HOLDER_NONE) return;
  uint64_t cur = 0;
  if (_ta_budget_of(ct->tag)) { /* a budgeted tag's marks are reservations: held by many */
    atomic_store_explicit(&ct->holder, TA_HOLDER_MANY, memory_order_relaxed);
    _ta_tag_holders_many(ct->tag, atomic_load(&_ta_tag_holders[ct->tag]));
    return;
  }
  if (atomic_compare_exchange_strong(&_ta_tag_holders[ct->tag], &cur, (uint64_t)(uintptr_t)ct)) {
    atomic_store_explicit(&ct->holder, TA_HOLDER_SOLE, memory_order_relaxed);
    return;
  }
  atomic_store_explicit(&ct->holder, TA_HOLDER_MANY, memory_order_relaxed);
  _ta_tag_holders_many(ct->tag, cur);
}

/* A set held by several has risen past its mark (d < 0): the mark rises
 * to its live bytes plus TA_PEAK_SLACK (headroom first: a reader then
 * sees live bytes too low, never too high), and the tag's bounds are
 * noted. Within the slack the set rises unseen: the bound covers it.
 * A budgeted tag's rise is charged to its budgets first (budget.c), with
 * less slack or none if they are near their limits; false if a fail
 * budget refuses it: nothing changed, the caller undoes what it counted.
 * force: charged whatever the budgets say (a count that cannot be undone). */
TA_NOINLINE static bool _ta_ctr_rise_many(_ta_ctr_t *ct, int64_t d, bool force) {
  uint64_t x = (uint64_t)(-d) + TA_PEAK_SLACK;
  unsigned b = _ta_budget_of(ct->tag);
  if (ta_unlikely(b)) {
    if (force) _ta_budget_add(b, (int64_t)(x = (uint64_t)-d));
    else if (!_ta_budget_rise(b, (uint64_t)-d, &x)) return false;
  }
  TA_CTR_RAISE_MARK(ct, x);
  _ta_tag_note(ct->tag);
  return true;
}

/* ct's headroom went below zero (a malloc passed its high-water mark).
 * Its tag's sole holder raises its mark to its live bytes: the mark is
 * the tag's exact peak, to the block, and the next malloc above it comes
 * here again (a few instructions). Both are single adds (headroom first),
 * so a signal handler that allocates in between keeps live bytes exact;
 * it may leave the mark high by the bytes it interrupted. The sole
 * holder's case (true if ct is one) is inline for malloc's fast path
 * (_ta_took_rising). */
static inline bool _ta_ctr_rise_sole(_ta_ctr_t *ct) {
  if (atomic_load_explicit(&ct->holder, memory_order_relaxed) != TA_HOLDER_SOLE) return false;
  int64_t d = (int64_t)atomic_load_explicit(&ct->headroom, memory_order_relaxed);
  if (d < 0) TA_CTR_RAISE_MARK(ct, (uint64_t)-d);
  return true;
}

/* ct passed its mark, or would pass it by ahead bytes more (a growth in
 * place, about to be counted): raise it (above). False if a budget refused
 * the bytes: the caller undoes its count, or does not grow. force: charged
 * whatever the budgets say (a count that cannot be undone). */
static inline bool _ta_ctr_rise_by(_ta_ctr_t *ct, size_t ahead, bool force) {
  if (ta_unlikely(atomic_load_explicit(&ct->holder, memory_order_relaxed) == TA_HOLDER_NONE)) _ta_ctr_register(ct);
  if (_ta_ctr_rise_sole(ct)) return true; /* never budgeted: budgeted tags' sets are many */
  int64_t d = (int64_t)atomic_load_explicit(&ct->headroom, memory_order_relaxed) - (int64_t)ahead;
  return d >= 0 || _ta_ctr_rise_many(ct, d, force);
}

TA_NOINLINE static bool _ta_ctr_rise(_ta_ctr_t *ct) { return _ta_ctr_rise_by(ct, 0, false); }
static void _ta_ctr_rise_forced(_ta_ctr_t *ct) { (void)_ta_ctr_rise_by(ct, 0, true); }

/* Room under this thread's mark of tag for bytes more, made before a
 * block of a budgeted tag grows in place (realloc): the mark rises ahead,
 * charged to the budgets, so the count of the growth does not rise.
 * False if a fail budget refuses: the block must not grow. */
static bool _ta_ctr_admit(uint32_t tag, size_t bytes) {
  _ta_ctr_t *c = _ta_ctr_self(tag);
  return !c || _ta_ctr_rise_by(c, bytes, false); /* the shared counters: charged, never refused */
}

/* A set held by several whose headroom passed TA_PEAK_CAP: the tag's
 * bounds are noted (the sum of marks is about to come down), then its
 * mark comes down to TA_PEAK_SLACK above its live bytes (mark first:
 * _ta_ctr_read). Keeps what a set may rise unseen to about one page. */
TA_NOINLINE static void _ta_ctr_lower(_ta_ctr_t *ct) {
  int64_t d = (int64_t)atomic_load_explicit(&ct->headroom, memory_order_relaxed);
  if (d <= TA_PEAK_CAP) return;
  _ta_tag_note(ct->tag);
  uint64_t x = (uint64_t)(d - TA_PEAK_SLACK);
  TA_CTR_ADD(ct->high, -x);
  atomic_signal_fence(memory_order_seq_cst);
  TA_CTR_ADD(ct->headroom, -x);
  unsigned b = _ta_budget_of(ct->tag);
  if (b) _ta_budget_add(b, -(int64_t)x); /* after the mark: a charge never below the marks */
}

/* Called where a thread takes a slow path, or counts a free out of line. */
static inline void _ta_ctr_cap(_ta_ctr_t *ct) {
  if (ta_unlikely(atomic_load_explicit(&ct->holder, memory_order_relaxed) == TA_HOLDER_MANY &&
                  (int64_t)atomic_load_explicit(&ct->headroom, memory_order_relaxed) > TA_PEAK_CAP))
    _ta_ctr_lower(ct);
}

/* ---- counting out of line ------------------------------------------------------------ */

/* Count in the shared atomic table (no thread record): its live bytes
 * go up by raising its mark, down by raising its headroom, so the mark
 * is no high-water mark, and the tag is held by many. */
static void _ta_count_fallback(uint32_t tag, size_t up, size_t down) {
  _ta_ctr_t *f = &_ta_ctr_fallback[tag];
  _ta_tag_holders_many(tag, atomic_load(&_ta_tag_holders[tag]));
  unsigned b = _ta_budget_of(tag);
  if (b && up) _ta_budget_add(b, (int64_t)up); /* charged, never refused: there is no undo here */
  if (up) atomic_fetch_add_explicit(&f->high, up, memory_order_relaxed);
  if (down) atomic_fetch_add_explicit(&f->headroom, down, memory_order_relaxed);
  if (b && down) _ta_budget_add(b, -(int64_t)down);
}

/* Count a free in c, the calling thread's set (st: its holder state,
 * registered): one add each, and the headroom kept below TA_PEAK_CAP
 * when the tag has other holders (_ta_ctr_cap). */
static inline __attribute__((always_inline)) void _ta_ctr_count_free(_ta_ctr_t *c, uint32_t st, size_t bytes, size_t req) {
  TA_CTR_ADD(c->free_blocks, 1);
  TA_CTR_ADD(c->free_req, req);
  TA_CTR_ADD(c->headroom, bytes);
  if (st == TA_HOLDER_MANY && ta_unlikely((int64_t)atomic_load_explicit(&c->headroom, memory_order_relaxed) > TA_PEAK_CAP))
    _ta_ctr_lower(c);
}

/* Count a block allocated (alloc) or freed by this thread under tag:
 * usable bytes, and the bytes asked for. One copy for each (the caller's
 * constant decides, so neither tests it). False if a budget refused the
 * allocation: nothing is counted, and the caller gives the block back. */
static inline __attribute__((always_inline)) bool _ta_count(uint32_t tag, size_t bytes, size_t req, bool alloc) {
  /* a free on an exiting thread whose record is given up counts in the
   * shared table: a record made for it would stay live for good (no key
   * destructor runs after the C library's own frees) */
  _ta_ctr_t *c = !alloc && ta_unlikely(_ta_tls_exited && _ta_tls_thread == NULL) ? NULL : _ta_ctr_self(tag);
  if (ta_unlikely(c == NULL)) { /* no record: the shared atomic table */
    _ta_ctr_t *f = &_ta_ctr_fallback[tag];
    if (alloc) {
      atomic_fetch_add_explicit(&f->alloc_bytes, bytes, memory_order_relaxed);
      atomic_fetch_add_explicit(&f->alloc_blocks, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&f->alloc_req, req, memory_order_relaxed);
      _ta_count_fallback(tag, bytes, 0);
    } else {
      atomic_fetch_add_explicit(&f->free_blocks, 1, memory_order_relaxed);
      atomic_fetch_add_explicit(&f->free_req, req, memory_order_relaxed);
      _ta_count_fallback(tag, 0, bytes);
    }
    return true;
  }
  uint32_t st = atomic_load_explicit(&c->holder, memory_order_relaxed);
  if (ta_unlikely(st == TA_HOLDER_NONE)) {
    _ta_ctr_register(c);
    st = atomic_load_explicit(&c->holder, memory_order_relaxed);
  }
  if (alloc) {
    TA_CTR_ADD(c->alloc_bytes, bytes);
    TA_CTR_ADD(c->alloc_blocks, 1);
    TA_CTR_ADD(c->alloc_req, req);
    if (TA_CTR_SUB_NEG(c->headroom, bytes) && ta_unlikely(!_ta_ctr_rise(c))) {
      TA_CTR_ADD(c->headroom, bytes); /* refused: as if never counted */
      TA_CTR_ADD(c->alloc_req, -req);
      TA_CTR_ADD(c->alloc_blocks, -1);
      TA_CTR_ADD(c->alloc_bytes, -bytes);
      errno = ENOMEM;
      return false;
    }
  } else {
    _ta_ctr_count_free(c, st, bytes, req);
  }
  return true;
}

TA_NOINLINE static void _ta_count_free(uint32_t tag, size_t bytes, size_t req) { (void)_ta_count(tag, bytes, req, false); }

/* The same from the calling thread's heap h, inline for the common case
 * of a block of the thread's current tag (h's counters, registered: the
 * empty heap's never are): no look-up of the thread's record and its
 * chunk. */
static inline __attribute__((always_inline)) void _ta_count_free_here(_ta_heap_t *h, uint32_t tag, size_t bytes, size_t req) {
  _ta_ctr_t *c = h->ctr;
  if (ta_unlikely(c->tag != tag)) {
    /* A block of another tag (a program that tags its work and frees
     * outside it, or frees another thread's blocks: many_tags, every
     * free): that tag's counters in the heap's thread record, which is
     * the calling thread's (the empty heap has none), if they exist;
     * else the way that makes them, or checks for an exiting thread. */
    c = h->thread ? _ta_ctr_find(h->thread, tag) : NULL;
    if (ta_unlikely(c == NULL)) {
      _ta_count_free(tag, bytes, req);
      return;
    }
  }
  uint32_t st = atomic_load_explicit(&c->holder, memory_order_relaxed);
  if (ta_unlikely(st == TA_HOLDER_NONE)) {
    _ta_count_free(tag, bytes, req);
    return;
  }
  _ta_ctr_count_free(c, st, bytes, req);
}
/* False (errno ENOMEM, nothing counted) if a budget refuses the block. */
TA_NOINLINE static bool _ta_count_alloc(uint32_t tag, size_t bytes, size_t req) { return _ta_count(tag, bytes, req, true); }

static void _ta_ctr_add(_Atomic(uint64_t) *mine, _Atomic(uint64_t) *shared, size_t d) {
  if (mine) TA_CTR_ADD(*mine, d);
  else atomic_fetch_add_explicit(shared, d, memory_order_relaxed);
}

/* A block resized in place: its growth counts as allocated bytes, its
 * shrinking as freed bytes (usable and requested alike); blocks are
 * unchanged. */
TA_NOINLINE static void _ta_count_resize(uint32_t tag, size_t old_bytes, size_t new_bytes, size_t old_req, size_t new_req) {
  _ta_ctr_t *c = _ta_ctr_self(tag), *f = &_ta_ctr_fallback[tag];
  if (c && ta_unlikely(atomic_load_explicit(&c->holder, memory_order_relaxed) == TA_HOLDER_NONE)) _ta_ctr_register(c);
  if (new_bytes > old_bytes) {
    _ta_ctr_add(c ? &c->alloc_bytes : NULL, &f->alloc_bytes, new_bytes - old_bytes);
    if (!c) _ta_count_fallback(tag, new_bytes - old_bytes, 0);
    else if (TA_CTR_SUB_NEG(c->headroom, new_bytes - old_bytes)) _ta_ctr_rise_forced(c); /* grown already */
  } else if (new_bytes < old_bytes) {
    if (!c) _ta_count_fallback(tag, 0, old_bytes - new_bytes);
    else {
      TA_CTR_ADD(c->headroom, old_bytes - new_bytes);
      _ta_ctr_cap(c);
    }
  }
  if (new_req >= old_req) _ta_ctr_add(c ? &c->alloc_req : NULL, &f->alloc_req, new_req - old_req);
  else _ta_ctr_add(c ? &c->free_req : NULL, &f->free_req, old_req - new_req);
}

/* A block of tag that keeps its usable bytes, asked again for new_req
 * bytes instead of old_req, counted in the calling thread's counters of
 * its current tag if it is tag's (registered): the common case of
 * _ta_count_resize, inline (as _ta_count_free_here). False: counted
 * nothing, the caller calls _ta_count_resize. A buffer grown a few bytes
 * at a time by realloc comes here at every call. */
static inline __attribute__((always_inline)) bool _ta_count_req_here(uint32_t tag, size_t old_req, size_t new_req) {
  _ta_ctr_t *c = _ta_tls_heap->ctr;
  if (ta_unlikely(c->tag != tag || atomic_load_explicit(&c->holder, memory_order_relaxed) == TA_HOLDER_NONE)) return false;
  if (new_req >= old_req) TA_CTR_ADD(c->alloc_req, new_req - old_req);
  else TA_CTR_ADD(c->free_req, old_req - new_req);
  return true;
}

static _ta_thread_t *_ta_threads_free_record(void) {
  for (_ta_thread_t *t = _ta_threads_first(); t; t = t->next)
    if (!atomic_load_explicit(&t->live, memory_order_relaxed)) return t;
  return NULL;
}

/* The calling thread's record, created (or an exited thread's reused) on
 * first use; NULL only if no memory. */
static _ta_thread_t *_ta_thread_self_slow(void) {
  if (!_ta_ensure_init()) return NULL;
  _ta_mutex_lock(&_ta_threads_lock);
  _ta_thread_t *th = _ta_threads_free_record();
  if (th) atomic_store_explicit(&th->live, true, memory_order_relaxed);
  _ta_mutex_unlock(&_ta_threads_lock);
  if (!th) {
    th = _ta_meta_alloc(sizeof(_ta_thread_t));
    if (!th) return NULL;
    atomic_store_explicit(&th->live, true, memory_order_relaxed);
    _ta_mutex_lock(&_ta_threads_lock);
    th->next = _ta_threads_first();
    atomic_store_explicit(&_ta_books->threads_head, (uint64_t)(uintptr_t)th, memory_order_release);
    _ta_mutex_unlock(&_ta_threads_lock);
  }
  /* A record left by a thread that vanished in a fork keeps its counts;
   * its heap stays as it was (its pages are freed into remotely). */
  th->heap = NULL;
  if (!_ta_ctr_of(th, TA_TAG_UNTAGGED)) { /* the counters of the default tag, always there */
    atomic_store_explicit(&th->live, false, memory_order_relaxed);
    return NULL;
  }
  th->tag = TA_TAG_UNTAGGED;
  th->depth = 0;
  _ta_tls_thread = th;
  /* May allocate (keys >= 32); the record is already in place for that. */
  pthread_setspecific(_ta_key, th);
  return th;
}

/* ---- switching tags ------------------------------------------------------------ */

/* Make tag current on this thread: its heap's counters become the tag's
 * (one pointer store, which also says the tag malloc writes into blocks).
 * False, with the tag unchanged, only if the counters cannot be had (no
 * memory for a chunk of them). */
static bool _ta_use_tag(_ta_thread_t *th, uint32_t tag) {
  _ta_ctr_t *c = _ta_ctr_of(th, tag);
  if (ta_unlikely(!c)) return false;
  th->tag = tag;
  _ta_heap_t *h = th->heap;
  if (h) h->ctr = c;
  return true;
}

/* A tag's peak of live bytes, between *lower and *upper (equal: exact),
 * from s, its sums now. Held by one set, the set's mark is the peak.
 * Held by several, the peak is at least the highest live total noted
 * (at rises, queries and thread exits) and at most the highest sum of
 * marks noted (at rises, before marks come down) or now. The Go reader
 * (books/region.go, peakBounds) computes the same from the books. */
static void _ta_tag_peak_of(uint32_t tag, const _ta_sum_t *s, uint64_t *lower, uint64_t *upper) {
  uint64_t live = s->alloc_bytes - s->free_bytes, noted = atomic_load(&_ta_tag_peak[tag]);
  uint64_t lo = noted > live ? noted : live, hi = s->high;
  uint64_t holders = atomic_load(&_ta_tag_holders[tag]);
  if ((int64_t)hi < (int64_t)lo) hi = lo;
  if (holders != TA_HOLDERS_MANY) { /* one set (or none): its mark */
    *lower = *upper = hi;
    return;
  }
  uint64_t up = atomic_load(&_ta_tag_peak_upper[tag]);
  *lower = lo, *upper = up > hi ? up : hi;
}

/* ---- the public API ------------------------------------------------------------------- */

TA_COLD static void _ta_bad_tag(const char *fn, const char *name) {
  static _Atomic(int) warned;
  if (atomic_fetch_add(&warned, 1) < 8)
    _ta_warn("%s: invalid tag name %s%s%s (a tag name is 1 to %u bytes, levels separated by one '/', none \".\" or \"..\"); the tag is unchanged", fn,
             name ? "\"" : "", name ? name : "NULL", name ? "\"" : "", (unsigned)TA_TAG_NAME_MAX);
}

/* The slot of the heap's tag_names for a name at address name (types.h):
 * the address's top bits after a multiply, so names laid out at any
 * stride spread over the slots. */
static inline size_t _ta_name_slot(const char *name) {
  return (size_t)(((uintptr_t)name * 0x9e3779b97f4a7c15ull) >> (64 - TA_TAG_NAME_BITS));
}

/* Does name hold the string interned (a registered tag's name)? Stops at
 * the first byte that differs, so it never reads past the end of name,
 * whatever the string there now is (a reused buffer). */
static inline bool _ta_name_is(const char *interned, const char *name) {
  for (size_t i = 0;; i++) {
    if (interned[i] != name[i]) return false;
    if (interned[i] == 0) return true;
  }
}

/* The id of name (valid, n bytes, of hash) for thread th, noted in its
 * heap's tag_names: a caller that sets the same string again skips the
 * scan, the hash and the registry (tagalloc_set_tag). The overflow tag
 * is not noted: its name is not the caller's. */
static uint32_t _ta_tag_id_cached(_ta_thread_t *th, const char *name, size_t n, uint32_t hash) {
  uint32_t id = _ta_tag_intern(name, n, hash);
  _ta_heap_t *h = th->heap;
  if (h && id != TA_TAG_OVERFLOW) h->tag_names[_ta_name_slot(name)] = (uint16_t)(id + 1);
  return id;
}

/* The id + 1 of the tag called name if the calling thread's heap h noted
 * it for name's address (_ta_tag_id_cached) and the bytes there are still
 * that tag's name; else 0. h is &_ta_heap_empty (no slot filled) until
 * the thread's first malloc. */
static inline uint32_t _ta_tag_id_noted(const _ta_heap_t *h, const char *name) {
  if (ta_unlikely(name == NULL)) return 0;
  uint32_t e = h->tag_names[_ta_name_slot(name)];
  if (e == 0 || !_ta_name_is(_ta_tag_names[e - 1].name, name)) return 0;
  ta_assert(h->thread == _ta_tls_thread);
  return e;
}

TA_EXPORT int tagalloc_set_tag(const char *name) {
  _ta_heap_t *h = _ta_tls_heap;
  uint32_t e = _ta_tag_id_noted(h, name);
  if (ta_likely(e != 0)) return _ta_use_tag(h->thread, e - 1) ? 0 : ENOMEM;
  uint32_t hash;
  size_t n = _ta_tag_scan(name, &hash);
  if (!n) {
    _ta_bad_tag("tagalloc_set_tag", name);
    return EINVAL;
  }
  _ta_thread_t *th = _ta_thread_self();
  if (!th) return ENOMEM;
  return _ta_use_tag(th, _ta_tag_id_cached(th, name, n, hash)) ? 0 : ENOMEM;
}

TA_EXPORT void SetHeapBlockTagForThread(const char *tag) { (void)tagalloc_set_tag(tag); }

TA_EXPORT void ClearHeapBlockTagForThread(void) {
  _ta_thread_t *th = _ta_tls_thread;
  if (th) (void)_ta_use_tag(th, TA_TAG_UNTAGGED); /* chunk 0 exists: the record's first */
}

/* Push tag on thread th's stack (it has room): 0, or ENOMEM with the
 * tag unchanged (_ta_use_tag). */
static int _ta_push(_ta_thread_t *th, uint32_t tag) {
  uint32_t prev = th->tag;
  if (!_ta_use_tag(th, tag)) return ENOMEM;
  th->stack[th->depth++] = prev;
  return 0;
}

TA_EXPORT int tagalloc_push_tag(const char *name) {
  _ta_heap_t *h = _ta_tls_heap;
  uint32_t e = _ta_tag_id_noted(h, name);
  if (ta_likely(e != 0 && h->thread->depth < TA_TAG_STACK)) return _ta_push(h->thread, e - 1); /* else below, which names the error */
  uint32_t hash;
  size_t n = _ta_tag_scan(name, &hash);
  if (!n) {
    _ta_bad_tag("tagalloc_push_tag", name);
    return EINVAL;
  }
  _ta_thread_t *th = _ta_thread_self();
  if (!th) return ENOMEM;
  if (th->depth >= TA_TAG_STACK) {
    _ta_warn("tagalloc_push_tag(\"%s\"): tags nested deeper than %u", name, (unsigned)TA_TAG_STACK);
    return EOVERFLOW;
  }
  return _ta_push(th, _ta_tag_id_cached(th, name, n, hash));
}

TA_EXPORT void tagalloc_pop_tag(void) {
  _ta_thread_t *th = _ta_tls_thread;
  if (!th || th->depth == 0) {
    _ta_warn("tagalloc_pop_tag: no tag pushed on this thread");
    return;
  }
  (void)_ta_use_tag(th, th->stack[--th->depth]); /* its counters exist: it was current */
}

/* The figures of the tag called name, noted (one walk of the thread
 * records), and its peak's bounds: 0, EINVAL, ENOMEM or ENOENT. */
static int _ta_tag_query(const char *name, _ta_sum_t *s, uint64_t *lower, uint64_t *upper) {
  uint32_t hash;
  size_t n = _ta_tag_scan(name, &hash);
  if (!n) return EINVAL;
  if (!_ta_ensure_init()) return ENOMEM;
  int32_t id = _ta_tag_find_hashed(name, n, hash);
  if (id < 0) return ENOENT;
  *s = _ta_tag_sum((uint32_t)id);
  _ta_tag_raise_bounds((uint32_t)id, (int64_t)(s->alloc_bytes - s->free_bytes), (int64_t)s->high);
  _ta_tag_peak_of((uint32_t)id, s, lower, upper);
  return 0;
}

TA_EXPORT int tagalloc_tag_stats(const char *name, tagalloc_tag_stats_t *out) {
  if (!out) return EINVAL;
  _ta_sum_t s;
  uint64_t lower, upper;
  int rc = _ta_tag_query(name, &s, &lower, &upper);
  if (rc) return rc;
  out->live_bytes = s.alloc_bytes - s.free_bytes;
  out->live_blocks = s.alloc_blocks - s.free_blocks;
  out->alloc_bytes = s.alloc_bytes;
  out->alloc_blocks = s.alloc_blocks;
  out->live_requested_bytes = _ta_opt.requested ? s.alloc_req - s.free_req : (size_t)-1;
  out->peak_live_bytes = lower;
  return 0;
}

TA_EXPORT int tagalloc_tag_peak(const char *name, size_t *lower, size_t *upper) {
  if (!lower || !upper) return EINVAL;
  _ta_sum_t s;
  uint64_t lo, up;
  int rc = _ta_tag_query(name, &s, &lo, &up);
  if (rc) return rc;
  *lower = lo, *upper = up;
  return 0;
}

/* ---- threads created inside a tagged region inherit the tag -------------------------- */

typedef struct {
  void *(*start)(void *);
  void *arg;
  uint32_t tag;
} _ta_start_t;

static void *_ta_thread_start(void *p) {
  _ta_start_t s = *(_ta_start_t *)p;
  _ta_free(p);
  _ta_thread_t *th = _ta_thread_self();
  if (th && !_ta_use_tag(th, s.tag)) _ta_warn("a thread could not inherit its creator's tag (no memory for its counters)");
  return s.start(s.arg);
}

/* The C library's function name, which ours wraps (direct: the same,
 * for builds whose names are prefixed and wrap nothing), found once into
 * *slot; NULL if it is not there. version, if not NULL, is the symbol
 * version to take where the library has more than one: x86-64's has two
 * pthread_cond_wait (GLIBC_2.2.5, for the condition variables of before
 * 2.3.2, and GLIBC_2.3.2), and the old one would take the program's for
 * old ones and write over them; dlvsym asks for the one programs link
 * against rather than leave it to dlsym (which finds it too, glibc 2.36).
 * A library without that version (aarch64's starts at 2.17) has only the
 * one dlsym finds. */
static void *_ta_real_fn(_Atomic(void *) *slot, const char *name, const char *version, void *direct) {
  void *real = atomic_load_explicit(slot, memory_order_acquire);
  if (!real) {
#ifdef TA_PREFIX
    (void)name;
    (void)version;
    real = direct;
#else
    (void)direct;
    real = version ? dlvsym(RTLD_NEXT, name, version) : NULL;
    if (!real) real = dlsym(RTLD_NEXT, name);
#endif
    if (real) atomic_store_explicit(slot, real, memory_order_release);
  }
  return real;
}

typedef int (*_ta_pthread_create_t)(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
static _Atomic(void *) _ta_real_pthread_create;

/* The C library's pthread_create (ours wraps it), or NULL. */
static _ta_pthread_create_t _ta_pthread_create_real(void) {
  return (_ta_pthread_create_t)_ta_real_fn(&_ta_real_pthread_create, "pthread_create", NULL, (void *)pthread_create);
}

TA_EXPORT int TA_NAME(pthread_create)(pthread_t *t, const pthread_attr_t *attr, void *(*start)(void *), void *arg) {
  _ta_pthread_create_t real = _ta_pthread_create_real();
  if (!real) return EAGAIN;
  uint32_t tag = _ta_current_tag();
  if (tag == TA_TAG_UNTAGGED) return real(t, attr, start, arg);
  /* The hand-over record is ours, not the program's: charge it to the
   * default tag, not to the region's. */
  _ta_thread_t *th = _ta_tls_thread;
  (void)_ta_use_tag(th, TA_TAG_UNTAGGED); /* both tags' counters exist: they were current */
  _ta_start_t *s = _ta_malloc(sizeof(*s));
  (void)_ta_use_tag(th, tag);
  if (!s) return EAGAIN;
  *s = (_ta_start_t){start, arg, tag};
  int rc = real(t, attr, _ta_thread_start, s);
  if (rc != 0) _ta_free(s);
  return rc;
}

/* A thread about to wait for another is idle for a while: it gives back
 * its empty pages, the direct ones too (an idle thread never walks its
 * heap, and kept a page of every class it had used), and pushes the
 * remote frees it holds: it walks its whole heap (heap.c, _ta_heap_idle
 * with whole; a join is rare, so unspaced). A main thread that
 * allocates and frees, then starts a worker and joins it, held them for
 * the worker's whole run: simple's peak RSS 3.7-3.8 -> 3.4-3.5 MiB
 * (glibc 2.9). */
typedef int (*_ta_pthread_join_t)(pthread_t, void **);
static _Atomic(void *) _ta_real_pthread_join;

TA_EXPORT int TA_NAME(pthread_join)(pthread_t t, void **ret) {
  _ta_pthread_join_t real = (_ta_pthread_join_t)_ta_real_fn(&_ta_real_pthread_join, "pthread_join", NULL, (void *)pthread_join);
  if (!real) return EINVAL;
  _ta_heap_idle(_ta_tls_heap, true);
  return real(t, ret);
}

/* A thread about to wait on a condition variable may sleep long: it gives
 * back the pages it keeps for its next mallocs first (heap.c,
 * _ta_heap_idle: only if it allocated since, and spaced so that a thread
 * waiting for every item of a queue does not give and take its pages at
 * every item). The purger's own waits take the C library's directly
 * (_ta_cond_wait_plain). pthread_cond_clockwait (glibc 2.30 on) is what
 * C++'s condition_variable::wait_for and wait_until call; under a C
 * library without it, ours says EINVAL (a program linked against it could
 * not have started there, and one that looks it up finds ours). */
#define TA_COND_VERSION "GLIBC_2.3.2" /* the condition variables of glibc 2.3.2 on */
/* A wait's function in the C library (NULL if it has none: errno
 * ENOSYS, for the wrappers that report by errno), after the idle point
 * (heap.c, _ta_heap_idle) if idle: every wait wrapper below is one. */
static void *_ta_wait_real(_Atomic(void *) *slot, const char *name, const char *version, void *direct, bool idle) {
  void *real = _ta_real_fn(slot, name, version, direct);
  if (!real) {
    errno = ENOSYS;
    return NULL;
  }
  if (idle) _ta_heap_idle(_ta_tls_heap, false);
  return real;
}

typedef int (*_ta_cond_wait_t)(pthread_cond_t *, pthread_mutex_t *);
typedef int (*_ta_cond_timedwait_t)(pthread_cond_t *, pthread_mutex_t *, const struct timespec *);
static _Atomic(void *) _ta_real_cond_wait, _ta_real_cond_timedwait;

static _ta_cond_wait_t _ta_cond_wait_real(bool idle) {
  return (_ta_cond_wait_t)_ta_wait_real(&_ta_real_cond_wait, "pthread_cond_wait", TA_COND_VERSION, (void *)pthread_cond_wait, idle);
}

static int _ta_cond_wait_plain(pthread_cond_t *c, pthread_mutex_t *m) {
  _ta_cond_wait_t real = _ta_cond_wait_real(false);
  return real ? real(c, m) : EINVAL;
}

TA_EXPORT int TA_NAME(pthread_cond_wait)(pthread_cond_t *c, pthread_mutex_t *m) {
  _ta_cond_wait_t real = _ta_cond_wait_real(true);
  return real ? real(c, m) : EINVAL;
}

TA_EXPORT int TA_NAME(pthread_cond_timedwait)(pthread_cond_t *c, pthread_mutex_t *m, const struct timespec *at) {
  _ta_cond_timedwait_t real = (_ta_cond_timedwait_t)_ta_wait_real(&_ta_real_cond_timedwait, "pthread_cond_timedwait", TA_COND_VERSION,
                                                                  (void *)pthread_cond_timedwait, true);
  return real ? real(c, m, at) : EINVAL;
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 30) /* its headers declare it from 2.30 */
typedef int (*_ta_cond_clockwait_t)(pthread_cond_t *, pthread_mutex_t *, clockid_t, const struct timespec *);
static _Atomic(void *) _ta_real_cond_clockwait;

TA_EXPORT int TA_NAME(pthread_cond_clockwait)(pthread_cond_t *c, pthread_mutex_t *m, clockid_t clock, const struct timespec *at) {
  _ta_cond_clockwait_t real = (_ta_cond_clockwait_t)_ta_wait_real(&_ta_real_cond_clockwait, "pthread_cond_clockwait", NULL,
                                                                  (void *)pthread_cond_clockwait, true);
  return real ? real(c, m, clock, at) : EINVAL;
}
#endif

/* Other waits that may sleep long are idle points as the condition
 * variables' are (heap.c, _ta_heap_idle: spaced, and only if there may be
 * something to give): a semaphore's (CPython's locks and queues wait in
 * sem_clockwait or sem_timedwait, a pool's workers may in sem_wait) and
 * an event loop's epoll_wait (redis, libuv). A thread asleep in one held
 * the empty pages it keeps for its next mallocs, and the blocks of other
 * threads' pages it holds to push later, which kept those pages from
 * being emptied (the purger's, arena.c). An epoll_wait with a zero
 * timeout does not wait: no idle point. Not poll, select or nanosleep:
 * those are async-signal-safe (poll, by POSIX) or usual in a handler,
 * and a handler that interrupted a malloc must not walk its heap. A C
 * library without one of these functions gives its caller ENOSYS. */
typedef int (*_ta_sem_wait_t)(sem_t *);
typedef int (*_ta_sem_timedwait_t)(sem_t *, const struct timespec *);
typedef int (*_ta_epoll_wait_t)(int, struct epoll_event *, int, int);
typedef int (*_ta_epoll_pwait_t)(int, struct epoll_event *, int, int, const sigset_t *);
static _Atomic(void *) _ta_real_sem_wait, _ta_real_sem_timedwait, _ta_real_epoll_wait, _ta_real_epoll_pwait;

/* A semaphore free at once is taken without waiting: no idle point. A
 * lock that is a semaphore (CPython's: every `with lock`, and the import
 * machinery's module locks) is mostly free, and each of its waits was a
 * give-back of the pages the next mallocs took again: python_bench 59.2k
 * -> 62.2k faults, 138.6 -> 140.6 MiB. sem_trywait is a compare-and-swap
 * in the C library, no system call. As glibc's waits do before they take
 * a free semaphore: a deadline or clock it refuses goes to the C
 * library's wait (EINVAL, whatever the count), and a pending cancellation
 * is acted on (these waits are cancellation points even when they do not
 * wait). errno stays as it was, whether the try takes it or not. */
static bool _ta_sem_idle(sem_t *sem, const struct timespec *at, clockid_t clock) {
  if (at && (at->tv_nsec < 0 || at->tv_nsec >= 1000000000 || (clock != CLOCK_REALTIME && clock != CLOCK_MONOTONIC))) return true;
  pthread_testcancel();
  int e = errno;
  bool busy = sem_trywait(sem) != 0;
  errno = e; /* its EAGAIN is ours, not the caller's */
  return busy;
}

TA_EXPORT int TA_NAME(sem_wait)(sem_t *sem) {
  if (!_ta_sem_idle(sem, NULL, CLOCK_REALTIME)) return 0;
  _ta_sem_wait_t real = (_ta_sem_wait_t)_ta_wait_real(&_ta_real_sem_wait, "sem_wait", NULL, (void *)sem_wait, true);
  return real ? real(sem) : -1;
}

TA_EXPORT int TA_NAME(sem_timedwait)(sem_t *sem, const struct timespec *at) {
  if (!_ta_sem_idle(sem, at, CLOCK_REALTIME)) return 0;
  _ta_sem_timedwait_t real = (_ta_sem_timedwait_t)_ta_wait_real(&_ta_real_sem_timedwait, "sem_timedwait", NULL, (void *)sem_timedwait, true);
  return real ? real(sem, at) : -1;
}

#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 30) /* its headers declare it from 2.30 */
typedef int (*_ta_sem_clockwait_t)(sem_t *, clockid_t, const struct timespec *);
static _Atomic(void *) _ta_real_sem_clockwait;

TA_EXPORT int TA_NAME(sem_clockwait)(sem_t *sem, clockid_t clock, const struct timespec *at) {
  if (!_ta_sem_idle(sem, at, clock)) return 0;
  _ta_sem_clockwait_t real = (_ta_sem_clockwait_t)_ta_wait_real(&_ta_real_sem_clockwait, "sem_clockwait", NULL, (void *)sem_clockwait, true);
  return real ? real(sem, clock, at) : -1;
}
#endif

TA_EXPORT int TA_NAME(epoll_wait)(int fd, struct epoll_event *ev, int max, int timeout) {
  _ta_epoll_wait_t real = (_ta_epoll_wait_t)_ta_wait_real(&_ta_real_epoll_wait, "epoll_wait", NULL, (void *)epoll_wait, timeout != 0);
  return real ? real(fd, ev, max, timeout) : -1;
}

TA_EXPORT int TA_NAME(epoll_pwait)(int fd, struct epoll_event *ev, int max, int timeout, const sigset_t *mask) {
  _ta_epoll_pwait_t real = (_ta_epoll_pwait_t)_ta_wait_real(&_ta_real_epoll_pwait, "epoll_pwait", NULL, (void *)epoll_pwait, timeout != 0);
  return real ? real(fd, ev, max, timeout, mask) : -1;
}

/* ---- the accounting identity ------------------------------------------------------------ */

/* What the heap holds, per tag, found by walking it (the arena's page
 * descriptors and the huge table, never the books): small spans count
 * their used blocks less those other threads freed and the owner has not
 * collected yet (or that they hold, to push later), large spans and huge
 * blocks count whole. Requested bytes only with TAGALLOC_REQUESTED. Into
 * the static arrays below (one caller at a time: check_books, or a forked
 * child before it runs anything). */
TA_COLD_BSS static uint64_t _ta_walk_bytes[TA_TAG_SLOTS];
TA_COLD_BSS static uint64_t _ta_walk_blocks[TA_TAG_SLOTS];
TA_COLD_BSS static uint64_t _ta_walk_req[TA_TAG_SLOTS];

static void _ta_walk_heap(void) {
  static uint8_t freed[4096 / 8];
  memset(_ta_walk_bytes, 0, sizeof _ta_walk_bytes);
  memset(_ta_walk_blocks, 0, sizeof _ta_walk_blocks);
  memset(_ta_walk_req, 0, sizeof _ta_walk_req);
  _ta_mutex_lock(&_ta_arena_lock);
  size_t na = atomic_load(&_ta_narenas);
  for (size_t ai = 0; ai < na; ai++) {
    _ta_arena_t *a = &_ta_arenas[ai];
    for (size_t i = 0; i < a->top;) {
      _ta_page_t *h = &a->pages[i];
      size_t np = h->npages ? h->npages : 1;
      if (h->kind == TA_KIND_SMALL) {
        /* live: carved and on neither free list; each is its tag's */
        uintptr_t xf = atomic_load(&h->xthread_free);
        if (_ta_xf_gone(xf)) {
          i += np; /* every block came back, the list purged with the pages (arena.c) */
          continue;
        }
        memset(freed, 0, sizeof freed);
        const _ta_block_t *lists[2] = {h->free, _ta_xf_list(xf)};
        for (int l = 0; l < 2; l++)
          for (const _ta_block_t *b = lists[l]; b; b = b->next) {
            size_t k = _ta_block_index(h, b);
            freed[k / 8] |= (uint8_t)(1u << (k % 8));
          }
        for (size_t k = 0; k < h->capacity; k++) {
          if (freed[k / 8] & (1u << (k % 8))) continue;
          uint32_t tag = _ta_block_tag_at(h, k);
          if (tag >= TA_TAG_SLOTS) _ta_fatal("page %p: block %zu has tag %u, out of range", h->start, k, tag);
          _ta_walk_bytes[tag] += h->block_size;
          _ta_walk_blocks[tag]++;
          if (h->slop) _ta_walk_req[tag] += h->block_size - _ta_slop_get(h, k);
        }
      } else if (h->kind == TA_KIND_LARGE) {
        _ta_walk_bytes[h->tag] += np << TA_PAGE_SHIFT;
        _ta_walk_blocks[h->tag]++;
        _ta_walk_req[h->tag] += h->requested;
      }
      i += np;
    }
  }
  _ta_mutex_unlock(&_ta_arena_lock);
  _ta_mutex_lock(&_ta_huge_lock);
  for (size_t i = 0; i < _ta_huge_cap; i++) {
    _ta_huge_t *e = &_ta_huge_tab[i];
    if (e->addr <= TA_HUGE_DELETED) continue;
    _ta_walk_bytes[e->tag] += e->mapped;
    _ta_walk_blocks[e->tag]++;
    _ta_walk_req[e->tag] += e->requested;
  }
  _ta_mutex_unlock(&_ta_huge_lock);
  /* blocks heaps hold to push to their pages later: in use in their
   * pages, free in the books (page.c, remote frees in batches) */
  _ta_mutex_lock(&_ta_heaps_lock);
  for (_ta_heap_t *hp = _ta_heaps; hp; hp = hp->hnext)
    for (unsigned c = 0; c < TA_DENSE_CLASSES; c++) {
      const _ta_rchain_t *s = &hp->rchain[c];
      for (const _ta_block_t *b = s->pg ? s->head : NULL; b; b = b->next) {
        size_t k = _ta_block_index(s->pg, b);
        uint32_t tag = _ta_block_tag_at(s->pg, k);
        _ta_walk_bytes[tag] -= s->pg->block_size;
        _ta_walk_blocks[tag]--;
        if (s->pg->slop) _ta_walk_req[tag] -= s->pg->block_size - _ta_slop_get(s->pg, k);
      }
    }
  _ta_mutex_unlock(&_ta_heaps_lock);
#if TA_CHECK
  _ta_check_walk_quarantine(_ta_walk_bytes, _ta_walk_blocks, _ta_walk_req); /* free in the books */
#endif
}

/* In a child forked while other threads allocated: its books were copied
 * before the fork, so other threads' counts may be a few operations off
 * what the heap holds (the heap itself is exact: fork copied it at once).
 * Bring every tag's live figures in line with a walk of the heap, through
 * the fallback counters (cumulative figures begin anew after it:
 * _ta_books_rebase). */
static void _ta_books_resync(void) {
  _ta_walk_heap();
  uint32_t n = atomic_load(&_ta_books->tag_count);
  for (uint32_t id = 0; id < TA_TAG_SLOTS; id++) {
    if (id >= n && id != TA_TAG_OVERFLOW) continue;
    _ta_sum_t s = _ta_tag_sum(id);
    _ta_ctr_t *f = &_ta_ctr_fallback[id];
    uint64_t live = s.alloc_bytes - s.free_bytes, blocks = s.alloc_blocks - s.free_blocks, req = s.alloc_req - s.free_req;
    if (_ta_walk_bytes[id] != live) { /* the shared set's mark is no mark: the tag is held by many */
      _ta_tag_holders_many(id, atomic_load(&_ta_tag_holders[id]));
      if (_ta_walk_bytes[id] > live) {
        TA_CTR_ADD(f->alloc_bytes, _ta_walk_bytes[id] - live);
        TA_CTR_ADD(f->high, _ta_walk_bytes[id] - live);
      } else {
        TA_CTR_ADD(f->headroom, live - _ta_walk_bytes[id]);
      }
    }
    if (_ta_walk_blocks[id] > blocks) TA_CTR_ADD(f->alloc_blocks, _ta_walk_blocks[id] - blocks);
    else TA_CTR_ADD(f->free_blocks, blocks - _ta_walk_blocks[id]);
    if (_ta_opt.requested) {
      if (_ta_walk_req[id] > req) TA_CTR_ADD(f->alloc_req, _ta_walk_req[id] - req);
      else TA_CTR_ADD(f->free_req, req - _ta_walk_req[id]);
    }
  }
}

/* Set c to hold live bytes in blocks (req requested bytes) as allocated
 * and nothing freed, its mark at them (0, 0, 0: cleared). Each value is
 * stored only where it differs: a page a fork child writes is a
 * copy-on-write fault, at every fork. */
static void _ta_ctr_rebase(_ta_ctr_t *c, uint64_t live, uint64_t blocks, uint64_t req) {
  _ta_store_if_new(&c->alloc_bytes, live);
  _ta_store_if_new(&c->alloc_blocks, blocks);
  _ta_store_if_new(&c->alloc_req, req);
  _ta_store_if_new(&c->high, live);
  _ta_store_if_new(&c->headroom, 0);
  _ta_store_if_new(&c->free_blocks, 0);
  _ta_store_if_new(&c->free_req, 0);
}

/* A forked child's books begin with its life (after _ta_books_resync, or
 * with the copy exact: no other thread). It holds what it inherited, so
 * each tag's blocks live at the fork count as allocated at its birth and
 * nothing as freed, and its peak starts at them: without this its
 * cumulative figures were its parent's history, counted again in every
 * child (600 bash subshells: 857 MiB "allocated in all", the parent 1.5),
 * and its peak the parent's.
 *
 * A tag one set has held alone (and no resync corrected: resynced) is
 * rebased in that set, its sole holder still: nothing else of the tag
 * was ever written, neither the other sets, the shared one nor the
 * peak's bounds (_ta_tag_raise_bounds), and reading one of their pages,
 * never touched in the parent, would be a fault (spawn's children took
 * 2-3 more each). Any other tag is summed over its sets, which are
 * cleared, and its inherited blocks written into one: the surviving
 * thread's own set if it has one (then the sole holder: the child's peak
 * is exact from here), else the shared set (held by many, as a budgeted
 * tag always is). A tag nothing holds starts with no holder. The
 * overflow tag is looked at once it was handed out. */
static void _ta_books_rebase(bool resynced) {
  _ta_thread_t *self = _ta_tls_thread;
  uint32_t n = atomic_load(&_ta_books->tag_count);
  for (uint32_t id = 0; id < TA_TAG_SLOTS; id++) {
    if (id >= n && (id != TA_TAG_OVERFLOW || !atomic_load_explicit(&_ta_overflow_handed, memory_order_relaxed))) continue;
    uint64_t holders = atomic_load(&_ta_tag_holders[id]);
    if (holders == 0) continue; /* never counted: a set's first count, the shared set's and the resync's make it held */
    if (!resynced && holders != TA_HOLDERS_MANY) {
      _ta_ctr_t *sole = (_ta_ctr_t *)(uintptr_t)holders;
      int64_t live, high;
      _ta_ctr_read(sole, &live, &high);
      _ta_ctr_rebase(sole, (uint64_t)live, atomic_load(&sole->alloc_blocks) - atomic_load(&sole->free_blocks),
                     atomic_load(&sole->alloc_req) - atomic_load(&sole->free_req));
      continue;
    }
    _ta_sum_t s = _ta_tag_sum(id);
    uint64_t live = s.alloc_bytes - s.free_bytes, blocks = s.alloc_blocks - s.free_blocks, req = s.alloc_req - s.free_req;
    _ta_ctr_t *to = NULL;
    uint32_t holder = TA_HOLDER_NONE;
    if (blocks || live || req) {
      to = self && !_ta_budget_of(id) ? _ta_ctr_find(self, id) : NULL;
      holder = to ? TA_HOLDER_SOLE : TA_HOLDER_MANY;
      if (!to) to = &_ta_ctr_fallback[id];
    }
    TA_FOR_EACH_CTR(id, c, {
      bool mine = c == to;
      _ta_ctr_rebase(c, mine ? live : 0, mine ? blocks : 0, mine ? req : 0);
      if (c != &_ta_ctr_fallback[id] && atomic_load_explicit(&c->holder, memory_order_relaxed) != (mine ? holder : TA_HOLDER_NONE))
        atomic_store_explicit(&c->holder, mine ? holder : TA_HOLDER_NONE, memory_order_relaxed);
    });
    _ta_store_if_new(&_ta_tag_holders[id], holder == TA_HOLDER_SOLE ? (uint64_t)(uintptr_t)to : holder == TA_HOLDER_MANY ? TA_HOLDERS_MANY : 0);
    _ta_store_if_new(&_ta_tag_peak[id], holder == TA_HOLDER_MANY ? live : 0); /* held by one: its mark */
    _ta_store_if_new(&_ta_tag_peak_upper[id], holder == TA_HOLDER_MANY ? live : 0);
  }
}

/* Check that, for every tag, the live bytes and blocks found in the heap
 * (_ta_walk_heap) equal the books (alloc - free over every thread). Only
 * exact when no other thread is allocating or freeing: a test calls it
 * after joining its threads. Aborts with the first tag that differs;
 * returns the number of tags checked. */
TA_EXPORT size_t tagalloc_check_books(void) {
  if (atomic_load(&_ta_init_state) < 2) return 0;
  _ta_walk_heap();
  size_t checked = 0;
  uint32_t n = atomic_load(&_ta_books->tag_count);
  for (uint32_t id = 0; id < TA_TAG_SLOTS; id++) {
    if (id >= n && id != TA_TAG_OVERFLOW) continue;
    _ta_sum_t s = _ta_tag_sum(id);
    uint64_t live = s.alloc_bytes - s.free_bytes, blocks = s.alloc_blocks - s.free_blocks;
    if (live != _ta_walk_bytes[id] || blocks != _ta_walk_blocks[id])
      _ta_fatal("books of tag \"%s\": %zu bytes in %zu blocks, but the heap holds %zu bytes in %zu blocks",
                _ta_tag_names[id].name, (size_t)live, (size_t)blocks, (size_t)_ta_walk_bytes[id], (size_t)_ta_walk_blocks[id]);
    if (_ta_opt.requested && s.alloc_req - s.free_req != _ta_walk_req[id])
      _ta_fatal("books of tag \"%s\": %zu requested bytes, but the heap's live blocks asked for %zu",
                _ta_tag_names[id].name, (size_t)(s.alloc_req - s.free_req), (size_t)_ta_walk_req[id]);
    checked++;
  }
  return checked;
}
