/* budget_test.c: tag budgets (tagalloc_set_budget). Under fail a tag's live
 * bytes never pass its budget, however many threads race at the limit,
 * and a refused allocation is NULL with ENOMEM and leaves the books as
 * they were; notify calls back once per crossing; observe only counts;
 * a budget covers the tags under it; realloc refused keeps the old block.
 * Every expected figure is computed here from malloc_usable_size. */
#include "tcheck.h"

#include <pthread.h>
#include <stdatomic.h>
#include <unistd.h>

#include "../include/tagalloc.h"

#define SLACK (64 * 1024) /* what each thread's set may reserve above its live bytes */

static size_t live_of(const char *tag) {
  tagalloc_tag_stats_t s;
  if (tagalloc_tag_stats(tag, &s) != 0) return 0;
  return s.live_bytes;
}

static tagalloc_budget_stats_t budget_of(const char *tag) {
  tagalloc_budget_stats_t b;
  memset(&b, 0, sizeof b);
  CHECK(tagalloc_budget_stats(tag, &b) == 0, "no budget on %s", tag);
  return b;
}

static void test_bad_input(void) {
  CHECK(tagalloc_set_budget("", 1024, TAGALLOC_BUDGET_FAIL) == EINVAL, "empty name");
  CHECK(tagalloc_set_budget("a//b", 1024, TAGALLOC_BUDGET_FAIL) == EINVAL, "empty level");
  CHECK(tagalloc_set_budget("b-bad", 0, TAGALLOC_BUDGET_FAIL) == EINVAL, "0 bytes");
  CHECK(tagalloc_set_budget("b-bad", 1024, 9) == EINVAL, "policy 9");
  tagalloc_budget_stats_t b;
  CHECK(tagalloc_budget_stats("b-never", &b) == ENOENT, "no budget");
}

/* One thread fills a 1 MiB budget with blocks of every kind: small, large
 * and huge; the first that does not fit is refused, the books unchanged;
 * freeing makes room again. */
static void test_fail_one_thread(void) {
  const size_t limit = 1 << 20;
  CHECK(tagalloc_set_budget("b-one", limit, TAGALLOC_BUDGET_FAIL) == 0, "set");
  SetHeapBlockTagForThread("b-one");
  size_t sizes[] = {48, 4000, 70000, 600000};
  for (int k = 0; k < 4; k++) {
    static void *held[32768];
    int n = 0;
    size_t live = 0;
    for (;;) {
      tagalloc_tag_stats_t before, after;
      CHECK(tagalloc_tag_stats("b-one", &before) == 0 || k == 0, "stats");
      errno = 0;
      void *p = malloc(sizes[k]);
      if (!p) {
        CHECK(errno == ENOMEM, "errno %d", errno);
        CHECK(tagalloc_tag_stats("b-one", &after) == 0, "stats");
        CHECK(after.live_bytes == before.live_bytes && after.alloc_blocks == before.alloc_blocks &&
                  after.alloc_bytes == before.alloc_bytes,
              "a refused block was charged: %zu/%zu -> %zu/%zu", before.live_bytes, before.alloc_blocks, after.live_bytes,
              after.alloc_blocks);
        break;
      }
      live += malloc_usable_size(p);
      held[n++] = p;
      CHECK(live <= limit, "size %zu: live %zu past the limit %zu", sizes[k], live, limit);
      if (n == 32768) break;
    }
    CHECK(n < 32768, "size %zu: never refused", sizes[k]);
    CHECK(live_of("b-one") == live, "live %zu, books %zu", live, live_of("b-one"));
    /* refused only once what is left is less than a block and a set's reserve */
    CHECK(live + sizes[k] + SLACK > limit, "size %zu: refused at %zu of %zu", sizes[k], live, limit);
    free(held[--n]);
    void *again = malloc(sizes[k]);
    CHECK(again != NULL, "size %zu: no room after a free", sizes[k]);
    free(again);
    while (n) free(held[--n]);
  }
  tagalloc_budget_stats_t b = budget_of("b-one");
  CHECK(b.refused >= 4, "refused %llu", (unsigned long long)b.refused);
  CHECK(b.charged <= limit, "charged %llu", (unsigned long long)b.charged);
  /* calloc and realloc: refused the same way; realloc keeps the block */
  char *p = malloc(limit / 2);
  CHECK(p != NULL, "half");
  memset(p, 7, limit / 2);
  CHECK(calloc(1, limit / 2 + 4096) == NULL && errno == ENOMEM, "calloc past the budget");
  char *q = realloc(p, limit + 4096);
  CHECK(q == NULL && errno == ENOMEM, "realloc past the budget");
  CHECK(p[limit / 2 - 1] == 7 && live_of("b-one") == malloc_usable_size(p), "the old block stays, charged");
  free(p);
  CHECK(live_of("b-one") == 0, "all freed");
  ClearHeapBlockTagForThread();
}

