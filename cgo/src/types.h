/* types.h: the layout of tagalloc's native allocator and the contract of each
 * layer. Every other source file is included once by static.c.
 *
 * Glossary
 *   arena     one contiguous reservation of address space (64 GiB by default,
 *             less if the OS refuses), mapped read-write with MAP_NORESERVE
 *             so only touched pages cost memory. More arenas are reserved
 *             when one fills up (at most TA_MAX_ARENAS).
 *   page      64 KiB of an arena (TA_PAGE_SIZE). Each page has a 128-byte
 *             descriptor (_ta_page_t) in a separate mapping: metadata is out
 *             of line (docs/ARCHITECTURE.md, D4), so overrunning a block cannot corrupt it.
 *   span      a run of pages. Its first page's descriptor is the span's
 *             "head"; every page of a span in use records head_off, the
 *             distance back to its head, so any address inside finds it.
 *   size class one of TA_NUM_CLASSES block sizes (sizeclasses.h, generated);
 *             a small span holds blocks of one class, carved lazily.
 *   small     size <= TA_MAX_SMALL (512 KiB): a block of a class.
 *   large     TA_MAX_SMALL < size < huge threshold: a span of whole pages.
 *   huge      size >= huge threshold (32 MiB): its own mmap, recorded in a
 *             hash table (huge.c); realloc uses mremap.
 *   heap      a thread's cache (_ta_heap_t), one per thread whatever its
 *             tags: per class, the page it allocates from (direct[]), its
 *             other pages with free blocks (queue) and its full pages
 *             (full). A thread owns the pages of its heap.
 *   tag       a name (1..63 bytes) a thread's allocations are charged to
 *             (tags.c). Tags do not segregate memory: a
 *             page holds blocks of any tags, and each block's tag id is a
 *             uint16_t in its span's tag array (_ta_page_t.tags, out of
 *             line, one entry per block), written by malloc and read by
 *             free: O(1), no lock, no hash, and a tag costs counters, not
 *             pages or heaps. Large spans and huge blocks keep one tag.
 *   books     per (thread, tag), exact alloc and free counts of blocks and
 *             bytes (_ta_ctr_t), in a region that tagalloc run reads
 *             (books.c). A tag's figures are sums over threads; a thread
 *             that frees another's block counts the free in its own
 *             counters, so one thread's live figure may be negative while
 *             the sum is exact (as per-CPU counters).
 *
 * The malloc path
 *   1. page = heap->small[(size + 15) / 16] up to 1 KiB, else
 *      heap->direct[_ta_class_of(size)]                    (TLS heap)
 *   2. if page->ctr is heap->ctr (the thread's counters of its current
 *      tag, so the page is the thread's and of that tag): pop
 *      page->free (prefetching the next free block for writing);
 *      used++; heap->ctr += 1 block and the class size;
 *      return.                                                (fast path)
 *      A page of another tag takes the tag if it is empty, else turns
 *      mixed: from then on tags[block index] holds each block's tag.
 *   3. otherwise (heap.c) move the cross-thread list into free, carve more blocks, try the class's other pages, rescan full
 *      pages that other threads freed into, adopt an abandoned page, or take
 *      a new span from the arena (arena.c, under the arena lock).
 * The free path
 *   1. page = descriptor of the address (one compare with arena 0's bounds,
 *      one index; head_off for multi-page spans).
 *   2. owner thread: page->ctr is heap->ctr: heap->ctr counts the free
 *      (fast path); else the block's tag (page->tag, or tags[block
 *      index] on a mixed page) and its counters (a look-up) count it;
 *      push on page->free (LIFO, so a block freed and allocated
 *      again stays in cache), used--. A page whose used count drops to 0
 *      goes back to the arena (unless it is the class's direct page).
 *   3. other thread: read the tag and count the free as in 2 (before the
 *      push: after it the block may be reused), then a lock-free push on
 *      page->xthread_free; the owner collects it on its next slow path.
 *      Blocks of 1 KiB or less go on the freeing heap's chain for their
 *      class first, pushed together when a block of another page comes
 *      (page.c, remote frees in batches).
 *   4. large spans go back to the arena; huge blocks are unmapped.
 *
 * Memory returns to the OS: free spans are "dirty" (resident) until purged
 * with madvise(MADV_DONTNEED): those older than the purge delay are purged
 * at the next arena operation, and dirty memory beyond the retain limit is
 * purged at once, so RSS falls right after a large free.
 *
 * Errors and out of memory: an impossible size or a failed mmap returns NULL
 * with errno = ENOMEM (after one purge-and-retry); the books are unchanged.
 * Misuse the allocator can see cheaply prints "tagalloc: CALL(ADDRESS): ..."
 * and aborts, as glibc does: a free or realloc of an address it never
 * handed out or of a freed span, a pointer that is not 16-aligned, an
 * interior pointer freed by another thread, a double free of a small
 * block (the free key, see _ta_block_t). Not caught: an aligned interior
 * pointer freed by the block's own thread. Broken invariants (debug builds, TA_DEBUG >= 1) print and abort.
 * The checking build (TA_CHECK, check.c) adds canaries, poison and a
 * quarantine, and names the first bad byte.
 *
 * Signal handlers: malloc and free are not async-signal-safe (POSIX), but
 * what programs do anyway must not hang. Guaranteed (cgo TestOdd): a handler
 * that allocates while its thread is outside the allocator (a crash handler:
 * backtrace(), backtrace_symbols_fd, malloc) works like any caller; one that
 * interrupts its thread inside the allocator's arena work (span allocation,
 * free, purge: the arena lock) does not wait for that lock: its malloc maps
 * a block of its own if it needs a new span (a system call; NULL/ENOMEM
 * only if that fails), its free of a span is done when the interrupted
 * section ends, so it never deadlocks there; the per-thread
 * counts are single add instructions (x86-64), so its counts are not lost.
 * Not guaranteed: a handler interrupting the one-time initialization gets
 * NULL; one interrupting its thread inside another lock (huge table,
 * abandoned pages, heap list, tags, metadata: rare, short sections) can
 * deadlock; one allocating the size class and tag its thread is taking from
 * or freeing to at that instant races on the page's free list (no lock is
 * there to take; not seen in the tests' millions of operations, not proven).
 *
 * Locks, in the order they nest (a thread holding one takes only later
 * ones; fork takes them all in this order, init.c _ta_fork_prepare):
 *   _ta_report_lock   memory reporters (report.c): outermost, held while
 *                     reporters run and allocate; not taken by fork (its
 *                     child re-initializes it)
 *   _ta_init_lock     the one-time initialization (init.c), before fork
 *                     handlers exist
 *   _ta_sample_lock   the events ring and sampled set (ring.c, stacks
 *                     builds)
 *   _ta_tags_lock     registering tag names (tags.c)
 *   _ta_threads_lock  thread records (tags.c)
 *   _ta_heaps_lock    the list of heaps (heap.c)
 *   _ta_aband_lock    abandoned pages (heap.c)
 *   _ta_arena_lock    spans, arenas, purging (arena.c)
 *   _ta_huge_lock     the huge table (huge.c)
 *   _ta_meta_lock     the metadata allocator (heap.c)
 *   _ta_quar_lock     the checking build's quarantine (check.c): a leaf
 *   _ta_purger_lock   the purger's wake-up (purger.c): a leaf, only tried
 *                     by others (not taken by fork: its child makes it anew)
 * Apart from _ta_report_lock, none is held while calling anything that
 * could allocate through malloc. Every lock is taken through
 * _ta_mutex_lock (the end of this file), and debug builds check this
 * order on every acquisition: static.c's _ta_locks_ranked gives each
 * lock its place here, and taking one at or above a place a thread holds
 * aborts, naming both (testdata/lockrank_test.c). */
