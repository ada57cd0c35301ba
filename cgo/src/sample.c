/* sample.c: who allocated it (docs/ARCHITECTURE.md, D7), in builds with TA_SAMPLING
 * (tagalloc run --stacks sampled|full builds and preloads that variant, so
 * the ordinary library pays nothing for it).
 *
 * Sampling is by bytes, as tcmalloc's and heapprofd's: each thread counts
 * down an exponentially distributed number of bytes (mean
 * TAGALLOC_SAMPLE_RATE) and the allocation that crosses zero is sampled;
 * with TAGALLOC_STACKS=full every allocation is. A sampled block's stack is
 * captured from DWARF call-frame information (so it works on distro
 * binaries without frame pointers): by default with rules cached per
 * return address (unwind.c, included below), libgcc's unwinder where they
 * do not reach or with TAGALLOC_UNWIND=1. It is deduplicated into a stack id, and an
 * ALLOC event goes into the events ring; the block's address goes into the
 * sampled set, so its free (or in-place resize) emits an event too. The
 * pages holding sampled blocks keep a filter of them (pg->sampled): frees
 * into other pages never look at the set.
 *
 * The events ring is the file $TAGALLOC_DIR/PID.events, mapped shared, the
 * heapprofd pattern: writers (any thread) reserve space with a CAS on head,
 * write their record, then publish its first word (length and type) with a
 * release store; the reader (tagalloc run) consumes committed records from
 * tail, zeroes them and advances tail. A full ring never blocks: the event
 * is counted in dropped. Layout (version 1; the Go reader is
 * tagtable/events.go): the header, then the ring. The header
 * (_ta_ev_hdr_t), the record types (TA_EV_MODULE ... TA_EV_REPORT, each
 * with its body) and the RESIZE flags (TA_RESIZE_*, in bit order) are
 * shared.h's, generated from internal/layout/mklayout/desc.go with the Go reader's.
 * A RESIZE record's flags, their bits 8-31 and 32-63 and its prior size
 * are about thinning (below).
 *
 * Nothing here allocates through the allocator, and nothing is called with
 * one of its locks held; a thread inside the sampler does not sample the
 * allocations the unwinder or loader might make (_ta_in_sampler). */

#if TA_SAMPLING

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <unwind.h>

#include "negln.h"

/* The ring: 64 MiB under --stacks full (every allocation, millions of
 * events a second); 4 MiB when sampling, whose events are far fewer (redis
 * under redis-benchmark writes about 150k a second, 7 MB a second, most of
 * them resizes of sampled blocks; realloc_chain about 1M, 40 MB): the
 * drainer comes back to it every 2.5 to 100 ms, aiming to find it an
 * eighth full, and within 2.5 ms of its making (cmd/tagalloc: pace). A
 * ring that laps sooner has fewer pages to fault in, in the program and
 * in the drainer, the first time through: on the 2-core VM a
 * page's first touch costs 10-15 us, and realloc_chain touched all 2,048
 * pages of an 8 MiB ring on each side. 2 MiB was cheaper still, but with
 * two busy loops beside it realloc_chain lost 2-3k events of 1M (3 runs);
 * 4 MiB lost none (4 runs), as 8 did. */
#define TA_EV_RING_FULL (64 * TA_MiB)
#define TA_EV_RING_SAMPLED (4 * TA_MiB)

/* The header, _ta_ev_hdr_t, is shared.h's. */
static _ta_ev_hdr_t *_ta_ev;
/* Stacks are on, and the first sample makes the ring if there is none
 * yet (most short programs, at a 512 KiB rate, never sample: they make no
 * events file, and the launcher opens and follows none for them). Set at
 * initialization and kept once the ring is made: a thread that reads it
 * next to a stale null _ta_ev still samples (and finds the ring under the
 * lock). Cleared, under the sample lock, only when the ring cannot be
 * made. */
static bool _ta_ev_lazy;
#define TA_EV_ON() (_ta_ev_lazy || _ta_ev) /* sampling, with its ring made or to be */
static uint8_t *_ta_ev_ring;
static uint64_t _ta_ev_size; /* the ring's size, a copy: writers read no header line for it */
/* the ring's bytes from its start that are in memory in our mapping:
 * writers bring more in at a time in its first lap (_ta_ev_populate) */
static _Atomic(uint64_t) _ta_ev_ready;
#define TA_EV_POPULATE (64 * 1024)
/* thinning's per-thread entries (below) */
#define TA_THIN_WAYS 8
typedef struct _ta_thin_s _ta_thin_t;
static __thread struct _ta_thin_s {
  uint64_t seq;                   /* _ta_set_w.seq when it was last reported */
  uint64_t req, usable;           /* as last reported */
  uint64_t last_req, last_usable; /* as last seen */
  uint32_t left_out, grew;        /* since the last report; grew: of them */
  uint32_t kind;                  /* the RESIZE flags of a resize it may leave out */
} _ta_thin[TA_THIN_WAYS];
/* the entries' blocks (0: empty), apart from them: the free of a sampled
 * block looks for its entry in one cache line, not eight */
static __thread uintptr_t _ta_thin_addr[TA_THIN_WAYS];
#define TA_THIN_ADDR(e) _ta_thin_addr[(e) - _ta_thin]
static __thread unsigned _ta_thin_next; /* the way to reuse next */
#define _ta_sample_left (_ta_tls.sample_left) /* bytes until the next sample (types.h) */
static __thread uint64_t _ta_sample_rng;
static __thread bool _ta_in_sampler;
/* leaf; alone on its cache line (TA_ALONE): it shared one with _ta_ev,
 * which every free on a page holding a sampled block reads */
static struct { pthread_mutex_t m; } TA_ALONE _ta_sample_lock = {PTHREAD_MUTEX_INITIALIZER};

/* Take the sample lock. What it guards is short (a table probe, a record
 * copied), and a thread put to sleep on it costs far more: larson's two
 * threads slept on it about 300 times a run (futex wake-ups are slow on
 * this VM), and sampling made the run 1.25-1.31x slower than sampling
 * off. So a taker spins first: 100 tries gave 1.18x, 1000 as good as
 * spinning without end (1.09-1.10x). */
static void _ta_sample_lock_take(void) {
  for (int spin = 0; spin < 1000; spin++) {
    if (_ta_mutex_trylock(&_ta_sample_lock.m)) return;
    for (int k = 0; k < 4; k++) TA_CPU_RELAX();
  }
  _ta_mutex_lock(&_ta_sample_lock.m);
}

/* ---- the ring -------------------------------------------------------------- */

/* Copy n bytes to ring position pos (wrapping). */
static void _ta_ev_put(uint64_t pos, const void *src, size_t n) {
  size_t off = (size_t)(pos & (_ta_ev_size - 1)), first = n;
  if (off + n > _ta_ev_size) first = _ta_ev_size - off;
  memcpy(_ta_ev_ring + off, src, first);
  if (first < n) memcpy(_ta_ev_ring, (const uint8_t *)src + first, n - first);
}

