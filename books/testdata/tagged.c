/* tagged.c: allocate under known tags, print the library's own books for
 * them (name live_bytes live_blocks alloc_bytes alloc_blocks, and the
 * tag's peak as this program computes it from malloc_usable_size, or 0
 * where it does not), then exit
 * normally, or die of SIGKILL with the blocks still live (argv[1] "kill"),
 * or fork a child that allocates under its own tag first ("fork"; the
 * parent names 150 tags more before, so that the books a child copies
 * run over several pages with pages of zeros between them; "fork-lost":
 * the same with the books directory renamed away first). */
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../cgo/include/tagalloc.h"

static void show(const char *tag, size_t peak) {
  tagalloc_tag_stats_t s;
  if (tagalloc_weak_stats(tag, &s) != 0) return;
  printf("%s %zu %zu %zu %zu %zu\n", tag, s.live_bytes, s.live_blocks, s.alloc_bytes, s.alloc_blocks, peak);
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "exit";
  static void *keep[3000];
  int k = 0;
  size_t alpha = 0, beta = 0, blip = 0; /* the tags' peaks */
  tagalloc_weak_set("alpha");
  for (int i = 0; i < 1000; i++) {
    keep[k] = malloc((size_t)(i % 300) + 1);
    alpha += malloc_usable_size(keep[k++]);
  }
  tagalloc_weak_set("beta");
  for (int i = 0; i < 50; i++) {
    keep[k] = malloc(100000 + (size_t)i * 1000);
    beta += malloc_usable_size(keep[k++]);
  }
  keep[k] = malloc(40 << 20);
  beta += malloc_usable_size(keep[k++]);
  /* a blip: held for an instant, never seen by a query */
  tagalloc_weak_set("blip");
  void *b[48];
  for (int i = 0; i < 48; i++) {
    b[i] = malloc(64);
    blip += malloc_usable_size(b[i]);
  }
  for (int i = 0; i < 48; i++) free(b[i]);
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
      show("child", 0);
      show("t149", 0);
      fflush(stdout);
      _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
  }
  show("alpha", alpha);
  show("beta", beta);
  show("blip", blip);
  fflush(stdout);
  if (strcmp(mode, "kill") == 0) kill(getpid(), SIGKILL);
  return 3;
}