#ifndef TAGALLOC_TYPES_H
#define TAGALLOC_TYPES_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "sizeclasses.h"
#include "shared.h" /* what Go shares: books and ring layouts, tag limits, options (generated) */

#define TAGALLOC_BUILDING 1

#ifndef TA_SAMPLING
#define TA_SAMPLING 0 /* 1: sampled stacks (sample.c); tagalloc run builds both */
#endif /* tagalloc.h: we define its functions */

#ifndef TA_CHECK
#define TA_CHECK 0 /* 1: the checking build (check.c); tagalloc run --check builds it */
#endif

/* ---- build configuration ------------------------------------------------ */

/* TA_DEBUG: 0 release; 1 or more: invariant checks (ta_assert) that print
 * and abort. Level 2 checks nothing more today; the tests build the core
 * at level 2 so that a check added for it runs in them. */
#ifndef TA_DEBUG
#define TA_DEBUG 0
#endif

/* TA_PREFIX: build the public entry points under other names (for example
 * -DTA_PREFIX=ta_test_ gives ta_test_malloc) so a test binary can run the
 * core beside the system allocator, under the thread sanitizer. */
#define TA_CAT2(a, b) a##b
#define TA_CAT(a, b) TA_CAT2(a, b)
#ifdef TA_PREFIX
#define TA_NAME(n) TA_CAT(TA_PREFIX, n)
#else
#define TA_NAME(n) n
#endif

#define TA_EXPORT __attribute__((visibility("default")))
#define TA_NOINLINE __attribute__((noinline))
#define TA_COLD __attribute__((cold, noinline))
/* On a big zeroed array that malloc and free do not touch (the per-tag
 * arrays of walks, reports and budgets, the tag-name hash, fork's map of
 * the books, the mincore vector of purges): the linker puts these after
 * every other zeroed global, so the small ones the allocator touches
 * share 3 pages instead of lying between them (a one-thread program
 * touched 9 of .bss's 48 pages). */
#define TA_COLD_BSS __attribute__((section(".bss.ta_cold")))
#define ta_likely(x) __builtin_expect(!!(x), 1)
#define ta_unlikely(x) __builtin_expect(!!(x), 0)
/* On a struct type: its variables have cache lines of their own (the
 * size rounds up to the alignment), for what threads write often, so that
 * what sits beside it is not invalidated with it. */
#define TA_ALONE __attribute__((aligned(64)))

/* On a lock: it sits with the library's other locks, each on a cache line
 * of its own, on one or two pages. fork writes every lock (prepare locks
 * them, the parent unlocks them, the child makes them anew): spread over
 * the data section they cost the child 8 copy-on-write faults and the
 * parent 4 on every fork (23 and 7 against glibc's 9 and 2 before the
 * program's first line in the child). */
#define TA_LOCK __attribute__((section(".data.tagalloc_locks"), aligned(64)))

/* A spinning thread's hint to the CPU that it waits (less power, and the
 * sibling hyperthread runs). */
#if defined(__x86_64__) || defined(__i386__)
#define TA_CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define TA_CPU_RELAX() __asm__ __volatile__("yield" ::: "memory")
#else
#define TA_CPU_RELAX() __asm__ __volatile__("" ::: "memory")
#endif

#define TA_KiB ((size_t)1024)
#define TA_MiB (TA_KiB * 1024)
#define TA_GiB (TA_MiB * 1024)

#define TA_MAX_ARENAS 64
#define TA_OS_PAGE 4096

/* Largest request we accept: beyond it, NULL + ENOMEM (like glibc's
 * PTRDIFF_MAX limit, with room for rounding). */
#define TA_MAX_REQUEST ((size_t)PTRDIFF_MAX - 2 * TA_PAGE_SIZE)

/* ---- blocks and pages --------------------------------------------------- */

/* A free small block. key is _ta_free_key while the block is free and is
 * cleared when it is handed out, so free finds a double free with one
 * compare (as glibc's tcache does): a match is confirmed by looking for
 * the block on its page's free lists, since a program's data can hold
 * the key by chance. Every class has room for both words (16 B and up). */
typedef struct _ta_block_s {
  struct _ta_block_s *next;
  uintptr_t key;
} _ta_block_t;

/* A page's xthread_free word: the list of blocks other threads freed (a
 * Treiber stack, pushed with one compare-and-swap) in the low 48 bits, and
 * its length in the top 16, updated in the same swap. So the owner takes
 * the list and its length whole, and when its own list is empty (the
 * usual case when it collects) makes the list its own without a walk: the
 * walk was a chain of misses, each block's line last written by the thread
 * that freed it. Arenas lie below 2^48 (arena.c), and a page has at most
 * 4096 blocks, so neither field overflows into the other. */
