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

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library's ABI (this header): major * 10000 + minor * 100 + patch. */
#define TAGALLOC_VERSION 201
int tagalloc_version(void);

/* ---- heap-block tags (DMD's prototype API) --------------------------------
 *
 * Blocks the calling thread allocates are charged to its current tag until
 * it is cleared, and so are those of threads it creates meanwhile (they
 * start with the tag). A block keeps its tag for life, through realloc,
 * whichever thread frees it. Untagged memory is charged to "untagged" (or
 * to $TAGALLOC_TAG). Tag names are 1 to 63 bytes; at most 4096 distinct
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
 * peak_live_bytes is the highest live total seen at the points the books
 * are looked at (queries, thread exits, and about every 256 KiB a thread
 * allocates under the tag). Returns 0, ENOENT (never used) or EINVAL. */
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
#pragma weak tagalloc_set_tag
#pragma weak tagalloc_version
#pragma weak tagalloc_purge
#pragma weak tagalloc_check
#pragma weak tagalloc_check_books
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
static inline int tagalloc_weak_stats(const char *tag, tagalloc_tag_stats_t *out) {
  return tagalloc_tag_stats ? tagalloc_tag_stats(tag, out) : -1;
}
#endif

#ifdef __cplusplus
}
#endif

#endif
