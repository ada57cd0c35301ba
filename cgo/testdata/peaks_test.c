/* peaks_test.c: exact per-tag peaks (tagalloc_tag_peak). A tag one thread
 * held has its exact peak, to the block, blips included; one several
 * threads held at once has bounds that contain the true peak, at most
 * 64 KiB per thread apart. Every expected figure is computed here from
 * malloc_usable_size. */
#include "tcheck.h"

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../include/tagalloc.h"

#define PER_THREAD_BOUND (64 * 1024)

static void peak_of(const char *tag, size_t *lo, size_t *up) {
  int rc = tagalloc_tag_peak(tag, lo, up);
  CHECK(rc == 0, "tagalloc_tag_peak(%s) = %d", tag, rc);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats(tag, &s) == 0 && s.peak_live_bytes == *lo, "%s: peak_live_bytes %zu, lower %zu", tag,
        s.peak_live_bytes, *lo);
}

static void expect_exact(const char *tag, size_t want) {
  size_t lo = 0, up = 0;
  peak_of(tag, &lo, &up);
  CHECK(lo == want && up == want, "%s: peak %zu..%zu, want exactly %zu", tag, lo, up, want);
}

static void expect_bounded(const char *tag, size_t want, size_t bound) {
  size_t lo = 0, up = 0;
  peak_of(tag, &lo, &up);
  CHECK(lo <= want && want <= up, "%s: peak %zu..%zu does not hold the true %zu", tag, lo, up, want);
  CHECK(up - lo <= bound, "%s: peak %zu..%zu, bound %zu > %zu", tag, lo, up, up - lo, bound);
}

static void test_bad_input(void) {
  size_t lo, up;
  CHECK(tagalloc_tag_peak("never-used-tag", &lo, &up) == ENOENT, "unknown tag");
  CHECK(tagalloc_tag_peak("", &lo, &up) == EINVAL, "empty name");
  CHECK(tagalloc_tag_peak("x", NULL, &up) == EINVAL, "NULL out");
}

/* 48 small blocks held for an instant, then alloc-free pairs below it. */
static void test_blip(void) {
  size_t want = 0;
  void *b[48];
  SetHeapBlockTagForThread("p-blip");
  for (int i = 0; i < 48; i++) {
    b[i] = malloc(64);
    want += malloc_usable_size(b[i]);
  }
  for (int i = 0; i < 48; i++) free(b[i]);
  for (int i = 0; i < 100; i++) free(malloc(64));
  ClearHeapBlockTagForThread();
  expect_exact("p-blip", want);
}

/* Small, large and huge blocks in a random walk: the peak is the highest
 * live total at any instant. */
static void test_one_thread_walk(void) {
  enum { N = 600 };
  static void *p[N];
  size_t live = 0, want = 0;
  uint64_t seed = 42;
  SetHeapBlockTagForThread("p-walk");
  for (int step = 0; step < 20000; step++) {
    int i = (int)(t_rand(&seed) % N);
    if (p[i]) {
      live -= malloc_usable_size(p[i]);
      free(p[i]);
      p[i] = NULL;
      continue;
    }
    uint64_t r = t_rand(&seed) % 1000;
    size_t n = r < 900 ? 1 + r * 3 : r < 998 ? 70000 + r * 100 : (size_t)(8 << 20);
    p[i] = malloc(n);
    live += malloc_usable_size(p[i]);
    if (live > want) want = live;
  }
  for (int i = 0; i < N; i++) free(p[i]);
  ClearHeapBlockTagForThread();
  expect_exact("p-walk", want);
}

/* A block grown and shrunk by realloc below 1 MiB (small and large spans):
 * a move holds the old and the new block at once, a resize in place one. */
static void test_realloc_chain(void) {
  size_t want = 0;
  SetHeapBlockTagForThread("p-realloc");
  void *p = malloc(1);
  want = malloc_usable_size(p);
  for (size_t n = 2, up = 1; n > 16; n = up ? n * 5 / 4 + 1 : n / 3) {
    if (n >= (900 << 10)) up = 0, n = 900 << 10;
    size_t old = malloc_usable_size(p);
    void *q = realloc(p, n);
    size_t now = malloc_usable_size(q) + (q != p ? old : 0);
    if (now > want) want = now;
    p = q;
  }
  free(p);
  ClearHeapBlockTagForThread();
  expect_exact("p-realloc", want);
}

/* ---- several threads ----------------------------------------------------------- */

enum { NT = 4, PER = 256 };
static pthread_barrier_t bar;