#define TA_XF_SHIFT 48
#define TA_XF_ONE ((uintptr_t)1 << TA_XF_SHIFT)
/* The list's low 4 bits are never a block's (blocks are 16-aligned): they
 * hold the state of a page every block of which other threads freed, as
 * the purger sees it (arena.c, "pages emptied by other threads"). A push
 * clears them (it is a double free then: the count passes the page's
 * blocks, and the owner's collect aborts); the owner's collect takes the
 * word whole but waits out TA_XF_PURGING. */
#define TA_XF_SEEN 1         /* the purger found it emptied; purged at its next look if still so */
#define TA_XF_PURGING 2      /* its pages being purged: whoever collects waits */
#define TA_XF_PURGED 4       /* purged: the blocks' memory is zero, their list gone */
#define TA_XF_STATE ((uintptr_t)15)
static inline _ta_block_t *_ta_xf_list(uintptr_t w) { return (_ta_block_t *)(w & (TA_XF_ONE - 1) & ~TA_XF_STATE); }
static inline uint32_t _ta_xf_count(uintptr_t w) { return (uint32_t)(w >> TA_XF_SHIFT); }
/* The list is gone with the pages (purged, or being purged): every block
 * of the page came back, and none may be read. */
static inline bool _ta_xf_gone(uintptr_t w) { return (w & (TA_XF_PURGING | TA_XF_PURGED)) != 0; }
_Static_assert(sizeof(uintptr_t) == 8, "xthread_free packs a count above a 48-bit pointer");

/* Never 0 (fresh memory); randomized at initialization. */
static uintptr_t _ta_free_key = (uintptr_t)0x5a17a110cf2eeb1dULL;

enum {
  TA_KIND_NONE = 0, /* never used (above the arena's top) */
  TA_KIND_FREE,     /* head of a free span */
  TA_KIND_SMALL,    /* head of a span of blocks of one class */
  TA_KIND_LARGE,    /* head of a span holding one large block */
  TA_KIND_INNER,    /* not a head: a page inside a span (head_off > 0) */
  TA_KIND_PURGING,  /* head of a free span being purged outside the lock */
};

/* Page flags (owner-written, plain). */
#define TA_IN_ABANDONED 2
#define TA_IN_STASHED 3 /* empty, on a stack of emptied pages (heap.c): no block of it is out */

enum {
  TA_PF_DIRTY = 1, /* free span: resident, not yet purged */
  TA_PF_ZERO = 2,  /* span memory is known to be zero (fresh or purged);
                      on a small span in use: it came so, and nothing past
                      its carved blocks has been touched */
  TA_PF_RESIDENT = 4, /* span just claimed: all its pages were resident (a
                         small span keeps it: carved whole, page.c); or a
                         small span in use carved whole and emptied by
                         other threads' frees (page.c, _ta_page_collect) */
  TA_PF_PRIMED = 8, /* large span in use: its pages were resident or
                        populated before the program had it, so its
                        residency when freed says nothing of the
                        program's use (arena.c, density) */
  TA_PF_UNMEASURED = 16, /* dirty free span: its resident count is a guess
                            (arena.c, "what is resident"), every page at
                            most; the purge measures it before purging
                            anything for the retain limit */
};

struct _ta_heap_s;

/* A page descriptor; heads carry the span's state. 128 bytes, two cache
 * lines (below), so adjacent pages' descriptors never share one. Who
 * writes what:
 *   free, used, capacity, reserved, sclass, block_size, ctr, tags[]
 *   entries, in_full, next/prev (of a span in use): the owning heap's
 *   thread (ctr also whoever takes an abandoned page, under the lock).
 *   xthread_free: any thread (lock-free push, with its count in the same
 *   word); the owner takes it whole.
 *   heap: the owner (abandon) or an adopter under _ta_aband_lock.
 *   kind, npages, head_off, flags, dirty links, the tags and slop arrays
 *   themselves: the arena lock holder, or the owner for a span it holds.
 * Invariant (small span, at rest): used + |free| + (reserved - capacity)
 *   == reserved, and |xthread_free| == its count <= used (blocks other
 *   threads freed count as used until the owner collects them). A block handed out has
 *   tag `tag`, or when that is TA_TAG_MIXED, tags[i] (a free block's entry
 *   is stale). Most pages only ever hold one tag's blocks: while they do,
 *   ctr is the owner thread's counters for that tag, and malloc and free
 *   compare it with the thread's heap->ctr and never touch tags[] (page.c,
 *   _ta_page_retag). ctr is a thread's counter set only while that
 *   thread's heap owns the page, so one compare says both "mine" and "of
 *   my current tag" (abandon, span free and a fork child's vanished heaps
 *   set it to NULL: a record, and its counters, pass to a later thread). */
