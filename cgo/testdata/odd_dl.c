/* odd_dl.c: a library odd_test.c dlopens and dlcloses in a loop. Its
 * constructor and destructor allocate and free, under a tag of its own
 * (tagalloc_weak_*: no-ops without the allocator), as a plugin's would. */
#include <stdlib.h>
#include <string.h>

#include "../include/tagalloc.h"

#define N 500
static char *table[N];
static char *name;

__attribute__((constructor)) static void odd_dl_init(void) {
  tagalloc_weak_set("odd-dl");
  for (int i = 0; i < N; i++) {
    size_t n = 8 + (size_t)(i * 37) % 3000;
    table[i] = malloc(n);
    if (table[i]) memset(table[i], i & 0xff, n);
  }
  name = strdup("odd_dl: loaded");
  tagalloc_weak_clear();
}

__attribute__((destructor)) static void odd_dl_fini(void) {
  /* the destructor allocates too (a last message, say), then frees all */
  char *msg = malloc(100);
  if (msg) strcpy(msg, "odd_dl: unloading");
  free(msg);
  for (int i = 0; i < N; i++) free(table[i]);
  free(name);
}

/* Check the table, grow and shrink some of it; 0 if all was well. */
long odd_dl_work(int round) {
  long bad = 0;
  for (int i = 0; i < N; i++)
    if (table[i] && (unsigned char)table[i][0] != (unsigned char)(i & 0xff)) bad++;
  tagalloc_weak_set("odd-dl");
  for (int i = round % 7; i < N; i += 7) {
    size_t n = 8 + (size_t)(i * 37) % 3000;
    char *p = realloc(table[i], n * 3);
    if (!p) { bad++; continue; }
    table[i] = p;
    memset(p, i & 0xff, n * 3);
  }
  tagalloc_weak_clear();
  return bad;
}