/* The first lap of the ring reached end: bring in the window holding it
 * (one madvise of 16 pages, where 16 first writes were 16 faults: about
 * 25 us instead of 220 on the 2-core VM) unless another writer did. The
 * windows start at a page and double up to TA_EV_POPULATE: most processes
 * that make a ring write a few KiB to it (the shell commands of pyenv's
 * python shim 0.8-2.3 KiB, the python 27 KiB), and a page of the file
 * brought in costs on ext4 (a page of the page cache, its blocks
 * reserved, dirtied; then freed when the file is removed): a first window
 * of 16 pages took 0.4-0.6 ms to bring in and 0.2-0.3 ms to remove, one
 * page 0.05 and 0.03 (medians of 300). Windows end on a page of the file
 * (the header is in the ring's first page). */
TA_NOINLINE static void _ta_ev_populate(uint64_t end) {
  uint64_t r = atomic_load_explicit(&_ta_ev_ready, memory_order_relaxed);
  while (end > r && r < _ta_ev_size) {
    /* in the file's bytes: the window's first page, and its end */
    uint64_t base = (r + sizeof(_ta_ev_hdr_t)) & ~(uint64_t)(TA_OS_PAGE - 1);
    uint64_t step = base < TA_OS_PAGE ? TA_OS_PAGE : base < TA_EV_POPULATE ? base : TA_EV_POPULATE;
    uint64_t fto = _ta_align_up(end + sizeof(_ta_ev_hdr_t), TA_OS_PAGE);
    if (fto < base + step) fto = base + step;
    uint64_t to = fto - sizeof(_ta_ev_hdr_t);
    if (to > _ta_ev_size) to = _ta_ev_size;
    if (atomic_compare_exchange_weak_explicit(&_ta_ev_ready, &r, to, memory_order_relaxed, memory_order_relaxed)) {
      uintptr_t from = (uintptr_t)(_ta_ev_ring + r) & ~(uintptr_t)(TA_OS_PAGE - 1);
      if (!_ta_os_populate((void *)from, (uintptr_t)(_ta_ev_ring + to) - from))
        atomic_store_explicit(&_ta_ev_ready, _ta_ev_size, memory_order_relaxed); /* faulted in as written */
      return;
    }
  }
}

/* Write one record: its body (len - 8 bytes, len a multiple of 8), then
 * its first word. False if the ring is full (counted). */
static bool _ta_ev_write(uint32_t type, const void *body, size_t len) {
  if (!_ta_ev) return false;
  uint64_t h = atomic_load_explicit(&_ta_ev->head, memory_order_relaxed);
  do {
    uint64_t t = atomic_load_explicit(&_ta_ev->tail, memory_order_acquire);
    if (h + len - t > _ta_ev_size) {
      atomic_fetch_add_explicit(&_ta_ev->dropped, 1, memory_order_relaxed);
      return false;
    }
  } while (!atomic_compare_exchange_weak_explicit(&_ta_ev->head, &h, h + len, memory_order_relaxed, memory_order_relaxed));
  uint64_t ready = atomic_load_explicit(&_ta_ev_ready, memory_order_relaxed);
  if (ta_unlikely(ready < _ta_ev_size && h + len > ready)) _ta_ev_populate(h + len);
  _ta_ev_put(h + 8, body, len - 8);
  uint64_t first = (uint64_t)len | (uint64_t)type << 32;
  atomic_store_explicit((_Atomic(uint64_t) *)(_ta_ev_ring + (h & (_ta_ev_size - 1))), first, memory_order_release);
  return true;
}

/* ---- modules ---------------------------------------------------------------- */

#define TA_MOD_MAX 4096
typedef struct { uintptr_t start, end; } _ta_range_t;
static _ta_range_t _ta_mods[TA_MOD_MAX]; /* executable ranges announced */
static size_t _ta_nmods;
static _ta_range_t _ta_self; /* our own code: frames in it are skipped */

static bool _ta_mod_known(uintptr_t pc) {
  for (size_t i = 0; i < _ta_nmods; i++)
    if (pc >= _ta_mods[i].start && pc < _ta_mods[i].end) return true;
  return false;
}

/* The GNU build-id of a loaded object, from its notes in memory. */
static size_t _ta_build_id(struct dl_phdr_info *info, const uint8_t **out) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
      const uint8_t *name = p + sizeof(*n), *desc = name + ((n->n_namesz + 3) & ~3u);
      if (desc + n->n_descsz > end) break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *out = desc;
        return n->n_descsz;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

static int _ta_mod_visit(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  bool self = arg != NULL;
  const char *path = info->dlpi_name;
  char exe[512];
  if (!path || !*path) { /* the main program */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    path = exe;
  }
  const uint8_t *bid = NULL;
  size_t bidlen = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
    if (self) {
      if ((uintptr_t)&_ta_mod_visit >= start && (uintptr_t)&_ta_mod_visit < end) _ta_self = (_ta_range_t){start, end};
      continue;
    }
    if (_ta_mod_known(start) || _ta_nmods == TA_MOD_MAX) continue;
    _ta_mods[_ta_nmods++] = (_ta_range_t){start, end};
    if (!bid) bidlen = _ta_build_id(info, &bid);
    size_t plen = strnlen(path, 4096);
    uint8_t rec[4096 + 64 + 48];
    uint64_t f[4] = {start, end, ph->p_offset, info->dlpi_addr};
    uint32_t lens[2] = {(uint32_t)bidlen, (uint32_t)plen};
    size_t n = 0;
    memcpy(rec + n, f, sizeof f), n += sizeof f;
    memcpy(rec + n, lens, sizeof lens), n += sizeof lens;
    if (bidlen > 64) bidlen = 64;
    memcpy(rec + n, bid, bidlen), n += bidlen;
    memcpy(rec + n, path, plen), n += plen;
    size_t len = _ta_align_up(n + 8, 8);
    memset(rec + n, 0, len - 8 - n);
    _ta_ev_write(TA_EV_MODULE, rec, len);
  }
  return 0;
}

/* Announce the objects loaded since the last look (sample lock held). */
static void _ta_mods_scan(void) { dl_iterate_phdr(_ta_mod_visit, NULL); }

/* ---- stacks ------------------------------------------------------------------- */

/* The stacks seen: open addressing, made at the first stack with
 * TA_STACK_TAB_FIRST slots (a page) and grown by 4x at half full, up to
 * TA_STACK_TAB; a stack that then finds no slot within its probes is not
 * deduplicated. (A table of TA_STACK_TAB slots mapped at start cost each
 * process a mapping, and each stack a page of its own, hashed: two faults
 * of about 14 us on the 2-core VM.) Under the sample lock. */
