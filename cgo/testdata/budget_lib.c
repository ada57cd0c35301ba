/* budget_lib.c: a "third-party" library for the budget test: it tags its
 * own allocations "thirdparty/cache" through the weak wrappers (a no-op
 * without tagalloc) and keeps blocks until malloc says no, as a cache
 * filling up would; the program that calls it knows nothing of tagalloc. */
#include <stdlib.h>

#include "../include/tagalloc.h"

static void *kept[100000];
static int nkept;

/* Cache up to n blocks of size bytes; returns how many it holds. */
int third_fill(int n, size_t size) {
  tagalloc_weak_push("thirdparty/cache");
  while (nkept < n && nkept < 100000) {
    void *p = malloc(size);
    if (!p) break; /* the library copes: a smaller cache */
    kept[nkept++] = p;
  }
  tagalloc_weak_pop();
  return nkept;
}

void third_clear(void) {
  while (nkept) free(kept[--nkept]);
}