static void *hold_at_once(void *arg) {
  (void)arg;
  void *b[PER];
  SetHeapBlockTagForThread("p-shared");
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++) b[i] = malloc(1024);
  pthread_barrier_wait(&bar); /* every thread holds its blocks */
  pthread_barrier_wait(&bar);
  for (int i = 0; i < PER; i++) free(b[i]);
  for (int r = 0; r < 3; r++) /* again, below the peak */
    for (int i = 0; i < PER / 2; i++) free(malloc(1024));
  return NULL;
}

static void test_threads_at_once(void) {
  pthread_t t[NT];
  pthread_barrier_init(&bar, NULL, NT + 1);
  for (int i = 0; i < NT; i++) pthread_create(&t[i], NULL, hold_at_once, NULL);
  pthread_barrier_wait(&bar);
  pthread_barrier_wait(&bar);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats("p-shared", &s) == 0, "stats");
  size_t want = s.live_bytes; /* the peak: every block is live now */
  void *one = malloc(1024);
  CHECK(want == (size_t)NT * PER * malloc_usable_size(one), "live %zu", want);
  free(one);
  pthread_barrier_wait(&bar);
  for (int i = 0; i < NT; i++) pthread_join(t[i], NULL);
  pthread_barrier_destroy(&bar);
  expect_bounded("p-shared", want, NT * PER_THREAD_BOUND);
}

/* A producer allocates batches that a consumer frees: the tag's live
 * figure never passes one batch, however much the producer allocated. */
enum { BATCH = 100, ROUNDS = 50 };
static void *batch[BATCH];
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int ready, done_rounds;

static void *consume(void *arg) {
  (void)arg;
  for (int r = 0; r < ROUNDS; r++) {
    pthread_mutex_lock(&mu);
    while (!ready) pthread_cond_wait(&cv, &mu);
    for (int i = 0; i < BATCH; i++) free(batch[i]);
    ready = 0;
    done_rounds++;
    pthread_cond_broadcast(&cv);
    pthread_mutex_unlock(&mu);
  }
  return NULL;
}

static void test_cross_thread(void) {
  pthread_t c;
  size_t want = 0;
  pthread_create(&c, NULL, consume, NULL);
  for (int r = 0; r < ROUNDS; r++) {
    size_t held = 0;
    SetHeapBlockTagForThread("p-cross");
    for (int i = 0; i < BATCH; i++) {
      batch[i] = malloc(512 + (size_t)r);
      held += malloc_usable_size(batch[i]);
    }
    ClearHeapBlockTagForThread();
    if (held > want) want = held;
    pthread_mutex_lock(&mu);
    ready = 1;
    pthread_cond_broadcast(&cv);
    while (done_rounds <= r) pthread_cond_wait(&cv, &mu);
    pthread_mutex_unlock(&mu);
  }
  pthread_join(c, NULL);
  expect_bounded("p-cross", want, 2 * PER_THREAD_BOUND);
}

/* A thread that exits holding its blocks; another frees them later. */
static size_t exit_held;
static void *alloc_and_exit(void *arg) {
  void **b = arg;
  SetHeapBlockTagForThread("p-exit");
  for (int i = 0; i < 1000; i++) {
    b[i] = malloc(200);
    exit_held += malloc_usable_size(b[i]);
  }
  ClearHeapBlockTagForThread();
  return NULL;
}

static void test_thread_exit(void) {
  static void *b[1000];
  pthread_t t;
  pthread_create(&t, NULL, alloc_and_exit, b);
  pthread_join(t, NULL);
  expect_exact("p-exit", exit_held); /* one thread held it: exact */
  for (int i = 0; i < 1000; i++) free(b[i]);
  /* now two threads counted it: the peak was exact when the second came */
  size_t lo, up;
  peak_of("p-exit", &lo, &up);
  CHECK(lo == exit_held && up >= lo, "p-exit after others' frees: %zu..%zu, want %zu", lo, up, exit_held);
}

/* tag's figures in a forked child: what it holds, what it allocated (alloc
 * bytes and blocks) and its peak, exactly. False, with the figures said,
 * if any differs. */
static int child_has(const char *tag, size_t live, size_t blocks, size_t alloc, size_t alloc_blocks, size_t peak) {
  tagalloc_tag_stats_t s;
  size_t lo = 0, up = 0;
  if (tagalloc_tag_stats(tag, &s) != 0 || tagalloc_tag_peak(tag, &lo, &up) != 0) return 0;
  if (s.live_bytes == live && s.live_blocks == blocks && s.alloc_bytes == alloc && s.alloc_blocks == alloc_blocks && lo == peak &&
      up == peak)
    return 1;
  fprintf(stderr, "child's %s: live %zu in %zu, alloc %zu in %zu, peak %zu..%zu; want live %zu in %zu, alloc %zu in %zu, peak %zu\n", tag,
          s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks, lo, up, live, blocks, alloc, alloc_blocks, peak);
  return 0;
}

