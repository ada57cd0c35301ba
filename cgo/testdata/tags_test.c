/* tags_test.c: exact per-tag books. Tags set on several threads, threads
 * created inside a tagged region, frees from other threads, realloc keeping
 * a block's tag, small, large and huge blocks, nesting, bad names and the
 * overflow tag. Every expected figure is computed from malloc_usable_size,
 * and checked against tagalloc_tag_stats exactly. */
#include "tcheck.h"

#include <pthread.h>

#include "../include/tagalloc.h"

#ifdef TA_TEST_PREFIX
#define pthread_create ta_test_pthread_create
int ta_test_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
#endif

typedef struct {
  size_t live_bytes, live_blocks, alloc_bytes, alloc_blocks;
} want_t;

static void expect(const char *tag, want_t w) {
  tagalloc_tag_stats_t s;
  int rc = tagalloc_tag_stats(tag, &s);
  CHECK(rc == 0, "tagalloc_tag_stats(%s) = %d", tag, rc);
  if (rc) return;
  CHECK(s.live_bytes == w.live_bytes, "%s live_bytes %zu, want %zu", tag, s.live_bytes, w.live_bytes);
  CHECK(s.live_blocks == w.live_blocks, "%s live_blocks %zu, want %zu", tag, s.live_blocks, w.live_blocks);
  CHECK(s.alloc_bytes == w.alloc_bytes, "%s alloc_bytes %zu, want %zu", tag, s.alloc_bytes, w.alloc_bytes);
  CHECK(s.alloc_blocks == w.alloc_blocks, "%s alloc_blocks %zu, want %zu", tag, s.alloc_blocks, w.alloc_blocks);
  CHECK(s.peak_live_bytes >= s.live_bytes, "%s peak %zu < live %zu", tag, s.peak_live_bytes, s.live_bytes);
}

static void add(want_t *w, void *p) {
  size_t u = malloc_usable_size(p);
  w->live_bytes += u;
  w->live_blocks++;
  w->alloc_bytes += u;
  w->alloc_blocks++;
}
static void sub(want_t *w, void *p) {
  w->live_bytes -= malloc_usable_size(p);
  w->live_blocks--;
}

static void test_basic(void) {
  want_t w = {0};
  CHECK(tagalloc_set_tag("basic") == 0, "set");
  void *ps[300];
  for (int i = 0; i < 300; i++) {
    /* small, medium and large */
    size_t n = i < 200 ? (size_t)(1 + i * 37) : i < 290 ? (size_t)(70000 + i * 911) : (size_t)(600000 + i * 4096);
    ps[i] = malloc(n);
    add(&w, ps[i]);
  }
  ClearHeapBlockTagForThread();
  void *other = malloc(1000); /* untagged: not ours */
  expect("basic", w);
  for (int i = 0; i < 300; i += 2) {
    sub(&w, ps[i]);
    free(ps[i]);
  }
  expect("basic", w);
  for (int i = 1; i < 300; i += 2) {
    sub(&w, ps[i]);
    free(ps[i]);
  }
  expect("basic", w);
  free(other);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats("basic", &s) == 0 && s.peak_live_bytes >= w.alloc_bytes / 2, "peak %zu", s.peak_live_bytes);
}

static void test_huge_and_aligned(void) {
  want_t w = {0};
  SetHeapBlockTagForThread("huge");
  void *h = malloc(40 << 20);
  add(&w, h);
  void *a = aligned_alloc(4096, 10000);
  add(&w, a);
  void *c = calloc(1000, 1000);
  add(&w, c);
  ClearHeapBlockTagForThread();
  expect("huge", w);
  sub(&w, h);
  free(h);
  sub(&w, a);
  free(a);
  sub(&w, c);
  free(c);
  expect("huge", w);
}