#define TA_STACK_TAB (1u << 16)
#define TA_STACK_TAB_FIRST 256u
typedef struct { uint64_t hash; uint32_t id; uint32_t used; } _ta_stack_slot_t;
static _ta_stack_slot_t *_ta_stacks;
static uint32_t _ta_stacks_cap, _ta_stacks_used; /* slots, and slots taken */
static uint32_t _ta_stack_count;

/* The slot of hash h in table t of cap slots, or the empty slot where it
 * would go; cap if neither is within 64 probes. */
static uint32_t _ta_stacks_probe(const _ta_stack_slot_t *t, uint32_t cap, uint64_t h) {
  uint32_t mask = cap - 1, i = (uint32_t)(h ^ (h >> 32)) & mask;
  for (uint32_t probe = 0; probe < 64; probe++, i = (i + 1) & mask)
    if (t[i].hash == h || !t[i].used) return i;
  return cap;
}

/* Make the table, or grow it, before one more stack goes in; false if it
 * cannot be (then it goes on as it is). */
static bool _ta_stacks_room(void) {
  if (_ta_stacks && ((_ta_stacks_used + 1) * 2 <= _ta_stacks_cap || _ta_stacks_cap >= TA_STACK_TAB)) return true;
  uint32_t cap = _ta_stacks ? _ta_stacks_cap * 4 : TA_STACK_TAB_FIRST;
  _ta_stack_slot_t *t = _ta_os_map(cap * sizeof(_ta_stack_slot_t), TA_OS_PAGE);
  if (!t) return _ta_stacks != NULL;
  for (uint32_t k = 0; k < _ta_stacks_cap; k++) {
    if (!_ta_stacks[k].used) continue;
    uint32_t j = _ta_stacks_probe(t, cap, _ta_stacks[k].hash);
    if (j < cap) t[j] = _ta_stacks[k]; /* else that stack is not deduplicated any more */
  }
  if (_ta_stacks) _ta_os_release(_ta_stacks, _ta_stacks_cap * sizeof(_ta_stack_slot_t));
  _ta_stacks = t, _ta_stacks_cap = cap;
  return true;
}

typedef struct { uintptr_t *pc; int n; } _ta_unwind_t;

static _Unwind_Reason_Code _ta_unwind_cb(struct _Unwind_Context *ctx, void *arg) {
  _ta_unwind_t *u = arg;
  uintptr_t pc = (uintptr_t)_Unwind_GetIP(ctx);
  if (!pc) return _URC_END_OF_STACK;
  if (u->n == 0 && pc >= _ta_self.start && pc < _ta_self.end) return _URC_NO_REASON; /* ours */
  u->pc[u->n++] = pc;
  return u->n == TA_STACK_MAX ? _URC_END_OF_STACK : _URC_NO_REASON;
}

/* The calling thread's stack by the libgcc unwinder. */
static int _ta_stack_capture_libgcc(uintptr_t *pc) {
  _ta_unwind_t u = {pc, 0};
  _Unwind_Backtrace(_ta_unwind_cb, &u);
  return u.n;
}

#include "unwind.c" /* the cached-CFI unwinder (x86-64) */

/* The calling thread's stack, innermost first, without our own frames:
 * by cached CFI rules, or by libgcc where they do not reach. */
static int _ta_stack_capture(uintptr_t *pc) {
#ifdef TA_FAST_UNWIND
  if (_ta_opt.unwind != 1) {
    int n = _ta_unwind_fast(pc, TA_STACK_MAX);
    if (_ta_opt.unwind == 2 && n >= 0) {
      uintptr_t ref[TA_STACK_MAX];
      int m = _ta_stack_capture_libgcc(ref);
      int i = 0;
      while (i < n && i < m && pc[i] == ref[i]) i++;
      if (i < n || i < m)
        _ta_fatal("unwind check: frame %d of %d is %p, libgcc's of %d is %p", i, n, i < n ? (void *)pc[i] : NULL, m,
                  i < m ? (void *)ref[i] : NULL);
    }
    if (n >= 0) return n;
  }
#endif
  return _ta_stack_capture_libgcc(pc);
}

/* The id of stack pc[0..n), written to the ring the first time it is seen
 * (sample lock held). Only a stack not seen before has its return
 * addresses looked up among the modules announced (a linear search per
 * address: of a deep stack, more than the rest of the lookup). */
static uint32_t _ta_stack_id(const uintptr_t *pc, int n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < n; i++) {
    h ^= pc[i];
    h *= 0x100000001b3ull;
  }
  h |= 1;
  uint32_t i = _ta_stacks ? _ta_stacks_probe(_ta_stacks, _ta_stacks_cap, h) : 0;
  if (_ta_stacks && i < _ta_stacks_cap && _ta_stacks[i].used) return _ta_stacks[i].id;
  for (int k = 0; k < n; k++)
    if (!_ta_mod_known(pc[k])) {
      _ta_mods_scan(); /* loaded since the last look: announced before the stack that needs it */
      break;
    }
  uint32_t id = ++_ta_stack_count;
  if (_ta_stacks_room()) {
    i = _ta_stacks_probe(_ta_stacks, _ta_stacks_cap, h); /* the table may be new */
    if (i < _ta_stacks_cap) _ta_stacks[i] = (_ta_stack_slot_t){h, id, 1}, _ta_stacks_used++;
  }
  uint64_t rec[1 + TA_STACK_MAX];
  uint32_t head[2] = {id, (uint32_t)n};
  memcpy(rec, head, 8);
  for (int k = 0; k < n; k++) rec[1 + k] = pc[k];
  _ta_ev_write(TA_EV_STACK, rec, 8 + 8 + 8 * (size_t)n);
  return id;
}

/* ---- the sampled set --------------------------------------------------------- */

/* Addresses of live sampled blocks: open addressing with linear probing,
 * grown (rehashed into a mapping twice the size) at half full. Removing an
 * address shifts the rest of its cluster back over it, so there are no
 * tombstones: under --stacks full every block passes through the set, and
 * tombstones had it rehashing in place again and again (23% of python's
 * CPU time under --stacks full went to the set, 13-17% after). */
#define TA_SET_EMPTY 0
static uintptr_t *_ta_set;
static size_t _ta_set_cap;

/* A free looks its block up without the lock first (_ta_set_lookup): on a
 * page that holds a sampled block, most frees are of other blocks, and
 * taking the lock for each was most of what sampling cost a program that
 * allocates small blocks (small_random, larson: threads queued on it).
 * Writers (under the lock) make the sequence odd while they change the
 * set, readers retry or take the lock when it moved (a seqlock); entries
 * and the table are read and written as relaxed atomics. A table the set
 * outgrew is purged, not unmapped: a reader may still be in it (it reads
 * zeros there, and the sequence tells it to look again). */