typedef struct _ta_page_s {
  /* cache line 1: what any thread reads, written rarely (setup, carving,
   * retagging; the arena lock's fields). Other threads read it on every
   * free of one of the page's blocks: the owner's per-block writes are on
   * line 2, so its mallocs do not take the line back from them (xmalloc,
   * 2 threads freeing each other's blocks: 0.15 -> 0.12 s with remote
   * frees in batches, page.c; the split alone, with a push a block on
   * line 2, was slower). The owner's fast paths read both lines. */
  struct _ta_ctr_s *ctr;      /* small: the owner thread's counters for `tag`
                                 while the page is of one tag and owned (the
                                 fast paths compare it with heap->ctr), else
                                 NULL */
  _Atomic(struct _ta_heap_s *) heap; /* owner; NULL if free or abandoned */
  uint8_t *start;             /* first byte of the span (heads) */
  void *slop;                 /* TAGALLOC_REQUESTED: per block, usable - requested
                                 (uint16_t if block_size < 64 KiB, else uint32_t) */
  uint32_t block_size;        /* class size (small); 0 for large */
  uint16_t tag;               /* small: the tag of every block handed out, or
                                 TA_TAG_MIXED (then tags[] has each block's);
                                 large: its block's tag */
  uint16_t capacity;          /* blocks carved so far (others read it atomically) */
  uint16_t reserved;          /* blocks that fit in the span */
  uint8_t sclass;             /* size class (small) */
  /* written only under the arena lock */
  uint8_t kind;               /* TA_KIND_* */
  uint8_t flags;              /* TA_PF_* (free spans; TA_PF_PRIMED on a large
                                 span in use, set by its owner; TA_PF_ZERO and
                                 TA_PF_RESIDENT on a small one as it came, the
                                 first cleared and the second set by its
                                 owner, page.c) */
  uint16_t arena;             /* index of the arena holding this page (arena lock) */
  uint32_t head_off;          /* pages back to the head; 0 on a head */
  uint32_t npages;            /* span length in pages (heads; arena lock) */
  _Atomic(uint32_t) sampled;  /* not under the lock: a filter of its sampled live
                                 blocks (TA_SAMPLING builds, sampledset.c); on this
                                 line, so free's fast path reads one */
  /* cache line 2: the owner's per-block writes, what other threads' frees
   * write, and list bookkeeping */
  union {
    struct {                  /* small span in use */
      _ta_block_t *free;      /* blocks ready for malloc (the owner frees here) */
      uint16_t used;          /* blocks handed out, not yet collected back */
    };
    struct {                  /* free span */
      struct _ta_page_s *dnext; /* dirty list, oldest first */
      struct _ta_page_s *dprev;
    };
  };
  _Atomic(uintptr_t) xthread_free; /* blocks freed by other threads, and their
                                      count (_ta_xf_list, _ta_xf_count) */
  struct _ta_page_s *next;    /* heap queue / free-span bin links */
  struct _ta_page_s *prev;
  union {
    uint64_t freed_at_ms;     /* free span: when it became free (dirty list) */
    uint16_t *tags;           /* small span in use: per block, its tag id
                                 (reserved entries; read when mixed) */
    uint64_t claim_res;       /* large span in use: OS pages of it resident
                                 when claimed or populated, a guess
                                 (arena.c, "what is resident") */
  };
  union {
    size_t requested;         /* large: bytes the caller asked for */
    size_t nsampled;          /* small (TA_SAMPLING): its sampled live blocks
                                 (sample lock) */
    size_t resident;          /* dirty free span: OS pages of it resident, at
                                 most, or a guess if TA_PF_UNMEASURED
                                 (arena.c, "what is resident") */
  };
  _Atomic(uint8_t) in_full;   /* 1: on its heap's full list; TA_IN_STASHED: on a stack
                                 of emptied pages; TA_IN_ABANDONED: on an
                                 abandoned list (read by remote frees after their push) */
  _Atomic(uint16_t) aband_used; /* small, on an abandoned list: used as the lock
                                 holder last left it (remote frees compare
                                 their count with it, heap.c) */
} _ta_page_t;

_Static_assert(sizeof(_ta_page_t) == 128, "page descriptor must be 128 bytes");
_Static_assert(offsetof(_ta_page_t, free) == 64 && offsetof(_ta_page_t, sampled) < 64, "what other threads read, and what the owner writes a block, on lines of their own");

typedef struct _ta_pageq_s {
  _ta_page_t *first;
  _ta_page_t *last;
  size_t count;
} _ta_pageq_t;

/* ---- arenas --------------------------------------------------------------- */

#define TA_ARENA_NAME "tagalloc heap" /* its mapping's name in /proc/PID/maps */
#define TA_PMD_SHIFT 21 /* 2 MiB: what one page-table page maps (x86-64, arm64 with 4 KiB pages) */
typedef struct _ta_arena_s {
  uint8_t *base;      /* TA_PAGE_SIZE aligned */
  size_t size;        /* bytes reserved */
  size_t npages;      /* pages reserved */
  size_t top;         /* pages ever handed out; [top, npages) is fresh */
  _ta_page_t *pages;  /* npages descriptors (their own mapping) */
  uint64_t *moved;    /* bit u: pages were moved into the 2 MiB unit u of the
                         arena's range (arena.c, "units moved into"); after
                         the descriptors, in their mapping */
  uint64_t *emptied;  /* bit i: other threads' frees emptied the small span
                         headed by page i (arena.c, "pages emptied by other
                         threads"); after the moved map */
} _ta_arena_t;

/* ---- tags and their books -------------------------------------------------- */

/* The tag limits (TA_MAX_TAGS, TA_TAG_NAME_MAX, TA_TAG_UNTAGGED,
 * TA_TAG_OVERFLOW, TA_TAG_SLOTS, TA_TAG_STACK, TA_CTR_CHUNK) are shared.h's. */
#define TA_TAG_MIXED 0xffffu             /* a small page's tag: see tags[] */
_Static_assert(TA_TAG_MIXED >= TA_TAG_SLOTS, "TA_TAG_MIXED is no tag");

/* The books of one tag as one thread saw them: counts written by that
 * thread only (TA_CTR_ADD: one add, no read-modify-write of another
 * thread's), read by anyone. A thread counts the blocks it allocates
 * under the tag and the blocks of the tag it frees, whoever allocated
 * them, so live = alloc - free holds for the sum over every thread that
 * ever ran, not for each thread.
 *
 * Live bytes are kept as high - headroom (books version 5): `high` is the
 * set's high-water mark of its own live bytes, `headroom` how far below
 * it the set is now. malloc subtracts from headroom, free adds to it, and
 * a malloc that takes it below zero has passed the mark: _ta_ctr_rise
 * raises it (exact peaks, docs/ARCHITECTURE.md "Peaks"). Freed bytes are
 * alloc_bytes - (high - headroom); both are signed in two's complement
 * (a thread that frees others' blocks has negative live bytes). */
typedef struct _ta_ctr_s {
  _Atomic(uint64_t) alloc_bytes, alloc_blocks; /* usable bytes */
  _Atomic(uint64_t) headroom, free_blocks;     /* headroom: high - live */
  _Atomic(uint64_t) alloc_req, free_req;       /* requested bytes */
  uint32_t tag;                                /* the tag these count (set once) */
  _Atomic(uint32_t) holder;                    /* TA_HOLDER_*: this set among its tag's */
  _Atomic(uint64_t) high;                      /* high-water mark of live bytes */
} _ta_ctr_t;
/* How a counter set holds its tag: not yet counted anything; the only set
 * that ever counted the tag (its high is the tag's exact peak); one of
 * several (peaks are kept with a bound: _ta_ctr_rise_many). */
