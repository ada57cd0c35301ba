/* api_test.c: conformance of every entry point, as glibc behaves: alignment,
 * usable sizes, zeroing, realloc keeping data, errno and NULL on failure.
 * Prints "ok NAME" per test and "N passed, M failed"; exits non-zero on any
 * failure. */
#include "tcheck.h"

#include <sys/resource.h>

#include "../src/sizeclasses.h"
#include <unistd.h>

static const size_t sizes[] = {0, 1, 7, 8, 15, 16, 17, 24, 31, 32, 33, 48, 63, 64, 65, 100, 127, 128, 129,
                               255, 256, 257, 500, 1000, 1024, 1025, 2047, 4096, 4097, 10000, 32768, 65535,
                               65536, 65537, 100000, 262144, 524287, 524288, 524289, 1 << 20, (1 << 20) + 1,
                               3 << 20, 16 << 20, (32 << 20) - 1, 32 << 20, (32 << 20) + 1, 100 << 20};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

static void test_active(void) { CHECK(t_tagalloc_active(), "tagalloc is not the allocator in this process"); }

static void test_malloc_sizes(void) {
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    uint8_t *p = malloc(n);
    CHECK(p != NULL, "malloc(%zu) = NULL", n);
    if (!p) continue;
    CHECK(((uintptr_t)p & 15) == 0, "malloc(%zu) = %p not 16-aligned", n, (void *)p);
    size_t u = malloc_usable_size(p);
    CHECK(u >= n, "usable %zu < requested %zu", u, n);
    CHECK(n < 128 || u - n <= n / 8 + 4096, "usable %zu wastes too much for %zu", u, n);
    memset(p, 0xab, u); /* the whole usable size is ours */
    free(p);
  }
  CHECK(malloc_usable_size(NULL) == 0, "usable(NULL)");
}

static void test_calloc_zero(void) {
  /* Dirty memory first, so calloc must really zero what it reuses. */
  for (size_t i = 0; i < NSIZES; i++) {
    size_t n = sizes[i];
    void *d = malloc(n ? n : 1);
    if (d) memset(d, 0x5a, n);
    free(d);
    uint8_t *p = calloc(1, n);
    CHECK(p != NULL, "calloc(1, %zu) = NULL", n);
    if (!p) continue;
    size_t bad = 0;
    for (size_t k = 0; k < n; k += (n > 65536 ? 61 : 1)) bad += p[k] != 0;
    CHECK(bad == 0, "calloc(1, %zu): %zu nonzero bytes", n, bad);
    free(p);
  }
  uint32_t *a = calloc(1000, sizeof(uint32_t));
  CHECK(a != NULL, "calloc(1000, 4)");
  for (int i = 0; a && i < 1000; i++) CHECK(a[i] == 0, "calloc element %d", i);
  free(a);
}

static void test_calloc_overflow(void) {
  errno = 0;
  void *p = calloc(SIZE_MAX / 2, 3);
  CHECK(p == NULL && errno == ENOMEM, "calloc overflow: p=%p errno=%d", p, errno);
  errno = 0;
  p = calloc((size_t)1 << 33, (size_t)1 << 33);
  CHECK(p == NULL && errno == ENOMEM, "calloc 2^66: p=%p errno=%d", p, errno);
}

static void test_impossible_sizes(void) {
  size_t bad[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX / 2 + 1, (size_t)PTRDIFF_MAX, (size_t)1 << 62};
  for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
    errno = 0;
    void *p = malloc(bad[i]);
    CHECK(p == NULL && errno == ENOMEM, "malloc(%zu): p=%p errno=%d", bad[i], p, errno);
    void *q = malloc(16);
    errno = 0;
    void *r = realloc(q, bad[i]);
    CHECK(r == NULL && errno == ENOMEM, "realloc(q, %zu): r=%p errno=%d", bad[i], r, errno);
    free(q); /* realloc failed: q is still ours */
    errno = 0;
    void *a = aligned_alloc(64, bad[i]);
    CHECK(a == NULL && errno == ENOMEM, "aligned_alloc(64, %zu): %p errno=%d", bad[i], a, errno);
  }
  errno = 0;
  void *r = reallocarray(NULL, SIZE_MAX / 2, 4);
  CHECK(r == NULL && errno == ENOMEM, "reallocarray overflow: %p errno=%d", r, errno);
}