static struct {
  uint64_t seq; /* the seqlock's sequence */
  size_t live;  /* addresses in the set */
} TA_ALONE _ta_set_w; /* what writers change, apart from what lookups read */

static inline void _ta_set_write_begin(void) {
  __atomic_store_n(&_ta_set_w.seq, _ta_set_w.seq + 1, __ATOMIC_RELAXED);
  __atomic_thread_fence(__ATOMIC_RELEASE);
}
static inline void _ta_set_write_end(void) { __atomic_store_n(&_ta_set_w.seq, _ta_set_w.seq + 1, __ATOMIC_RELEASE); }
static inline uintptr_t _ta_set_at(size_t j) { return __atomic_load_n(&_ta_set[j], __ATOMIC_RELAXED); }
static inline void _ta_set_put(size_t j, uintptr_t a) { __atomic_store_n(&_ta_set[j], a, __ATOMIC_RELAXED); }

/* a's home slot in a table of cap slots */
static inline size_t _ta_set_home(uintptr_t a, size_t cap) { return (size_t)((a >> 4) * 0x9E3779B97F4A7C15ull >> 20) & (cap - 1); }

/* The slot of a in table t of cap slots, or the empty slot that ends its
 * cluster: every lookup's probe, locked or not (at most cap steps: a
 * reader without the lock may see slots change under it). */
static inline size_t _ta_set_probe(uintptr_t *t, size_t cap, uintptr_t a) {
  size_t j = _ta_set_home(a, cap);
  for (size_t k = 0; k < cap; k++, j = (j + 1) & (cap - 1)) {
    uintptr_t v = __atomic_load_n(&t[j], __ATOMIC_RELAXED);
    if (v == a || v == TA_SET_EMPTY) break;
  }
  return j;
}

/* Start loading a's slot, without the lock, well before a lookup under it
 * (the set is far larger than the caches under --stacks full: its misses
 * were most of what marking a block cost; a sample prefetches while it
 * unwinds the stack). The table and its size are read
 * relaxed and may be a grow apart: a prefetch of the wrong line is only a
 * wasted load. */
static inline void _ta_set_prefetch(uintptr_t a) {
  uintptr_t *t = __atomic_load_n(&_ta_set, __ATOMIC_RELAXED);
  size_t cap = __atomic_load_n(&_ta_set_cap, __ATOMIC_RELAXED);
  if (t) __builtin_prefetch(t + _ta_set_home(a, cap), 1);
}

/* Without the lock: whether a is in the set (TA_SET_IN, TA_SET_OUT), or
 * TA_SET_UNSURE if writers kept changing the set while we looked (then
 * look under the lock). An answer is the set as it was at some moment
 * during the call; only a thread that owns block a adds or removes it. */
enum { TA_SET_OUT, TA_SET_IN, TA_SET_UNSURE };
static int _ta_set_lookup(uintptr_t a) {
  for (int tries = 0; tries < 3; tries++) {
    uint64_t s = __atomic_load_n(&_ta_set_w.seq, __ATOMIC_ACQUIRE);
    if (s & 1) continue; /* a writer is at it */
    /* the size first: a table is never smaller than the size stored after
     * it (grow stores the table, then releases the size), so the probe
     * stays inside whichever table it reads */
    size_t cap = __atomic_load_n(&_ta_set_cap, __ATOMIC_ACQUIRE);
    uintptr_t *t = __atomic_load_n(&_ta_set, __ATOMIC_RELAXED);
    bool found = t && cap && __atomic_load_n(&t[_ta_set_probe(t, cap, a)], __ATOMIC_RELAXED) == a;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&_ta_set_w.seq, __ATOMIC_RELAXED) == s) return found ? TA_SET_IN : TA_SET_OUT;
  }
  return TA_SET_UNSURE;
}

static bool _ta_set_grow(void) {
  /* first a page: 4096 slots were 8 pages a process that took a sample
   * touched one by one, hashed (a fault of about 14 us each, 2-core VM) */
  size_t cap = _ta_set_cap ? _ta_set_cap * 2 : TA_OS_PAGE / sizeof(uintptr_t);
  uintptr_t *old = _ta_set, *nt = _ta_os_map(cap * sizeof(uintptr_t), TA_OS_PAGE);
  if (!nt) return false;
  size_t oldcap = _ta_set_cap;
  for (size_t i = 0; i < oldcap; i++) { /* atomics: a reader may see nt before the sequence moves */
    uintptr_t a = old[i];
    if (a == TA_SET_EMPTY) continue;
    size_t j = _ta_set_home(a, cap);
    while (__atomic_load_n(&nt[j], __ATOMIC_RELAXED) != TA_SET_EMPTY) j = (j + 1) & (cap - 1);
    __atomic_store_n(&nt[j], a, __ATOMIC_RELAXED);
  }
  _ta_set_write_begin();
  __atomic_store_n(&_ta_set, nt, __ATOMIC_RELAXED);
  __atomic_store_n(&_ta_set_cap, cap, __ATOMIC_RELEASE); /* after the table: _ta_set_lookup */
  _ta_set_write_end();
  if (old) _ta_os_purge(old, oldcap * sizeof(uintptr_t)); /* not unmapped: readers */
  return true;
}

static bool _ta_set_add(uintptr_t a) {
  if ((_ta_set_w.live + 1) * 2 > _ta_set_cap && !_ta_set_grow()) return false;
  size_t j = _ta_set_probe(_ta_set, _ta_set_cap, a);
  if (_ta_set[j] == a) return false; /* already there: not counted twice */
  _ta_set_write_begin();
  _ta_set_put(j, a);
  _ta_set_write_end();
  _ta_set_w.live++;
  return true;
}

static bool _ta_set_has(uintptr_t a) { return _ta_set_cap && _ta_set_at(_ta_set_probe(_ta_set, _ta_set_cap, a)) == a; }

/* Remove a; false if it was not there. */
static bool _ta_set_remove(uintptr_t a) {
  if (!_ta_set_cap) return false;
  size_t m = _ta_set_cap - 1, i = _ta_set_probe(_ta_set, _ta_set_cap, a);
  if (_ta_set_at(i) != a) return false;
  /* an entry further on moves into the hole if the hole lies between its
   * home slot and where it sits, cyclically */
  _ta_set_write_begin();
  for (size_t j = (i + 1) & m; _ta_set_at(j) != TA_SET_EMPTY; j = (j + 1) & m) {
    size_t h = _ta_set_home(_ta_set_at(j), _ta_set_cap);
    if (((j - h) & m) >= ((j - i) & m)) _ta_set_put(i, _ta_set_at(j)), i = j;
  }
  _ta_set_put(i, TA_SET_EMPTY);
  _ta_set_write_end();
  _ta_set_w.live--;
  return true;
}