/* realloc keeps the block's tag, in place or moved, grown or shrunk. */
static void test_realloc_keeps_tag(void) {
  want_t w = {0};
  SetHeapBlockTagForThread("realloc");
  char *p = malloc(100);
  add(&w, p);
  ClearHeapBlockTagForThread();
  SetHeapBlockTagForThread("elsewhere");
  size_t steps[] = {5000, 70000, 700000, 3 << 20, 50 << 20, 1 << 20, 100, 10};
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
    size_t before = malloc_usable_size(p);
    char *q = realloc(p, steps[i]);
    CHECK(q != NULL, "realloc %zu", steps[i]);
    size_t after = malloc_usable_size(q);
    /* a move is a new block and a freed one; in place, bytes change */
    if (q != p) {
      w.alloc_blocks++;
      w.alloc_bytes += after;
    } else if (after > before) {
      w.alloc_bytes += after - before;
    }
    w.live_bytes += after;
    w.live_bytes -= before;
    p = q;
    expect("realloc", w);
  }
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats("elsewhere", &s) == ENOENT || s.alloc_blocks == 0, "the current tag got blocks realloc made");
  sub(&w, p);
  free(p);
  expect("realloc", w);
  ClearHeapBlockTagForThread();
}

/* Threads with their own tags; blocks freed by other threads; threads made
 * inside a tagged region inherit the tag. */
typedef struct {
  int id;
  void *blocks[200];
  want_t w;
} job_t;

static void *tagged_worker(void *arg) {
  job_t *j = arg;
  char name[32];
  snprintf(name, sizeof name, "worker-%d", j->id);
  SetHeapBlockTagForThread(name);
  for (int i = 0; i < 200; i++) {
    j->blocks[i] = malloc((size_t)(16 + (i * 131 + j->id * 7) % 3000));
    add(&j->w, j->blocks[i]);
  }
  /* free half here */
  for (int i = 0; i < 200; i += 2) {
    sub(&j->w, j->blocks[i]);
    free(j->blocks[i]);
    j->blocks[i] = NULL;
  }
  return NULL;
}

static void test_threads_and_cross_frees(void) {
  enum { N = 4 };
  pthread_t t[N];
  job_t jobs[N];
  memset(jobs, 0, sizeof jobs);
  for (int i = 0; i < N; i++) {
    jobs[i].id = i;
    pthread_create(&t[i], NULL, tagged_worker, &jobs[i]);
  }
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  char name[32];
  for (int i = 0; i < N; i++) {
    snprintf(name, sizeof name, "worker-%d", i);
    expect(name, jobs[i].w);
    /* main frees the rest: debited from the worker's tag */
    for (int k = 1; k < 200; k += 2) {
      sub(&jobs[i].w, jobs[i].blocks[k]);
      free(jobs[i].blocks[k]);
    }
    expect(name, jobs[i].w);
    CHECK(jobs[i].w.live_bytes == 0 && jobs[i].w.live_blocks == 0, "worker %d not all freed", i);
  }
}

static want_t inherit_w;
static void *inherit_child(void *arg) {
  void **out = arg;
  for (int i = 0; i < 10; i++) {
    out[i] = malloc(1000);
    add(&inherit_w, out[i]);
  }
  return NULL;
}

static void test_inherit(void) {
  void *blocks[10];
  SetHeapBlockTagForThread("parent");
  pthread_t t;
  pthread_create(&t, NULL, inherit_child, blocks);
  ClearHeapBlockTagForThread(); /* clearing the parent does not untag the child */
  pthread_join(t, NULL);
  expect("parent", inherit_w);
  for (int i = 0; i < 10; i++) {
    sub(&inherit_w, blocks[i]);
    free(blocks[i]);
  }
  expect("parent", inherit_w);
}

static void test_nesting(void) {
  want_t a = {0}, b = {0};
  CHECK(tagalloc_push_tag("outer") == 0, "push outer");
  void *p = malloc(50);
  add(&a, p);
  CHECK(tagalloc_push_tag("inner") == 0, "push inner");
  void *q = malloc(60);
  add(&b, q);
  tagalloc_pop_tag();
  void *r = malloc(70);
  add(&a, r);
  tagalloc_pop_tag();
  expect("outer", a);
  expect("inner", b);
  free(p);
  free(q);
  free(r);
}