/* A forked child's figures begin with its life: the blocks it inherited
 * count as allocated at its birth (none as freed), its peak starts at
 * them and stays exact; the parent's history (its peak, what it freed
 * before the fork) is its own. */
static void test_fork(void) {
  size_t want = 0, held = 0, more = 0;
  void *b[300];
  SetHeapBlockTagForThread("p-fork");
  for (int i = 0; i < 100; i++) {
    b[i] = malloc(100);
    want += malloc_usable_size(b[i]);
  }
  for (int i = 40; i < 100; i++) free(b[i]);
  for (int i = 0; i < 40; i++) held += malloc_usable_size(b[i]);
  /* the overflow tag, by its name: its own slot, pages away */
  SetHeapBlockTagForThread("overflow");
  free(malloc(3000));
  void *over = malloc(1000);
  size_t over_held = malloc_usable_size(over);
  ClearHeapBlockTagForThread();
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    int ok = child_has("p-fork", held, 40, held, 40, held) && child_has("overflow", over_held, 1, over_held, 1, over_held);
    SetHeapBlockTagForThread("p-fork");
    void *c[300];
    for (int i = 0; i < 300; i++) {
      c[i] = malloc(100);
      more += malloc_usable_size(c[i]);
    }
    ClearHeapBlockTagForThread();
    ok = ok && child_has("p-fork", held + more, 340, held + more, 340, held + more);
    for (int i = 0; i < 40; i++) free(b[i]);
    ok = ok && child_has("p-fork", more, 300, held + more, 340, held + more);
    for (int i = 0; i < 300; i++) free(c[i]);
    _exit(ok ? 0 : 1);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "the child's figures did not begin with its life (status %d)", st);
  expect_exact("p-fork", want);
  free(over);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats("p-fork", &s) == 0 && s.alloc_blocks == 100 && s.live_blocks == 40 && s.live_bytes == held,
        "the parent's p-fork after the child: alloc %zu blocks, live %zu in %zu", s.alloc_blocks, s.live_bytes, s.live_blocks);
  for (int i = 0; i < 40; i++) free(b[i]);
}

static void *hold_many(void *arg) {
  void **b = arg;
  SetHeapBlockTagForThread("p-fork-many");
  for (int i = 0; i < 64; i++) b[i] = malloc(1000);
  for (int i = 32; i < 64; i++) free(b[i]); /* 32 held */
  ClearHeapBlockTagForThread();
  return NULL;
}

/* Blocks a thread that vanished in the fork allocated, and a tag two
 * threads held: the child starts from what it holds, with exact bounds. */
static void test_fork_many(void) {
  void *b[64], *m[16];
  size_t held = 0, mine = 0;
  pthread_t t;
  CHECK(pthread_create(&t, NULL, hold_many, b) == 0, "pthread_create");
  pthread_join(t, NULL);
  SetHeapBlockTagForThread("p-fork-many");
  for (int i = 0; i < 16; i++) {
    m[i] = malloc(5000);
    mine += malloc_usable_size(m[i]);
  }
  ClearHeapBlockTagForThread();
  for (int i = 0; i < 32; i++) held += malloc_usable_size(b[i]);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    /* (no frees here: pages emptied would start the purger's thread,
     * which the thread sanitizer refuses after a multi-threaded fork) */
    _exit(child_has("p-fork-many", held + mine, 48, held + mine, 48, held + mine) ? 0 : 1);
  }
  int st = 0;
  CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0,
        "the child's figures did not begin with its life (status %d)", st);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats("p-fork-many", &s) == 0 && s.alloc_blocks == 80 && s.live_blocks == 48,
        "the parent's p-fork-many after the child: alloc %zu blocks, live %zu", s.alloc_blocks, s.live_blocks);
  for (int i = 0; i < 32; i++) free(b[i]);
  for (int i = 0; i < 16; i++) free(m[i]);
}

int main(void) {
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 2;
  }
  RUN(test_bad_input);
  RUN(test_blip);
  RUN(test_one_thread_walk);
  RUN(test_realloc_chain);
  RUN(test_threads_at_once);
  RUN(test_cross_thread);
  RUN(test_thread_exit);
  RUN(test_fork);
  RUN(test_fork_many);
  return t_summary();
}