#define TA_HOLDER_NONE 0u
#define TA_HOLDER_SOLE 1u
#define TA_HOLDER_MANY 2u
/* A tag's entry in the books' holders table: 0, the address of its sole
 * counter set, or TA_HOLDERS_MANY (shared.h). */
/* Held by several sets, a set's headroom is kept between 0 and
 * TA_PEAK_CAP, and set to TA_PEAK_SLACK when it rises: a rise costs a sum
 * over the tag's sets at most once per slack bytes, and the peak's bound
 * (what a set below its mark may add unseen) is at most TA_PEAK_CAP per
 * set holding the tag, one page. */
#define TA_PEAK_SLACK (32 * 1024)
#define TA_PEAK_CAP (64 * 1024)
_Static_assert(sizeof(_ta_ctr_t) == 64, "a counter set is one cache line");

#define TA_CTR_CHUNKS ((TA_TAG_SLOTS + TA_CTR_CHUNK - 1) / TA_CTR_CHUNK)

struct _ta_heap_s;

/* A thread's record: its heap, its current tag and the tag stack, and its
 * counters (chunks of 64 tags, allocated on first use: a thread that uses
 * 3 tags has 1 to 3 chunks, whatever the number of tags the program has).
 * Records are never unmapped; an exited thread's record keeps its counts
 * and is reused by a later thread. */
typedef struct _ta_thread_s {
  _Atomic(_ta_ctr_t *) ctr[TA_CTR_CHUNKS];
  struct _ta_heap_s *heap;    /* NULL until its first malloc */
  uint32_t tag;               /* current tag */
  uint32_t depth;             /* tag stack depth */
  uint32_t stack[TA_TAG_STACK];
  struct _ta_thread_s *next;  /* every record (append-only list) */
  _Atomic(bool) live;
} _ta_thread_t;

/* ---- heaps ---------------------------------------------------------------- */

/* A thread's heap: one per thread, whatever the number of tags. Its first
 * line is what the fast paths read: the current tag and its counters, and
 * the direct pages. Heaps live in private metadata (the books hold no
 * heap: every count is in the thread's counters). */
#define TA_KEPT_EMPTY 32 /* see _ta_kept_note */
/* Remote frees in batches (page.c): a chain of blocks of one page of
 * another heap, freed by this thread, pushed at once. */
#ifndef TA_RCHAIN_MAX
#define TA_RCHAIN_MAX 32 /* blocks a chain holds at most */
#endif
#define TA_RCHAIN (!TA_CHECK)
typedef struct {
  struct _ta_page_s *pg;    /* the page of the chain's blocks; NULL: none */
  _ta_block_t *head, *tail; /* linked by next, each with the free key */
  uint32_t n;               /* how many */
} _ta_rchain_t;
/* Sizes up to TA_SMALL_MAX find their page by size, not class (mimalloc's
 * pages_free_direct): one shift instead of the class formula's seven
 * instructions, on malloc's critical path (size -> class -> page -> block).
 * The classes up to 1 KiB are multiples of 16 bytes, so a size and the size
 * rounded up to 16 bytes share a class. */
#define TA_SMALL_MAX 1024
#define TA_SMALL_SLOTS (TA_SMALL_MAX / 16 + 1)
static inline size_t _ta_small_slot(size_t size) { return (size + 15) >> 4; }
/* A tag switch by a name the thread set lately: its id by the name's
 * address (a slot each, direct-mapped), the name's bytes compared with the
 * interned ones. 1,024 slots: a thread cycling through 256 names (many_tags)
 * finds about 4 in 5 of them there. */
#define TA_TAG_NAME_BITS 10
#define TA_TAG_NAME_SLOTS (1 << TA_TAG_NAME_BITS)
typedef struct _ta_heap_s {
  _ta_ctr_t *ctr;           /* the thread's counters of its current tag, never
                               NULL; ctr->tag is the tag its mallocs get */
  /* The fields a new heap sets come first, with direct[] and small[]: a
   * heap is written on one page when it is made, not three. */
  uint64_t slow_count;      /* slow paths taken (maintenance clock) */
  uint64_t last_gc_ms;      /* last walk that returned empty pages */
  struct _ta_heap_s *hnext; /* list of live heaps (_ta_heaps_lock) */
  struct _ta_heap_s *hprev;
  _ta_thread_t *thread;     /* owner */
  _ta_page_t *direct[TA_NUM_CLASSES]; /* never NULL: &_ta_page_empty at worst */
  _ta_page_t *small[TA_SMALL_SLOTS];  /* direct[] by size: slot (size + 15) / 16
                               holds direct[_ta_class_of(size)] for sizes up to
                               TA_SMALL_MAX (_ta_direct_set keeps them equal) */
  _ta_pageq_t queue[TA_NUM_CLASSES];  /* pages with free blocks (or maybe) */
  _ta_pageq_t full[TA_NUM_CLASSES];   /* pages with none, at last look */
  _Atomic(uint8_t) xfull[TA_NUM_CLASSES]; /* a remote free hit a full page */
  uint64_t idle_slow;       /* slow_count at the last idle give-back (heap.c, _ta_heap_idle) */
  uint64_t idle_us;         /* when it was (_ta_now_us) */
  uint32_t idle_given;      /* pages it gave back */
  bool idle_pending;        /* a free emptied a direct page since */
  _ta_page_t *kept[TA_KEPT_EMPTY]; /* empty direct pages of big classes, oldest
                               first (heap.c, _ta_kept_note); entries may be
                               stale, checked before use */
  unsigned nkept;
  uint64_t rchains;          /* bit c: rchain[c] holds blocks */
  _ta_rchain_t rchain[TA_DENSE_CLASSES]; /* per class: blocks of one page of
                               another heap this thread freed, not yet pushed */
  uint16_t tag_names[TA_TAG_NAME_SLOTS]; /* tags.c: id + 1 of a tag set
                               lately by the name at an address, in slot
                               _ta_name_slot(address); 0: none */
} _ta_heap_t;

/* ---- options (one table, parsed once: options.c) -------------------------- */

