/* stress_test.c: seeded multi-threaded stress. Threads allocate blocks of
 * random sizes through every entry point, write a pattern into each, hand
 * some to other threads through a shared exchange (cross-thread frees),
 * realloc some, pass an idle point now and then (a condition-variable
 * wait whose deadline has passed: the library gives their empty pages
 * back there), and check every block's pattern before freeing it. Threads
 * exit and are replaced (their caches go back), and the main thread forks
 * children that keep allocating without exec.
 *
 * usage: stress_test SEED THREADS OPS_PER_THREAD ROUNDS [FORKS]
 *
 * After every round (threads joined, children reaped) the books are
 * checked against a walk of the heap (tagalloc_check_books aborts if a
 * tag's differ), in each forked child too with STRESS_CHECK_CHILD=1, and
 * at the end the tags the workers used must hold nothing. It prints "stress-stats: ops N enomem N peak_threads N
 * books_checks N lost_bytes N" (over the parent and its forked children).
 * With STRESS_ENOMEM_OK=1 in the environment (a run with injected mapping
 * failures, TAGALLOC_FAULT_EVERY), an allocation that fails with ENOMEM is
 * counted as survived (enomem) instead of as an error. */
#include "tcheck.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>

#include "../include/tagalloc.h"

#ifdef TA_TEST_PREFIX
#define pthread_create ta_test_pthread_create
int ta_test_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
#endif
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

typedef struct {
  void *p;
  size_t n;
  uint64_t salt;
} blk_t;

#define XSLOTS 1024
static _Atomic(blk_t *) exchange[XSLOTS];
static _Atomic(long) errors;
static uint64_t g_seed;
static long g_ops;

/* Figures over the parent and its forked children: a shared page. */
typedef struct {
  _Atomic(long) ops, enomem, live_threads, peak_threads, checks;
} shared_t;
static shared_t *g_shared, g_private;
static int g_enomem_ok;

/* A failed allocation: survived if it is ENOMEM and the run injects
 * failures, else an error. */
static void alloc_failed(const char *what, size_t n) {
  if (g_enomem_ok && errno == ENOMEM) {
    atomic_fetch_add(&g_shared->enomem, 1);
    return;
  }
  atomic_fetch_add(&errors, 1);
  fprintf(stderr, "%s of %zu failed (errno %d)\n", what, n, errno);
}

/* Fill or check at most 4 KiB at each end and a sample in between, so
 * multi-MiB blocks stay cheap while every block is still checked. */
static void fill(blk_t *b) {
  uint8_t *p = b->p;
  size_t n = b->n;
  if (n <= 8192) { t_fill(p, n, b->salt); return; }
  t_fill(p, 4096, b->salt);
  t_fill(p + n - 4096, 4096, b->salt ^ 1);
  for (size_t i = 4096; i < n - 4096; i += 4093) p[i] = t_pattern(p, i, b->salt);
}
static int verify(const blk_t *b) {
  const uint8_t *p = b->p;
  size_t n = b->n;
  if (n <= 8192) return t_verify(p, n, b->salt);
  if (!t_verify(p, 4096, b->salt) || !t_verify(p + n - 4096, 4096, b->salt ^ 1)) return 0;
  for (size_t i = 4096; i < n - 4096; i += 4093)
    if (p[i] != t_pattern(p, i, b->salt)) return 0;
  return 1;
}

static size_t rand_size(uint64_t *s) {
  uint64_t r = t_rand(s) % 1000;
  if (r < 600) return t_rand(s) % 129;           /* tiny */
  if (r < 900) return t_rand(s) % 4096;          /* small */
  if (r < 995) return t_rand(s) % (512 << 10);   /* medium classes */
  if (t_rand(s) % 16) return (512 << 10) + t_rand(s) % (4 << 20); /* large */
  return (32 << 20) + t_rand(s) % (4 << 20);     /* huge */
}

static void *do_alloc(uint64_t *s, size_t n) {
  void *p = NULL;
  switch (t_rand(s) % 6) {
  case 0: p = calloc(1, n);
    if (p) for (size_t i = 0; i < n; i += 509) if (((uint8_t *)p)[i]) { atomic_fetch_add(&errors, 1); fprintf(stderr, "calloc(%zu) not zero at %zu\n", n, i); break; }
    break;
  case 1: { size_t a = (size_t)16 << (t_rand(s) % 10); p = aligned_alloc(a, n);
    if (p && ((uintptr_t)p & (a - 1))) { atomic_fetch_add(&errors, 1); fprintf(stderr, "aligned_alloc(%zu) misaligned %p\n", a, p); }
    break; }
  case 2: { int e = posix_memalign(&p, 64, n); if (e) { p = NULL; errno = e; } break; }
  default: p = malloc(n); break;
  }
  if (p && malloc_usable_size(p) < n) { atomic_fetch_add(&errors, 1); fprintf(stderr, "usable %zu < %zu\n", malloc_usable_size(p), n); }
  return p;
}

