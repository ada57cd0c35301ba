/* tcheck.h: a tiny test framework for the C test programs. Each program is
 * built twice: against the preload library (plain names, LD_PRELOAD) and
 * against the core built with -DTA_PREFIX=ta_test_ (TA_TEST_PREFIX set),
 * where these macros send the standard names to the prefixed ones. */
#ifndef TCHECK_H
#define TCHECK_H
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TA_TEST_PREFIX
void *ta_test_malloc(size_t);
void ta_test_free(void *);
void *ta_test_calloc(size_t, size_t);
void *ta_test_realloc(void *, size_t);
void *ta_test_reallocarray(void *, size_t, size_t);
int ta_test_posix_memalign(void **, size_t, size_t);
void *ta_test_aligned_alloc(size_t, size_t);
void *ta_test_memalign(size_t, size_t);
void *ta_test_valloc(size_t);
void *ta_test_pvalloc(size_t);
size_t ta_test_malloc_usable_size(void *);
#define malloc ta_test_malloc
#define free ta_test_free
#define calloc ta_test_calloc
#define realloc ta_test_realloc
#define reallocarray ta_test_reallocarray
#define posix_memalign ta_test_posix_memalign
#define aligned_alloc ta_test_aligned_alloc
#define memalign ta_test_memalign
#define valloc ta_test_valloc
#define pvalloc ta_test_pvalloc
#define malloc_usable_size ta_test_malloc_usable_size
#endif

#ifdef TA_TEST_PREFIX
size_t tagalloc_check(void);
void tagalloc_purge(void);
__attribute__((unused)) static size_t t_check(void) { return tagalloc_check(); }
size_t tagalloc_check_books(void);
__attribute__((unused)) static size_t t_check_books(void) { return tagalloc_check_books(); }
__attribute__((unused)) static void t_purge(void) { tagalloc_purge(); }
#else
/* Looked up at run time: the program also runs without the library. */
__attribute__((unused)) static size_t t_check(void) {
  size_t (*f)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "tagalloc_check");
  return f ? f() : 0;
}
__attribute__((unused)) static size_t t_check_books(void) {
  size_t (*f)(void) = (size_t (*)(void))dlsym(RTLD_DEFAULT, "tagalloc_check_books");
  return f ? f() : 0;
}
__attribute__((unused)) static void t_purge(void) {
  void (*f)(void) = (void (*)(void))dlsym(RTLD_DEFAULT, "tagalloc_purge");
  if (f) f();
}
#endif

__attribute__((unused)) static int t_passed, t_failed, t_cur_failed;
__attribute__((unused)) static const char *t_cur;

#define CHECK(cond, ...)                                                      \
  do {                                                                        \
    if (!(cond)) {                                                            \
      t_cur_failed = 1;                                                       \
      fprintf(stderr, "FAIL %s: %s:%d: %s: ", t_cur, __FILE__, __LINE__, #cond); \
      fprintf(stderr, __VA_ARGS__);                                           \
      fprintf(stderr, "\n");                                                  \
    }                                                                         \
  } while (0)

#define RUN(fn)                                     \
  do {                                              \
    t_cur = #fn;                                    \
    t_cur_failed = 0;                               \
    fn();                                           \
    t_check();                                      \
    if (t_cur_failed) t_failed++;                   \
    else { t_passed++; printf("ok   %s\n", #fn); fflush(stdout); } \
  } while (0)

__attribute__((unused)) static int t_summary(void) {
  printf("%d passed, %d failed\n", t_passed, t_failed);
  fflush(stdout);
  return t_failed ? 1 : 0;
}

/* Is tagalloc the allocator behind the names we call? */
__attribute__((unused)) static int t_tagalloc_active(void) {
#ifdef TA_TEST_PREFIX
  return 1;
#else
  return dlsym(RTLD_DEFAULT, "tagalloc_version") != NULL;
#endif
}

/* A "Field: N kB" line of /proc/self/status (VmRSS, VmSize), 0 if none. */
__attribute__((unused)) static size_t t_status_kb(const char *field) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0, n = strlen(field);
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, field, n) == 0 && line[n] == ':' && sscanf(line + n + 1, "%zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb;
}

/* xorshift64* */
__attribute__((unused)) static inline uint64_t t_rand(uint64_t *s) {
  uint64_t x = *s;
  x ^= x >> 12; x ^= x << 25; x ^= x >> 27;
  *s = x;
  return x * 0x2545F4914F6CDD1Dull;
}

__attribute__((unused)) static inline uint8_t t_pattern(const void *p, size_t i, uint64_t salt) {
  uint64_t v = ((uintptr_t)p >> 4) * 0x9E3779B97F4A7C15ull + i * 0x100000001B3ull + salt;
  return (uint8_t)(v >> 56);
}
__attribute__((unused)) static void t_fill(void *p, size_t n, uint64_t salt) {
  uint8_t *b = p;
  for (size_t i = 0; i < n; i++) b[i] = t_pattern(p, i, salt);
}
__attribute__((unused)) static int t_verify(const void *p, size_t n, uint64_t salt) {
  const uint8_t *b = p;
  for (size_t i = 0; i < n; i++)
    if (b[i] != t_pattern(p, i, salt)) return 0;
  return 1;
}
#endif