typedef struct _ta_options_s {
  size_t arena_reserve;     /* TAGALLOC_ARENA_RESERVE */
  size_t huge_threshold;    /* TAGALLOC_HUGE_THRESHOLD */
  size_t purge_delay_ms;    /* TAGALLOC_PURGE_DELAY_MS */
  size_t retain_min;        /* TAGALLOC_RETAIN_MIN */
  size_t purger;            /* TAGALLOC_PURGER: 0, no purger thread (purger.c) */
  size_t verbose;           /* TAGALLOC_VERBOSE */
  const char *default_tag;  /* TAGALLOC_TAG: the name of untagged memory */
  size_t requested;         /* TAGALLOC_REQUESTED: keep every block's requested size */
  size_t fault_every;       /* TAGALLOC_FAULT_EVERY: testing, see _ta_fault */
  size_t fault_count;       /* TAGALLOC_FAULT_COUNT */
  size_t stacks;            /* TAGALLOC_STACKS: 0 off, 1 sampled, 2 full (sample.c) */
  size_t sample_rate;       /* TAGALLOC_SAMPLE_RATE: mean bytes between samples */
  size_t unwind;            /* TAGALLOC_UNWIND: how stacks are taken (unwind.c) */
  size_t check;             /* TAGALLOC_CHECK: TA_CHECK builds, what to check (check.c) */
  size_t check_quarantine;  /* TAGALLOC_CHECK_QUARANTINE: bytes of freed blocks held back */
} _ta_options_t;

/* ---- globals --------------------------------------------------------------- */

extern _ta_options_t _ta_opt;
extern _ta_arena_t _ta_arenas[TA_MAX_ARENAS];
extern _Atomic(size_t) _ta_narenas;
extern _ta_page_t _ta_page_empty;
extern _ta_heap_t _ta_heap_empty;
/* the thread's heap, and (TA_SAMPLING) its bytes until the next sample:
 * one thread-local block, so malloc's fast path finds both from one
 * offset (one load of it from the GOT, not two: callgrind, larson 2 4
 * under the stacks build, 318.6M -> 316.9M instructions) on one cache
 * line */
typedef struct {
  _ta_heap_t *heap;
  int64_t sample_left;
} _ta_tls_t;
extern __thread _ta_tls_t _ta_tls;
#define _ta_tls_heap (_ta_tls.heap)
extern __thread _ta_thread_t *_ta_tls_thread;
/* Set when the thread's record and heap were given up (_ta_thread_done,
 * a pthread key destructor): a free after that (the C library frees its
 * thread buffers after every key destructor ran) makes neither again. */
extern __thread bool _ta_tls_exited;

/* Add to a counter only this thread writes. On x86-64 one add instruction
 * to memory, so a signal handler on this thread that allocates cannot slip
 * in between a load and a store and have its count lost (error policy,
 * above); readers on other threads see the old or the new value. */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define TA_CTR_ADD(field, n) __asm__ volatile("addq %1, %0" : "+m"(*(uint64_t *)&(field)) : "er"((uint64_t)(n)))
#else
#define TA_CTR_ADD(field, n) \
  atomic_store_explicit(&(field), atomic_load_explicit(&(field), memory_order_relaxed) + (n), memory_order_relaxed)
#endif

/* Subtract n from a counter only this thread writes, as TA_CTR_ADD, and
 * say whether it went below zero as a signed count (one sub and the
 * sign flag it sets: malloc's headroom check, _ta_take). */
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define TA_CTR_SUB_NEG(field, n)                                                                              \
  ({                                                                                                          \
    bool neg_;                                                                                                \
    __asm__ volatile("subq %2, %0" : "+m"(*(uint64_t *)&(field)), "=@ccs"(neg_) : "er"((uint64_t)(n))); \
    neg_;                                                                                                     \
  })
#else
#define TA_CTR_SUB_NEG(field, n)                                                          \
  ({                                                                                      \
    uint64_t v_ = atomic_load_explicit(&(field), memory_order_relaxed) - (uint64_t)(n); \
    atomic_store_explicit(&(field), v_, memory_order_relaxed);                            \
    (int64_t)v_ < 0;                                                                      \
  })
#endif

/* Raise a counter set's high-water mark and its headroom by x, keeping
 * its live bytes (high - headroom): headroom first, so another thread
 * reading the pair (_ta_ctr_read) never sees live bytes too high. */
#define TA_CTR_RAISE_MARK(ct, x)                          \
  do {                                                    \
    TA_CTR_ADD((ct)->headroom, (x));                      \
    atomic_signal_fence(memory_order_seq_cst);            \
    TA_CTR_ADD((ct)->high, (x));                          \
  } while (0)

/* The fast paths' counts: TA_CTR_ADD on the thread's own counters. The
 * no-counts build measures what they cost (bench: tagalloc-nocounts): it
 * tags every block but keeps no count, and so no peak (never for use). */
#if defined(TA_MEASURE_NO_COUNTS)
#define TA_BOOK_ADD(field, n) ((void)&(field), (void)(n))
#define TA_BOOK_SUB_NEG(field, n) ((void)&(field), (void)(n), false)
#else
#define TA_BOOK_ADD(field, n) TA_CTR_ADD(field, n)
#define TA_BOOK_SUB_NEG(field, n) TA_CTR_SUB_NEG(field, n)
#endif

/* ---- layer entry points ------------------------------------------------------ */

/* prim_linux.c: the only file that talks to the OS about memory. */
static void *_ta_os_reserve(size_t size, size_t align);
static void _ta_os_release(void *p, size_t size);
static void _ta_os_purge(void *p, size_t size);
static void _ta_os_name(void *p, size_t size, const char *name);
static uint64_t _ta_now_ms(void);
static void _ta_write_stderr(const char *s, size_t n);

/* budget.c: tag budgets; a rise of a budgeted tag's counter set is
 * charged there (tags.c), and its blocks grow by moving (alloc.c, huge.c) */
static unsigned _ta_budget_of(uint32_t tag);
static bool _ta_budget_rise(unsigned b, uint64_t need, uint64_t *x);
static void _ta_budget_add(unsigned b, int64_t d);
static void _ta_budget_tag_new_locked(uint32_t tag);
static void _ta_budgets_init(void);
static void _ta_budgets_recount(void);
static bool _ta_ctr_admit(uint32_t tag, size_t bytes); /* tags.c */