static void test_realloc_semantics(void) {
  /* realloc(NULL, n) is malloc(n). */
  char *p = realloc(NULL, 100);
  CHECK(p != NULL, "realloc(NULL, 100)");
  /* realloc(p, 0) frees and returns NULL, as glibc does. */
  void *z = realloc(p, 0);
  CHECK(z == NULL, "realloc(p, 0) = %p, glibc returns NULL", z);
  void *arr = reallocarray(NULL, 10, 10);
  CHECK(arr != NULL && malloc_usable_size(arr) >= 100, "reallocarray(NULL, 10, 10)");
  arr = reallocarray(arr, 1000, 10);
  CHECK(arr != NULL && malloc_usable_size(arr) >= 10000, "reallocarray grow");
  free(arr);
}

static void test_realloc_keeps_data(void) {
  /* Grow through every kind (small, large, huge) and shrink back, checking
   * the prefix survives every move. */
  size_t n = 1;
  uint8_t *p = malloc(n);
  t_fill(p, n, 7);
  size_t steps[] = {2, 17, 100, 1000, 5000, 70000, 600000, 2 << 20, 40 << 20, 70 << 20,
                    (40 << 20), 3 << 20, 700000, 70000, 1000, 30, 1};
  for (size_t i = 0; i < sizeof(steps) / sizeof(steps[0]); i++) {
    size_t m = steps[i];
    uint8_t *q = realloc(p, m);
    CHECK(q != NULL, "realloc to %zu", m);
    if (!q) break;
    size_t keep = n < m ? n : m;
    /* check the prefix against the pattern of the old address */
    size_t bad = 0;
    for (size_t k = 0; k < keep; k += (keep > 1 << 20 ? 4093 : 1)) bad += q[k] != t_pattern(p, k, 7);
    CHECK(bad == 0, "realloc %zu -> %zu lost data (%zu bytes differ)", n, m, bad);
    t_fill(q, m, 7);
    p = q;
    n = m;
  }
  free(p);
}

static void test_realloc_inplace_large(void) {
  /* Growing a large block by a page when the next pages are free keeps it. */
  uint8_t *p = malloc(1 << 20);
  CHECK(p != NULL, "malloc 1 MiB");
  t_fill(p, 1 << 20, 3);
  uint8_t *q = realloc(p, (1 << 20) + 65536);
  CHECK(q != NULL && t_verify(q, 1 << 20, 3) == (q == p), "grow keeps data");
  uint8_t *r = realloc(q, 800000);
  CHECK(r == q, "shrinking a large block stays in place");
  free(r);
}

static void test_realloc_room_large(void) {
  /* A large block that grows and cannot grow in place (another block
   * follows it) moves with a quarter more room, and grows into that room
   * where it is. */
  const size_t page = 65536, start = 9 * page;
  uint8_t *p = malloc(start), *after = malloc(start);
  CHECK(p != NULL && after != NULL, "malloc 576 KiB twice");
  if (!p || !after) return;
  for (size_t i = 0; i < start; i++) p[i] = (uint8_t)(i * 7 + 5);
  size_t was = malloc_usable_size(p);
  uint8_t *q = realloc(p, was + 1);
  CHECK(q != NULL, "realloc to %zu", was + 1);
  if (!q) return;
  size_t bad = 0;
  for (size_t i = 0; i < start; i++) bad += q[i] != (uint8_t)(i * 7 + 5);
  CHECK(bad == 0, "grow lost data (%zu bytes differ)", bad);
  if (q == p) {
    printf("# realloc grew in place: %p was followed by %p\n", (void *)p, (void *)after);
  } else {
    size_t room = malloc_usable_size(q);
    CHECK(room >= was + was / 4, "moved with %zu usable, want a quarter more than %zu", room, was);
    uint8_t *same = realloc(q, room);
    CHECK(same == q, "growing into the room moved it (%p -> %p)", (void *)q, (void *)same);
    q = same;
  }
  free(q);
  free(after);
}

/* The smallest of 1, 1.25, 1.5 and 1.75 times a power of two that is n or more. */
static size_t grid_at_least(size_t n) {
  for (size_t p = 1024;; p *= 2)
    for (size_t m = 4; m < 8; m++)
      if ((m * p) / 4 >= n) return (m * p) / 4;
}