/* ---- the countdown -------------------------------------------------------------- */

/* The bytes an allocation of req bytes counts down by (a zero-byte block
 * counts as one, so it can be sampled too). */
static inline int64_t _ta_counted(size_t req) { return (int64_t)(req ? req : 1); }

/* A thread's first random state: its stack address, the process's free
 * key and the time (out of line: the address taken would give every draw
 * a stack frame). */
TA_COLD static uint64_t _ta_sample_seed(void) {
  uint64_t x = (uintptr_t)&x ^ _ta_free_key ^ (uint64_t)_ta_now_ms();
  return x ? x : 1;
}

/* The bytes to the next sample: exponential with mean rate. A draw
 * follows every selected realloc (realloc_chain: 7M), so it is kept short:
 * no frame, the rate converted as a signed number (no branch). */
static int64_t _ta_sample_next(void) {
  if (_ta_opt.sample_rate <= 1) return 0;
  uint64_t x = _ta_sample_rng;
  if (ta_unlikely(!x)) x = _ta_sample_seed();
  x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
  _ta_sample_rng = x;
  double u = (double)(int64_t)((x * 0x2545F4914F6CDD1Dull) >> 11 | 1) * (1.0 / 9007199254740992.0);
  double n = _ta_neg_ln(u) * (double)(int64_t)_ta_opt.sample_rate;
  return n > 1e15 ? (int64_t)1e15 : (int64_t)n;
}

/* ---- set up ---------------------------------------------------------------------------- */

static uint64_t _ta_fork_seq; /* FORK events written by this process */
/* A child forked from a process with a ring makes its own at its first
 * event, as any process does (most exec or exit first: a shell's
 * commands), linked to the parent's FORK mark, where its reader starts
 * from a copy of the parent's profile: the parent's pid, and the mark (0:
 * not forked so, or the ring is made). */
static struct {
  uint32_t ppid;
  uint64_t seq;
} _ta_fork_from;

/* An events file's fill (_ta_file_make): its header, whole before the
 * file has its name. */
static bool _ta_ev_put_header(int fd, const void *h) { return _ta_pwrite_all(fd, h, sizeof(_ta_ev_hdr_t), 0); }

/* Make and map the events file DIR/PID.events (at the first sample, and in
 * a forked child: then ppid and seq name the parent's FORK event). */
static void _ta_sample_open(uint32_t ppid, uint64_t seq) {
  _ta_ev = NULL;
  if (!_ta_opt.stacks || !_ta_books_shared) return; /* no reader: nothing to sample for */
  size_t ring = _ta_opt.stacks == 2 ? TA_EV_RING_FULL : TA_EV_RING_SAMPLED;
  _ta_ev_hdr_t h;
  memset(&h, 0, sizeof h);
  h.version = TA_EV_VERSION;
  h.header_size = sizeof(_ta_ev_hdr_t);
  h.ring_size = ring;
  h.pid = (uint32_t)getpid();
  h.mode = (uint32_t)_ta_opt.stacks;
  h.sample_rate = _ta_opt.stacks == 2 ? 1 : _ta_opt.sample_rate;
  h.fork_ppid = ppid;
  h.fork_seq = seq;
  memcpy(h.magic, TA_EV_MAGIC, 8);
  void *p = _ta_file_make(".events", sizeof(_ta_ev_hdr_t) + ring, NULL, _ta_ev_put_header, &h);
  if (!p) {
    _ta_warn("cannot make the events file of pid %d in %s (errno %d): no stacks", (int)getpid(), _ta_books_dir, errno);
    return;
  }
  _ta_ev_ring = (uint8_t *)p + sizeof(_ta_ev_hdr_t);
  _ta_ev_size = ring;
  atomic_store_explicit(&_ta_ev_ready, 0, memory_order_relaxed);
  /* the first window now, with the header's page: the first record's
   * read of head and its CAS were a read fault and a write fault there */
  _ta_ev_populate(8);
  __atomic_store_n(&_ta_ev, (_ta_ev_hdr_t *)p, __ATOMIC_RELEASE); /* last: the ring is whole for whoever sees it */
}

static void _ta_sample_init(void) {
  if (_ta_opt.stacks == 2) _ta_opt.sample_rate = 1;
  if (!_ta_opt.stacks || !_ta_books_shared) return; /* no reader: nothing to sample for */
  _ta_ev_lazy = true; /* countdowns are drawn only with a ring to write to, or to make */
}

/* Whether the ring is there (sample lock held), made now if this is the
 * process's first event; false if it cannot be made (then stacks are off
 * for good, as without a reader). */
static bool _ta_ev_make_locked(void) {
  if (_ta_ev) return true;
  if (!_ta_ev_lazy) return false;
  _ta_sample_open(_ta_fork_from.ppid, _ta_fork_from.seq);
  _ta_fork_from.ppid = 0, _ta_fork_from.seq = 0;
  if (!_ta_ev) _ta_ev_lazy = false;
  return _ta_ev != NULL;
}

/* The ring (sample lock held), made now if this process has none yet
 * but holds sampled blocks (a forked child's, inherited): a collection's
 * mark and a fork's are only needed where there are sampled blocks. */
static bool _ta_ev_held_locked(void) { return _ta_ev || (_ta_set_w.live && _ta_ev_make_locked()); }

/* _ta_ev_make_locked without the sample lock held: before a record of a
 * sampled block written without it (a resize in place), which in a
 * forked child may be the process's first. */
static bool _ta_ev_ensure(void) {
  if (__atomic_load_n(&_ta_ev, __ATOMIC_ACQUIRE)) return true;
  _ta_sample_lock_take();
  bool ok = _ta_ev_make_locked();
  _ta_mutex_unlock(&_ta_sample_lock.m);
  return ok;
}

/* A page's sampled word: a filter of its sampled blocks, one bit of 32
 * per block, picked by hashing its address; a small span counts them
 * (nsampled, off free's line), and the filter is cleared when the count
 * comes back to 0 (a large span has one block). Free asks whether its
 * block's bit is set (TA_SAMPLED_AT) before it looks the block up in the
 * set: with one sampled block on a page, 1 free in 32 of its other blocks
 * looks. Before the filter, every free on the page left the fast path
 * (small_random: 8% of all frees, their branch mispredicted); with 16 bits
 * (and the count beside them), small_random's 2 threads looked 222k
 * blocks up for 22k sampled. */
static inline uint32_t _ta_sampled_bit(const void *p) {
  return 1u << (unsigned)((uintptr_t)p * 0x9E3779B97F4A7C15ull >> 59);
}
#define TA_SAMPLED_AT(pg, p) ((atomic_load_explicit(&(pg)->sampled, memory_order_relaxed) & _ta_sampled_bit(p)) != 0)

