/* nested_tags.c: allocate under tags named as paths (gfx, gfx/webgl/...,
 * net/...) on four threads, free part of each thread's blocks from the
 * main thread (cross-thread frees), and print the library's own books as
 * "books NAME live_bytes live_blocks alloc_bytes alloc_blocks". With
 * argv[1] "wait", then prints "ready PID" and waits until its standard
 * input closes (for top). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../cgo/include/tagalloc.h"

static const char *names[] = {
    "gfx/webgl/textures", "gfx/webgl/buffers", "gfx", "gfx/layers", "net/cache", "net/socket",
};
#define NTAGS (int)(sizeof names / sizeof names[0])
#define NTHREADS 4
#define PER 64

static void *blocks[NTHREADS][NTAGS][PER];

static void *work(void *arg) {
  int t = (int)(long)arg;
  for (int k = 0; k < NTAGS; k++) {
    SetHeapBlockTagForThread(names[k]);
    for (int j = 0; j < PER; j++) {
      size_t n = 32 + (size_t)(k * 700 + j * 13 + t * 5);
      blocks[t][k][j] = malloc(n);
      memset(blocks[t][k][j], k, n);
    }
    ClearHeapBlockTagForThread();
  }
  return NULL;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IONBF, 0); /* no buffer to allocate under a tag */
  pthread_t th[NTHREADS];
  for (int t = 0; t < NTHREADS; t++) pthread_create(&th[t], NULL, work, (void *)(long)t);
  for (int t = 0; t < NTHREADS; t++) pthread_join(th[t], NULL);
  /* the main thread frees a third of every thread's blocks */
  for (int t = 0; t < NTHREADS; t++)
    for (int k = 0; k < NTAGS; k++)
      for (int j = 0; j < PER; j += 3) free(blocks[t][k][j]);
  for (int k = 0; k < NTAGS; k++) {
    tagalloc_tag_stats_t s;
    if (tagalloc_weak_stats(names[k], &s) == 0)
      printf("books %s %zu %zu %zu %zu\n", names[k], s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks);
  }
  if (argc > 1 && strcmp(argv[1], "wait") == 0) {
    printf("ready %d\n", (int)getpid());
    char c;
    while (read(0, &c, 1) > 0) {
    }
  }
  return 0;
}