static void release(blk_t *b) {
  if (!verify(b)) {
    atomic_fetch_add(&errors, 1);
    fprintf(stderr, "block %p (%zu bytes) corrupted before free\n", b->p, b->n);
  }
  free(b->p);
  free(b);
}

/* An idle point that does not sleep: a timed wait whose deadline has
 * passed. The library gives the thread's empty pages back before it
 * (heap.c, _ta_heap_idle) while other threads free into them. */
static void idle_point(void) {
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  struct timespec past = {0, 0};
  pthread_mutex_lock(&m);
  int rc = pthread_cond_timedwait(&c, &m, &past);
  pthread_mutex_unlock(&m);
  if (rc != ETIMEDOUT) { atomic_fetch_add(&errors, 1); fprintf(stderr, "pthread_cond_timedwait returned %d\n", rc); }
}

static void *worker(void *arg) {
  uint64_t s = g_seed ^ ((uintptr_t)arg * 0x9E3779B97F4A7C15ull) ^ 1;
  /* some workers tag their blocks, some change tags as they go */
  char tag[16];
  snprintf(tag, sizeof tag, "stress-%d", (int)((uintptr_t)arg % 3));
  if ((uintptr_t)arg % 3) tagalloc_weak_set(tag);
  enum { SLOTS = 256 };
  blk_t *mine[SLOTS] = {0};
  long live = atomic_fetch_add(&g_shared->live_threads, 1) + 1;
  for (long peak = atomic_load(&g_shared->peak_threads); live > peak;)
    if (atomic_compare_exchange_weak(&g_shared->peak_threads, &peak, live)) break;
  for (long op = 0; op < g_ops; op++) {
    unsigned i = (unsigned)(t_rand(&s) % SLOTS);
    uint64_t r = t_rand(&s) % 100;
    if (mine[i] && r < 10) {
      /* realloc keeps the prefix */
      blk_t *b = mine[i];
      size_t n = rand_size(&s), keep = n < b->n ? n : b->n;
      blk_t old = *b;
      int ok = verify(b);
      errno = 0;
      void *q = realloc(b->p, n ? n : 1);
      if (!q) { alloc_failed("realloc", n ? n : 1); continue; }
      if (ok) {
        /* the prefix moved with the data: check it against the old pattern */
        const uint8_t *qp = q;
        size_t lim = keep < 4096 ? keep : 4096;
        for (size_t k = 0; k < lim; k++)
          if (qp[k] != t_pattern(old.p, k, old.salt)) { atomic_fetch_add(&errors, 1); fprintf(stderr, "realloc lost byte %zu\n", k); break; }
      }
      b->p = q;
      b->n = n ? n : 1;
      b->salt = t_rand(&s);
      fill(b);
      continue;
    }
    if (mine[i] && r < 40) {
      /* hand it to whichever thread takes this exchange slot next */
      blk_t *b = mine[i];
      mine[i] = NULL;
      blk_t *prev = atomic_exchange(&exchange[t_rand(&s) % XSLOTS], b);
      if (prev) release(prev);
      continue;
    }
    if (mine[i]) release(mine[i]);
    mine[i] = NULL;
    if (r == 99) tagalloc_weak_set(op & 1 ? "stress-odd" : "stress-even");
    else if (r == 98) tagalloc_weak_clear();
    else if (r == 97) idle_point();
    errno = 0;
    blk_t *b = malloc(sizeof *b);
    if (!b) { alloc_failed("malloc", sizeof *b); continue; }
    b->n = rand_size(&s);
    errno = 0;
    b->p = do_alloc(&s, b->n);
    if (!b->p) { size_t n = b->n; free(b); alloc_failed("allocation", n); continue; }
    b->salt = t_rand(&s);
    fill(b);
    mine[i] = b;
  }
  for (unsigned i = 0; i < SLOTS; i++)
    if (mine[i]) release(mine[i]);
  atomic_fetch_add(&g_shared->ops, g_ops);
  atomic_fetch_sub(&g_shared->live_threads, 1);
  return NULL;
}

