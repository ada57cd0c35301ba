/* tags_test.c: exact per-tag books. Tags set on several threads, threads
 * created inside a tagged region, frees from other threads, realloc keeping
 * a block's tag, small, large and huge blocks, nesting, bad names and the
 * overflow tag. Every expected figure is computed from malloc_usable_size,
 * and checked against tagalloc_tag_stats exactly. */
#include "tcheck.h"

#include <pthread.h>
#include <stdbool.h>

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
  bool own_mapping = false; /* the block has a mapping of its own (huge.c) */
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
    size_t before = malloc_usable_size(p);
    char *q = realloc(p, steps[i]);
    CHECK(q != NULL, "realloc %zu", steps[i]);
    size_t after = malloc_usable_size(q);
    /* a move is a new block and a freed one; in place, bytes change. A
     * block in a mapping of its own that stays over 512 KiB is resized
     * with mremap, which may move it without a copy: the same block. Which
     * blocks get there depends on the arena's state (a large span that
     * cannot grow in place moves to its own mapping past 8 MiB,
     * TA_REALLOC_MAP). */
    bool remapped = own_mapping && steps[i] > (512u << 10);
    own_mapping = remapped || (q != p && steps[i] >= (8u << 20));
    if (q != p && !remapped) {
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
  /* a name is a path of levels (docs/tag-trees.md): none empty, "." or ".." */
  static const char *bad[] = {"a//b", "/a", "a/", "/", "a/../b", "..", ".", "gfx/./x", "x/.."};
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    CHECK(tagalloc_set_tag(bad[i]) == EINVAL, "bad path %s", bad[i]);
    CHECK(tagalloc_push_tag(bad[i]) == EINVAL, "bad path %s pushed", bad[i]);
  }
  static const char *good[] = {"gfx/webgl/textures", "a/b", "...", "a.b/.c", "x/..y"};
  for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) CHECK(tagalloc_set_tag(good[i]) == 0, "path %s", good[i]);
  ClearHeapBlockTagForThread();
}

/* Past 4096 tags, blocks go to "overflow". Runs last: it fills the table. */
/* A name set again from the same address is found by its address first
 * (the heap's tag_names, tags.c): the bytes there decide, so a buffer
 * reused for another name (longer, shorter, one byte apart) switches to
 * that name's tag, and a literal and a buffer holding the same name are
 * one tag. */
