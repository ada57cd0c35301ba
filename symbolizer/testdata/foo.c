/* libfoo.so for the symbolizer's tests: an exported function that calls a
 * static one, each recording the return address of the call into it. */
#include <stdlib.h>

void *foo_ret_main;  /* in the program, after its call of foo_alloc */
void *foo_ret_leaf;  /* in foo_alloc, after its call of foo_leaf */

__attribute__((noinline)) static void *foo_leaf(size_t n) {
  foo_ret_leaf = __builtin_return_address(0);
  void *p = malloc(n);
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

__attribute__((noinline)) void *foo_alloc(size_t n) {
  foo_ret_main = __builtin_return_address(0);
  void *p = foo_leaf(n + 1); /* CALL-MARKER foo_alloc */
  __asm__ volatile("" : : "r"(p) : "memory");
  return p;
}

/* The address of the static function, for the stripped-library test. */
void *foo_static_addr(void) { return (void *)foo_leaf; }
