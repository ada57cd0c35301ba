/* own_malloc.c: a program with an allocator of its own, as Chromium's
 * allocator shim over PartitionAlloc is: it defines malloc and the rest
 * of the family over its own memory (here a bump allocator on mmap that
 * never reuses), so the loader finds its malloc before a preloaded
 * library's, for the program, its libraries and the C library alike.
 *   own_malloc [-f]
 * It allocates for 300 ms (with -f, a forked child does too, as a zygote's
 * children do), then exits 0. */
#define _GNU_SOURCE
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ARENA (64u << 20)
static unsigned char *arena, *cur;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

/* A block: its size in the 16 bytes before it. */
static void *bump(size_t align, size_t n) {
  if (align < 16) align = 16;
  pthread_mutex_lock(&lock);
  if (!arena) {
    arena = mmap(NULL, ARENA, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) abort();
    cur = arena;
  }
  uintptr_t p = ((uintptr_t)cur + 16 + align - 1) & ~(uintptr_t)(align - 1);
  if (n > ARENA || p + n > (uintptr_t)arena + ARENA) {
    pthread_mutex_unlock(&lock);
    errno = ENOMEM;
    return NULL;
  }
  cur = (unsigned char *)(p + n);
  pthread_mutex_unlock(&lock);
  ((size_t *)p)[-1] = n;
  return (void *)p;
}

void *malloc(size_t n) { return bump(16, n); }
void free(void *p) { (void)p; }
void *calloc(size_t n, size_t m) { return n && m > SIZE_MAX / n ? NULL : bump(16, n * m); /* fresh: zero */ }
void *realloc(void *p, size_t n) {
  void *q = bump(16, n);
  if (p && q) memcpy(q, p, ((size_t *)p)[-1] < n ? ((size_t *)p)[-1] : n);
  return q;
}
void *memalign(size_t a, size_t n) { return bump(a, n); }
void *aligned_alloc(size_t a, size_t n) { return bump(a, n); }
int posix_memalign(void **out, size_t a, size_t n) {
  void *p = bump(a, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}
size_t malloc_usable_size(void *p) { return p ? ((size_t *)p)[-1] : 0; }

static void churn(void) {
  struct timespec t0, t;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do {
    for (int i = 0; i < 100; i++) {
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
