/* own_malloc.c: a program with an allocator of its own, as Chromium's
 * allocator shim is: it defines malloc and the rest of the family (here
 * passing them on to the C library's own), so the loader finds its
 * malloc before a preloaded library's, for the program, its libraries
 * and the C library alike.
 *   own_malloc [-f]
 * It allocates for 300 ms (with -f, a forked child does too, as a zygote's
 * children do), then exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);

void *malloc(size_t n) { return __libc_malloc(n); }
void free(void *p) { __libc_free(p); }
void *calloc(size_t n, size_t m) { return __libc_calloc(n, m); }
void *realloc(void *p, size_t n) { return __libc_realloc(p, n); }
void *memalign(size_t a, size_t n) { return __libc_memalign(a, n); }
void *aligned_alloc(size_t a, size_t n) { return __libc_memalign(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p = __libc_memalign(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

static void churn(void) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (int i = 0; i < 1000; i++) {
      char *s = strdup("a string the C library allocates"); /* its malloc: ours */
      if (!s) exit(3);
      free(s);
    }
    struct timespec ms = {0, 1000000};
    nanosleep(&ms, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t);
  } while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < 300);
}

int main(int argc, char **argv) {
  pid_t child = -1;
  if (argc > 1 && strcmp(argv[1], "-f") == 0 && (child = fork()) == 0) {
    churn();
    _exit(0);
  }
  churn();
  if (child > 0) {
    int st;
    if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0) return 4;
  }
  return 0;
}
