/* reporters.c: memory reporters for the reporter and dark-matter tests.
 * A cache (tag "cache") whose reporter measures its entries, an untagged
 * list whose reporter measures its nodes, untagged blocks nobody reports
 * (leak_dark: the dark matter), one block two reporters measure (a bug
 * the dark-matter report must show), a nonheap mapping and a count. It
 * collects once, then exits (the library collects again at exit), and
 * prints what it expects: "expect NAME VALUE". */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <malloc.h>
#include "../../../cgo/include/tagalloc.h"

#define NCACHE 100
#define NLIST 50
#define NDARK 30
static void *cache[NCACHE], *list[NLIST], *dark[NDARK], *shared;
static size_t mapped = 1 << 20;

__attribute__((noinline)) static void make_cache(void) {
  tagalloc_push_tag("cache");
  for (int i = 0; i < NCACHE; i++) cache[i] = malloc(1000);
  shared = malloc(4000);
  tagalloc_pop_tag();
}

__attribute__((noinline)) static void make_list(void) {
  for (int i = 0; i < NLIST; i++) list[i] = malloc(200);
}

__attribute__((noinline)) static void leak_dark(void) {
  for (int i = 0; i < NDARK; i++) dark[i] = malloc(300);
}

__attribute__((noinline)) static void cache_reporter(tagalloc_report_sink_t *s, void *arg) {
  (void)arg;
  size_t n = 0;
  for (int i = 0; i < NCACHE; i++) n += tagalloc_report_block(cache[i]);
  n += tagalloc_report_block(shared);
  tagalloc_report(s, "explicit/cache/entries", TAGALLOC_KIND_HEAP, TAGALLOC_UNITS_BYTES, (int64_t)n, "The cache's entries.");
  tagalloc_report(s, "cache-entries", TAGALLOC_KIND_OTHER, TAGALLOC_UNITS_COUNT, NCACHE, "Entries in the cache.");
}

/* Measures the shared block too: a double report. */
__attribute__((noinline)) static void buggy_reporter(tagalloc_report_sink_t *s, void *arg) {
  (void)arg;
  size_t n = tagalloc_report_block(shared);
  for (int i = 0; i < NLIST; i++) n += tagalloc_report_block(list[i]);
  tagalloc_report(s, "explicit/list/nodes", TAGALLOC_KIND_HEAP, TAGALLOC_UNITS_BYTES, (int64_t)n, "The list's nodes (and, wrongly, the shared block).");
  tagalloc_report(s, "explicit/list/mapped", TAGALLOC_KIND_NONHEAP, TAGALLOC_UNITS_BYTES, (int64_t)mapped, "A mapping of the list's.");
}

int main(void) {
  make_cache();
  make_list();
  leak_dark();
  void *m = mmap(NULL, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) return 1;
  if (tagalloc_register_reporter("cache", cache_reporter, NULL) != 0) return 2;
  if (tagalloc_register_reporter("list", buggy_reporter, NULL) != 0) return 3;
  if (tagalloc_register_reporter("", buggy_reporter, NULL) != EINVAL) return 4;
  if (tagalloc_unregister_reporter("nope") != ENOENT) return 5;
  if (tagalloc_report_block(NULL) != 0) return 6;
  int items = tagalloc_collect_reports();
  size_t cache_bytes = 0, list_bytes = 0, dark_bytes = 0, shared_bytes = malloc_usable_size(shared);
  for (int i = 0; i < NCACHE; i++) cache_bytes += malloc_usable_size(cache[i]);
  for (int i = 0; i < NLIST; i++) list_bytes += malloc_usable_size(list[i]);
  for (int i = 0; i < NDARK; i++) dark_bytes += malloc_usable_size(dark[i]);
  printf("expect items %d\n", items);
  printf("expect cache_bytes %zu\n", cache_bytes);
  printf("expect shared_bytes %zu\n", shared_bytes);
  printf("expect list_bytes %zu\n", list_bytes);
  printf("expect dark_bytes %zu\n", dark_bytes);
  printf("expect mapped %zu\n", mapped);
  fflush(stdout);
  return 0;
}
