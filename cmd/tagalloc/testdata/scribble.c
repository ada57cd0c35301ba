/* scribble.c: a hostile target. It allocates under tags from a few
 * threads (so its books have several thread records, heaps and counter
 * chunks), then scribbles over its own books region, found as a reader
 * finds it (the library's exported tagalloc_books pointer), and lets
 * tagalloc read the wreck.
 *
 * usage: scribble MODE [exit|wait|child]
 *   MODE: random (bytes after the header), header (the header's fields
 *   after magic, version and sizes, but the bytes in use), cycle (the thread list and a heap list loop),
 *   counts (huge counters, tag counts, sizes and offsets), used (claims
 *   4 GiB in use), names (tag names without NUL, control bytes), flip
 *   (a thread keeps writing random bytes anywhere while tagalloc reads),
 *   zero (the whole region zeroed), events (under tagalloc run --stacks:
 *   its events file truncated to nothing while the launcher drains it).
 *   exit (default): exit(0) at once, through the library's exit handler
 *   (tagalloc run reads the books at the end); wait: print "ready PID",
 *   wait until stdin closes, then _exit; child: fork first, the child
 *   scribbles its own books (a copy of this process's) and exits, this
 *   process waits for it and exits with its books whole.
 * After scribbling it never allocates again: its own allocator keeps
 * pointers into the region, and writing through scribbled ones would
 * crash the target before tagalloc had a chance to read. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../../../cgo/include/tagalloc.h"

/* The start of the region's header (cgo/src/books.c _ta_books_t; the
 * fields every version has, in place). */
typedef struct {
  char magic[8];
  uint32_t version, header_size;
  uint64_t region_size, base, used;
  uint32_t pid, ppid;
  uint64_t start_ns;
  uint32_t state, tag_slots, tag_count, tag_overflow, tag_name_size, nclasses, ctr_chunk, cmdline_len;
  uint64_t cmdline_off, names_off, fallback_off, peaks_off, class_sizes_off;
  uint64_t threads_head;
  uint32_t ctr_size;
  uint32_t thread_size, thread_ctr_off, thread_heaps_off, thread_next_off, thread_live_off;
  uint32_t heap_size, heap_nalloc_off, heap_nfree_off, heap_tag_off, heap_tnext_off;
} books_t;

static uint64_t seed = 0x9E3779B97F4A7C15ull;
static uint64_t rnd(void) {
  seed ^= seed >> 12; seed ^= seed << 25; seed ^= seed >> 27;
  return seed * 0x2545F4914F6CDD1Dull;
}

static void *keep[4][300];
static void *work(void *arg) {
  long i = (long)arg;
  char tag[16];
  snprintf(tag, sizeof tag, "hostile-%ld", i);
  tagalloc_weak_set(tag);
  for (int k = 0; k < 300; k++) keep[i][k] = malloc(16 + (size_t)k * 37 * (size_t)(i + 1));
  for (int k = 0; k < 300; k += 3) free(keep[i][k]);
  tagalloc_weak_clear();
  return NULL;
}

static uint8_t *region;
static volatile int flipping = 1;
static void *flipper(void *arg) {
  (void)arg;
  books_t *b = (books_t *)region;
  uint64_t used = b->used;
  while (flipping) {
    for (int k = 0; k < 64; k++) region[rnd() % used] = (uint8_t)rnd();
    /* now and then a pointer-sized lie at an aligned place */
    *(uint64_t *)(region + (rnd() % (used / 8)) * 8) = b->base + rnd() % (used * 2);
  }
  return NULL;
}

