/* libc_wrap_test.c: a program that wraps the C library's allocator, as a
 * tracer or a counting shim does: it defines malloc, free, calloc and
 * realloc and passes them to glibc's other names for them (__libc_malloc
 * and the rest), and leaves posix_memalign, aligned_alloc, memalign and
 * strdup to whoever defines them. Run preloaded (TestLibcNames): the
 * preloaded library defines those names too, so every block has one
 * owner whichever function made it and the wrapper's free frees it; the
 * blocks are in the books. Before, posix_memalign's block went to glibc's
 * free: "free(): invalid pointer", abort. */
#include "tcheck.h"

#include <stdatomic.h>

#include "../include/tagalloc.h"

extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);

static _Atomic long wrapped; /* calls through the wrapper */

void *malloc(size_t n) {
  wrapped++;
  return __libc_malloc(n);
}
void free(void *p) {
  wrapped++;
  __libc_free(p);
}
void *calloc(size_t n, size_t m) {
  wrapped++;
  return __libc_calloc(n, m);
}
void *realloc(void *p, size_t n) {
  wrapped++;
  return __libc_realloc(p, n);
}

/* Blocks from the functions the wrapper leaves alone, freed by its free. */
static void test_unwrapped_then_wrapped_free(void) {
  for (int i = 0; i < 1000; i++) {
    void *p = NULL;
    CHECK(posix_memalign(&p, 64, 100 + (size_t)i) == 0 && p && ((uintptr_t)p & 63) == 0, "posix_memalign");
    free(p);
    void *q = aligned_alloc(4096, 8192);
    CHECK(q && ((uintptr_t)q & 4095) == 0, "aligned_alloc");
    free(q);
    void *r = memalign(256, 1000);
    CHECK(r != NULL, "memalign");
    r = realloc(r, 100000); /* the wrapper's realloc of memalign's block */
    CHECK(r != NULL, "realloc");
    free(r);
    char *s = strdup("the C library's malloc is the wrapper's");
    CHECK(s && strcmp(s, "the C library's malloc is the wrapper's") == 0, "strdup");
    free(s);
  }
  CHECK(wrapped >= 5000, "%ld calls through the wrapper", wrapped);
}

/* What went through the wrapper is in the books, under the thread's tag. */
static void test_counted(void) {
  int (*set)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tagalloc_set_tag");
  int (*stats)(const char *, tagalloc_tag_stats_t *) =
      (int (*)(const char *, tagalloc_tag_stats_t *))dlsym(RTLD_DEFAULT, "tagalloc_tag_stats");
  CHECK(set && stats, "the library is preloaded");
  if (!set || !stats) return;
  CHECK(set("wrapped") == 0, "tagalloc_set_tag");
  void *held[100];
  for (int i = 0; i < 100; i++) held[i] = malloc(1000);
  void *al = NULL;
  CHECK(posix_memalign(&al, 64, 1000) == 0, "posix_memalign");
  tagalloc_tag_stats_t st;
  CHECK(stats("wrapped", &st) == 0 && st.live_blocks == 101 && st.live_bytes >= 101 * 1000, "%zu live blocks, %zu bytes", st.live_blocks,
        st.live_bytes);
  for (int i = 0; i < 100; i++) free(held[i]);
  free(al);
  CHECK(stats("wrapped", &st) == 0 && st.live_blocks == 0 && st.alloc_blocks == 101, "%zu live, %zu allocated", st.live_blocks,
        st.alloc_blocks);
  set(NULL);
}

int main(void) {
  RUN(test_unwrapped_then_wrapped_free);
  RUN(test_counted);
  return t_summary();
}