static void test_realloc_room_small(void) {
  /* A small block of 1 KiB or more that grows out of its class moves to
   * the class on the grid of four a doubling that holds its new size,
   * never past the small classes (512 KiB); a smaller one moves to the
   * class it asks for. 7732 bytes stop at 8192 (a quarter more room
   * than 7680 bytes would be 9600 or more: redis's 8 KiB list nodes). */
  const size_t sizes[] = {2000, 5000, 7680, 70000, 430000};
  const size_t grow[] = {1, 1, 52, 1, 1};
  for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
    uint8_t *p = malloc(sizes[i]);
    CHECK(p != NULL, "malloc %zu", sizes[i]);
    if (!p) return;
    for (size_t k = 0; k < sizes[i]; k++) p[k] = (uint8_t)(k * 7 + 3);
    size_t was = malloc_usable_size(p), to = was + grow[i], want = grid_at_least(to);
    uint8_t *q = realloc(p, to);
    CHECK(q != NULL, "realloc %zu -> %zu", was, to);
    if (!q) return;
    size_t bad = 0;
    for (size_t k = 0; k < sizes[i]; k++) bad += q[k] != (uint8_t)(k * 7 + 3);
    CHECK(bad == 0, "realloc %zu -> %zu lost data (%zu bytes differ)", was, to, bad);
    size_t room = malloc_usable_size(q);
    CHECK(room == want && want <= 524288, "grown from %zu to %zu: %zu usable, want %zu", was, to, room, want);
    CHECK(realloc(q, room) == q, "growing into the room moved it");
    free(q);
  }
  uint8_t *p = malloc(500), *q;
  CHECK(p != NULL, "malloc 500");
  if (!p) return;
  size_t was = malloc_usable_size(p);
  q = realloc(p, was + 1);
  CHECK(q != NULL && malloc_usable_size(q) <= was + was / 8, "grown from %zu: %zu usable, want the next class", was,
        q ? malloc_usable_size(q) : 0);
  free(q);
}

/* A huge block resized in place, freed, and its address given to a new,
 * smaller block (part of the freed mapping, from the cache): a realloc of
 * the new block must see its own mapping, not the one the address had
 * (the in-place path without the lock remembers the last, until the
 * table changes: huge.c). */
static void test_realloc_huge_reused_address(void) {
  const size_t MiB = 1 << 20;
  uint8_t *p = malloc(40 * MiB);
  CHECK(p != NULL, "malloc 40 MiB");
  if (!p) return;
  p = realloc(p, 40 * MiB + 100); /* grows the mapping, with room */
  CHECK(p != NULL, "realloc 40 MiB + 100");
  if (!p) return;
  size_t room = malloc_usable_size(p);
  uint8_t *same = realloc(p, room - 4096); /* in place: remembered */
  CHECK(same == p, "realloc within the mapping stays (%p -> %p)", (void *)p, (void *)same);
  uint8_t *again = realloc(p, room - 8192);
  CHECK(again == p, "and again");
  free(p);
  uint8_t *q = malloc(33 * MiB); /* the freed mapping's first part, most likely at p */
  CHECK(q != NULL, "malloc 33 MiB");
  if (!q) return;
  for (size_t i = 0; i < 33 * MiB; i += 4093) q[i] = (uint8_t)(i * 131 >> 3);
  uint8_t *r = realloc(q, room - 8192); /* the old block's size: q's own mapping must grow */
  CHECK(r != NULL, "realloc of the new block");
  if (!r) return;
  CHECK(malloc_usable_size(r) >= room - 8192, "realloc(%zu) of a %zu block at a reused address: usable %zu", room - 8192,
        (size_t)33 * MiB, malloc_usable_size(r));
  size_t bad = 0;
  for (size_t i = 0; i < 33 * MiB; i += 4093) bad += r[i] != (uint8_t)(i * 131 >> 3);
  CHECK(bad == 0, "the new block's data kept: %zu samples differ", bad);
  memset(r + 33 * MiB, 7, room - 8192 - 33 * MiB);
  free(r);
}

static int is_aligned(void *p, size_t a) { return ((uintptr_t)p & (a - 1)) == 0; }