/* A realloc chain under a fail budget grows (a large span, in place or
 * moved with room to grow into) until the budget says no: then
 * realloc is NULL, the block keeps its bytes and stays charged. */
static void test_fail_realloc_chain(void) {
  const size_t limit = 4 << 20;
  CHECK(tagalloc_set_budget("b-chain", limit, TAGALLOC_BUDGET_FAIL) == 0, "set");
  SetHeapBlockTagForThread("b-chain");
  size_t n = 600000;
  char *p = malloc(n);
  CHECK(p != NULL, "first");
  memset(p, 5, n);
  int steps = 0;
  for (;;) {
    char *q = realloc(p, n + 100000);
    if (!q) {
      CHECK(errno == ENOMEM, "errno %d", errno);
      break;
    }
    p = q;
    memset(p + n, 5, 100000);
    n += 100000;
    steps++;
    CHECK(live_of("b-chain") <= limit, "live %zu past %zu", live_of("b-chain"), limit);
  }
  CHECK(steps > 20, "refused after %d steps at %zu", steps, n);
  CHECK(p[0] == 5 && p[n - 1] == 5, "the block lost its bytes");
  CHECK(live_of("b-chain") == malloc_usable_size(p), "charged %zu, usable %zu", live_of("b-chain"), malloc_usable_size(p));
  CHECK(budget_of("b-chain").refused == 1, "one refusal");
  free(p);
  ClearHeapBlockTagForThread();
}

/* 8 threads allocate under one fail budget at once, each freeing now and
 * then: the bytes they hold together never pass the limit; refusals
 * happen; the books equal the blocks held. The bytes held are the test's
 * own sum (added after malloc returns, taken off before free), never more
 * than the allocator's live bytes at any instant: a sum of the tag's
 * counters read one thread after another is not an instant's, and may
 * exceed it. */
#define RACERS 8
static _Atomic(size_t) race_held, race_live_max;
static _Atomic(long) race_refused;
static const char *race_tag = "b-race/worker";
static void *racer(void *arg) {
  uint64_t seed = (uint64_t)(uintptr_t)arg * 7919 + 3;
  SetHeapBlockTagForThread(race_tag);
  void *held[512];
  int n = 0;
  for (int i = 0; i < 20000; i++) {
    if (n == 512 || (n > 0 && t_rand(&seed) % 3 == 0)) {
      int k = (int)(t_rand(&seed) % (uint64_t)n);
      atomic_fetch_sub(&race_held, malloc_usable_size(held[k]));
      free(held[k]);
      held[k] = held[--n];
      continue;
    }
    size_t sz = 16 + t_rand(&seed) % 6000;
    if (t_rand(&seed) % 50 == 0) sz = 100000 + t_rand(&seed) % 400000;
    void *p = malloc(sz);
    if (!p) {
      atomic_fetch_add(&race_refused, 1);
      continue;
    }
    held[n++] = p;
    size_t live = atomic_fetch_add(&race_held, malloc_usable_size(p)) + malloc_usable_size(p);
    size_t m = atomic_load(&race_live_max);
    while (live > m && !atomic_compare_exchange_weak(&race_live_max, &m, live)) {
    }
  }
  while (n) {
    atomic_fetch_sub(&race_held, malloc_usable_size(held[n - 1]));
    free(held[--n]);
  }
  return NULL;
}

