/* misuse_test.c MODE: one kind of misuse, which the allocator must catch
 * (abort with a message naming it); mode "data-matches" must not abort.
 * Run preloaded: the Go test (TestMisuse) checks the signal and stderr. */
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *victim;

static void *free_twice(void *arg) {
  (void)arg;
  free(victim);
  free(victim);
  return NULL;
}

static void *free_once(void *arg) {
  (void)arg;
  free(victim);
  return NULL;
}

/* Frees the victim, then stays alive (holding it, maybe, to push with
 * others: remote frees in batches) until main is done. */
static pthread_barrier_t freed, done;
static void *free_and_wait(void *arg) {
  (void)arg;
  free(malloc(16)); /* a heap of its own (a thread without one frees at once) */
  free(victim);
  pthread_barrier_wait(&freed);
  pthread_barrier_wait(&done);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  const char *m = argv[1];
  void *keep[8];
  for (int i = 0; i < 8; i++) keep[i] = malloc(64); /* the page stays in use */
  char *p = malloc(64);
  if (!strcmp(m, "double-free")) {
    free(p);
    free(p);
  } else if (!strcmp(m, "double-free-emptied")) {
    /* a block of a page its thread emptied: the page waits, no one's, for
     * the next thread that needs one of its class (heap.c, emptied pages
     * between threads) */
    void *full[200], *hold = NULL;
    for (int i = 0; i < 200; i++) full[i] = malloc(1000); /* 1 KiB blocks, 64 a page */
    hold = malloc(1000); /* the page malloc takes from stays in use */
    for (int i = 0; i < 64; i++) free(full[i]); /* the first page empties */
    free(full[5]);
    free(hold);
  } else if (!strcmp(m, "double-free-later")) { /* other frees between */
    free(p);
    free(keep[3]);
    free(keep[5]);
    free(p);
  } else if (!strcmp(m, "double-free-remote")) { /* from another thread */
    victim = p;
    pthread_t t;
    pthread_create(&t, NULL, free_twice, NULL);
    pthread_join(t, NULL);
    free(malloc(64)); /* the owner collects the remote list */
  } else if (!strcmp(m, "double-free-held") || !strcmp(m, "double-free-held-exit")) {
    /* another thread frees it (and holds it, or exits), then the owner */
    victim = p;
    pthread_barrier_init(&freed, NULL, 2);
    pthread_barrier_init(&done, NULL, 2);
    pthread_t t;
    pthread_create(&t, NULL, free_and_wait, NULL);
    pthread_barrier_wait(&freed);
    if (!strcmp(m, "double-free-held-exit")) {
      pthread_barrier_wait(&done);
      pthread_join(t, NULL);
    }
    free(p);
    free(malloc(64)); /* the owner collects the remote list */
  } else if (!strcmp(m, "double-free-large")) {
    void *q = malloc(1 << 20);
    free(q);
    free(q);
  } else if (!strcmp(m, "interior")) { /* misaligned: caught in the fast path */
    free(p + 8);
  } else if (!strcmp(m, "interior-remote")) { /* any, from another thread */
    victim = p + 16;
    pthread_t t;
    pthread_create(&t, NULL, free_once, NULL);
    pthread_join(t, NULL);
  } else if (!strcmp(m, "foreign")) {
    static char not_ours[64];
    free(not_ours);
  } else if (!strcmp(m, "usable-interior")) { /* malloc_usable_size's inline path */
    printf("%zu\n", malloc_usable_size(p + 16));
  } else if (!strcmp(m, "usable-freed-large")) {
    void *q = malloc(1 << 20);
    free(q);
    printf("%zu\n", malloc_usable_size(q));
  } else if (!strcmp(m, "usable-foreign")) {
    static char not_ours[64];
    printf("%zu\n", malloc_usable_size(not_ours));
  } else if (!strcmp(m, "realloc-freed")) {
    void *q = malloc(1 << 20);
    free(q);
    q = realloc(q, 2 << 20);
  } else if (!strcmp(m, "data-matches")) {
    /* every word of live blocks set to anything, freed once each: fine */
    for (int i = 0; i < 8; i++) {
      memset(keep[i], 0xa5 + i, 64);
      free(keep[i]);
    }
    free(p);
  } else {
    return 2;
  }
  puts("survived");
  return 0;
}
