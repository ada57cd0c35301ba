/* ospolicy_test.c: what the arena's OS-memory policy promises (arena.c,
 * ARCHITECTURE "Returning memory to the OS"), seen from outside with
 * mincore: a program that writes its big blocks through gets the next
 * one's pages brought in before it touches them; one that touches its big
 * blocks in part does not; and the retain limit counts what of the free
 * memory is resident, not its length.
 * Prints "ok NAME" per test and "N passed, M failed". */
#include "tcheck.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)
#define OS_PAGE 4096

/* Resident share of [p, p+n), in percent. */
static int resident_pct(void *p, size_t n) {
  uintptr_t a = (uintptr_t)p & ~(uintptr_t)(OS_PAGE - 1);
  size_t pages = ((uintptr_t)p + n - a + OS_PAGE - 1) / OS_PAGE, res = 0;
  static unsigned char vec[64 * MiB / OS_PAGE];
  if (pages > sizeof vec || mincore((void *)a, pages * OS_PAGE, vec) != 0) return -1;
  for (size_t i = 0; i < pages; i++) res += vec[i] & 1;
  return (int)(res * 100 / pages);
}

/* MADV_POPULATE_WRITE is Linux 5.14 and later: without it, nothing is
 * populated and the dense test has nothing to see. */
static int can_populate(void) {
  void *p = mmap(NULL, OS_PAGE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 0;
  int ok = madvise(p, OS_PAGE, 23 /* MADV_POPULATE_WRITE */) == 0;
  munmap(p, OS_PAGE);
  return ok;
}

/* Allocate and free n blocks of size bytes, writing every page of each
 * (dense) or only its first byte, purging after each: every block is on
 * clean pages, the only ones that show how a program uses its blocks
 * (pages already resident cannot tell). */
static void churn(int n, size_t size, int dense) {
  for (int i = 0; i < n; i++) {
    char *p = malloc(size);
    CHECK(p != NULL, "malloc(%zu)", size);
    if (!p) return;
    if (dense) {
      for (size_t o = 0; o < size; o += OS_PAGE) p[o] = (char)o;
    } else {
      p[0] = 1;
    }
    free(p);
    t_purge();
  }
}

static void test_sparse_not_populated(void) {
  churn(16, 2 * MiB, 0);
  t_purge(); /* the next block's pages come from purged (not resident) memory */
  char *p = malloc(3 * MiB);
  CHECK(p != NULL, "malloc");
  int pct = resident_pct(p, 3 * MiB);
  CHECK(pct >= 0 && pct <= 10, "a program touching its big blocks in part: a new block %d%% resident before use", pct);
  free(p);
}

/* Write every page of [p, p+n). */
static void touch(char *p, size_t n) {
  for (size_t o = 0; p && o < n; o += OS_PAGE) p[o] = 1;
}

/* Allocate n blocks of size bytes into ps: how many came resident (90% or
 * more) before the program touched them, that is populated. */
static int alloc_populated(char **ps, int n, size_t size) {
  int populated = 0;
  for (int i = 0; i < n; i++) {
    ps[i] = malloc(size);
    CHECK(ps[i] != NULL, "malloc(%zu)", size);
    populated += ps[i] && resident_pct(ps[i], size) >= 90;
  }
  return populated;
}

static void test_dense_populated(void) {
  if (!can_populate()) {
    printf("skip dense_populated: no MADV_POPULATE_WRITE\n");
    return;
  }
  churn(16, 2 * MiB, 1);
  t_purge();
  /* one block in 8 is left to fault (a probe of the density): of 8 new
   * blocks, at least 6 are resident before the program touches them */
  char *ps[8];
  int populated = alloc_populated(ps, 8, 3 * MiB);
  CHECK(populated >= 6, "a program writing its big blocks through: only %d of 8 new blocks populated", populated);
  for (int i = 0; i < 8; i++) touch(ps[i], 3 * MiB); /* as a dense program does */
  for (int i = 0; i < 8; i++) free(ps[i]);
  t_purge();
  /* calloc of populated pages still gives zeros */
  char *z = calloc(1, 3 * MiB);
  CHECK(z != NULL, "calloc");
  for (size_t o = 0; z && o < 3 * MiB; o += 997) CHECK(z[o] == 0, "calloc byte %zu not zero", o);
  touch(z, 3 * MiB);
  free(z);
  /* huge blocks (their own mapping) too */
  char *hs[4];
  populated = alloc_populated(hs, 4, 40 * MiB);
  CHECK(populated >= 3, "a dense program: only %d of 4 new huge blocks populated", populated);
  for (int i = 0; i < 4; i++) touch(hs[i], 40 * MiB);
  for (int i = 0; i < 4; i++) free(hs[i]);
  /* back to sparse: the probes see it, and populating stops */
  churn(32, 2 * MiB, 0);
  t_purge();
  char *p = malloc(3 * MiB);
  int pct = resident_pct(p, 3 * MiB);
  CHECK(pct >= 0 && pct <= 10, "sparse again, yet a new block %d%% resident before use", pct);
  free(p);
}

static void test_kept_by_what_is_resident(void) {
  /* 24 blocks of 4 MiB, each touched at one page, freed together. The
   * retain limit (8 MiB here: the heap fell to nothing) counts what is
   * resident, 24 pages, so the arena keeps them all, and their touched
   * pages stay resident for the next blocks (a limit on the spans'
   * length, 96 MiB, would have purged all but two). */
  churn(32, 2 * MiB, 0); /* a sparse program: nothing is populated */
  t_purge();
  char *ps[24];
  for (int i = 0; i < 24; i++) {
    ps[i] = malloc(4 * MiB);
    CHECK(ps[i] != NULL, "malloc");
    if (ps[i]) ps[i][0] = 1;
  }
  for (int i = 0; i < 24; i++) free(ps[i]);
  int kept = 0;
  for (int i = 0; i < 24; i++) kept += ps[i] && resident_pct(ps[i], 1) == 100;
  CHECK(kept >= 20, "only %d of 24 freed blocks' touched pages kept resident", kept);
  t_check(); /* the arena's count of resident pages agrees with its spans (debug builds) */
  t_purge();
  kept = 0;
  for (int i = 0; i < 24; i++) kept += ps[i] && resident_pct(ps[i], 1) == 100;
  CHECK(kept == 0, "%d freed blocks' pages still resident after tagalloc_purge", kept);
}

/* The cache of freed huge mappings serves a smaller block from part of
 * a bigger mapping, keeping the rest for the next, and a bigger block
 * from a smaller mapping grown with mremap: the resident pages serve,
 * moved, and only the rest is new. */
static void test_huge_cache_parts(void) {
  t_purge();
  char *h = malloc(64 * MiB);
  CHECK(h != NULL, "malloc 64 MiB");
  if (!h) return;
  touch(h, 64 * MiB);
  free(h);
  char *a = malloc(32 * MiB), *b = malloc(32 * MiB);
  CHECK(a != NULL && b != NULL, "malloc 32 MiB twice");
  if (!a || !b) return;
  int pa = resident_pct(a, 32 * MiB), pb = resident_pct(b, 32 * MiB);
  CHECK(pa >= 90 && pb >= 90, "two 32 MiB blocks after a 64 MiB one was freed: %d%% and %d%% resident before use (its halves)", pa, pb);
  touch(a, 32 * MiB);
  free(b);
  char *c = malloc(48 * MiB); /* the 32 MiB mapping freed last, grown */
  CHECK(c != NULL, "malloc 48 MiB");
  if (c) {
    int pc = resident_pct(c, 32 * MiB);
    CHECK(pc >= 90, "a 48 MiB block after a 32 MiB one was freed: its first 32 MiB %d%% resident before use", pc);
    for (size_t o = 0; o < 48 * MiB; o += 4093) c[o] = (char)o; /* all of it is the program's */
    for (size_t o = 0; o < 48 * MiB; o += 4093) CHECK(c[o] == (char)o, "48 MiB block: byte %zu", o);
    free(c);
  }
  free(a);
  t_check();
  t_purge();
}

/* A buffer realloc grows past 8 MiB (TA_REALLOC_MAP) takes a part of a
 * bigger cached mapping (twice what it asks), not all of it: the rest
 * stays cached, within the retain limit's reach, and joins the buffer as
 * it grows, resident and in place. */
static void test_huge_growing_takes_part(void) {
  t_purge();
  char *h = realloc(malloc(100), 48 * MiB); /* a mapping of its own (grown past 8 MiB) */
  CHECK(h != NULL, "realloc to 48 MiB");
  if (!h) return;
  touch(h, 48 * MiB);
  free(h); /* cached, resident */
  char *b = realloc(malloc(100), 10 * MiB);
  CHECK(b != NULL, "realloc to 10 MiB");
  if (!b) return;
  size_t u = malloc_usable_size(b);
  CHECK(u >= 10 * MiB && u <= 24 * MiB, "a buffer grown to 10 MiB holds %zu bytes of a 48 MiB cached mapping", u);
  memset(b, 7, 10 * MiB);
  char *was = b;
  b = realloc(b, 40 * MiB);
  CHECK(b == was, "grown to 40 MiB, the buffer moved (%p -> %p): the rest of its mapping was not joined", (void *)was, (void *)b);
  if (!b) return;
  CHECK(resident_pct(b + 16 * MiB, 24 * MiB) >= 90, "grown to 40 MiB: its new pages %d%% resident before use (the cached rest)",
        resident_pct(b + 16 * MiB, 24 * MiB));
  CHECK(b[0] == 7 && b[10 * MiB - 1] == 7, "contents lost growing");
  touch(b, 40 * MiB);
  free(b);
  t_check();
  t_purge();
}

static long minor_faults(void) {
  struct rusage ru;
  return getrusage(RUSAGE_SELF, &ru) == 0 ? ru.ru_minflt : 0;
}

/* A heap that turns over keeps the free spans it reuses: 8 buffers grown
 * by realloc to 1-4 MiB, started again when full. Each fits only blocks
 * the other buffers left; the retain limit (8 MiB here, the heap just
 * above that) purged them, and the arena took fresh pages for every
 * buffer's next spans, until it learned that the program comes back for
 * what the limit purges (arena.c, _ta_retain_learn). After a first round,
 * the rounds fault on a small part of the pages they write: 1,010 faults
 * for 25,152 pages with it, 8,119-10,169 before it (with mremap growth
 * from 1 MiB; a 10 s purge delay, as native_test.go runs it). */
static void test_turnover_kept(void) {
  t_purge();
  enum { N = 8, ROUNDS = 6 };
  char *buf[N] = {0};
  size_t len[N] = {0}, target[N];
  uint64_t s = 7;
  for (int i = 0; i < N; i++) target[i] = MiB + t_rand(&s) % (3 * MiB);
  long faults = 0, written = 0;
  for (int r = 0; r < ROUNDS; r++) {
    long f0 = minor_faults();
    for (int done = 0; done < N;) {
      done = 0;
      for (int i = 0; i < N; i++) {
        if (len[i] >= target[i]) {
          done++;
          continue;
        }
        size_t add = 16384;
        char *q = realloc(buf[i], len[i] + add);
        CHECK(q != NULL, "realloc to %zu", len[i] + add);
        if (!q) return;
        memset(q + len[i], r + 1, add);
        buf[i] = q;
        len[i] += add;
        if (r > 0) written += add / OS_PAGE;
      }
    }
    if (r > 0) faults += minor_faults() - f0;
    for (int i = 0; i < N; i++) { /* full: checked, freed, started again */
      CHECK(buf[i][0] == r + 1 && buf[i][len[i] - 1] == r + 1, "contents lost growing");
      free(buf[i]);
      buf[i] = NULL;
      len[i] = 0;
      target[i] = MiB + t_rand(&s) % (3 * MiB);
    }
  }
  printf("turnover: %ld faults for %ld pages written after the first round\n", faults, written);
  /* a quarter: up to 2,738 with CI's tests running beside it (the
   * learning's one-second windows see fewer rounds), against 8,119 and
   * more before */
  CHECK(faults * 4 < written, "rounds after the first faulted %ld times for %ld pages written", faults, written);
  t_purge();
}

/* The first big block measured sets the density: one block written
 * through, the only one freed in a fresh process, makes the next blocks
 * on clean pages come in populated (a quarter weight from 0 gave 64 of
 * 256 after it, under TA_DENSE: nothing populated until 8 such blocks
 * were freed). Alone in a process: the density is the process's. */
static void test_dense_from_first(void) {
  if (!can_populate()) {
    printf("skip dense_from_first: no MADV_POPULATE_WRITE\n");
    return;
  }
  churn(1, 2 * MiB, 1); /* purged after: the next blocks' pages are not resident */
  char *ps[4];
  int populated = alloc_populated(ps, 4, 3 * MiB);
  CHECK(populated >= 3, "one block written through, measured: only %d of 4 new blocks populated", populated);
  for (int i = 0; i < 4; i++) free(ps[i]);
}

/* A big block that no free resident span holds takes the pages of one
 * waiting elsewhere: the whole 2 MiB parts of it (whose page tables move
 * whole) move (mremap), so the freed block's range is mostly not
 * resident once the new block has its pages (the retain limit, 8 MiB
 * here, would have kept them there). Of a freed block of 6 MiB at any
 * 64 KiB alignment, 4 MiB or more move. Only in a dense program: one
 * block written through first. Alone in a process (the density is the
 * process's), after test_dense_from_first. */
static void test_pages_moved(void) {
  if (!can_populate()) {
    printf("skip pages_moved: no MADV_POPULATE_WRITE\n");
    return;
  }
  churn(1, 2 * MiB, 1); /* dense; its block's 2 MiB clean */
  /* a, then a wall after it (too big for those 2 MiB): a freed cannot grow into a run */
  char *a = malloc(6 * MiB), *wall = malloc(3 * MiB);
  CHECK(a != NULL && wall != NULL, "malloc");
  if (!a || !wall) return;
  touch(a, 6 * MiB);
  touch(wall, 3 * MiB);
  free(a);
  CHECK(resident_pct(a, 6 * MiB) == 100, "a freed block's pages not kept (%d%% resident)", resident_pct(a, 6 * MiB));
  char *b = malloc(16 * MiB);
  CHECK(b != NULL, "malloc");
  if (!b) return;
  CHECK(b > wall, "the new block is not after the wall: the test's layout did not hold");
  int left = resident_pct(a, 6 * MiB);
  CHECK(left <= 34, "the freed block's range still %d%% resident: its pages did not move", left);
  touch(b, 16 * MiB);
  t_check(); /* the arena's counts agree with its spans (debug builds) */
  free(b);
  free(wall);
}

/* The process's mappings (lines of /proc/self/maps; the arena's are not
 * told apart by name: kernels without CONFIG_ANON_VMA_NAME show none), or
 * -1. */
static int mappings(void) {
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return -1;
  int n = 0, c;
  while ((c = getc(f)) != EOF) n += c == '\n';
  fclose(f);
  return n;
}

/* A range pages moved into is a mapping of its own (the pages keep the
 * offset they came with) until a purge maps it afresh, joined to the
 * arena's mapping again: moves go on round after round, and the arena's
 * mappings do not grow with them (each round added two before). Rounds
 * of test_pages_moved's layout, each purged; after it (dense). */
static void test_moves_heal(void) {
  if (!can_populate()) {
    printf("skip moves_heal: no MADV_POPULATE_WRITE\n");
    return;
  }
  enum { rounds = 16 };
  char *walls[rounds] = {0};
  t_purge();
  int before = mappings(), moved = 0;
  CHECK(before >= 1, "cannot read /proc/self/maps");
  for (int r = 0; r < rounds; r++) {
    /* the walls stay: each round's blocks lie past the last round's */
    char *a = malloc(6 * MiB);
    walls[r] = malloc(3 * MiB);
    CHECK(a != NULL && walls[r] != NULL, "malloc");
    if (!a || !walls[r]) break;
    touch(a, 6 * MiB);
    touch(walls[r], 3 * MiB);
    free(a);
    char *b = malloc(16 * MiB);
    CHECK(b != NULL, "malloc");
    if (!b) break;
    moved += resident_pct(a, 6 * MiB) <= 34;
    touch(b, 16 * MiB);
    free(b);
    t_purge();
  }
  int after = mappings();
  CHECK(moved >= rounds * 3 / 4, "pages moved in %d of %d rounds", moved, rounds);
  CHECK(after <= before + 2, "the process's mappings went from %d to %d in %d rounds of moves", before, after, rounds);
  for (int r = 0; r < rounds; r++) free(walls[r]);
  t_check();
}

/* ---- pages emptied by other threads (arena.c) ----------------------------
 * A producer thread makes blocks and writes them, the main thread frees
 * every one of them (remote frees), and the producer sleeps in a call the
 * library does not see (nanosleep), so it never collects its pages. */
#define EMPTIED_SIZE 1024
#define EMPTIED_N (24 * 1024) /* 24 MiB of blocks */
static char *emptied_blocks[EMPTIED_N];
static atomic_int emptied_phase; /* 1: made; 2: freed, sleep on; 3: wake; 4: made again, checked */
static atomic_long emptied_faults; /* the producer's minor faults making them again */

static void wait_phase(int want) {
  struct timespec ts = {0, 1000000};
  while (atomic_load(&emptied_phase) < want) nanosleep(&ts, NULL);
}

static long thread_faults(void) {
  struct rusage ru;
  getrusage(RUSAGE_THREAD, &ru);
  return ru.ru_minflt;
}

static void *emptied_producer(void *arg) {
  (void)arg;
  for (int i = 0; i < EMPTIED_N; i++) {
    emptied_blocks[i] = malloc(EMPTIED_SIZE);
    if (emptied_blocks[i]) memset(emptied_blocks[i], 0x5a, EMPTIED_SIZE);
  }
  atomic_store(&emptied_phase, 1);
  wait_phase(3);
  /* awake: its pages, purged or not, check as they are (heap.c's
   * invariants of this thread's pages), and serve blocks again */
  t_check();
  long f0 = thread_faults();
  int bad = 0;
  for (int i = 0; i < EMPTIED_N; i++) {
    emptied_blocks[i] = malloc(EMPTIED_SIZE);
    if (!emptied_blocks[i]) {
      bad++;
      continue;
    }
    memset(emptied_blocks[i], i & 0xff, EMPTIED_SIZE);
  }
  atomic_store(&emptied_faults, thread_faults() - f0);
  for (int i = 0; i < EMPTIED_N; i++)
    if (emptied_blocks[i] && (emptied_blocks[i][0] != (char)(i & 0xff) || emptied_blocks[i][EMPTIED_SIZE - 1] != (char)(i & 0xff))) bad++;
  CHECK(bad == 0, "%d of %d blocks made again went missing or were overwritten", bad, EMPTIED_N);
  for (int i = 0; i < EMPTIED_N; i++) free(emptied_blocks[i]);
  t_check();
  atomic_store(&emptied_phase, 4);
  return NULL;
}

/* Resident share, in percent, of the 64 KiB spans holding the blocks. */
static int emptied_resident_pct(void) {
  size_t res = 0, total = 0;
  uintptr_t last = 0;
  static unsigned char vec[16];
  for (int i = 0; i < EMPTIED_N; i++) {
    uintptr_t span = (uintptr_t)emptied_blocks[i] & ~(uintptr_t)0xffff;
    if (span == last) continue;
    last = span;
    if (mincore((void *)span, 0x10000, vec) != 0) return -1;
    for (int k = 0; k < 16; k++) res += vec[k] & 1;
    total += 16;
  }
  return total ? (int)(res * 100 / total) : -1;
}

/* Free the producer's blocks from this thread and see its pages, which
 * it no longer collects, purged by the purger within the purge delay's
 * two looks (waiting up to 10 s for a slow machine), the heap walk equal
 * to the books meanwhile; then the producer makes them again. With
 * keep (a purge delay far longer than the test), the pages stay, and
 * the producer makes its blocks again on them with few faults. */
static void emptied(int keep) {
  atomic_store(&emptied_phase, 0);
  pthread_t t;
  CHECK(pthread_create(&t, NULL, emptied_producer, NULL) == 0, "pthread_create");
  wait_phase(1);
  int before = emptied_resident_pct();
  CHECK(before >= 90, "the producer's pages %d%% resident once written", before);
  for (int i = 0; i < EMPTIED_N; i++) free(emptied_blocks[i]);
  t_purge(); /* pushes the blocks this thread holds to push later (page.c) */
  struct timespec t0, now, tick = {0, 20000000};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int pct = 100;
  double secs = 0;
  do {
    nanosleep(&tick, NULL);
    pct = emptied_resident_pct();
    clock_gettime(CLOCK_MONOTONIC, &now);
    secs = (double)(now.tv_sec - t0.tv_sec) + (double)(now.tv_nsec - t0.tv_nsec) / 1e9;
  } while (pct > 10 && secs < (keep ? 1.0 : 10.0));
  if (keep) {
    CHECK(pct >= 90, "emptied pages the purge delay keeps: %d%% resident after %.2f s", pct, secs);
  } else {
    CHECK(pct <= 10, "emptied pages still %d%% resident after %.2f s", pct, secs);
    printf("  %d MiB of blocks freed by another thread: %d%% -> %d%% of their pages resident in %.2f s\n",
           EMPTIED_N * EMPTIED_SIZE >> 20, before, pct, secs);
  }
  t_check_books(); /* the heap walk, the purged pages in it, equals the books */
  atomic_store(&emptied_phase, 3);
  wait_phase(4);
  pthread_join(t, NULL);
  long faults = atomic_load(&emptied_faults);
  if (keep) CHECK(faults < EMPTIED_N * EMPTIED_SIZE / OS_PAGE / 8, "made again on kept pages with %ld faults", faults);
  t_check_books();
}

/* A big block aligned past a page (2 MiB, 64 MiB), freed and asked for
 * again, gets a free span that holds it aligned where it lies, its own
 * among them: the address space does not grow with the rounds. Free
 * spans were searched for the block plus its alignment's slack, which
 * its own span never has, so each round took new pages from the arena's
 * top (136 MiB of address space a round for 33 MiB at 2 MiB) and wrote
 * their descriptors (15 MiB resident after 200 rounds). */
static void test_aligned_reuse(void) {
  static const size_t aligns[] = {2 * MiB, 64 * MiB};
  for (int a = 0; a < 2; a++) {
    void *first = NULL;
    uintptr_t lo = UINTPTR_MAX, hi = 0;
    for (int i = 0; i < 50; i++) {
      void *p = NULL;
      CHECK(posix_memalign(&p, aligns[a], 33 * MiB) == 0 && p != NULL, "posix_memalign(%zu, 33 MiB)", aligns[a]);
      if (!p) return;
      CHECK((uintptr_t)p % aligns[a] == 0, "%p is not aligned to %zu", p, aligns[a]);
      ((char *)p)[0] = 1;
      ((char *)p)[33 * MiB - 1] = 1;
      if (!first) first = p;
      lo = (uintptr_t)p < lo ? (uintptr_t)p : lo;
      hi = (uintptr_t)p > hi ? (uintptr_t)p : hi;
      free(p);
    }
    CHECK(hi - lo <= 2 * aligns[a] + 33 * MiB, "50 rounds of 33 MiB aligned to %zu MiB spread over %zu MiB of addresses",
          aligns[a] / MiB, (size_t)((hi - lo) / MiB));
  }
}

static void test_emptied_purged(void) { emptied(0); }
static void test_emptied_kept(void) { emptied(1); }

int main(void) {
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 2;
  }
  /* Alone, in a process of its own with a purge delay longer than its
   * rounds (native_test.go): what it shows is the retain limit's, and a
   * loaded machine's slow rounds would have spans purged by age. */
  if (getenv("OSPOLICY_TURNOVER")) {
    RUN(test_turnover_kept);
    RUN(test_emptied_kept);
    return t_summary();
  }
  if (getenv("OSPOLICY_FIRST")) {
    RUN(test_dense_from_first);
    RUN(test_pages_moved);
    RUN(test_moves_heal);
    return t_summary();
  }
  RUN(test_sparse_not_populated);
  RUN(test_dense_populated);
  RUN(test_kept_by_what_is_resident);
  RUN(test_huge_cache_parts);
  RUN(test_huge_growing_takes_part);
  RUN(test_emptied_purged);
  RUN(test_aligned_reuse);
  return t_summary();
}
