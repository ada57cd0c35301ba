/* budget_prog.c: a program that knows nothing of tagalloc, calling a
 * library that tags its memory (budget_lib.c). Run with
 * TAGALLOC_BUDGET=thirdparty=SIZE, the library's cache stops at its budget
 * while the program goes on allocating its own memory; it prints
 * "cache N of M" and "own OK|FAILED". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int third_fill(int n, size_t size);
void third_clear(void);

int main(void) {
  int want = 2000;
  int got = third_fill(want, 16384); /* 32 MiB asked for */
  printf("cache %d of %d\n", got, want);
  /* the program's own memory, untagged: 64 MiB in 1 MiB blocks */
  int ok = 1;
  void *own[64];
  for (int i = 0; i < 64; i++) {
    own[i] = malloc(1 << 20);
    if (!own[i]) ok = 0;
    else memset(own[i], 1, 1 << 20);
  }
  printf("own %s\n", ok ? "OK" : "FAILED");
  for (int i = 0; i < 64; i++) free(own[i]);
  third_clear();
  return 0;
}
