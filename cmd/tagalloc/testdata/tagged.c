/* tagged.c: allocate under known tags and print the library's own books
 * (name live_bytes live_blocks alloc_bytes alloc_blocks). Then, by argv[1]:
 * "exit" returns 7; "kill" dies of SIGKILL; "wait" prints "ready" and
 * waits until its standard input closes (for snapshot and top). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../cgo/include/tagalloc.h"

static void show(const char *tag) {
  tagalloc_tag_stats_t s;
  if (tagalloc_weak_stats(tag, &s) != 0) return;
  printf("%s %zu %zu %zu %zu\n", tag, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks);
  if (s.live_requested_bytes != (size_t)-1) printf("requested %s %zu\n", tag, s.live_requested_bytes);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  setvbuf(stdout, NULL, _IONBF, 0); /* no buffer to allocate under a tag */
  static void *keep[2000];
  tagalloc_weak_set("webgl-contexts");
  for (int i = 0; i < 500; i++) keep[i] = malloc(1000 + (size_t)i);
  tagalloc_weak_set("decoder");
  for (int i = 500; i < 600; i++) keep[i] = malloc(200000);
  tagalloc_weak_clear();
  for (int i = 0; i < 500; i += 5) free(keep[i]);
  show("webgl-contexts");
  show("decoder");
  if (strcmp(mode, "kill") == 0) kill(getpid(), SIGKILL);
  if (strcmp(mode, "wait") == 0) {
    printf("ready %d\n", (int)getpid());
    char c;
    while (read(0, &c, 1) > 0) {
    }
  }
  return 7;
}
