/* check_test.c MODE: run under the checking build (TA_CHECK, check.c). The
 * misuse modes must abort with a message (TestCheck checks the signal and
 * stderr); "clean" runs correct code through every entry point and must
 * pass, with the books equal to a walk of the heap. */
#include "tcheck.h"

#include <pthread.h>

#include "../include/tagalloc.h"

static volatile unsigned char sink;

/* Allocate and free blocks of n bytes until the quarantine (4 MiB by
 * default) has let the earlier ones go and they are handed out again. */
static void churn(size_t n, size_t bytes) {
  for (size_t done = 0; done < bytes; done += n) {
    void *q = malloc(n);
    free(q);
  }
  /* then more blocks at once than a page holds, so the free lists (LIFO:
   * the early frees sink to the bottom) are drained */
  static void *keep[4096];
  for (int i = 0; i < 4096; i++) keep[i] = malloc(n);
  for (int i = 0; i < 4096; i++) free(keep[i]);
}

/* A pattern that does not depend on the address (realloc moves blocks). */
static void fill(unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(i * 7 + 1);
}
static int verify(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(i * 7 + 1)) return 0;
  return 1;
}

static void *free_it(void *p) {
  free(p);
  return NULL;
}

/* ---- clean: every entry point, used correctly ------------------------------- */

static void test_sizes_and_usable(void) {
  for (size_t n = 0; n < 3000; n += (n < 300 ? 1 : 97)) {
    unsigned char *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu)", n);
    CHECK(malloc_usable_size(p) == n, "usable %zu != requested %zu (the check build says the requested size)",
          malloc_usable_size(p), n);
    memset(p, 0x5a, malloc_usable_size(p)); /* filling to the usable size is fine */
    free(p);
  }
}

static void test_realloc_keeps_data_and_tag(void) {
  SetHeapBlockTagForThread("check-realloc");
  unsigned char *p = malloc(10);
  ClearHeapBlockTagForThread();
  fill(p, 10);
  size_t sizes[] = {100, 5000, 70000, 700000, 40u << 20, 300, 8};
  size_t have = 10;
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *q = realloc(p, sizes[i]);
    CHECK(q != NULL, "realloc to %zu", sizes[i]);
    size_t keep = have < sizes[i] ? have : sizes[i];
    CHECK(verify(q, keep), "realloc to %zu lost data", sizes[i]);
    fill(q, sizes[i]);
    have = sizes[i];
    p = q;
  }
  tagalloc_tag_stats_t st;
  CHECK(tagalloc_tag_stats("check-realloc", &st) == 0 && st.live_blocks == 1, "the block kept its tag: %zu live blocks",
        st.live_blocks);
  free(p);
  CHECK(tagalloc_tag_stats("check-realloc", &st) == 0 && st.live_blocks == 0 && st.live_bytes == 0,
        "freed: %zu live bytes", st.live_bytes);
}

static void test_calloc_and_aligned(void) {
  size_t sizes[] = {1, 24, 100, 4000, 100000, 3u << 20, 40u << 20};
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
    unsigned char *p = calloc(1, sizes[i]);
    CHECK(p != NULL, "calloc %zu", sizes[i]);
    size_t nz = 0;
    for (size_t k = 0; k < sizes[i]; k++) nz += p[k] != 0;
    CHECK(nz == 0, "calloc(%zu): %zu non-zero bytes", sizes[i], nz);
    memset(p, 1, sizes[i]);
    free(p);
  }
  size_t aligns[] = {16, 32, 64, 256, 4096, 65536, 1 << 20};
  for (size_t i = 0; i < sizeof aligns / sizeof aligns[0]; i++) {
    void *p = NULL;
    CHECK(posix_memalign(&p, aligns[i], 100) == 0 && ((uintptr_t)p % aligns[i]) == 0, "posix_memalign %zu", aligns[i]);
    memset(p, 2, 100);
    free(p);
    p = aligned_alloc(aligns[i], aligns[i] * 2);
    CHECK(p && ((uintptr_t)p % aligns[i]) == 0, "aligned_alloc %zu", aligns[i]);
    memset(p, 3, aligns[i] * 2);
    free(p);
    p = memalign(aligns[i], 33);
    CHECK(p && ((uintptr_t)p % aligns[i]) == 0, "memalign %zu", aligns[i]);
    memset(p, 4, 33);
    free(p);
  }
  void *v = valloc(5000);
  CHECK(v && ((uintptr_t)v & 4095) == 0, "valloc");
  memset(v, 5, 5000);
  free(v);
  v = pvalloc(5000);
  CHECK(v && ((uintptr_t)v & 4095) == 0 && malloc_usable_size(v) == 8192, "pvalloc: usable %zu", malloc_usable_size(v));
  memset(v, 6, 8192);
  free(v);
  errno = 0;
  CHECK(malloc(SIZE_MAX - 8) == NULL && errno == ENOMEM, "huge request: NULL/ENOMEM");
}

