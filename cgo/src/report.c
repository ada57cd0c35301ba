/* report.c: memory reporters, about:memory's model, in C. A program
 * registers reporters (callbacks); tagalloc_collect_reports runs them, and
 * each says what it holds as (path, kind, units, amount, description). A
 * heap reporter measures its blocks with tagalloc_report_block (about:
 * memory's MallocSizeOf), which returns a block's usable size and counts it
 * as reported under the block's tag; readers subtract the reported bytes
 * from the tags' lines, so heap-unclassified is what no reporter claimed.
 *
 * The collection publishes into the books region (books.c): the reports
 * table (at most TA_REPORTS_MAX items) and, per tag, the heap bytes that
 * tagalloc_report_block measured during the collection. In the stack
 * sampling build each collection and each report of a sampled block is an
 * event too (COLLECT, REPORT), from which the dark-matter report (DMD's:
 * unreported, once- and twice-reported blocks by stack) is made.
 *
 * Reporters run on the caller's thread, under _ta_report_lock (outermost:
 * no allocator lock is held, so reporters may allocate). When the first
 * reporter is registered an atexit handler is registered too, so the books
 * a process leaves say what its reporters said at exit (it runs before the
 * atexit handlers registered earlier, e.g. destructors of objects built
 * before that registration). Never called from a signal handler. */

#include <stdlib.h> /* atexit */

#define TA_REPORTERS_MAX 64

typedef struct {
  char name[TA_TAG_NAME_MAX + 1];
  tagalloc_reporter_fn fn;
  void *arg;
} _ta_reporter_t;

/* The items of the collection under way (a reporter's amounts), then
 * copied into the region whole. */
struct tagalloc_report_sink {
  uint32_t n;
  uint32_t dropped; /* items past TA_REPORTS_MAX */
  uint8_t slot[TA_REPORTS_MAX][TA_REPORT_SLOT];
};

static pthread_mutex_t TA_LOCK _ta_report_lock = PTHREAD_MUTEX_INITIALIZER;
TA_COLD_BSS static _ta_reporter_t _ta_reporters[TA_REPORTERS_MAX];
static uint32_t _ta_nreporters;
static bool _ta_report_atexit;
TA_COLD_BSS static struct tagalloc_report_sink _ta_sink; /* under _ta_report_lock */
/* Heap bytes reported per tag since the collection began (any thread may
 * measure; atomic adds). */
TA_COLD_BSS static _Atomic(uint64_t) _ta_reported[TA_TAG_SLOTS];
static uint64_t _ta_collect_seq;

/* Copy a string of up to cap-1 printable bytes (others dropped) into dst. */
static void _ta_report_str(uint8_t *dst, size_t cap, const char *s) {
  size_t k = 0;
  for (; s && *s && k + 1 < cap; s++)
    if ((unsigned char)*s >= 0x20 && *s != 0x7f) dst[k++] = (uint8_t)*s;
  dst[k] = 0;
}

TA_EXPORT void tagalloc_report(tagalloc_report_sink_t *sink, const char *path, int kind, int units, int64_t amount,
                               const char *description) {
  if (!sink || !path || !*path || kind < 0 || kind > 2 || units < 0 || units > 3 || amount < 0) {
    _ta_warn("tagalloc_report(%s): ignored: needs a path, kind 0..2, units 0..3 and an amount >= 0", path ? path : "NULL");
    return;
  }
  if (sink->n == TA_REPORTS_MAX) {
    sink->dropped++;
    return;
  }
  uint8_t *s = sink->slot[sink->n++];
  memset(s, 0, TA_REPORT_SLOT);
  s[0] = (uint8_t)kind, s[1] = (uint8_t)units;
  uint64_t a = (uint64_t)amount;
  memcpy(s + 8, &a, 8);
  _ta_report_str(s + 16, TA_REPORT_PATH, path);
  _ta_report_str(s + 16 + TA_REPORT_PATH, TA_REPORT_DESC, description);
}

/* The usable size and tag of the block at p; false if p is not one. */
static bool _ta_block_of(const void *p, size_t *usable, uint32_t *tag) {
  _ta_page_t *pg;
  size_t mapped = 0;
  _ta_ptr_kind_t k = _ta_classify(p, &pg, &mapped);
  switch (k) {
  case TA_PTR_SMALL:
  case TA_PTR_LARGE:
    *usable = _ta_usable(k, pg, mapped);
    *tag = _ta_block_tag(pg, p);
    return true;
  case TA_PTR_HUGE: {
    _ta_mutex_lock(&_ta_huge_lock);
    _ta_huge_t *e = _ta_huge_find_locked((uintptr_t)p);
    if (e) *usable = e->mapped, *tag = e->tag;
    _ta_mutex_unlock(&_ta_huge_lock);
    return e != NULL;
  }
  default:
    return false;
  }
}

