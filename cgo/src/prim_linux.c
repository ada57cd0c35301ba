/* prim_linux.c: OS memory and time. The only file that calls mmap, munmap,
 * madvise and mremap. Memory states: reserved (mapped read-write with
 * MAP_NORESERVE, no page touched) -> in use (touched: resident) -> purged
 * (MADV_DONTNEED, or its pages moved elsewhere: not resident, reads as
 * zero) -> released (munmap). */

#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef PR_SET_VMA
#define PR_SET_VMA 0x53564d41
#define PR_SET_VMA_ANON_NAME 0
#endif

/* Fault injection, for tests of out-of-memory paths: with
 * TAGALLOC_FAULT_EVERY=N, every Nth request for memory (an arena span, a
 * mapping for a huge block or the huge table, a remap, a page move) fails
 * with ENOMEM, until TAGALLOC_FAULT_COUNT failures have been injected. */
static _Atomic(size_t) _ta_fault_calls, _ta_fault_hits;

TA_NOINLINE static bool _ta_fault_slow(void) {
  if (_ta_opt.fault_count && atomic_load_explicit(&_ta_fault_hits, memory_order_relaxed) >= _ta_opt.fault_count) return false;
  if ((atomic_fetch_add_explicit(&_ta_fault_calls, 1, memory_order_relaxed) + 1) % _ta_opt.fault_every != 0) return false;
  atomic_fetch_add_explicit(&_ta_fault_hits, 1, memory_order_relaxed);
  errno = ENOMEM;
  return true;
}

static inline bool _ta_fault(void) { return ta_unlikely(_ta_opt.fault_every != 0) && _ta_fault_slow(); }

/* Map size bytes with flags, aligned to align (a power of two >= the OS
 * page): if the kernel's address is misaligned, map size + align and trim
 * both ends. NULL on failure, errno from the kernel. */
static void *_ta_os_mmap_aligned(size_t size, size_t align, int flags) {
  void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (p == MAP_FAILED) return NULL;
  if (((uintptr_t)p & (align - 1)) == 0) return p;
  munmap(p, size);
  if (size + align < size) { errno = ENOMEM; return NULL; }
  uint8_t *q = mmap(NULL, size + align, PROT_READ | PROT_WRITE, flags, -1, 0);
  if (q == MAP_FAILED) return NULL;
  uint8_t *a = (uint8_t *)_ta_align_up((uintptr_t)q, align);
  if (a > q) munmap(q, (size_t)(a - q));
  size_t tail = (size_t)((q + size + align) - (a + size));
  if (tail) munmap(a + size, tail);
  return a;
}

/* Reserve address space: touched pages cost memory, untouched ones not,
 * and the reservation is not charged against overcommit. */
static void *_ta_os_reserve(size_t size, size_t align) {
  return _ta_os_mmap_aligned(size, align, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE);
}

static void _ta_os_release(void *p, size_t size) {
  if (munmap(p, size) != 0) _ta_warn("munmap(%p, %zu) failed (errno %d)", p, size, errno);
}

/* Give the pages back; the range stays mapped and reads as zero. */
static void _ta_os_purge(void *p, size_t size) {
  int e = errno;
  (void)madvise(p, size, MADV_DONTNEED);
  errno = e;
}

/* How many OS pages of [p, p+size) are resident (p page-aligned): mincore,
 * into vec (n bytes) a chunk at a time. If the kernel cannot say, all. */
static size_t _ta_os_resident(void *p, size_t size, unsigned char *vec, size_t n) {
  size_t res = 0, pages = size / TA_OS_PAGE;
  int e = errno;
  for (size_t i = 0; i < pages; i += n) {
    size_t k = pages - i < n ? pages - i : n;
    if (mincore((uint8_t *)p + i * TA_OS_PAGE, k * TA_OS_PAGE, vec) != 0) {
      res += k;
      continue;
    }
    for (size_t j = 0; j < k; j++) res += vec[j] & 1;
  }
  errno = e;
  return res;
}

#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif

/* Bring the pages of [p, p+size) in now, writable, in one call (p
 * page-aligned): on the 2-core VM a page's first write fault cost 14 us,
 * populated 1.2-2.8 us. False if the kernel cannot (before Linux 5.14):
 * the pages fault in as they are written. */
