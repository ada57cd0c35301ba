/* The symbolizer's test program: known functions calling each other,
 * each call site marked, printing the addresses to look up and waiting on
 * stdin so the test can read its module table. */
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

extern void *foo_alloc(size_t n);
extern void *foo_static_addr(void);
extern void *foo_ret_main, *foo_ret_leaf;

static void *ret_leaf;   /* set by alloc_in_leaf: where it returns to */
static void *ret_middle; /* set by middle */
volatile int sink;

__attribute__((noinline)) void *alloc_in_leaf(size_t n) {
  ret_leaf = __builtin_return_address(0);
  void *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

__attribute__((noinline)) void *middle(size_t n) {
  ret_middle = __builtin_return_address(0);
  void *p = alloc_in_leaf(n); /* CALL-MARKER middle */
  sink++;
  return p;
}

static inline __attribute__((always_inline)) void *inlined(size_t n) {
  void *p = alloc_in_leaf(n * 2); /* CALL-MARKER inlined */
  sink++;
  return p;
}

__attribute__((noinline)) void *outer(size_t n) {
  void *p = middle(n); /* CALL-MARKER outer */
  sink++;
  free(p);
  p = inlined(n); /* CALL-MARKER outer-inlined */
  sink++;
  return p;
}

int main(void) {
#ifdef CHANGED
  printf("changed %d\n", sink);
#endif
  free(outer(8));
  void *ret_outer_inlined = ret_leaf;
  void *ret_outer_middle = ret_middle;
  free(middle(8));
  void *ret_middle_leaf = ret_leaf;
  free(foo_alloc(8)); /* CALL-MARKER main-foo */
  printf("alloc_in_leaf %p\n", (void *)alloc_in_leaf);
  printf("middle %p\n", (void *)middle);
  printf("outer %p\n", (void *)outer);
  printf("main %p\n", (void *)main);
  printf("foo_alloc %p\n", (void *)foo_alloc);
  printf("foo_leaf %p\n", foo_static_addr());
  printf("ret_middle_leaf %p\n", ret_middle_leaf);
  printf("ret_outer_middle %p\n", ret_outer_middle);
  printf("ret_outer_inlined %p\n", ret_outer_inlined);
  printf("ret_main_foo %p\n", foo_ret_main);
  printf("ret_foo_leaf %p\n", foo_ret_leaf);
  printf("ready\n");
  fflush(stdout);
  char buf[1];
  while (read(0, buf, 1) > 0) {
  }
  return 0;
}