TA_EXPORT size_t tagalloc_report_block(const void *p) {
  if (!p || !_ta_ensure_init()) return 0;
  size_t usable;
  uint32_t tag;
  if (!_ta_block_of(p, &usable, &tag)) {
    _ta_warn("tagalloc_report_block(%p): not a block of this heap: reported as 0 bytes", p);
    return 0;
  }
  if (tag < TA_TAG_SLOTS) atomic_fetch_add_explicit(&_ta_reported[tag], usable, memory_order_relaxed);
  _ta_sample_report(p);
  return usable;
}

/* Find a reporter by name (report lock held); its index or -1. */
static int _ta_reporter_find(const char *name) {
  for (uint32_t i = 0; i < _ta_nreporters; i++)
    if (strcmp(_ta_reporters[i].name, name) == 0) return (int)i;
  return -1;
}

static void _ta_report_at_exit(void) { (void)tagalloc_collect_reports(); }

TA_EXPORT int tagalloc_register_reporter(const char *name, tagalloc_reporter_fn fn, void *arg) {
  size_t n = name ? strnlen(name, TA_TAG_NAME_MAX + 1) : 0;
  if (!fn || n == 0 || n > TA_TAG_NAME_MAX) return EINVAL;
  if (!_ta_ensure_init()) return ENOMEM;
  _ta_mutex_lock(&_ta_report_lock);
  int rc = 0, i = _ta_reporter_find(name);
  if (i < 0 && _ta_nreporters == TA_REPORTERS_MAX) {
    rc = ENOSPC;
  } else {
    if (i < 0) i = (int)_ta_nreporters++;
    memcpy(_ta_reporters[i].name, name, n);
    _ta_reporters[i].name[n] = 0;
    _ta_reporters[i].fn = fn, _ta_reporters[i].arg = arg;
  }
  bool first = !_ta_report_atexit && rc == 0;
  _ta_report_atexit = _ta_report_atexit || first;
  _ta_mutex_unlock(&_ta_report_lock);
  if (first) atexit(_ta_report_at_exit);
  return rc;
}

TA_EXPORT int tagalloc_unregister_reporter(const char *name) {
  if (!name) return EINVAL;
  _ta_mutex_lock(&_ta_report_lock);
  int i = _ta_reporter_find(name);
  if (i >= 0) _ta_reporters[i] = _ta_reporters[--_ta_nreporters];
  _ta_mutex_unlock(&_ta_report_lock);
  return i >= 0 ? 0 : ENOENT;
}

TA_EXPORT int tagalloc_collect_reports(void) {
  if (!_ta_ensure_init() || !_ta_books) return -1;
  _ta_mutex_lock(&_ta_report_lock);
  for (size_t t = 0; t < TA_TAG_SLOTS; t++) atomic_store_explicit(&_ta_reported[t], 0, memory_order_relaxed);
  _ta_sample_collect(++_ta_collect_seq);
  _ta_sink.n = _ta_sink.dropped = 0;
  for (uint32_t i = 0; i < _ta_nreporters; i++) _ta_reporters[i].fn(&_ta_sink, _ta_reporters[i].arg);
  if (_ta_sink.dropped) _ta_warn("memory reporters gave %u items past the limit of %u: dropped", _ta_sink.dropped, TA_REPORTS_MAX);
  /* publish: readers take reports_count slots; a reader copying meanwhile
   * may see a mix of two collections, as with any counter */
  uint8_t *base = (uint8_t *)_ta_books;
  atomic_store_explicit(&_ta_books->reports_count, 0, memory_order_release);
  memcpy(base + _ta_books->reports_off, _ta_sink.slot, (size_t)_ta_sink.n * TA_REPORT_SLOT);
  uint64_t *rep = (uint64_t *)(base + _ta_books->reported_off);
  for (size_t t = 0; t < TA_TAG_SLOTS; t++) rep[t] = atomic_load_explicit(&_ta_reported[t], memory_order_relaxed);
  atomic_store_explicit(&_ta_books->reports_count, _ta_sink.n, memory_order_release);
  atomic_fetch_add_explicit(&_ta_books->collections, 1, memory_order_release);
  int n = (int)_ta_sink.n;
  _ta_mutex_unlock(&_ta_report_lock);
  return n;
}

/* fork: the child may collect at once (the lock is not held across fork
 * by anyone but the forking thread, which holds no allocator lock then). */
static void _ta_report_fork_child(void) { _ta_mutex_reinit(&_ta_report_lock); }