static void test_bad_names(void) {
  char long_name[80];
  memset(long_name, 'x', sizeof long_name);
  long_name[64] = 0; /* 64 bytes: one too many */
  CHECK(tagalloc_set_tag("") == EINVAL, "empty name");
  CHECK(tagalloc_set_tag(NULL) == EINVAL, "NULL name");
  CHECK(tagalloc_set_tag(long_name) == EINVAL, "64-byte name");
  SetHeapBlockTagForThread(long_name); /* warns, no crash */
  long_name[63] = 0;                   /* 63 bytes: fine */
  CHECK(tagalloc_set_tag(long_name) == 0, "63-byte name");
  void *p = malloc(10);
  tagalloc_tag_stats_t s;
  CHECK(tagalloc_tag_stats(long_name, &s) == 0 && s.live_blocks == 1, "63-byte tag holds the block");
  free(p);
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_tag_stats("never-used-tag", &s) == ENOENT, "unknown tag");
  CHECK(tagalloc_tag_stats(NULL, &s) == EINVAL, "NULL query");
}

/* Past 4096 tags, blocks go to "overflow". Runs last: it fills the table. */
static void test_overflow(void) {
  tagalloc_tag_stats_t before, after;
  int had = tagalloc_tag_stats("overflow", &before) == 0;
  char name[32];
  for (int i = 0; i < 4200; i++) {
    snprintf(name, sizeof name, "many-%d", i);
    CHECK(tagalloc_set_tag(name) == 0, "set %s", name);
  }
  void *p = malloc(100); /* under "many-4199": past the limit */
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_tag_stats("overflow", &after) == 0, "overflow tag exists");
  CHECK(after.live_blocks == (had ? before.live_blocks : 0) + 1, "block charged to overflow: %zu", after.live_blocks);
  free(p);
}

/* With TAGALLOC_REQUESTED=1, live_requested_bytes is exact: the sum of the
 * sizes asked for, over the tag's live blocks, through realloc in place and
 * moved, and frees from other threads. Without it, (size_t)-1. */
static size_t req_live;
static void *req_freer(void *arg) {
  void **ps = arg;
  for (int i = 0; i < 50; i++) free(ps[i]);
  return NULL;
}

static void test_requested(void) {
  tagalloc_tag_stats_t s;
  int on = getenv("TAGALLOC_REQUESTED") && getenv("TAGALLOC_REQUESTED")[0] == '1';
  SetHeapBlockTagForThread("req");
  static void *ps[200];
  static size_t ns[200];
  req_live = 0;
  for (int i = 0; i < 200; i++) {
    ns[i] = i < 150 ? (size_t)(1 + i * 13) : i < 190 ? (size_t)(70001 + i) : (size_t)(700001 + i * 4096);
    ps[i] = i % 3 == 0 ? calloc(1, ns[i]) : i % 3 == 1 ? aligned_alloc(64, ns[i]) : malloc(ns[i]);
    req_live += ns[i];
  }
  void *h = malloc(40 << 20);
  req_live += 40 << 20;
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_tag_stats("req", &s) == 0, "stats");
  if (!on) {
    CHECK(s.live_requested_bytes == (size_t)-1, "requested bytes without TAGALLOC_REQUESTED: %zu", s.live_requested_bytes);
    for (int i = 0; i < 200; i++) free(ps[i]);
    free(h);
    return;
  }
  CHECK(s.live_requested_bytes == req_live, "live requested %zu, want %zu", s.live_requested_bytes, req_live);
  /* realloc: in place (smaller, same class) and moved (bigger), huge too */
  for (int i = 50; i < 200; i += 7) {
    size_t n = i % 2 ? ns[i] - ns[i] / 8 : ns[i] * 3;
    void *q = realloc(ps[i], n);
    CHECK(q != NULL, "realloc");
    req_live += n;
    req_live -= ns[i];
    ps[i] = q;
    ns[i] = n;
  }
  h = realloc(h, (50 << 20) + 1);
  req_live += 10 << 20;
  req_live += 1;
  CHECK(tagalloc_tag_stats("req", &s) == 0 && s.live_requested_bytes == req_live, "after realloc: %zu, want %zu",
        s.live_requested_bytes, req_live);
  /* frees from another thread */
  pthread_t t;
  pthread_create(&t, NULL, req_freer, ps);
  pthread_join(t, NULL);
  for (int i = 0; i < 50; i++) req_live -= ns[i];
  CHECK(tagalloc_tag_stats("req", &s) == 0 && s.live_requested_bytes == req_live, "after remote frees: %zu, want %zu",
        s.live_requested_bytes, req_live);
  for (int i = 50; i < 200; i++) free(ps[i]);
  free(h);
  CHECK(tagalloc_tag_stats("req", &s) == 0 && s.live_requested_bytes == 0 && s.live_blocks == 0, "all freed: %zu",
        s.live_requested_bytes);
}