/* realloc and the sampler (TA_SAMPLING builds): what realloc did to the
 * block it was given, which _ta_realloc (alloc.c) has _ta_realloc_block
 * (alloc.c) and _ta_huge_resize (huge.c) fill, and hands to the
 * sampler's realloc hook (_ta_sample_realloc, sample.c). Without it (NULL,
 * and in builds without sampling) realloc moves a block the plain way. */
typedef struct {
  size_t from;   /* resized a large or huge block without a copy, from this many
                    bytes asked; TA_REALLOC_COPIED if it did not */
  size_t usable; /* then the block's usable size (saves looking it up again: a
                    huge block's takes a lock) */
  bool moved;    /* copied it to a new block, not sampled on its own, and left
                    the old one for the caller to free after the hook */
} _ta_realloc_did_t;
#define TA_REALLOC_COPIED SIZE_MAX
/* Say in did (if any) that the block was resized without a copy. */
#define TA_REALLOC_SAY(did, req, now) \
  do { \
    if (TA_SAMPLING && (did)) (did)->from = (req), (did)->usable = (now); \
  } while (0)

/* error.c */
TA_COLD static void _ta_fatal(const char *fmt, ...) __attribute__((noreturn));
TA_COLD static void _ta_warn(const char *fmt, ...);

/* arena.c */
static bool _ta_arena_init(void);
static _ta_page_t *_ta_span_alloc(size_t npages, size_t align_pages, size_t want, uint8_t *state);
static void _ta_span_free(_ta_page_t *span);
static bool _ta_span_grow_inplace(_ta_page_t *span, size_t npages, bool *resident);
static bool _ta_span_shrink_inplace(_ta_page_t *span, size_t npages);
static void _ta_arena_purge(bool all);
static _ta_page_t *_ta_page_of_slow(const void *p);

/* page.c / heap.c */
static void *_ta_malloc_slow(_ta_heap_t *h, unsigned c, size_t size);
static _ta_page_t *_ta_span_alloc_small(size_t npages, size_t tag_bytes, size_t slop_bytes);

/* Slop entries: 16 bits hold any slop of a block under 64 KiB (even of a
 * zero-byte request); bigger blocks (a few per span) take 32. */
static inline size_t _ta_slop_bytes(const struct _ta_page_s *pg);
static inline uint32_t _ta_slop_get(const struct _ta_page_s *pg, size_t idx);
static inline void _ta_slop_set(struct _ta_page_s *pg, size_t idx, size_t slop);
static void _ta_free_local_slow(_ta_heap_t *h, _ta_page_t *pg, void *b);
static inline void _ta_free_remote(struct _ta_heap_s *h, _ta_page_t *pg, _ta_block_t *b);
static void _ta_aband_release_if_empty(_ta_page_t *pg);
static void _ta_heap_collect_all(_ta_heap_t *h, bool release_direct);
static void _ta_heap_idle(_ta_heap_t *h, bool whole);
static void _ta_heaps_reclaim_abandoned(void);

/* tags.c */
static pthread_mutex_t _ta_threads_lock; /* defined in tags.c */
static _ta_ctr_t *_ta_ctr_self(uint32_t tag);
static _ta_ctr_t *_ta_ctr_of(_ta_thread_t *th, uint32_t tag);
static _ta_thread_t *_ta_thread_self_slow(void);
static bool _ta_count_alloc(uint32_t tag, size_t bytes, size_t req);
static bool _ta_use_tag(_ta_thread_t *th, uint32_t tag);

/* The calling thread's record, made on first use (NULL only without memory). */
static inline _ta_thread_t *_ta_thread_self(void) {
  _ta_thread_t *th = _ta_tls_thread;
  return ta_likely(th != NULL) ? th : _ta_thread_self_slow();
}
static uint32_t _ta_current_tag(void);
static void _ta_count_free(uint32_t tag, size_t bytes, size_t req);
static void _ta_count_resize(uint32_t tag, size_t old_bytes, size_t new_bytes, size_t old_req, size_t new_req);
/* A tag's counts summed over every thread (tags.c) */
typedef struct {
  uint64_t alloc_bytes, alloc_blocks, free_bytes, free_blocks, alloc_req, free_req;
  uint64_t high; /* sum of the sets' marks: an upper bound of live bytes */
} _ta_sum_t;
static void _ta_tag_note(uint32_t tag);
static bool _ta_ctr_rise(_ta_ctr_t *ct);
static void _ta_ctr_cap(_ta_ctr_t *ct);
static void _ta_ctr_register(_ta_ctr_t *ct);

/* huge.c */
static _Atomic(size_t) _ta_huge_bytes; /* bytes of live huge blocks (defined in huge.c) */
static void *_ta_huge_alloc(size_t size, size_t align, bool zero, bool growing, uint32_t tag);
static inline void *_ta_malloc(size_t size);
static inline void _ta_free(void *p);
static bool _ta_huge_lookup(const void *p, size_t *mapped);
static bool _ta_huge_free(void *p, uint32_t *tag, size_t *mapped, size_t *requested);
static void *_ta_huge_resize(void *p, size_t size, bool *found, size_t *mapped, uint32_t *tag, bool *refused, _ta_realloc_did_t *did);
static void _ta_huge_purge(bool all);

/* report.c */
static void _ta_report_fork_child(void);

/* check.c (TA_CHECK builds only): the hooks the lower layers call */
#if TA_CHECK
static void _ta_check_poison_block(void *b, size_t usable);
static void _ta_check_poison_carved(uint8_t *first, uint32_t n, uint32_t bsize);
static void _ta_check_walk_quarantine(uint64_t *bytes, uint64_t *blocks, uint64_t *req);
#endif

/* init.c */
static bool _ta_init_slow(void);
extern _Atomic(int) _ta_init_state; /* 0 none, 1 running, 2 core ready, 3 done */

static inline bool _ta_ensure_init(void) {
  if (ta_likely(atomic_load_explicit(&_ta_init_state, memory_order_acquire) >= 2)) return true;
  return _ta_init_slow();
}

/* ---- inline helpers --------------------------------------------------------- */

static inline size_t _ta_align_up(size_t n, size_t a) { return (n + a - 1) & ~(a - 1); }

/* The head descriptor of the span holding p, or NULL if p is in no span in
 * use (not ours, or inside a free span). Arena 0 is checked inline. */