/* The poison is there after free, and the quarantine delays reuse. */
static void test_poison_and_delay(void) {
  unsigned char *p = malloc(64);
  memset(p, 0x11, 64);
  free(p);
  CHECK(p[20] == 0xdf && p[63] == 0xdf, "freed memory is poisoned: 0x%x", p[20]);
  int reused = 0;
  for (int i = 0; i < 1000; i++) {
    void *q = malloc(64);
    reused |= q == p;
    free(q);
  }
  CHECK(!reused, "a freed block came back within 1000 allocations (64 KB, quarantine 4 MiB)");
}

static void test_cross_thread_and_books(void) {
  SetHeapBlockTagForThread("check-xthread");
  void *blocks[2000];
  for (int i = 0; i < 2000; i++) {
    blocks[i] = malloc((size_t)(i % 700) + 1);
    memset(blocks[i], 7, (size_t)(i % 700) + 1);
  }
  ClearHeapBlockTagForThread();
  for (int i = 0; i < 2000; i += 2) {
    pthread_t t;
    pthread_create(&t, NULL, free_it, blocks[i]);
    pthread_join(t, NULL);
  }
  tagalloc_tag_stats_t st;
  CHECK(tagalloc_tag_stats("check-xthread", &st) == 0 && st.live_blocks == 1000, "live blocks %zu, want 1000",
        st.live_blocks);
  for (int i = 1; i < 2000; i += 2) free(blocks[i]);
  CHECK(tagalloc_tag_stats("check-xthread", &st) == 0 && st.live_blocks == 0 && st.live_bytes == 0,
        "all freed: %zu live bytes", st.live_bytes);
  CHECK(t_check_books() > 0, "books checked"); /* aborts if a tag's books differ from the heap */
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *m = argv[1];
  if (!strcmp(m, "clean")) {
    if (!t_tagalloc_active()) {
      fprintf(stderr, "tagalloc is not the allocator\n");
      return 1;
    }
    RUN(test_sizes_and_usable);
    RUN(test_realloc_keeps_data_and_tag);
    RUN(test_calloc_and_aligned);
    RUN(test_poison_and_delay);
    RUN(test_cross_thread_and_books);
    t_check_books();
    return t_summary();
  }
  unsigned char *p = malloc(24);
  memset(p, 1, 24);
  if (!strcmp(m, "overrun-1")) { /* one byte past the end, caught at free */
    p[24] = 0x41;
    free(p);
  } else if (!strcmp(m, "overrun-trailer")) { /* past the canaries, into the trailer */
    unsigned char *q = malloc(32); /* usable 48: no canary bytes, the trailer at 32 */
    q[33] = 0x41;
    free(q);
  } else if (!strcmp(m, "overrun-large")) {
    unsigned char *q = malloc(300000);
    q[300000] = 0x41;
    free(q);
  } else if (!strcmp(m, "overrun-realloc")) {
    p[26] = 0x41;
    p = realloc(p, 4000);
  } else if (!strcmp(m, "overrun-remote")) { /* freed by another thread */
    p[25] = 0x41;
    pthread_t t;
    pthread_create(&t, NULL, free_it, p);
    pthread_join(t, NULL);
  } else if (!strcmp(m, "write-after-free")) { /* caught as it leaves the quarantine */
    free(p);
    p[20] = 0x42;
    churn(24, 16u << 20);
  } else if (!strcmp(m, "write-after-free-head")) { /* where the free list's link goes */
    free(p);
    p[5] = 0x42;
    churn(24, 16u << 20);
  } else if (!strcmp(m, "write-after-free-large")) {
    unsigned char *q = malloc(300000);
    free(q);
    q[200000] = 0x42;
    churn(300000, 64u << 20);
  } else if (!strcmp(m, "write-after-free-reuse")) { /* TAGALLOC_CHECK=3: caught at reuse */
    free(p);
    p[40] = 0x42;
    churn(24, 1u << 20);
  } else if (!strcmp(m, "write-after-realloc")) { /* a stale pointer after realloc moved it */
    unsigned char *q = realloc(p, 25);
    p[3] = 0x42;
    churn(24, 16u << 20);
    free(q);
  } else if (!strcmp(m, "double-free")) {
    free(p);
    free(p);
  } else if (!strcmp(m, "double-free-later")) { /* after it left the quarantine */
    free(p);
    churn(24, 16u << 20);
    free(p);
  } else if (!strcmp(m, "interior")) { /* aligned, from the owner: caught in this build */
    unsigned char *q = malloc(64);
    free(q + 16);
  } else {
    return 2;
  }
  sink = p[0];
  puts("survived");
  return 0;
}