/* With TAGALLOC_TAG=NAME (and TAGS_TEST_DEFAULT=NAME), untagged memory is
 * charged to NAME and there is no "untagged". */
static void test_default_tag(void) {
  const char *name = getenv("TAGS_TEST_DEFAULT");
  tagalloc_tag_stats_t s;
  if (!name) {
    void *p = malloc(100);
    CHECK(tagalloc_tag_stats("untagged", &s) == 0 && s.live_blocks >= 1, "untagged holds the untagged block");
    free(p);
    return;
  }
  void *p = malloc(100);
  CHECK(tagalloc_tag_stats(name, &s) == 0 && s.live_blocks >= 1, "%s holds the untagged block", name);
  CHECK(tagalloc_tag_stats("untagged", &s) == ENOENT, "\"untagged\" exists though TAGALLOC_TAG is set");
  free(p);
}

static void test_active(void) { CHECK(t_tagalloc_active(), "tagalloc is not the allocator in this process"); }

/* The accounting identity: the books of every tag equal a walk of the heap
 * (threads are joined; some blocks stay live under several tags). */
static void *books_worker(void *arg) {
  char name[16];
  snprintf(name, sizeof name, "books-%d", (int)(intptr_t)arg);
  SetHeapBlockTagForThread(name);
  void **keep = malloc(100 * sizeof(void *));
  for (int i = 0; i < 100; i++) keep[i] = malloc((size_t)(i * 97 % 5000 + 1));
  for (int i = 0; i < 100; i += 3) free(keep[i]); /* some freed here */
  return keep;                                  /* the rest later, elsewhere */
}

static void test_books_equal_heap(void) {
  pthread_t t[3];
  void **kept[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], NULL, books_worker, (void *)(intptr_t)i);
  for (int i = 0; i < 3; i++) pthread_join(t[i], (void **)&kept[i]);
  SetHeapBlockTagForThread("books-main");
  void *big = malloc(3 << 20), *huge = malloc(40 << 20);
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_check_books() > 5, "books checked");
  for (int i = 0; i < 3; i++) {
    for (int k = 1; k < 100; k++)
      if (k % 3) free(kept[i][k]); /* cross-thread frees, owners gone */
    free(kept[i]);
  }
  CHECK(tagalloc_check_books() > 5, "books checked after cross-thread frees");
  free(big);
  free(huge);
  CHECK(tagalloc_check_books() > 5, "books checked at the end");
}

int main(void) {
  RUN(test_active);
  if (t_failed) return t_summary();
  RUN(test_default_tag);
  RUN(test_requested);
  RUN(test_basic);
  RUN(test_huge_and_aligned);
  RUN(test_realloc_keeps_tag);
  RUN(test_threads_and_cross_frees);
  RUN(test_inherit);
  RUN(test_nesting);
  RUN(test_bad_names);
  RUN(test_overflow);
  RUN(test_books_equal_heap);
  return t_summary();
}
