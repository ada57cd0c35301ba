/* forks_test.c: a child forked while other threads allocate and free
 * across threads has books equal to its heap, every time. Worker threads
 * malloc blocks of random sizes under tags of their own and hand half of
 * them to each other to free; the main thread forks FORKS children one
 * after another, and each child checks its books against a walk of its
 * heap (tagalloc_check_books aborts on the first tag that differs), then
 * allocates and frees under a tag of its own and checks again.
 *   forks_test [forks=1000] [threads=3] [seed=1] */
#include "tcheck.h"

#include <pthread.h>
#include <stdatomic.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../include/tagalloc.h"

#ifdef TA_TEST_PREFIX
#define pthread_create ta_test_pthread_create
int ta_test_pthread_create(pthread_t *, const pthread_attr_t *, void *(*)(void *), void *);
#endif

#define SLOTS 512
#define HAND 64

static atomic_int stop;
/* blocks handed from worker i to worker (i+1) % n, one slot each */
static _Atomic(void *) hand[8][HAND];
static int nthreads;

static void *work(void *arg) {
  int me = (int)(intptr_t)arg;
  char tag[16];
  snprintf(tag, sizeof tag, "fork-w%d", me);
  SetHeapBlockTagForThread(tag);
  uint64_t seed = 0x9e3779b97f4a7c15ull * (uint64_t)(me + 1);
  void *mine[SLOTS] = {0};
  while (!atomic_load_explicit(&stop, memory_order_relaxed)) {
    int i = (int)(t_rand(&seed) % SLOTS);
    free(mine[i]);
    uint64_t r = t_rand(&seed) % 100;
    mine[i] = malloc(r < 90 ? 1 + t_rand(&seed) % 2048 : r < 99 ? 70000 + t_rand(&seed) % 200000 : (size_t)(1 << 20));
    /* hand one block over, take one handed to us */
    int h = (int)(t_rand(&seed) % HAND);
    void *give = malloc(16 + t_rand(&seed) % 512);
    void *old = atomic_exchange(&hand[(me + 1) % nthreads][h], give);
    free(old);
    void *got = atomic_exchange(&hand[me][h], NULL);
    free(got);
  }
  for (int i = 0; i < SLOTS; i++) free(mine[i]);
  return NULL;
}

int main(int argc, char **argv) {
  int forks = argc > 1 ? atoi(argv[1]) : 1000;
  nthreads = argc > 2 ? atoi(argv[2]) : 3;
  if (nthreads < 1 || nthreads > 8 || forks < 1) {
    fprintf(stderr, "usage: forks_test [forks] [threads 1..8] [seed]\n");
    return 2;
  }
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 2;
  }
  pthread_t t[8];
  for (int i = 0; i < nthreads; i++) pthread_create(&t[i], NULL, work, (void *)(intptr_t)i);
  int failed = 0;
  for (int f = 0; f < forks; f++) {
    pid_t pid = fork();
    if (pid == 0) {
      t_check_books(); /* aborts if the copied books differ from the copied heap */
      SetHeapBlockTagForThread("fork-child");
      void *p[100];
      for (int i = 0; i < 100; i++) p[i] = malloc((size_t)(i * 37 + 1));
      for (int i = 0; i < 100; i += 2) free(p[i]);
      t_check_books();
      _exit(0);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "FAIL fork %d: child status %d\n", f, st);
      failed++;
    }
  }
  atomic_store(&stop, 1);
  for (int i = 0; i < nthreads; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < nthreads; i++)
    for (int h = 0; h < HAND; h++) free(atomic_exchange(&hand[i][h], NULL));
  t_check_books();
  printf("%d forks, %d children whose books differed from their heap\n", forks, failed);
  printf("%d passed, %d failed\n", failed ? 0 : 1, failed ? 1 : 0);
  return failed ? 1 : 0;
}
