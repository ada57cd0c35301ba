/* layer.c: one of multilib's libraries, built once per name (-DLAYER=a
 * makes liblayer_a.so exporting layer_a). Each allocates what it is told
 * to through malloc, from its own functions, so that a profile charges it
 * to its own library: blocks of mixed sizes (mostly small, some of pages),
 * a working set replaced at random, and what is left of the set kept live
 * at exit. Deterministic: the same seed gives the same allocations. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define CAT2(a, b) a##b
#define CAT(a, b) CAT2(a, b)
#define FN CAT(layer_, LAYER)

static uint64_t next(uint64_t *s) {
  *s ^= *s << 13, *s ^= *s >> 7, *s ^= *s << 17;
  return *s;
}

static size_t size_of(uint64_t r) {
  switch (r % 16) {
  case 0: return 4096 + r % 60000; /* pages */
  case 1: case 2: return 512 + r % 1536;
  default: return 16 + r % 240;
  }
}

/* Allocate about bytes in all, with a working set of slots blocks; the
 * set is left live. */
__attribute__((noinline)) void FN(uint64_t seed, size_t bytes, size_t slots) {
  void **set = calloc(slots, sizeof *set);
  uint64_t s = seed | 1;
  for (size_t done = 0; done < bytes;) {
    uint64_t r = next(&s);
    size_t i = r % slots, n = size_of(r >> 8);
    free(set[i]);
    set[i] = malloc(n);
    memset(set[i], (int)i, n < 64 ? n : 64);
    done += n;
  }
  /* set and its blocks stay live: the library's live heap at exit */
}