static void test_reused_name_buffer(void) {
  static const char *names[] = {"reuse-a", "reuse-b", "reuse", "reuse-a/longer"};
  static const int order[] = {0, 1, 2, 3, 0, 2, 1, 3, 3, 0, 0, 1};
  want_t w[4] = {{0}};
  void *ps[3][12];
  char buf[32];
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < 12; i++) {
      int k = order[i];
      if (round == 1) {
        CHECK(tagalloc_set_tag(names[k]) == 0, "set %s", names[k]); /* the literal's address */
      } else {
        strcpy(buf, names[k]);
        CHECK(tagalloc_set_tag(buf) == 0, "set %s from the buffer", names[k]);
      }
      ps[round][i] = malloc((size_t)(40 + 16 * k));
      add(&w[k], ps[round][i]);
    }
  ClearHeapBlockTagForThread();
  /* pushed from the buffer too, nested as deep as the stack allows (the
   * names are noted now: the push that finds its name by address) */
  void *pushed[40];
  int npushed = 0, refused = 0;
  for (int i = 0; i < 40; i++) {
    int k = order[i % 12];
    strcpy(buf, names[k]);
    int rc = tagalloc_push_tag(buf);
    if (rc == EOVERFLOW) {
      refused++;
      continue;
    }
    CHECK(rc == 0, "push %s: %d", names[k], rc);
    pushed[npushed] = malloc((size_t)(40 + 16 * k));
    add(&w[k], pushed[npushed++]);
  }
  CHECK(npushed == 32 && refused == 8, "pushed %d, refused %d: the stack holds 32", npushed, refused);
  /* each pop restores the tag pushed before: a block after the pop of
   * push j is charged to push j-1's name */
  void *popped[32];
  for (int j = npushed - 1; j >= 1; j--) {
    tagalloc_pop_tag();
    popped[j] = malloc(100);
    add(&w[order[(j - 1) % 12]], popped[j]);
  }
  tagalloc_pop_tag();
  void *outside = malloc(1000);
  for (int k = 0; k < 4; k++) expect(names[k], w[k]);
  free(outside);
  for (int j = npushed - 1; j >= 1; j--) {
    sub(&w[order[(j - 1) % 12]], popped[j]);
    free(popped[j]);
  }
  for (int i = 0; i < npushed; i++) {
    sub(&w[order[i % 12]], pushed[i]);
    free(pushed[i]);
  }
  for (int round = 0; round < 3; round++)
    for (int i = 0; i < 12; i++) {
      sub(&w[order[i]], ps[round][i]);
      free(ps[round][i]);
    }
  for (int k = 0; k < 4; k++) expect(names[k], w[k]);
}

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
  /* a large block grown 64 bytes at a time, then shrunk, within its 10
   * pages (realloc's fast path), by a thread of another tag */
  SetHeapBlockTagForThread("req");
  char *g = malloc(600000);
  ClearHeapBlockTagForThread();
  CHECK(g != NULL, "malloc 600000");
  size_t gn = 600000;
  req_live += gn;
  for (int k = 0; k < 500; k++) {
    char *q = realloc(g, gn + 64);
    CHECK(q == g, "a large block grown within its pages stays (%zu bytes)", gn + 64);
    g = q;
    gn += 64;
    req_live += 64;
  }
  g = realloc(g, gn - 1000);
  req_live -= 1000;
  gn -= 1000;
  CHECK(tagalloc_tag_stats("req", &s) == 0 && s.live_requested_bytes == req_live, "after growing in place: %zu, want %zu",
        s.live_requested_bytes, req_live);
  /* the same by a thread whose current tag is the block's (realloc's
   * inline count) */
  SetHeapBlockTagForThread("req");
  for (int k = 0; k < 100; k++) {
    char *q = realloc(g, k % 2 ? gn - 100 : gn + 164);
    CHECK(q == g, "a large block resized within its pages stays (%zu bytes)", gn);
    gn += k % 2 ? -(size_t)100 : 164;
    req_live += k % 2 ? -(size_t)100 : 164;
  }
  ClearHeapBlockTagForThread();
  CHECK(tagalloc_tag_stats("req", &s) == 0 && s.live_requested_bytes == req_live, "after resizing in place under its tag: %zu, want %zu",
        s.live_requested_bytes, req_live);
  free(g);
  req_live -= gn;
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

/* Many tags on many threads: each of MT_THREADS threads
 * allocates blocks of five sizes under each of MT_TAGS tags in turn; half
 * are freed by another thread, the rest by their own after every thread
 * allocated, and the allocating threads exit with blocks still live (their
 * pages are abandoned). The books stay exact per tag, equal a walk of the
 * heap, and what the process gains in resident memory stays near the
 * bytes the blocks hold: tags do not multiply pages. */
#define MT_THREADS 16
#define MT_TAGS 256
#define MT_SIZES 5
#define MT_PER 2
static const size_t mt_size[MT_SIZES] = {16, 64, 256, 1024, 2048};
static char mt_name[MT_TAGS][16];
static void *mt_block[MT_THREADS][MT_TAGS][MT_SIZES * MT_PER];
static size_t mt_usable[MT_THREADS][MT_TAGS][MT_SIZES * MT_PER]; /* at allocation */
static pthread_barrier_t mt_allocated, mt_freed;

static size_t mt_rss(void) {
  FILE *f = fopen("/proc/self/statm", "r");
  unsigned long pages = 0, rss = 0;
  if (f) {
    if (fscanf(f, "%lu %lu", &pages, &rss) != 2) rss = 0;
    fclose(f);
  }
  return rss * 4096;
}

static void *mt_worker(void *arg) {
  int id = (int)(intptr_t)arg;
  for (int t = 0; t < MT_TAGS; t++) {
    SetHeapBlockTagForThread(mt_name[t]);
    for (int k = 0; k < MT_SIZES * MT_PER; k++) {
      char *p = malloc(mt_size[k % MT_SIZES]);
      if (p) p[0] = (char)t;
      mt_block[id][t][k] = p;
      mt_usable[id][t][k] = p ? malloc_usable_size(p) : 0;
    }
  }
  ClearHeapBlockTagForThread();
  pthread_barrier_wait(&mt_allocated);
  /* odd tags: the next thread's blocks; even tags are left to main */
  int other = (id + 1) % MT_THREADS;
  for (int t = 1; t < MT_TAGS; t += 2)
    for (int k = 0; k < MT_SIZES * MT_PER; k++) free(mt_block[other][t][k]);
  pthread_barrier_wait(&mt_freed);
  return NULL; /* exits holding its even tags' blocks */
}

