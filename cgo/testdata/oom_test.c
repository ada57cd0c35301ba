/* oom_test.c: out of memory, injected (TAGALLOC_FAULT_EVERY/COUNT, set by
 * the Go test). Every failed call returns NULL with errno ENOMEM and
 * leaves the caller's block alone; the books stay exact (the tag's live
 * bytes equal the sum of the live blocks' usable sizes, and a heap walk
 * equals the books); once the injection stops, everything works again. */
#include "tcheck.h"
#include "../include/tagalloc.h"

#define SLOTS 4096
static unsigned char *blk[SLOTS];
static size_t len[SLOTS];
static uint64_t seed = 42;

static size_t pick_size(void) {
  uint64_t r = t_rand(&seed) % 1000;
  if (r < 900) return 1 + t_rand(&seed) % 2048;                   /* small */
  if (r < 995) return 600 * 1024 + t_rand(&seed) % (4 << 20);     /* large */
  return (33u << 20) + t_rand(&seed) % (8 << 20);                 /* huge */
}

static void fill(int i) { memset(blk[i], (int)(i & 0xff), len[i] < 64 ? len[i] : 64); }

static int intact(int i) {
  for (size_t k = 0; k < len[i] && k < 64; k++)
    if (blk[i][k] != (unsigned char)(i & 0xff)) return 0;
  return 1;
}

static size_t live_usable(void) {
  size_t sum = 0;
  for (int i = 0; i < SLOTS; i++)
    if (blk[i]) sum += malloc_usable_size(blk[i]);
  return sum;
}

static size_t failures, calls;

static void churn(int ops, int expect_failures) {
  for (int op = 0; op < ops; op++) {
    int i = (int)(t_rand(&seed) % SLOTS);
    if (blk[i] && t_rand(&seed) % 3 == 0) {
      CHECK(intact(i), "block %d changed", i);
      free(blk[i]);
      blk[i] = NULL;
      continue;
    }
    size_t n = pick_size();
    void *p;
    errno = 0;
    calls++;
    if (blk[i]) { /* realloc: on failure the old block stays, intact */
      p = realloc(blk[i], n);
      if (!p) {
        CHECK(errno == ENOMEM, "realloc failed with errno %d", errno);
        CHECK(intact(i), "block %d changed by a failed realloc", i);
        failures++;
        continue;
      }
      size_t keep = len[i] < n ? len[i] : n;
      blk[i] = p;
      len[i] = keep; /* the first keep bytes are the old ones */
      CHECK(intact(i), "realloc lost block %d's data", i);
      len[i] = n;
      fill(i);
      continue;
    }
    switch (t_rand(&seed) % 3) {
    case 0: p = malloc(n); break;
    case 1: p = calloc(1, n); break;
    default: p = NULL; if (posix_memalign(&p, 256, n) != 0) errno = ENOMEM; break;
    }
    if (!p) {
      CHECK(errno == ENOMEM, "allocation of %zu failed with errno %d", n, errno);
      failures++;
      continue;
    }
    blk[i] = p;
    len[i] = n;
    fill(i);
  }
  if (!expect_failures) CHECK(failures == 0, "%zu failures after the injection stopped", failures);
}

static void check_books(void) {
  tagalloc_tag_stats_t st;
  CHECK(tagalloc_weak_stats("oom", &st) == 0, "no stats for tag oom");
  CHECK(st.live_bytes == live_usable(), "books say %zu live, the blocks hold %zu", (size_t)st.live_bytes, live_usable());
  t_check_books();
}

static void test_injected(void) {
  tagalloc_weak_set("oom");
  churn(20000, 1);
  printf("injected: %zu of %zu calls failed\n", failures, calls);
  CHECK(failures > 0, "no allocation failed: the injection is not working");
  check_books();
}

static void test_recovers(void) {
  /* The injection has a budget (TAGALLOC_FAULT_COUNT): use it up, then
   * nothing may fail. */
  for (int k = 0; k < 100000; k++) {
    void *p = malloc(1 << 20);
    if (p) free(p);
  }
  failures = 0;
  churn(20000, 0);
  check_books();
  for (int i = 0; i < SLOTS; i++) free(blk[i]), blk[i] = NULL;
  check_books();
  tagalloc_weak_clear();
}

int main(void) {
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 1;
  }
  printf("oom_test\n"); /* stdio's buffer, allocated before the tag is set */
  RUN(test_injected);
  RUN(test_recovers);
  return t_summary();
}
