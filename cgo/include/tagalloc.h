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
#define TAGALLOC_VERSION 100
int tagalloc_version(void);

/* Return retained free memory to the OS now (as malloc_trim(0) does). */
void tagalloc_purge(void);

/* Check the allocator's invariants for the calling thread's heap and the
 * arenas; print "tagalloc: ..." and abort if one is broken. Returns the
 * number of 64 KiB pages in use. A debugging aid: it walks the heap. */
size_t tagalloc_check(void);

#ifdef __cplusplus
}
#endif

#endif