static inline uintptr_t _ta_arena0_off(const void *p) { return (uintptr_t)p - (uintptr_t)_ta_arenas[0].base; }
/* The head descriptor for off, an offset into arena 0 below its size. */
static inline _ta_page_t *_ta_arena0_head(uintptr_t off) {
  _ta_page_t *pg = &_ta_arenas[0].pages[off >> TA_PAGE_SHIFT];
  return pg - pg->head_off;
}
static inline _ta_page_t *_ta_page_of(const void *p) {
  uintptr_t off = _ta_arena0_off(p);
  if (ta_likely(off < _ta_arenas[0].size)) return _ta_arena0_head(off);
  return _ta_page_of_slow(p);
}

/* Index of the block holding p within a small span of class c. */
static inline size_t _ta_block_index_of(const _ta_page_t *pg, unsigned c, const void *p) {
  uint64_t off = (uint64_t)((const uint8_t *)p - pg->start);
  return (size_t)((off * _ta_classes[c].magic) >> TA_MAGIC_SHIFT);
}
static inline size_t _ta_block_index(const _ta_page_t *pg, const void *p) { return _ta_block_index_of(pg, pg->sclass, p); }

/* Is p the start of a block of small span pg carved so far? Any address
 * (a free's argument, a link read where it may be stale): a block start
 * below capacity lies inside the span, so the index's wrap for one that
 * is not cannot pass. Capacity is read atomically: its owner may be
 * carving. */
static inline bool _ta_is_carved_at(const _ta_page_t *pg, const void *p, size_t idx) {
  const uint8_t *b = p;
  size_t off = (size_t)(b - pg->start);
  return b >= pg->start && idx < __atomic_load_n(&pg->capacity, __ATOMIC_RELAXED) && idx * pg->block_size == off;
}
static inline bool _ta_is_carved(const _ta_page_t *pg, const void *p) { return _ta_is_carved_at(pg, p, _ta_block_index(pg, p)); }

/* The tag of the live block idx of span pg (small or large: a large
 * span's tag is never TA_TAG_MIXED). Any thread: the acquire pairs with
 * the owner's release when a page turns mixed (_ta_page_retag), so a
 * reader that sees TA_TAG_MIXED sees the entries it filled. */
static inline uint32_t _ta_block_tag_at(const _ta_page_t *pg, size_t idx) {
  uint32_t t = __atomic_load_n(&pg->tag, __ATOMIC_ACQUIRE);
  return t == TA_TAG_MIXED ? pg->tags[idx] : t;
}

/* The tag of the live block p of span pg (small or large). */
static inline uint32_t _ta_block_tag(const _ta_page_t *pg, const void *p) {
  uint32_t t = __atomic_load_n(&pg->tag, __ATOMIC_ACQUIRE);
  return t == TA_TAG_MIXED ? pg->tags[_ta_block_index(pg, p)] : t;
}

static inline size_t _ta_slop_bytes(const _ta_page_t *pg) {
  return (size_t)pg->reserved * (pg->block_size < 65536 ? sizeof(uint16_t) : sizeof(uint32_t));
}
static inline uint32_t _ta_slop_get(const _ta_page_t *pg, size_t idx) {
  return pg->block_size < 65536 ? ((const uint16_t *)pg->slop)[idx] : ((const uint32_t *)pg->slop)[idx];
}
static inline void _ta_slop_set(_ta_page_t *pg, size_t idx, size_t slop) {
  if (pg->block_size < 65536) ((uint16_t *)pg->slop)[idx] = (uint16_t)slop;
  else ((uint32_t *)pg->slop)[idx] = (uint32_t)slop;
}

#if TA_DEBUG >= 1
#define ta_assert(x) \
  do { if (ta_unlikely(!(x))) _ta_fatal("assertion failed: %s (%s:%d)", #x, __FILE__, __LINE__); } while (0)
#else
#define ta_assert(x) do { (void)sizeof(x); } while (0)
#endif

/* ---- locks, by rank ----------------------------------------------------------- */

/* Every mutex is taken through these, so that debug builds (TA_DEBUG >= 1)
 * check the order of the table at the top of this file: each lock's rank
 * is its place there (_ta_lock_rank, static.c), a thread records the
 * ranks it holds, and taking a lock ranked at or below one it holds is
 * fatal, naming both. Release builds call pthreads directly. */
#if TA_DEBUG >= 1
static int _ta_lock_rank(const pthread_mutex_t *m); /* static.c: the table, by address */
static const char *_ta_lock_name(int rank);
static __thread uint32_t _ta_tls_ranks; /* bit r: this thread holds the lock of rank r */
static inline void _ta_rank_take(const pthread_mutex_t *m) {
  int r = _ta_lock_rank(m);
  if (ta_unlikely(_ta_tls_ranks >> r)) {
    int held = 31 - __builtin_clz(_ta_tls_ranks);
    _ta_fatal("lock order: taking %s while holding %s (types.h, Locks)", _ta_lock_name(r), _ta_lock_name(held));
  }
  _ta_tls_ranks |= 1u << r;
}
static inline void _ta_rank_drop(const pthread_mutex_t *m) { _ta_tls_ranks &= ~(1u << _ta_lock_rank(m)); }
#else
#define _ta_rank_take(m) ((void)(m))
#define _ta_rank_drop(m) ((void)(m))
#endif
static inline void _ta_mutex_lock(pthread_mutex_t *m) {
  _ta_rank_take(m);
  pthread_mutex_lock(m);
}
static inline bool _ta_mutex_trylock(pthread_mutex_t *m) {
  if (pthread_mutex_trylock(m) != 0) return false;
  _ta_rank_take(m); /* no wait, so no deadlock; still held in order */
  return true;
}
static inline void _ta_mutex_unlock(pthread_mutex_t *m) {
  pthread_mutex_unlock(m);
  _ta_rank_drop(m);
}
/* A fork child makes a lock its parent held (through the fork) anew: a
 * store of the initializer, as the locks are made (a call of
 * pthread_mutex_init faulted in a page of libc's text in every child). */
static inline void _ta_mutex_reinit(pthread_mutex_t *m) {
  *m = (pthread_mutex_t)PTHREAD_MUTEX_INITIALIZER;
  _ta_rank_drop(m);
}

#endif
