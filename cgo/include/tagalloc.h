/* tagalloc.h: the public C API of libtagalloc.so, the preloaded allocator.
 *
 * Preloading the library (LD_PRELOAD=$(tagalloc lib) or `tagalloc run --`)
 * replaces malloc, free, calloc, realloc, reallocarray, posix_memalign,
 * aligned_alloc, memalign, valloc, pvalloc and malloc_usable_size; nothing
 * here is needed for that. The functions below are extras a program may call.
 */
#ifndef TAGALLOC_H
#define TAGALLOC_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library's ABI (this header): major * 10000 + minor * 100 + patch. */
#define TAGALLOC_VERSION 300
int tagalloc_version(void);

/* ---- heap-block tags (DMD's prototype API) --------------------------------
 *
 * Blocks the calling thread allocates are charged to its current tag until
 * it is cleared, and so are those of threads it creates meanwhile (they
 * start with the tag). A block keeps its tag for life, through realloc,
 * whichever thread frees it. Untagged memory is charged to "untagged" (or
 * to $TAGALLOC_TAG). Tag names are 1 to 63 bytes, levels separated by one '/' (none "." or ".."); at most 4096 distinct
 * tags, after which new ones are charged to "overflow" (with one warning).
 * An invalid name prints a warning and leaves the tag unchanged. */
void SetHeapBlockTagForThread(const char *tag);
void ClearHeapBlockTagForThread(void);

/* The same with an answer: 0, EINVAL (bad name) or ENOMEM. */
int tagalloc_set_tag(const char *tag);

/* Nesting: push makes tag current and remembers the one before (0, EINVAL,
 * ENOMEM, or EOVERFLOW past 32 levels); pop restores it. */
int tagalloc_push_tag(const char *tag);
void tagalloc_pop_tag(void);

/* What a tag holds now, exactly, and has held; bytes are usable bytes.
 * peak_live_bytes is the tag's peak of live bytes: exact while one thread
 * at a time has held the tag's memory, else a lower bound whose upper
 * bound tagalloc_tag_peak gives. Returns 0, ENOENT (never used) or
 * EINVAL. */
typedef struct tagalloc_tag_stats {
  size_t live_bytes;
  size_t live_blocks;
  size_t alloc_bytes;   /* cumulative */
  size_t alloc_blocks;  /* cumulative */
  size_t peak_live_bytes;
  /* bytes the program asked for, of the live blocks; (size_t)-1 unless
   * the process runs with TAGALLOC_REQUESTED=1 */
  size_t live_requested_bytes;
} tagalloc_tag_stats_t;
int tagalloc_tag_stats(const char *tag, tagalloc_tag_stats_t *out);

/* The tag's peak of live bytes so far lies in [*lower, *upper]; equal,
 * it is exact. It is exact, to the block, while one thread at a time has
 * allocated and freed the tag's blocks; once several have, the bound is
 * about 64 KiB per thread that holds the tag's memory. peak_live_bytes
 * of tagalloc_tag_stats is *lower. 0, EINVAL or ENOENT as above. */
int tagalloc_tag_peak(const char *tag, size_t *lower, size_t *upper);

/* ---- budgets -----------------------------------------------------------------
 *
 * A budget limits the live bytes of a tag and of every tag under it
 * ("gfx" covers "gfx/webgl/textures"). Past it:
 *   TAGALLOC_BUDGET_FAIL     the allocation returns NULL with ENOMEM and is
 *                            not charged (malloc, calloc, realloc: the old
 *                            block stays), and is counted as refused;
 *   TAGALLOC_BUDGET_NOTIFY   it succeeds, and the callback runs once per
 *                            crossing, on the allocating thread, outside
 *                            the allocator's locks (it may allocate);
 *   TAGALLOC_BUDGET_OBSERVE  it succeeds, and the crossing is counted.
 * What counts against the limit is the live bytes plus what each thread
 * reserved under the tag above its own live bytes, at most 64 KiB: a fail
 * budget is never passed, and may refuse that much early per thread that
 * holds the tag's memory. A budget on a tag no one used yet applies when
 * it is first used. Set it again to change the limit or policy. Unmodified
 * programs: TAGALLOC_BUDGET='gfx=256M,parser=64M:notify' (fail by default).
 * tagalloc_set_budget returns 0, EINVAL (bad name, 0 bytes, bad policy),
 * ENOSPC (more than 64 budgets) or ENOMEM. */
#define TAGALLOC_BUDGET_FAIL 1
#define TAGALLOC_BUDGET_NOTIFY 2
#define TAGALLOC_BUDGET_OBSERVE 3
int tagalloc_set_budget(const char *tag, uint64_t bytes, int policy);
typedef void (*tagalloc_budget_fn)(const char *tag, uint64_t limit, uint64_t charged, void *arg);
void tagalloc_set_budget_callback(tagalloc_budget_fn fn, void *arg);
typedef struct tagalloc_budget_stats {
  uint64_t limit;
  int policy;
  uint64_t charged;   /* what counts against the limit now (above) */
  uint64_t crossings; /* times the charge went past the limit */
  uint64_t refused;   /* allocations refused (fail) */
} tagalloc_budget_stats_t;
/* The budget set on tag: 0, ENOENT (none), EINVAL. */
int tagalloc_budget_stats(const char *tag, tagalloc_budget_stats_t *out);