static uint8_t *addr(uint64_t a) { return region + (a - ((books_t *)region)->base); }

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "random";
  int wait = argc > 2 && strcmp(argv[2], "wait") == 0;
  setvbuf(stdout, NULL, _IONBF, 0);
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, work, (void *)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  if (argc > 2 && strcmp(argv[2], "child") == 0) {
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 2;
    }
    if (pid > 0) {
      int st;
      if (waitpid(pid, &st, 0) != pid) return 2;
      exit(0);
    }
  }
  void **sym = dlsym(RTLD_DEFAULT, "tagalloc_books");
  if (!sym || !*sym) {
    fprintf(stderr, "scribble: no tagalloc_books (not preloaded?)\n");
    return 2;
  }
  region = *sym;
  books_t *b = (books_t *)region;
  uint64_t used = b->used;
  pthread_t fl;
  if (strcmp(mode, "random") == 0) {
    for (uint64_t i = b->header_size; i < used; i++) region[i] = (uint8_t)rnd();
  } else if (strcmp(mode, "header") == 0) {
    /* every field after the magic, version and sizes, but the bytes in use */
    for (uint64_t i = 16; i < b->header_size; i++)
      if (i < 32 || i >= 40) region[i] = (uint8_t)rnd();
  } else if (strcmp(mode, "cycle") == 0) {
    /* the oldest thread record points back at the newest; the first
     * heap of the newest record points at itself */
    uint64_t a = b->threads_head;
    while (*(uint64_t *)(addr(a) + b->thread_next_off)) a = *(uint64_t *)(addr(a) + b->thread_next_off);
    *(uint64_t *)(addr(a) + b->thread_next_off) = b->threads_head;
    uint64_t h = *(uint64_t *)(addr(b->threads_head) + b->thread_heaps_off);
    if (h) *(uint64_t *)(addr(h) + b->heap_tnext_off) = h;
  } else if (strcmp(mode, "counts") == 0) {
    uint64_t *ctr = (uint64_t *)(region + b->fallback_off);
    for (uint32_t i = 0; i < b->tag_slots * (b->ctr_size / 8); i++) ctr[i] = ~(uint64_t)0 - (i & 7);
    b->tag_count = ~0u;
    b->cmdline_len = ~0u;
    b->nclasses = 1u << 31;
    b->ctr_chunk = 1;
    b->thread_size = ~0u;
    b->peaks_off = ~(uint64_t)0 - 7;
  } else if (strcmp(mode, "used") == 0) {
    b->used = (uint64_t)4 << 30;
    b->region_size = b->used;
  } else if (strcmp(mode, "names") == 0) {
    /* terminated names of any other bytes: escapes for the terminal,
     * invalid UTF-8; and, every 7th, one that fills its slot unterminated */
    for (uint32_t t = 0; t < b->tag_count; t++) {
      uint8_t *name = region + b->names_off + (uint64_t)t * b->tag_name_size;
      uint32_t n = 1 + (uint32_t)(rnd() % (b->tag_name_size - 1));
      for (uint32_t i = 0; i < n; i++) name[i] = (uint8_t)(1 + rnd() % 255);
      if (t % 3 == 1) memcpy(name, "\x1b[2J\x1b]0;pwned\x07", 12);
      name[n] = 0;
      if (t == 6) memset(name, 'x', b->tag_name_size);
    }
  } else if (strcmp(mode, "zero") == 0) {
    memset(region, 0, used);
  } else if (strcmp(mode, "flip") == 0) {
    pthread_create(&fl, NULL, flipper, NULL);
  } else if (strcmp(mode, "events") == 0) {
    const char *dir = getenv("TAGALLOC_DIR");
    char path[600];
    snprintf(path, sizeof path, "%s/%d.events", dir ? dir : ".", (int)getpid());
    if (truncate(path, 0) != 0) {
      perror(path);
      return 2;
    }
    usleep(300 * 1000); /* the launcher drains every 20 ms */
    _exit(0);           /* the sampler would write into the truncated mapping */
  } else {
    fprintf(stderr, "scribble: unknown mode %s\n", mode);
    return 2;
  }
  if (wait) {
    char line[32];
    int n = snprintf(line, sizeof line, "ready %d\n", (int)getpid());
    if (write(1, line, (size_t)n) < 0) _exit(3);
    char c;
    while (read(0, &c, 1) > 0) {
    }
    _exit(0);
  }
  if (strcmp(mode, "flip") == 0) usleep(200 * 1000);
  exit(0); /* the library's exit handler may trip on the wreck: that is the test too */
}