/* ---- the hooks ------------------------------------------------------------------------- */

static size_t _ta_usable_of(void *p); /* alloc.c */

/* Mark p sampled (sample lock held). */
static void _ta_sample_mark(void *p) {
  if (!_ta_set_add((uintptr_t)p)) return;
  _ta_page_t *pg = _ta_page_of(p);
  if (!pg) return;
  if (pg->kind == TA_KIND_SMALL) pg->nsampled++;
  uint32_t v = atomic_load_explicit(&pg->sampled, memory_order_relaxed); /* written under the lock only */
  atomic_store_explicit(&pg->sampled, v | _ta_sampled_bit(p), memory_order_relaxed);
}

/* Unmark p if it is sampled, and say whether it was (sample lock held). */
static bool _ta_sample_unmark(void *p) {
  if (!_ta_set_remove((uintptr_t)p)) return false;
  _ta_page_t *pg = _ta_page_of(p);
  if (!pg) return true;
  if (pg->kind != TA_KIND_SMALL || --pg->nsampled == 0) /* the last: filter cleared */
    atomic_store_explicit(&pg->sampled, 0, memory_order_relaxed);
  return true;
}

/* The countdown crossed zero at block p (requested bytes req, charged to
 * tag): record it, and start the next countdown. */
/* The next countdown: drawn, or none if stacks are off for good. */
static void _ta_sample_restart(void) { _ta_sample_left = TA_EV_ON() ? _ta_sample_next() : INT64_MAX / 2; }

TA_NOINLINE static void *_ta_sample_take(void *p, size_t req, uint32_t tag) {
  if (!_ta_sample_rng && TA_EV_ON()) { /* the thread's first countdown: drawn, not 0 */
    _ta_sample_left = _ta_sample_next() - _ta_counted(req);
    if (_ta_sample_left >= 0) return p;
  }
  if (!p || _ta_in_sampler || !TA_EV_ON()) {
    _ta_sample_restart();
    return p;
  }
  _ta_in_sampler = true;
  int e = errno;
  if (ta_unlikely(!_ta_self.start)) { /* our code's range, to leave our frames out */
    _ta_sample_lock_take();
    if (!_ta_self.start) dl_iterate_phdr(_ta_mod_visit, (void *)1);
    _ta_mutex_unlock(&_ta_sample_lock.m);
  }
  _ta_set_prefetch((uintptr_t)p); /* loaded while the stack is unwound */
  uintptr_t pc[TA_STACK_MAX];
  int n = _ta_stack_capture(pc); /* no lock held: the unwinder may take the loader's */
  size_t usable = _ta_usable_of(p);
  _ta_sample_lock_take();
  if (ta_likely(_ta_ev_make_locked())) { /* the process's first sample makes the ring */
    uint32_t stack = _ta_stack_id(pc, n);
    uint64_t rec[4] = {(uintptr_t)p, usable, req, (uint64_t)tag | (uint64_t)stack << 32};
    if (_ta_ev_write(TA_EV_ALLOC, rec, 8 + sizeof rec)) _ta_sample_mark(p);
    else atomic_fetch_add_explicit(&_ta_ev->dropped_bytes, usable, memory_order_relaxed);
  }
  _ta_mutex_unlock(&_ta_sample_lock.m);
  errno = e;
  _ta_sample_restart(); /* none if the ring could not be made */
  _ta_in_sampler = false;
  return p;
}

/* Called by the allocation paths with block p just handed out: count it
 * down, and sample it when the count crosses zero. */
static inline void *_ta_sample_alloc(void *p, size_t req, uint32_t tag) {
  if (ta_likely((_ta_sample_left -= _ta_counted(req)) >= 0)) return p;
  return _ta_sample_take(p, req, tag);
}

/* The block realloc moves a block to (q, req bytes asked; NULL if it
 * could not be made), from _ta_malloc_moving (alloc.c): counted down as
 * an allocation, the thread's first countdown drawn if it crosses zero,
 * as _ta_sample_alloc does, but not sampled on its own: it stays sampled
 * if the old block was (one chain), and the realloc's hook
 * (_ta_sample_realloc) decides for it and sets the countdown after. */
static inline void _ta_sample_moving(void *q, size_t req) {
  if (ta_likely((_ta_sample_left -= _ta_counted(req)) >= 0)) return;
  if (!_ta_sample_rng && TA_EV_ON()) { /* the thread's first countdown: drawn, not 0 */
    _ta_sample_left = _ta_sample_next() - _ta_counted(req);
    if (_ta_sample_left >= 0) return;
  }
  if (!q || _ta_in_sampler || !TA_EV_ON()) _ta_sample_restart();
}

/* realloc selected block q (req bytes asked) and it was not sampled
 * before: a fresh sample, from this stack, charged to the tag realloc
 * kept (a huge block's is the thread's). */
static void _ta_sample_take_at(void *q, size_t req) {
  _ta_page_t *pg = _ta_page_of(q);
  (void)_ta_sample_take(q, req, pg ? _ta_block_tag(pg, q) : _ta_current_tag());
}

/* RESIZE flags: TA_RESIZE_* (shared.h) */

/* ---- thinning: the in-place resizes of a growing sampled block ------------------ */

/* A buffer grown a few bytes at a time by realloc stays sampled once it
 * is, and each realloc of it was a RESIZE record: realloc_chain, 8
 * buffers grown 1-64 bytes at a time to 1-4 MiB, wrote 7M a run and kept
 * the drainer busy all the time on the other core. So a thread remembers,
 * for the last sampled blocks it resized in place, what it last reported,
 * and leaves out a resize that changes nothing the reader weighs by more
 * than 1/2^TA_THIN_SHIFT: in place, of the kind the last one reported was
 * (grown without a copy and not selected, which leaves the block weighed
 * or not as it was; or a fresh draw with the same outcome), no smaller
 * than the last one seen, and both sizes within 1/256 of those reported.
 * The next record of the block says how many were left out and how many
 * grew, so the realloc counts and the growth diagnosis stay exact and the
 * cumulative estimate telescopes (between records, the reader's view of
 * the block is at most 1/256 behind: weights change no faster than
 * sizes). A record of anything else (a smaller size, another kind, a
 * move, a free) is preceded by one of the last size left out (a
 * catch-up). An entry holds while the sampled set has not changed
 * (_ta_set_w.seq); after that the block is looked up, and the reader drops
 * a catch-up whose prior size is not the one it has (the block was freed
 * by another thread and the address sampled again). What is left out when
 * another thread frees the block, or the process ends, is lost: counts,
 * and under 1/256 of the sizes. Under --stacks full nothing is left out
 * (exact). */
#define TA_THIN_SHIFT 8
#define TA_THIN_MAX TA_RESIZE_LEFT_OUT_MAX /* left out at most: a record's 24 bits */