static void test_fail_racing(void) {
  const size_t limit = 4 << 20;
  CHECK(tagalloc_set_budget("b-race", limit, TAGALLOC_BUDGET_FAIL) == 0, "set");
  pthread_t t[RACERS];
  for (long i = 0; i < RACERS; i++) pthread_create(&t[i], NULL, racer, (void *)i);
  for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
  /* "b-race" is the level: its own tag holds nothing, the worker's all */
  tagalloc_budget_stats_t b = budget_of("b-race");
  CHECK(atomic_load(&race_live_max) <= limit, "live reached %zu past %zu", atomic_load(&race_live_max), limit);
  /* they did race at the limit: refused within the reserves of 8 sets and a large block */
  CHECK(atomic_load(&race_live_max) + RACERS * SLACK + 500000 > limit, "live only reached %zu of %zu",
        atomic_load(&race_live_max), limit);
  CHECK(atomic_load(&race_refused) > 0 && b.refused == (uint64_t)atomic_load(&race_refused), "refused %ld, counted %llu",
        atomic_load(&race_refused), (unsigned long long)b.refused);
  CHECK(b.charged <= limit, "charged %llu", (unsigned long long)b.charged);
  CHECK(live_of("b-race/worker") == 0, "all freed: %zu", live_of("b-race/worker"));
  t_check_books();
}

/* notify: the callback runs once per crossing, and again after the charge
 * came back under; the allocations succeed. observe: counted only. */
static _Atomic(int) notified;
static char notified_tag[64];
static void on_budget(const char *tag, uint64_t limit, uint64_t charged, void *arg) {
  CHECK(arg == (void *)&notified && charged > limit, "callback %s %llu/%llu", tag, (unsigned long long)charged,
        (unsigned long long)limit);
  snprintf(notified_tag, sizeof notified_tag, "%s", tag);
  void *p = malloc(100); /* outside the allocator's locks: it may allocate */
  free(p);
  atomic_fetch_add(&notified, 1);
}

static void test_notify_and_observe(void) {
  tagalloc_set_budget_callback(on_budget, &notified);
  CHECK(tagalloc_set_budget("b-note", 256 << 10, TAGALLOC_BUDGET_NOTIFY) == 0, "set");
  CHECK(tagalloc_set_budget("b-watch", 256 << 10, TAGALLOC_BUDGET_OBSERVE) == 0, "set");
  for (int round = 0; round < 2; round++) {
    const char *tags[] = {"b-note", "b-watch"};
    for (int k = 0; k < 2; k++) {
      SetHeapBlockTagForThread(tags[k]);
      void *held[64];
      for (int i = 0; i < 64; i++) {
        /* 200,000 bytes, then 63 x 8000: 700 KB, past the budget once */
        held[i] = malloc(i == 0 ? 200000 : 8000);
        CHECK(held[i] != NULL, "%s: refused", tags[k]);
      }
      ClearHeapBlockTagForThread();
      /* the large block last: its free is counted out of line, where the
       * set gives back what it reserved, and the budget re-arms */
      for (int i = 63; i >= 0; i--) free(held[i]);
      CHECK(budget_of(tags[k]).charged <= (256 << 10), "%s: charged %llu after the frees", tags[k],
            (unsigned long long)budget_of(tags[k]).charged);
    }
    CHECK(atomic_load(&notified) == round + 1, "round %d: %d callbacks", round, atomic_load(&notified));
  }
  CHECK(strcmp(notified_tag, "b-note") == 0, "callback for %s", notified_tag);
  tagalloc_budget_stats_t n = budget_of("b-note"), w = budget_of("b-watch");
  CHECK(n.crossings == 2 && n.refused == 0, "notify: %llu crossings, %llu refused", (unsigned long long)n.crossings,
        (unsigned long long)n.refused);
  CHECK(w.crossings == 2 && w.refused == 0, "observe: %llu crossings", (unsigned long long)w.crossings);
  tagalloc_set_budget_callback(NULL, NULL);
}

/* 8 threads race past a notify budget and an observe budget: nothing is
 * refused, and the callback ran once per crossing counted. */
static _Atomic(int) race_notified;
static void on_race_budget(const char *tag, uint64_t limit, uint64_t charged, void *arg) {
  (void)tag, (void)limit, (void)charged, (void)arg;
  atomic_fetch_add(&race_notified, 1);
}

