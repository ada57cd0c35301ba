/* static.c: the whole allocator as one translation unit (every layer is
 * static, so the compiler inlines across them). Build:
 *   cc -O2 -fPIC -shared -fvisibility=hidden -ftls-model=initial-exec \
 *      -o libtagalloc.so static.c -lpthread
 * Layers, bottom up: */
#include "types.h"     /* layout, glossary, paths, policies */
#include "prim_linux.c" /* OS memory and time */
#include "error.c"     /* messages without allocating */
#include "options.c"   /* the options table */
#include "books.c"     /* the region holding the books (shared with tagalloc run) */
#include "arena.c"     /* address space, spans, purging */
#include "page.c"      /* small spans: carving, collecting, remote free */
/* sampled stacks (TA_SAMPLING builds; without it they compile to nothing): */
#include "ring.c"       /* the events ring, its making, the sample lock */
#include "modules.c"    /* the loaded objects, announced to the ring */
#include "unwind.c"     /* the cached-CFI unwinder (x86-64) */
#include "stacks.c"     /* stack capture, stack ids */
#include "sampledset.c" /* the sampled set, pages' filters of it */
#include "sample.c"     /* the countdown, the hooks, thinning, fork, reports */
#include "heap.c"      /* thread heaps: slow path, thread exit */
#include "huge.c"      /* huge blocks: one mapping each */
#include "tags.c"      /* tags: registry, thread records, counters, API */
#include "purger.c"    /* the thread that purges when the program does not call */
#include "budget.c"    /* tag budgets: limits on a tag's live bytes, charged at rises */
#include "init.c"      /* lazy init, fork */
#include "alloc.c"     /* the public entry points */
#include "check.c"     /* the checking build's entry points over them (TA_CHECK builds) */
#include "report.c"    /* memory reporters: tagalloc_report_block, collections */

#if TA_DEBUG >= 1
/* The locks in the order of types.h's table (a thread holding one takes
 * only later ones), each with its rank there, for the debug builds'
 * check (_ta_rank_take). The sampling and checking builds' own locks are
 * in those builds only. */
static const struct {
  pthread_mutex_t *m;
  const char *name;
} _ta_locks_ranked[] = {
    {&_ta_report_lock, "_ta_report_lock"},
    {&_ta_init_lock, "_ta_init_lock"},
#if TA_SAMPLING
    {&_ta_sample_lock.m, "_ta_sample_lock"},
#else
    {NULL, "_ta_sample_lock"},
#endif
    {&_ta_tags_lock, "_ta_tags_lock"},
    {&_ta_threads_lock, "_ta_threads_lock"},
    {&_ta_heaps_lock, "_ta_heaps_lock"},
    {&_ta_aband_lock, "_ta_aband_lock"},
    {&_ta_arena_lock, "_ta_arena_lock"},
    {&_ta_huge_lock, "_ta_huge_lock"},
    {&_ta_meta_lock, "_ta_meta_lock"},
#if TA_CHECK
    {&_ta_quar_lock, "_ta_quar_lock"},
#else
    {NULL, "_ta_quar_lock"},
#endif
    {&_ta_purger_lock, "_ta_purger_lock"},
};
_Static_assert(sizeof(_ta_locks_ranked) / sizeof(_ta_locks_ranked[0]) < 32, "a thread's ranks are bits of a uint32_t");

static int _ta_lock_rank(const pthread_mutex_t *m) {
  for (size_t r = 0; r < sizeof(_ta_locks_ranked) / sizeof(_ta_locks_ranked[0]); r++)
    if (_ta_locks_ranked[r].m == m) return (int)r;
  _ta_fatal("lock %p has no rank (static.c, _ta_locks_ranked)", (const void *)m);
}

static const char *_ta_lock_name(int rank) { return _ta_locks_ranked[rank].name; }
#endif

#if defined(TA_PREFIX) && TA_DEBUG >= 1
/* For the test core only (testdata/lockrank_test.c): take the lock of
 * rank first, then of rank second, then release both, so a test can see
 * the check pass in order and abort out of it. */
TA_EXPORT void TA_NAME(lock_ranks_probe)(int first, int second) {
  pthread_mutex_t *a = _ta_locks_ranked[first].m, *b = _ta_locks_ranked[second].m;
  _ta_mutex_lock(a);
  _ta_mutex_lock(b);
  _ta_mutex_unlock(b);
  _ta_mutex_unlock(a);
}
#endif