static void test_aligned_entry_points(void) {
  size_t aligns[] = {1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096, 8192, 65536, 131072, 1 << 20, 4 << 20, 64 << 20};
  size_t asizes[] = {0, 1, 8, 24, 100, 4096, 5000, 65536, 100000, 600000, 3 << 20, 33 << 20};
  for (size_t i = 0; i < sizeof(aligns) / sizeof(aligns[0]); i++) {
    for (size_t j = 0; j < sizeof(asizes) / sizeof(asizes[0]); j++) {
      size_t a = aligns[i], n = asizes[j];
      void *p = NULL;
      if (a >= sizeof(void *)) {
        int rc = posix_memalign(&p, a, n);
        CHECK(rc == 0 && p && is_aligned(p, a), "posix_memalign(%zu, %zu): rc=%d p=%p", a, n, rc, p);
        if (p) {
          CHECK(malloc_usable_size(p) >= n, "posix_memalign usable");
          memset(p, 1, n);
        }
        free(p);
      }
      p = aligned_alloc(a, n);
      CHECK(p && is_aligned(p, a), "aligned_alloc(%zu, %zu) = %p", a, n, p);
      if (p) memset(p, 2, n);
      free(p);
      p = memalign(a, n);
      CHECK(p && is_aligned(p, a), "memalign(%zu, %zu) = %p", a, n, p);
      if (p) CHECK(malloc_usable_size(p) >= n, "memalign usable");
      free(p);
    }
  }
  long ps = sysconf(_SC_PAGESIZE);
  void *v = valloc(100);
  CHECK(v && is_aligned(v, (size_t)ps), "valloc");
  free(v);
  void *pv = pvalloc(100);
  CHECK(pv && is_aligned(pv, (size_t)ps) && malloc_usable_size(pv) >= (size_t)ps, "pvalloc rounds to a page");
  free(pv);
  pv = pvalloc(0);
  CHECK(pv && malloc_usable_size(pv) >= (size_t)ps, "pvalloc(0) gives a page");
  free(pv);
}

static void test_aligned_errors(void) {
  void *p = (void *)1;
  CHECK(posix_memalign(&p, 3, 10) == EINVAL, "posix_memalign(3) must be EINVAL");
  CHECK(posix_memalign(&p, 4, 10) == EINVAL, "posix_memalign(4 < sizeof(void*)) must be EINVAL");
  CHECK(p == (void *)1, "posix_memalign must not touch *out on error");
  errno = 0;
  int e0 = errno;
  CHECK(posix_memalign(&p, 64, SIZE_MAX / 2) == ENOMEM, "posix_memalign huge must be ENOMEM");
  CHECK(errno == e0, "posix_memalign must not set errno");
  errno = 0;
  CHECK(aligned_alloc(3, 10) == NULL && errno == EINVAL, "aligned_alloc(3): errno %d", errno);
  /* memalign rounds a non power of two up, as glibc does */
  void *m = memalign(48, 100);
  CHECK(m && is_aligned(m, 64), "memalign(48) rounds to 64");
  free(m);
}

static void test_usable_size_classes(void) {
  /* Every size up to 4 KiB: usable >= n, and <= n + 1/8 beyond 128. */
  for (size_t n = 1; n <= 4096; n++) {
    void *p = malloc(n);
    size_t u = malloc_usable_size(p);
    CHECK(u >= n && (n <= 128 ? u - n < 16 : (u - n) * 8 <= u), "size %zu usable %zu", n, u);
    free(p);
  }
}

/* Sizes up to 1 KiB find their page by size (heap->small[], one slot a
 * 16 bytes), the rest by class: every size gets a block of exactly its
 * class, whether the size's page is new or one that sizes sharing its class
 * set up, with blocks of every size live at once and taken in a shuffled
 * order (each slot must follow its class's page as it changes). */