static void test_many_tags(void) {
  for (int t = 0; t < MT_TAGS; t++) snprintf(mt_name[t], sizeof mt_name[t], "mt-%d", t);
  pthread_barrier_init(&mt_allocated, NULL, MT_THREADS);
  pthread_barrier_init(&mt_freed, NULL, MT_THREADS);
  /* Earlier tests' free memory goes back first: the purger returning it
   * during the test made RSS fall, and the growth below wrapped around
   * (a CI run: "grew 18014398509464220 KiB"). */
  t_purge();
  size_t rss0 = mt_rss();
  pthread_t th[MT_THREADS];
  for (int i = 0; i < MT_THREADS; i++) pthread_create(&th[i], NULL, mt_worker, (void *)(intptr_t)i);
  for (int i = 0; i < MT_THREADS; i++) pthread_join(th[i], NULL);
  size_t rss1 = mt_rss();
  if (getenv("MT_VERBOSE")) fprintf(stderr, "many tags: rss %zu -> %zu KiB\n", rss0 >> 10, rss1 >> 10);
  /* what the even tags still hold, from malloc_usable_size */
  size_t held = 0;
  for (int t = 0; t < MT_TAGS; t++) {
    want_t w = {0};
    for (int i = 0; i < MT_THREADS; i++)
      for (int k = 0; k < MT_SIZES * MT_PER; k++) {
        void *p = mt_block[i][t][k];
        CHECK(p != NULL, "thread %d tag %d block %d", i, t, k);
        if (!p) continue;
        size_t u = mt_usable[i][t][k];
        w.alloc_bytes += u, w.alloc_blocks++;
        if (t % 2 == 0) w.live_bytes += u, w.live_blocks++;
      }
    held += w.live_bytes;
    expect(mt_name[t], w);
  }
  CHECK(tagalloc_check_books() > MT_TAGS, "books equal the heap, threads gone");
#ifndef __SANITIZE_THREAD__ /* the sanitizer's shadow memory is resident too */
  /* All blocks were live at once: twice what is held now. Allow a quarter
   * more, and per thread a partly used page of each of the 5 classes
   * (carved 4 KiB at a time) and its counters. Per-(thread, tag) heaps
   * needed 8x here. */
  size_t peak_data = 2 * held, slack = (size_t)MT_THREADS * MT_SIZES * 8192 + (4u << 20);
  size_t grew = rss1 > rss0 ? rss1 - rss0 : 0;
  CHECK(grew <= peak_data + peak_data / 4 + slack, "resident memory grew %zu KiB (%zu -> %zu) for %zu KiB of blocks", grew >> 10,
        rss0 >> 10, rss1 >> 10, peak_data >> 10);
#else
  (void)rss0, (void)rss1;
#endif
  for (int t = 0; t < MT_TAGS; t += 2)
    for (int i = 0; i < MT_THREADS; i++)
      for (int k = 0; k < MT_SIZES * MT_PER; k++) free(mt_block[i][t][k]); /* owners gone: abandoned pages */
  for (int t = 0; t < MT_TAGS; t++) {
    tagalloc_tag_stats_t s;
    CHECK(tagalloc_tag_stats(mt_name[t], &s) == 0 && s.live_bytes == 0 && s.live_blocks == 0, "tag %s still holds %zu bytes",
          mt_name[t], s.live_bytes);
  }
  CHECK(tagalloc_check_books() > MT_TAGS, "books equal the heap at the end");
  pthread_barrier_destroy(&mt_allocated);
  pthread_barrier_destroy(&mt_freed);
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
  RUN(test_many_tags);
  RUN(test_bad_names);
  RUN(test_reused_name_buffer);
  RUN(test_overflow);
  RUN(test_books_equal_heap);
  return t_summary();
}