/* The entry of block a, or NULL (any way: realloc_chain's 8 buffers
 * shared 8 ways by address hash evicted each other). */
static inline _ta_thin_t *_ta_thin_find(uintptr_t a) {
  for (int i = 0; i < TA_THIN_WAYS; i++)
    if (_ta_thin_addr[i] == a) return &_ta_thin[i];
  return NULL;
}

/* Say that sampled block p is now q (usable, req bytes asked); run: the
 * entry of what was left out of p before it (NULL: nothing), grew: of
 * those and this one, how many grew. */
static void _ta_resize_write(void *p, void *q, uint64_t usable, uint64_t req, uint64_t flags, const _ta_thin_t *run, uint32_t grew) {
  uint64_t rec[6] = {(uintptr_t)p, (uintptr_t)q, usable, req, flags, 0};
  if (run) rec[4] |= (uint64_t)run->left_out << TA_RESIZE_LEFT_OUT_SHIFT | (uint64_t)grew << TA_RESIZE_GREW_SHIFT, rec[5] = run->req;
  _ta_ev_write(TA_EV_RESIZE, rec, 8 + (run ? 6 : 5) * 8);
}

/* Report the last resize left out of e's block, if one was, and forget
 * the block (before any other record of it, or to make room). */
static void _ta_thin_flush_entry(_ta_thin_t *e) {
  if (e->left_out) {
    e->left_out--; /* the last one is the record */
    void *a = (void *)TA_THIN_ADDR(e);
    _ta_resize_write(a, a, e->last_usable, e->last_req, e->kind | TA_RESIZE_CATCHUP, e, e->grew);
  }
  TA_THIN_ADDR(e) = 0;
}

static void _ta_thin_flush(uintptr_t a) {
  _ta_thin_t *e = _ta_thin_find(a);
  if (e) _ta_thin_flush_entry(e);
}

/* Sampled block p was resized in place to req bytes (usable; flags:
 * RESIZE's): leave it out or report it. seq: the set's sequence, read
 * before p was found in it (or found to be e's still); e: p's entry, NULL
 * if it has none (the caller looked). */
static void _ta_thin_resized(void *p, size_t req, uint64_t usable, uint64_t flags, uint64_t seq, _ta_thin_t *e) {
  if (_ta_opt.sample_rate <= 1) { /* full: every one reported */
    _ta_resize_write(p, p, usable, req, flags, NULL, 0);
    return;
  }
  _ta_thin_t *run = NULL;
  uint32_t grew = 0;
  if (e) {
    bool more = req >= e->last_req, same = e->seq == seq;
    if (more && flags == e->kind && same && e->left_out < TA_THIN_MAX && req - e->req <= e->req >> TA_THIN_SHIFT &&
        usable >= e->usable && usable - e->usable <= e->usable >> TA_THIN_SHIFT) {
      e->grew += req > e->last_req;
      e->left_out++;
      e->last_req = req, e->last_usable = usable;
      return;
    }
    if (!more || flags != e->kind) {
      if (same) _ta_thin_flush_entry(e); /* else it may be another block now: the run is lost */
    } else if (e->left_out) {
      run = e, grew = e->grew + (req > e->last_req); /* this record ends the run */
    }
  } else {
    e = &_ta_thin[_ta_thin_next++ % TA_THIN_WAYS];
    if (TA_THIN_ADDR(e)) _ta_thin_flush_entry(e); /* make room */
  }
  _ta_resize_write(p, p, usable, req, flags, run, grew);
  /* grown: the next may be left out if it is not selected */
  uint32_t kind = flags & TA_RESIZE_GROWN ? TA_RESIZE_GROWN : (uint32_t)flags;
  TA_THIN_ADDR(e) = (uintptr_t)p;
  *e = (_ta_thin_t){.seq = seq, .req = req, .usable = usable, .last_req = req, .last_usable = usable, .kind = kind};
}

/* Block p, about to be freed, may be sampled (its page counts some, or it
 * is large or huge): if it is, say it is freed. */
TA_NOINLINE static void _ta_sample_free(void *p) {
  if (!TA_EV_ON() || _ta_set_lookup((uintptr_t)p) == TA_SET_OUT) return;
  if (!_ta_ev_ensure()) return; /* a forked child's first event: its ring */
  _ta_thin_flush((uintptr_t)p);
  _ta_sample_lock_take();
  if (_ta_sample_unmark(p)) {
    uint64_t rec[1] = {(uintptr_t)p};
    _ta_ev_write(TA_EV_FREE, rec, 16);
  }
  _ta_mutex_unlock(&_ta_sample_lock.m);
}

/* The usable size of q, which realloc just made: realloc said it in did
 * if it resized a large or huge block without a copy (a huge block's
 * lookup takes a lock). */
static inline uint64_t _ta_resized_usable(void *q, const _ta_realloc_did_t *did) {
  return did->from != TA_REALLOC_COPIED ? did->usable : _ta_usable_of(q);
}

/* realloc moved or resized block p to q (maybe p itself), req bytes
 * asked; left is the countdown before it (the move's own malloc did not
 * count); counted, what the realloc counts down by; how:
 * TA_RESIZE_GROWN if a large or huge block grew (or kept its size)
 * without a copy, TA_RESIZE_KEPT if a small block stayed in its class,
 * else 0; maybe: p's page holds sampled blocks (else p is not one); did:
 * what realloc did (types.h). A p that moved is still to be freed (by
 * _ta_realloc, after this): a sampled p's record moves to q here, so its
 * free finds it unsampled and says nothing.
 *
 * For sampling, a realloc is an allocation of req bytes (counted = req,
 * as tcmalloc and heapprofd count it), selected if the countdown crosses
 * zero in it: the reader weighs the block by its new size if so, else no
 * more. But a block grown without a copy counts its growth only, as the
 * books do, and a block weighed before stays weighed: the chance that it
 * is weighed is then still 1 - exp(-req/rate), what a fresh draw of req
 * bytes gives, so the estimates stay unbiased, and a buffer grown a few
 * bytes at a time is neither drawn again at every step (realloc_chain:
 * 4M draws a run) nor flips in and out of the sample. A sampled p stays
 * sampled at q, so its chain goes on for the growth diagnosis: RESIZE
 * says whether the realloc was selected and whether it grew. An unsampled
 * p that is selected starts a sample at q, from the realloc's stack.
 *
 * A small block resized in its size class (no copy, the same usable
 * size) counts as nothing and keeps its weight: the chance that it is
 * weighed is that of the draw of the size it was allocated or moved with
 * (C), and the reader keeps weighing it by C, so its estimate stays
 * unbiased whatever it grows to in the class; the books count nothing
 * either (its usable size did not move). realloc_chain's buffers, grown
 * 1-64 bytes a step, drew afresh at each step below 512 KiB: 0.44M draws
 * and most of its 1.06M events a run. */