static void test_usable_size_exact_class(void) {
  enum { MAXN = 1100, K = 3 };
  static void *ps[(MAXN + 1) * K];
  static size_t order[(MAXN + 1) * K];
  size_t n_all = 0;
  for (size_t n = 0; n <= MAXN; n++) {
    void *p = malloc(n);
    size_t want = _ta_classes[_ta_class_of(n)].size;
    CHECK(p && malloc_usable_size(p) == want, "malloc(%zu): usable %zu, its class %zu", n, p ? malloc_usable_size(p) : 0, want);
    free(p);
    for (int k = 0; k < K; k++) order[n_all++] = n;
  }
  uint64_t r = 88172645463325252ull;
  for (size_t i = n_all - 1; i > 0; i--) { /* xorshift, Fisher-Yates */
    r ^= r << 13, r ^= r >> 7, r ^= r << 17;
    size_t j = r % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (size_t i = 0; i < n_all; i++) {
    size_t n = order[i];
    ps[i] = malloc(n);
    size_t want = _ta_classes[_ta_class_of(n)].size;
    CHECK(ps[i] && malloc_usable_size(ps[i]) == want, "malloc(%zu) among others: usable %zu, its class %zu", n,
          ps[i] ? malloc_usable_size(ps[i]) : 0, want);
    if (ps[i]) memset(ps[i], (int)(n & 0xff), n);
  }
  for (size_t i = 0; i < n_all; i++) {
    const uint8_t *q = ps[i];
    for (size_t b = 0; q && b < order[i]; b++)
      if (q[b] != (uint8_t)(order[i] & 0xff)) {
        CHECK(0, "block of %zu bytes overwritten at %zu", order[i], b);
        break;
      }
    free(ps[i]);
  }
}

static void test_many_small(void) {
  /* Fill several spans of a class, free out of order, refill: blocks are
   * distinct and keep their contents. */
  enum { N = 20000 };
  static void *ps[N];
  for (int i = 0; i < N; i++) {
    ps[i] = malloc(24);
    t_fill(ps[i], 24, 11);
  }
  for (int i = 0; i < N; i++) CHECK(t_verify(ps[i], 24, 11), "block %d corrupted", i);
  for (int i = 0; i < N; i += 2) free(ps[i]);
  for (int i = 0; i < N; i += 2) {
    ps[i] = malloc(24);
    t_fill(ps[i], 24, 11);
  }
  for (int i = 0; i < N; i++) CHECK(t_verify(ps[i], 24, 11), "block %d corrupted after reuse", i);
  for (int i = N - 1; i >= 0; i--) free(ps[i]);
}

static void test_trim(void) {
#ifndef TA_TEST_PREFIX
  CHECK(malloc_trim(0) == 1, "malloc_trim");
#endif
  t_purge();
  t_check();
}

static void test_enomem_rlimit(void) {
  /* With the address space limited, a huge allocation fails with ENOMEM,
   * the allocator keeps working, and succeeds again once the limit goes. */
  struct rlimit old;
  if (getrlimit(RLIMIT_AS, &old) != 0) return;
  struct rlimit lim = old;
  lim.rlim_cur = 0;
  t_purge(); /* cached mappings would make room under the limit when purged */
  size_t vm_kb = t_status_kb("VmSize");
  CHECK(vm_kb > 0, "VmSize not found");
  lim.rlim_cur = (vm_kb + 64 * 1024) * 1024; /* 64 MiB more than now */
  CHECK(setrlimit(RLIMIT_AS, &lim) == 0, "setrlimit");
  /* huge blocks (their own mappings, past the default threshold): a large
   * span would come from address space the arena reserved already */
  errno = 0;
  void *big = malloc((size_t)512 << 20);
  CHECK(big == NULL && errno == ENOMEM, "malloc(512 MiB) under RLIMIT_AS: %p errno %d", big, errno);
  errno = 0;
  void *big2 = calloc(1, (size_t)600 << 20);
  CHECK(big2 == NULL && errno == ENOMEM, "calloc under RLIMIT_AS: %p errno %d", big2, errno);
  void *small = malloc(1000);
  CHECK(small != NULL, "small malloc still works under the limit");
  free(small);
  setrlimit(RLIMIT_AS, &old);
  big = malloc((size_t)512 << 20);
  CHECK(big != NULL, "malloc(512 MiB) after the limit is lifted");
  if (big) memset(big, 1, 4096);
  free(big);
}

int main(void) {
  RUN(test_active);
  RUN(test_malloc_sizes);
  RUN(test_calloc_zero);
  RUN(test_calloc_overflow);
  RUN(test_impossible_sizes);
  RUN(test_realloc_semantics);
  RUN(test_realloc_keeps_data);
  RUN(test_realloc_inplace_large);
  RUN(test_realloc_room_large);
  RUN(test_realloc_room_small);
  RUN(test_realloc_huge_reused_address);
  RUN(test_aligned_entry_points);
  RUN(test_aligned_errors);
  RUN(test_usable_size_classes);
  RUN(test_usable_size_exact_class);
  RUN(test_many_small);
  RUN(test_enomem_rlimit);
  RUN(test_trim);
  return t_summary();
}
