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
#include "sample.c"    /* sampled stacks and the events ring (TA_SAMPLING builds); it includes
                          unwind.c, the cached-CFI unwinder (x86-64) */
#include "heap.c"      /* thread heaps: slow path, thread exit */
#include "huge.c"      /* huge blocks: one mapping each */
#include "tags.c"      /* tags: registry, thread records, counters, API */
#include "budget.c"    /* tag budgets: limits on a tag's live bytes, charged at rises */
#include "init.c"      /* lazy init, fork */
#include "alloc.c"     /* the public entry points */
#include "check.c"     /* the checking build's entry points over them (TA_CHECK builds) */
#include "report.c"    /* memory reporters: tagalloc_report_block, collections */