static bool _ta_os_populate(void *p, size_t size) { /* ring.c, arena.c */
  int e = errno;
  bool ok = madvise(p, size, MADV_POPULATE_WRITE) == 0 || errno != EINVAL;
  errno = e;
  return ok;
}

/* Name the mapping so /proc/PID/maps shows "[anon:tagalloc ...]" (Linux 5.17+;
 * silently nothing before). */
static void _ta_os_name(void *p, size_t size, const char *name) {
  int e = errno;
  (void)prctl(PR_SET_VMA, PR_SET_VMA_ANON_NAME, (unsigned long)p, size, (unsigned long)name);
  errno = e;
}

static uint64_t _ta_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* The same in microseconds, from the fine clock: the coarse one moves a
 * tick at a time (4 ms on the 2-core VM), too coarse for heap.c's idle
 * give-back, spaced 1 ms. */
static uint64_t _ta_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static void _ta_write_stderr(const char *s, size_t n) {
  int e = errno;
  while (n > 0) {
    ssize_t w = write(2, s, n);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      break;
    }
    s += w;
    n -= (size_t)w;
  }
  errno = e;
}

/* Map size bytes of ordinary (committed-on-touch) memory for one huge block,
 * aligned to align. */
static void *_ta_os_map(size_t size, size_t align) {
  if (_ta_fault()) return NULL;
  return _ta_os_mmap_aligned(size, align < TA_OS_PAGE ? TA_OS_PAGE : align, MAP_PRIVATE | MAP_ANONYMOUS);
}

#ifndef MREMAP_DONTUNMAP
#define MREMAP_DONTUNMAP 4
#endif

/* Move the pages of [from, from+size) to [to, to+size), both page-aligned
 * ranges of our mappings: the page tables move (no copy, no fault), what
 * was at to is dropped, and from stays mapped, reading as zero as if
 * purged. 0, or the error: nothing moved, though a failed MREMAP_FIXED
 * may have unmapped to already (the caller maps it afresh: _ta_os_renew).
 * EINVAL: the kernel cannot (MREMAP_DONTUNMAP is Linux 5.7 and later);
 * EFAULT: from crosses two mappings (before Linux 6.17: the arena's and
 * one a move made). On the
 * 2-core VM, per MiB: 32-194 us for ranges whose page tables move whole
 * (2 MiB-aligned), 976 us a page at a time, against 1.1-1.5 ms for
 * MADV_POPULATE_WRITE of fresh pages and 2.9 ms for faults. */
static int _ta_os_move(void *from, void *to, size_t size) {
  if (_ta_fault()) return ENOMEM;
  int e = errno;
  void *q = mremap(from, size, size, MREMAP_MAYMOVE | MREMAP_FIXED | MREMAP_DONTUNMAP, to);
  int err = q == to ? 0 : q == MAP_FAILED ? errno : EFAULT;
  errno = e;
  return err;
}

/* Purge [p, p+size) by mapping it afresh (p and size page-aligned, in
 * an arena), named name as the arena is: a range pages were moved into
 * (_ta_os_move) is a mapping of its own, and the fresh one joins the
 * mappings around it again. The kernel may refuse (the process's
 * mappings at their limit) after it took the old range away: it is
 * mapped once more; a range still there is purged in place; one gone for
 * good would be a hole in the heap, fatal. */
static void _ta_os_renew(void *p, size_t size, const char *name) {
  int e = errno;
  for (int tries = 0; tries < 2; tries++) {
    if (mmap(p, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0) == p) {
      _ta_os_name(p, size, name);
      errno = e;
      return;
    }
  }
  if (madvise(p, size, MADV_DONTNEED) != 0) _ta_fatal("cannot map the heap at %p (%zu bytes) again (errno %d)", p, size, errno);
  errno = e;
}

/* Resize a mapping, moving it if needed. NULL on failure (old one intact). */
static void *_ta_os_remap(void *p, size_t old, size_t size) {
  if (_ta_fault()) return NULL;
  void *q = mremap(p, old, size, MREMAP_MAYMOVE);
  return q == MAP_FAILED ? NULL : q;
}
