/* tagged.c: allocate under known tags, print the library's own books for
 * them (name live_bytes live_blocks alloc_bytes alloc_blocks), then exit
 * normally, or die of SIGKILL with the blocks still live (argv[1] "kill"),
 * or fork a child that allocates under its own tag first ("fork"; the
 * parent names 150 tags more before, so that the books a child copies
 * run over several pages with pages of zeros between them; "fork-lost":
 * the same with the books directory renamed away first). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../cgo/include/tagalloc.h"

static void show(const char *tag) {
  tagalloc_tag_stats_t s;
  if (tagalloc_weak_stats(tag, &s) != 0) return;
  printf("%s %zu %zu %zu %zu\n", tag, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  static void *keep[3000];
  int k = 0;
  tagalloc_weak_set("alpha");
  for (int i = 0; i < 1000; i++) keep[k++] = malloc((size_t)(i % 300) + 1);
  tagalloc_weak_set("beta");
  for (int i = 0; i < 50; i++) keep[k++] = malloc(100000 + (size_t)i * 1000);
  keep[k++] = malloc(40 << 20);
  tagalloc_weak_clear();
  for (int i = 0; i < 1000; i += 2) free(keep[i]); /* half of alpha */
  if (strcmp(mode, "fork-lost") == 0) { /* the books directory is gone when the child is forked */
    const char *dir = getenv("TAGALLOC_DIR");
    char gone[4096];
    snprintf(gone, sizeof gone, "%s.gone", dir);
    if (rename(dir, gone) != 0) return 4;
    mode = "fork";
  }
  if (strcmp(mode, "fork") == 0) {
    static void *many[150];
    char name[16];
    for (int i = 0; i < 150; i++) {
      snprintf(name, sizeof name, "t%d", i);
      tagalloc_weak_set(name);
      many[i] = malloc(64 + (size_t)i);
    }
    tagalloc_weak_clear();
    pid_t pid = fork();
    if (pid == 0) {
      tagalloc_weak_set("child");
      void *p = malloc(12345);
      (void)p;
      tagalloc_weak_clear(); /* printf's buffer is not the child tag's */
      show("child");
      show("t149");
      fflush(stdout);
      _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
  }
  show("alpha");
  show("beta");
  fflush(stdout);
  if (strcmp(mode, "kill") == 0) kill(getpid(), SIGKILL);
  return 3;
}