static void test_notify_observe_racing(void) {
  const char *tags[] = {"b-nrace/worker", "b-orace/worker"};
  const char *levels[] = {"b-nrace", "b-orace"};
  int policies[] = {TAGALLOC_BUDGET_NOTIFY, TAGALLOC_BUDGET_OBSERVE};
  tagalloc_set_budget_callback(on_race_budget, NULL);
  for (int k = 0; k < 2; k++) {
    CHECK(tagalloc_set_budget(levels[k], 1 << 20, policies[k]) == 0, "set");
    race_tag = tags[k];
    atomic_store(&race_refused, 0);
    atomic_store(&race_live_max, 0);
    pthread_t t[RACERS];
    for (long i = 0; i < RACERS; i++) pthread_create(&t[i], NULL, racer, (void *)i);
    for (int i = 0; i < RACERS; i++) pthread_join(t[i], NULL);
    tagalloc_budget_stats_t b = budget_of(levels[k]);
    CHECK(atomic_load(&race_refused) == 0 && b.refused == 0, "%s: refused %ld", levels[k], atomic_load(&race_refused));
    CHECK(atomic_load(&race_live_max) > (1 << 20) && b.crossings >= 1, "%s: live reached %zu, %llu crossings", levels[k],
          atomic_load(&race_live_max), (unsigned long long)b.crossings);
    if (k == 0) CHECK((uint64_t)atomic_load(&race_notified) == b.crossings, "%d callbacks, %llu crossings",
                      atomic_load(&race_notified), (unsigned long long)b.crossings);
  }
  CHECK((uint64_t)atomic_load(&race_notified) == budget_of("b-nrace").crossings, "observe called back");
  tagalloc_set_budget_callback(NULL, NULL);
  race_tag = "b-race/worker";
}

/* Nested budgets: gfx (2 MiB) over gfx/webgl (1 MiB) and gfx/video. The
 * inner one refuses webgl at 1 MiB; the outer one refuses video when the
 * two together reach 2 MiB; a budget set on a tag already in use counts
 * what it holds. */
static void test_nested(void) {
  SetHeapBlockTagForThread("b-gfx/video");
  void *early = malloc(300000); /* before any budget */
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_set_budget("b-gfx/webgl", 1 << 20, TAGALLOC_BUDGET_FAIL) == 0, "inner");
  CHECK(tagalloc_set_budget("b-gfx", 2 << 20, TAGALLOC_BUDGET_FAIL) == 0, "outer");
  CHECK(budget_of("b-gfx").charged >= malloc_usable_size(early), "the outer budget counts what was there");
  void *w[64], *v[64];
  int nw = 0, nv = 0;
  SetHeapBlockTagForThread("b-gfx/webgl");
  while (nw < 64 && (w[nw] = malloc(100000)) != NULL) nw++;
  ClearHeapBlockTagForThread();
  size_t lw = live_of("b-gfx/webgl");
  CHECK(lw <= (1 << 20) && lw + 100000 + SLACK > (1 << 20), "webgl stopped at %zu", lw);
  SetHeapBlockTagForThread("b-gfx/video");
  while (nv < 64 && (v[nv] = malloc(100000)) != NULL) nv++;
  ClearHeapBlockTagForThread();
  size_t lv = live_of("b-gfx/video");
  CHECK(lw + lv <= (2 << 20) && lw + lv + 100000 + 2 * SLACK > (2 << 20), "gfx stopped at %zu + %zu", lw, lv);
  CHECK(budget_of("b-gfx/webgl").refused == 1 && budget_of("b-gfx").refused == 1, "one refusal each");
  while (nw) free(w[--nw]);
  while (nv) free(v[--nv]);
  free(early);
  t_check_books();
}

int main(int argc, char **argv) {
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 2;
  }
  (void)argc, (void)argv;
  RUN(test_bad_input);
  RUN(test_fail_one_thread);
  RUN(test_fail_realloc_chain);
  RUN(test_fail_racing);
  RUN(test_notify_and_observe);
  RUN(test_notify_observe_racing);
  RUN(test_nested);
  return t_summary();
}