/* ---- memory reporters (about:memory's model) ---------------------------------
 *
 * A reporter says what a part of the program holds: items of (path, kind,
 * units, amount, description), as about:memory's. Paths under "explicit/"
 * add up with the heap's tags in the tree; a HEAP item is memory from
 * malloc, measured block by block with tagalloc_report_block, which returns
 * the block's usable size (as malloc_usable_size) and marks it reported:
 * the tree takes reported bytes out of the blocks' tags, so
 * heap-unclassified is what no reporter claimed, and under
 * `tagalloc run --stacks` the dark-matter report lists the blocks that no
 * reporter measured, or that two did (a bug in a reporter), by stack.
 *
 *   static void cache_reporter(tagalloc_report_sink_t *s, void *arg) {
 *     struct cache *c = arg; size_t n = 0;
 *     for (entry *e = c->first; e; e = e->next) n += tagalloc_report_block(e);
 *     tagalloc_report(s, "explicit/cache/entries", TAGALLOC_KIND_HEAP,
 *                     TAGALLOC_UNITS_BYTES, n, "Entries of the cache.");
 *   }
 *   tagalloc_register_reporter("cache", cache_reporter, &cache);
 *
 * tagalloc_collect_reports() runs every reporter (on the calling thread;
 * reporters may allocate) and publishes their items in the books, where
 * tagalloc run, snapshot, top and serve read them; it runs once more at
 * exit() once a reporter is registered. At most 64 reporters and 64 items
 * per collection; paths up to 111 bytes, descriptions up to 127. */
enum { TAGALLOC_KIND_NONHEAP = 0, TAGALLOC_KIND_HEAP = 1, TAGALLOC_KIND_OTHER = 2 };
enum {
  TAGALLOC_UNITS_BYTES = 0,
  TAGALLOC_UNITS_COUNT = 1,
  TAGALLOC_UNITS_COUNT_CUMULATIVE = 2,
  TAGALLOC_UNITS_PERCENTAGE = 3 /* hundredths of a percent, as about:memory's */
};
typedef struct tagalloc_report_sink tagalloc_report_sink_t;
typedef void (*tagalloc_reporter_fn)(tagalloc_report_sink_t *sink, void *arg);

/* Register (or replace) the reporter called name (1..63 bytes): 0, EINVAL,
 * ENOSPC (64 already) or ENOMEM. */
int tagalloc_register_reporter(const char *name, tagalloc_reporter_fn fn, void *arg);
/* 0, or ENOENT. */
int tagalloc_unregister_reporter(const char *name);
/* One item, from inside a reporter. A bad item (no path, kind or units out
 * of range, amount < 0) is ignored with a warning. */
void tagalloc_report(tagalloc_report_sink_t *sink, const char *path, int kind, int units, int64_t amount,
                     const char *description);
/* about:memory's MallocSizeOf: the usable size of the block at p (0 for
 * NULL, or with a warning for a pointer that is not a block's start),
 * counted as reported in this collection. */
size_t tagalloc_report_block(const void *p);
/* Run every reporter now; returns the items published, or -1. */
int tagalloc_collect_reports(void);

/* Return retained free memory to the OS now (as malloc_trim(0) does). */
void tagalloc_purge(void);

/* Check the allocator's invariants for the calling thread's heap and the
 * arenas; print "tagalloc: ..." and abort if one is broken. Returns the
 * number of 64 KiB pages in use. A debugging aid: it walks the heap. */
size_t tagalloc_check(void);

/* Walk the whole heap and check, for every tag, that what it holds equals
 * its books (aborting with the tag's name if not). Exact only while no
 * other thread allocates or frees. Returns the number of tags checked. */
size_t tagalloc_check_books(void);

/* ---- calling the API from code that may run without the library --------
 *
 * These wrappers call the library if it is loaded (preloaded or linked)
 * and do nothing otherwise: the functions are weak references, resolved to
 * the library's when it is there. */
#if defined(__GNUC__) && !defined(TAGALLOC_BUILDING)
#pragma weak SetHeapBlockTagForThread
#pragma weak ClearHeapBlockTagForThread
#pragma weak tagalloc_push_tag
#pragma weak tagalloc_pop_tag
#pragma weak tagalloc_tag_stats
#pragma weak tagalloc_tag_peak
#pragma weak tagalloc_set_budget
#pragma weak tagalloc_set_budget_callback
#pragma weak tagalloc_budget_stats
#pragma weak tagalloc_set_tag
#pragma weak tagalloc_version
#pragma weak tagalloc_purge
#pragma weak tagalloc_check
#pragma weak tagalloc_check_books
#pragma weak tagalloc_register_reporter
#pragma weak tagalloc_unregister_reporter
#pragma weak tagalloc_report
#pragma weak tagalloc_report_block
#pragma weak tagalloc_collect_reports
static inline void tagalloc_weak_set(const char *tag) {
  if (SetHeapBlockTagForThread) SetHeapBlockTagForThread(tag);
}
static inline void tagalloc_weak_clear(void) {
  if (ClearHeapBlockTagForThread) ClearHeapBlockTagForThread();
}
static inline int tagalloc_weak_push(const char *tag) { return tagalloc_push_tag ? tagalloc_push_tag(tag) : 0; }
static inline void tagalloc_weak_pop(void) {
  if (tagalloc_pop_tag) tagalloc_pop_tag();
}
static inline int tagalloc_weak_register_reporter(const char *name, tagalloc_reporter_fn fn, void *arg) {
  return tagalloc_register_reporter ? tagalloc_register_reporter(name, fn, arg) : 0;
}
static inline int tagalloc_weak_collect_reports(void) { return tagalloc_collect_reports ? tagalloc_collect_reports() : 0; }
/* Without the library no reporter runs, so report and report_block are
 * only reached through a registered reporter: no wrappers needed. */
static inline int tagalloc_weak_stats(const char *tag, tagalloc_tag_stats_t *out) {
  return tagalloc_tag_stats ? tagalloc_tag_stats(tag, out) : -1;
}
#endif

#ifdef __cplusplus
}
#endif

#endif