TA_NOINLINE static void _ta_sample_realloc(void *p, void *q, size_t req, int64_t left, int64_t counted, uint64_t how, bool maybe,
                                           const _ta_realloc_did_t *did) {
  if (!TA_EV_ON()) return;
  if (!_ta_sample_rng) left = _ta_sample_next(); /* the thread's first countdown: drawn */
  left -= counted;
  bool selected = left < 0 && !_ta_in_sampler && !(how & TA_RESIZE_KEPT);
  _ta_sample_left = selected ? _ta_sample_next() : left;
  uint64_t flags = (selected ? TA_RESIZE_SELECTED : 0) | how;
  /* p's page holds no sampled block, or p is none of them: at most a
   * fresh sample (only p's owner, this thread, could have added it) */
  if (!maybe) {
    if (selected) _ta_sample_take_at(q, req);
    return;
  }
  uint64_t seq = __atomic_load_n(&_ta_set_w.seq, __ATOMIC_ACQUIRE);
  _ta_thin_t *e = _ta_thin_find((uintptr_t)p);
  if (p == q && e && e->seq == seq) {
    /* reported by this thread, and the set has not changed since: p is
     * still the same sampled block (it is ours: nobody freed it); in a
     * forked child, reported by the parent (the ring may be to make) */
    if (_ta_ev_ensure()) _ta_thin_resized(p, req, _ta_resized_usable(q, did), flags, seq, e);
    return;
  }
  int in = _ta_set_lookup((uintptr_t)p);
  if (in == TA_SET_OUT) {
    if (e) TA_THIN_ADDR(e) = 0; /* freed by another thread */
    if (selected) _ta_sample_take_at(q, req);
    return;
  }
  if (!_ta_ev_ensure()) return; /* a block a forked child inherited: its first event */
  if (in == TA_SET_IN && p == q) {
    /* Resized in place and sampled: the record is all there is to say,
     * and it needs no lock (the ring takes writers at once, and no other
     * thread changes p's entry while its owner resizes it); taking the
     * lock was a quarter of what sampling cost realloc_chain (perf: 500
     * of 2,000 samples in our code). A fork on another thread meanwhile
     * may leave this record after its FORK mark: the child then has p at
     * its old size. */
    _ta_thin_resized(p, req, _ta_resized_usable(q, did), flags, seq, e);
    return;
  }
  if (e) _ta_thin_flush_entry(e);
  _ta_sample_lock_take();
  /* in place, a sampled block stays marked; moved, it is unmarked at p and
   * marked at q */
  bool was = p == q ? _ta_set_has((uintptr_t)p) : _ta_sample_unmark(p);
  if (was) {
    if (p != q && _ta_set_has((uintptr_t)q)) { /* q's free was lost: end p's chain there */
      uint64_t rec[1] = {(uintptr_t)p};
      _ta_ev_write(TA_EV_FREE, rec, 16);
    } else {
      if (p != q) _ta_sample_mark(q);
      _ta_resize_write(p, q, _ta_resized_usable(q, did), req, flags, NULL, 0);
    }
  }
  _ta_mutex_unlock(&_ta_sample_lock.m);
  if (!was && selected) _ta_sample_take_at(q, req);
}

/* fork: the parent marks the point in its ring; the child keeps the
 * parent's stack ids, modules and sampled set, and at its first event
 * (_ta_fork_from) makes an events file of its own whose header points at
 * that mark (its reader starts from a copy of the parent's profile
 * there). A child that execs or exits first makes none: under a shell,
 * eager rings cost each command an events file (0.5-1.3 ms on ext4) and
 * the launcher more. */
static void _ta_sample_fork_prepare(void) {
  _ta_sample_lock_take();
  /* a forked child without a ring yet that holds sampled blocks it
   * inherited makes its ring now, so that its own child can start from
   * its profile (one that holds none has nothing to pass on) */
  if (_ta_ev_held_locked()) {
    uint64_t rec[1] = {++_ta_fork_seq};
    _ta_ev_write(TA_EV_FORK, rec, 16);
  }
}
static void _ta_sample_fork_parent(void) { _ta_mutex_unlock(&_ta_sample_lock.m); }
static void _ta_sample_fork_child(void) {
  _ta_mutex_reinit(&_ta_sample_lock.m);
  _ta_fork_from.ppid = 0, _ta_fork_from.seq = 0; /* a child of a child without a ring: it inherited no sampled block */
  if (_ta_ev) { /* its ring at its first event, linked to the mark (_ta_ev_lazy stays set) */
    _ta_fork_from.ppid = _ta_ev->pid, _ta_fork_from.seq = _ta_fork_seq;
    _ta_ev = NULL;
    _ta_fork_seq = 0;
  }
}

/* A memory reporter measured block p (report.c): if p is sampled, say so
 * with the reporter's stack (for the dark-matter report). */
TA_NOINLINE static void _ta_sample_report(const void *p) {
  if (!TA_EV_ON() || _ta_in_sampler) return;
  _ta_sample_lock_take();
  bool sampled = _ta_set_has((uintptr_t)p);
  _ta_mutex_unlock(&_ta_sample_lock.m);
  if (!sampled) return;
  _ta_in_sampler = true;
  uintptr_t pc[TA_STACK_MAX];
  int n = _ta_stack_capture(pc);
  _ta_sample_lock_take();
  if (_ta_ev_make_locked()) { /* a forked child's first event may be this */
    uint64_t rec[2] = {(uintptr_t)p, _ta_stack_id(pc, n)};
    _ta_ev_write(TA_EV_REPORT, rec, 8 + sizeof rec);
  }
  _ta_mutex_unlock(&_ta_sample_lock.m);
  _ta_in_sampler = false;
}

/* A collection of memory reports begins: report marks start afresh. */
static void _ta_sample_collect(uint64_t seq) {
  if (!TA_EV_ON()) return;
  _ta_sample_lock_take();
  if (_ta_ev_held_locked()) { /* without sampled blocks there are no marks to clear */
    uint64_t rec[1] = {seq};
    _ta_ev_write(TA_EV_COLLECT, rec, 16);
  }
  _ta_mutex_unlock(&_ta_sample_lock.m);
}

#else /* !TA_SAMPLING: no cost, no code */

#define _ta_sample_alloc(p, req, tag) (p)
#define _ta_sample_free(p) ((void)0)
#define _ta_sample_init() ((void)0)
#define _ta_sample_fork_prepare() ((void)0)
#define _ta_sample_fork_parent() ((void)0)
#define _ta_sample_fork_child() ((void)0)
#define _ta_sample_report(p) ((void)(p))
#define _ta_sample_collect(seq) ((void)(seq))
#define TA_SAMPLED_AT(pg, p) false

#endif
