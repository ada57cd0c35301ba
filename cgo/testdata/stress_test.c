/* stress_test.c: seeded multi-threaded stress. Threads allocate blocks of
 * random sizes through every entry point, write a pattern into each, hand
 * some to other threads through a shared exchange (cross-thread frees),
 * realloc some, and check every block's pattern before freeing it. Threads
 * exit and are replaced (their caches go back), and the main thread forks
 * children that keep allocating without exec.
 *
 * usage: stress_test SEED THREADS OPS_PER_THREAD ROUNDS [FORKS] */
#include "tcheck.h"

#include <pthread.h>
#include <stdatomic.h>

#include "../include/tagalloc.h"

#ifdef TA_TEST_PREFIX
#define pthread_create ta_test_pthread_create
int ta_test_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
#endif
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
  case 2: if (posix_memalign(&p, 64, n) != 0) p = NULL; break;
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

static void *worker(void *arg) {
  uint64_t s = g_seed ^ ((uintptr_t)arg * 0x9E3779B97F4A7C15ull) ^ 1;
  /* some workers tag their blocks, some change tags as they go */
  char tag[16];
  snprintf(tag, sizeof tag, "stress-%d", (int)((uintptr_t)arg % 3));
  if ((uintptr_t)arg % 3) tagalloc_weak_set(tag);
  enum { SLOTS = 256 };
  blk_t *mine[SLOTS] = {0};
  for (long op = 0; op < g_ops; op++) {
    unsigned i = (unsigned)(t_rand(&s) % SLOTS);
    uint64_t r = t_rand(&s) % 100;
    if (mine[i] && r < 10) {
      /* realloc keeps the prefix */
      blk_t *b = mine[i];
      size_t n = rand_size(&s), keep = n < b->n ? n : b->n;
      blk_t old = *b;
      int ok = verify(b);
      void *q = realloc(b->p, n ? n : 1);
      if (!q) continue;
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
    blk_t *b = malloc(sizeof *b);
    if (!b) { atomic_fetch_add(&errors, 1); continue; }
    b->n = rand_size(&s);
    b->p = do_alloc(&s, b->n);
    if (!b->p) { free(b); atomic_fetch_add(&errors, 1); fprintf(stderr, "allocation of %zu failed\n", b->n); continue; }
    b->salt = t_rand(&s);
    fill(b);
    mine[i] = b;
  }
  for (unsigned i = 0; i < SLOTS; i++)
    if (mine[i]) release(mine[i]);
  return NULL;
}

/* A child forked without exec: keep allocating, with threads, then exit. */
static int child(uint64_t seed) {
  g_seed = seed;
  tagalloc_weak_set("forked-child"); /* its threads inherit it */
  g_ops = g_ops / 4 + 1;
  pthread_t t[2];
  for (long i = 0; i < 2; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 100));
  worker((void *)99);
  for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
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
  for (int r = 0; r < rounds; r++) {
    pthread_t *t = malloc(sizeof(pthread_t) * (size_t)threads);
    for (long i = 0; i < threads; i++) pthread_create(&t[i], NULL, worker, (void *)(i + (long)r * threads));
    /* fork while the workers run: the child must not inherit a held lock */
    pid_t kids[16];
    int nk = 0;
    for (int f = 0; f < forks && nk < 16; f++) {
      pid_t pid = fork();
      if (pid == 0) _exit(child(g_seed + (uint64_t)r * 131 + (uint64_t)f));
      if (pid > 0) kids[nk++] = pid;
    }
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    free(t);
    for (int i = 0; i < nk; i++) {
      int st = 0;
      waitpid(kids[i], &st, 0);
      if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        atomic_fetch_add(&errors, 1);
        fprintf(stderr, "forked child %d failed: status %#x\n", kids[i], st);
      }
    }
  }
  for (int i = 0; i < XSLOTS; i++) {
    blk_t *b = atomic_exchange(&exchange[i], NULL);
    if (b) release(b);
  }
  t_check();
  t_check_books(); /* every tag's books equal a walk of the heap (aborts if not) */
  long e = atomic_load(&errors);
  printf("stress: seed %llu threads %d ops %ld rounds %d forks %d: %ld errors\n",
         (unsigned long long)g_seed, threads, g_ops, rounds, forks, e);
  printf("%d passed, %d failed\n", e ? 0 : 1, e ? 1 : 0);
  return e ? 1 : 0;
}
