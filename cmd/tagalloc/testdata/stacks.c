/* stacks.c: allocations from functions known by name, for the --stacks
 * tests: make_textures (tag "gpu", through a shared-library-like deep call
 * chain), parse_config (untagged, freed half), grow_buffer (realloc by a
 * small step: a just-enough chain); "pause" makes the textures again half
 * a second later; "peak" takes and frees 32 MiB under tag "scratch"
 * (scratch_phase: the heap's peak); "fork", "late", "children" and
 * "late-claim" fork. Prints each tag's exact books via
 * tagalloc_tag_stats ("NAME LIVE_BYTES LIVE_BLOCKS ALLOC_BYTES ALLOC_BLOCKS"). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "../../../cgo/include/tagalloc.h"

#define N 2000
static void *textures[N], *config[N];

__attribute__((noinline)) static void *make_texture(size_t n) { return malloc(n); }

__attribute__((noinline)) void make_textures(void) {
  for (int i = 0; i < N; i++) textures[i] = make_texture(4096);
}

__attribute__((noinline)) void parse_config(void) {
  for (int i = 0; i < N; i++) config[i] = malloc(64);
  for (int i = 0; i < N; i += 2) free(config[i]), config[i] = NULL;
}

__attribute__((noinline)) char *grow_buffer(void) {
  char *b = NULL;
  for (size_t n = 16; n <= 256 * 1024; n += 16) b = realloc(b, n);
  return b;
}

__attribute__((noinline)) char *grow_doubling(void) {
  char *b = NULL;
  for (size_t n = 16; n <= 256 * 1024; n *= 2) b = realloc(b, n);
  return b;
}

#define SCRATCH 4000
__attribute__((noinline)) void scratch_phase(void) {
  static void *s[SCRATCH];
  for (int i = 0; i < SCRATCH; i++) s[i] = malloc(8192);
  for (int i = 0; i < SCRATCH; i++) free(s[i]);
}

static void print(const char *tag) {
  tagalloc_tag_stats_t s;
  if (tagalloc_weak_stats(tag, &s) == 0)
    printf("%s %llu %llu %llu %llu\n", tag, (unsigned long long)s.live_bytes, (unsigned long long)s.live_blocks,
           (unsigned long long)s.alloc_bytes, (unsigned long long)s.alloc_blocks);
}

int main(int argc, char **argv) {
  if (argc > 1 && strcmp(argv[1], "late") == 0) {
    /* the parent allocates next to nothing before it forks (no sample: no
     * ring yet); its child makes a ring of its own at its first sample */
    free(malloc(16));
    pid_t pid = fork();
    if (pid == 0) {
      tagalloc_weak_set("gpu");
      make_textures();
      tagalloc_weak_clear();
      printf("child %d\n", (int)getpid());
      print("gpu");
      fflush(stdout);
      _exit(0);
    }
    waitpid(pid, NULL, 0);
    return 0;
  }
  printf("stacks\n");
  fflush(stdout);
  tagalloc_weak_set("gpu");
  make_textures();
  tagalloc_weak_clear();
  tagalloc_weak_set("config");
  parse_config();
  tagalloc_weak_clear();
  tagalloc_weak_set("grow");
  char *b = grow_buffer();
  char *d = grow_doubling();
  tagalloc_weak_clear();
  if (argc > 1 && strcmp(argv[1], "peak") == 0) {
    tagalloc_weak_set("scratch");
    scratch_phase();
    tagalloc_weak_clear();
  }
  if (argc > 1 && strcmp(argv[1], "pause") == 0) {
    /* a second round of textures half a second later: the timeline
     * keeps the two apart though the launcher drains both at the end */
    usleep(500 * 1000);
    tagalloc_weak_set("gpu");
    make_textures();
    tagalloc_weak_clear();
  }
  if (argc > 1 && strcmp(argv[1], "children") == 0) {
    /* three children forked after the parent's samples: one execs, one
     * exits at once, one frees a block it inherited (it prints its pid) */
    for (int k = 0; k < 3; k++) {
      fflush(stdout);
      pid_t pid = fork();
      if (pid == 0) {
        if (k == 0) execl("/bin/true", "true", (char *)NULL);
        if (k == 2) {
          for (int i = 0; i < N; i++) free(textures[i]), textures[i] = NULL;
          printf("freer %d\n", (int)getpid());
          fflush(stdout);
        }
        _exit(0);
      }
      waitpid(pid, NULL, 0);
    }
  }
  if (argc > 1 && strcmp(argv[1], "late-claim") == 0) {
    /* a child that waits while its parent forks 20 more (which exit at
     * once), then frees the textures it inherited: the parent's profile
     * no longer keeps a copy from that far back */
    int fds[2];
    if (pipe(fds) != 0) return 1;
    fflush(stdout);
    pid_t first = fork();
    if (first == 0) {
      char c;
      close(fds[1]);
      if (read(fds[0], &c, 1) != 1) _exit(1);
      for (int i = 0; i < N; i++) free(textures[i]), textures[i] = NULL;
      printf("freer %d\n", (int)getpid());
      fflush(stdout);
      _exit(0);
    }
    close(fds[0]);
    for (int k = 0; k < 20; k++) {
      pid_t pid = fork();
      if (pid == 0) _exit(0);
      waitpid(pid, NULL, 0);
    }
    usleep(100 * 1000); /* the launcher drains the parent's forks meanwhile */
    if (write(fds[1], "x", 1) != 1) return 1;
    waitpid(first, NULL, 0);
  }
  if (argc > 1 && strcmp(argv[1], "fork") == 0) {
    /* a child forked without exec: frees some blocks it inherited and
     * allocates more; its report is its own, inherited blocks included */
    pid_t pid = fork();
    if (pid == 0) {
      for (int i = 0; i < N; i += 4) free(textures[i]), textures[i] = NULL;
      tagalloc_weak_set("config");
      parse_config();
      tagalloc_weak_clear();
      printf("child %d\n", (int)getpid());
      print("gpu");
      print("config");
      fflush(stdout);
      _exit(0);
    }
    waitpid(pid, NULL, 0);
  }
  printf("parent %d\n", (int)getpid());
  print("gpu");
  print("config");
  print("grow");
  print("scratch");
  fflush(stdout);
  (void)b, (void)d; /* kept: the report's live figures match the ones printed */
  return 0;
}
