/* ring.c: the events ring, and its making (TA_SAMPLING builds; the
 * sampling itself is sample.c's).
 *
 * The ring is the file $TAGALLOC_DIR/PID.events, mapped shared, the
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
 * are about thinning (sample.c).
 *
 * A process makes its ring at its first sample (a forked child at its
 * first event, linked to its parent's FORK mark); the sample lock, here,
 * guards it and what the sampler keeps beside it (the modules announced,
 * the stack table, the sampled set). */

#if TA_SAMPLING

#include <fcntl.h>

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
/* leaf; alone on its cache line (TA_ALONE): it shared one with _ta_ev,
 * which every free on a page holding a sampled block reads */
static struct { pthread_mutex_t m; } _ta_sample_lock TA_LOCK = {PTHREAD_MUTEX_INITIALIZER};

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
  void *p = _ta_file_make(".events", sizeof(_ta_ev_hdr_t) + ring, NULL, _ta_ev_put_header, &h, NULL, NULL);
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

#endif