/* A child forked without exec: keep allocating, with threads, then exit. */
static int child(uint64_t seed) {
  g_seed = seed;
  atomic_store(&errors, 0); /* the parent's, copied: not this child's */
  tagalloc_weak_set("forked-child"); /* its threads inherit it */
  g_ops = g_ops / 4 + 1;
  pthread_t t[2];
  int made[2] = {0, 0};
  for (long i = 0; i < 2; i++) made[i] = pthread_create(&t[i], NULL, worker, (void *)(i + 100)) == 0;
  worker((void *)99);
  for (int i = 0; i < 2; i++)
    if (made[i]) pthread_join(t[i], NULL);
  /* the child's books too: its heap holds the parent's blocks it copied,
   * some of them in the middle of a malloc or free of a parent thread
   * when it forked (STRESS_CHECK_CHILD=1: the soak sets it) */
  const char *cc = getenv("STRESS_CHECK_CHILD");
  if (cc && *cc == '1') {
    t_check_books();
    atomic_fetch_add(&g_shared->checks, 1);
  }
  return atomic_load(&errors) ? 1 : 0;
}

int main(int argc, char **argv) {
  if (argc < 5) {
    fprintf(stderr, "usage: %s SEED THREADS OPS ROUNDS [FORKS]\n", argv[0]);
    return 2;
  }
  g_seed = strtoull(argv[1], NULL, 0);
  int threads = atoi(argv[2]);
  g_ops = atol(argv[3]);
  int rounds = atoi(argv[4]);
  int forks = argc > 5 ? atoi(argv[5]) : 0;
  if (!t_tagalloc_active()) fprintf(stderr, "note: tagalloc is not loaded\n");
  const char *ok = getenv("STRESS_ENOMEM_OK");
  g_enomem_ok = ok && *ok == '1';
  g_shared = mmap(NULL, sizeof *g_shared, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (g_shared == MAP_FAILED) g_shared = &g_private;
  for (int r = 0; r < rounds; r++) {
    pthread_t *t = malloc(sizeof(pthread_t) * (size_t)threads);
    int *made = calloc((size_t)threads, sizeof(int));
    if (!t || !made) { /* only with injected failures: skip the round */
      alloc_failed("round", sizeof(pthread_t) * (size_t)threads);
      free(t);
      free(made);
      continue;
    }
    for (long i = 0; i < threads; i++) {
      int e = pthread_create(&t[i], NULL, worker, (void *)(i + (long)r * threads));
      made[i] = e == 0;
      if (e) { errno = e == EAGAIN ? ENOMEM : e; alloc_failed("pthread_create", 0); }
    }
    /* fork while the workers run: the child must not inherit a held lock */
    pid_t kids[16];
    int nk = 0;
    for (int f = 0; f < forks && nk < 16; f++) {
      pid_t pid = fork();
      if (pid == 0) _exit(child(g_seed + (uint64_t)r * 131 + (uint64_t)f));
      if (pid > 0) kids[nk++] = pid;
    }
    for (int i = 0; i < threads; i++)
      if (made[i]) pthread_join(t[i], NULL);
    free(t);
    free(made);
    for (int i = 0; i < nk; i++) {
      int st = 0;
      waitpid(kids[i], &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        atomic_fetch_add(&errors, 1);
        fprintf(stderr, "forked child %d failed: status %#x\n", kids[i], st);
      }
    }
    t_check_books(); /* a checkpoint: no other thread runs now */
    atomic_fetch_add(&g_shared->checks, 1);
  }
  for (int i = 0; i < XSLOTS; i++) {
    blk_t *b = atomic_exchange(&exchange[i], NULL);
    if (b) release(b);
  }
  t_check();
  t_check_books(); /* every tag's books equal a walk of the heap (aborts if not) */
  atomic_fetch_add(&g_shared->checks, 1);
  /* Every block the workers allocated is freed: their tags must hold
   * nothing (the books lost nothing, and charged nothing twice). */
  size_t lost = 0;
  static const char *const worker_tags[] = {"stress-0", "stress-1", "stress-2", "stress-odd", "stress-even"};
  for (size_t i = 0; i < sizeof worker_tags / sizeof *worker_tags; i++) {
    tagalloc_tag_stats_t st;
    if (tagalloc_weak_stats(worker_tags[i], &st) == 0 && st.live_bytes) {
      lost += st.live_bytes;
      atomic_fetch_add(&errors, 1);
      fprintf(stderr, "tag %s still holds %zu bytes in %zu blocks after every block was freed\n",
              worker_tags[i], st.live_bytes, st.live_blocks);
    }
  }
  long e = atomic_load(&errors);
  printf("stress: seed %llu threads %d ops %ld rounds %d forks %d: %ld errors\n",
         (unsigned long long)g_seed, threads, g_ops, rounds, forks, e);
  printf("stress-stats: ops %ld enomem %ld peak_threads %ld books_checks %ld lost_bytes %zu\n",
         atomic_load(&g_shared->ops), atomic_load(&g_shared->enomem), atomic_load(&g_shared->peak_threads), atomic_load(&g_shared->checks), lost);
  printf("%d passed, %d failed\n", e ? 0 : 1, e ? 1 : 0);
  return e ? 1 : 0;
}
