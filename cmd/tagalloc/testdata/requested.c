/* requested.c: blocks of known requested sizes under the tag "req", for
 * the estimate of live requested bytes from sampled stacks. Allocates
 * blocks of 1 to 4,000 bytes (malloc and calloc) and some large ones,
 * frees a third, moves a third to a new size class by realloc, keeps the
 * rest, and prints the truth it computed ("truth req BYTES") and the tag's
 * books ("req LIVE_BYTES LIVE_BLOCKS ALLOC_BYTES ALLOC_BLOCKS"). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../../cgo/include/tagalloc.h"

#define N 30000
#define BIG 20
static void *blocks[N + BIG];
static size_t sizes[N + BIG];

static uint64_t rng = 88172645463325252ull;
static size_t next(size_t n) {
  rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
  return (size_t)(rng % n);
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* no buffer to allocate under the tag */
  tagalloc_weak_set("req");
  for (int i = 0; i < N; i++) {
    sizes[i] = 1 + next(4000);
    blocks[i] = i % 7 == 0 ? calloc(1, sizes[i]) : malloc(sizes[i]);
  }
  for (int i = 0; i < BIG; i++) {
    sizes[N + i] = 100000 + (size_t)i * 333;
    blocks[N + i] = malloc(sizes[N + i]);
  }
  tagalloc_weak_clear();
  for (int i = 0; i < N; i++) {
    if (i % 3 == 0) {
      free(blocks[i]);
      blocks[i] = NULL;
    } else if (i % 3 == 1) { /* another size class: no resize within one */
      sizes[i] = 5000 + next(3000);
      blocks[i] = realloc(blocks[i], sizes[i]);
    }
  }
  uint64_t truth = 0;
  for (int i = 0; i < N + BIG; i++)
    if (blocks[i]) truth += sizes[i];
  printf("truth req %llu\n", (unsigned long long)truth);
  tagalloc_tag_stats_t s;
  if (tagalloc_weak_stats("req", &s) == 0)
    printf("req %llu %llu %llu %llu\n", (unsigned long long)s.live_bytes, (unsigned long long)s.live_blocks,
           (unsigned long long)s.alloc_bytes, (unsigned long long)s.alloc_blocks);
  return 0;
}
