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
 * return address (unwind.c), libgcc's unwinder where they
 * do not reach or with TAGALLOC_UNWIND=1. It is deduplicated into a stack id, and an
 * ALLOC event goes into the events ring; the block's address goes into the
 * sampled set, so its free (or in-place resize) emits an event too. The
 * pages holding sampled blocks keep a filter of them (pg->sampled): frees
 * into other pages never look at the set.
 *
 * The events go into the ring (ring.c), stacks are taken and
 * deduplicated by stacks.c (unwind.c beneath it), the objects they are in
 * announced by modules.c, and the sampled blocks kept by sampledset.c;
 * this file holds the countdown, the hooks the allocation paths call
 * (malloc, free, realloc, fork, memory reporters) and the thinning of a
 * growing block's resizes.
 *
 * Nothing here allocates through the allocator, and nothing is called with
 * one of its locks held; a thread inside the sampler does not sample the
 * allocations the unwinder or loader might make (_ta_in_sampler). */

#if TA_SAMPLING

#include "negln.h"

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

/* The ring (sample lock held), made now if this process has none yet
 * but holds sampled blocks (a forked child's, inherited): a collection's
 * mark and a fork's are only needed where there are sampled blocks. */
static bool _ta_ev_held_locked(void) { return _ta_ev || (_ta_set_w.live && _ta_ev_make_locked()); }

/* ---- the hooks ------------------------------------------------------------------------- */

static size_t _ta_usable_of(void *p); /* alloc.c */

/* The next countdown: drawn, or none if stacks are off for good. */
static void _ta_sample_restart(void) { _ta_sample_left = TA_EV_ON() ? _ta_sample_next() : INT64_MAX / 2; }

/* The countdown crossed zero at block p (requested bytes req, charged to
 * tag): record it, and start the next countdown. */
/* The countdown crossed zero at an allocation of req bytes (p: the block,
 * NULL if none was made). False if there is nothing to sample after all:
 * it was the thread's first countdown, now drawn; or there is no block,
 * or sampling is off or busy on this thread (the countdown starts again).
 * True if p is due to be sampled. */
static inline bool _ta_sample_due(const void *p, size_t req) {
  if (!_ta_sample_rng && TA_EV_ON()) { /* the thread's first countdown: drawn, not 0 */
    _ta_sample_left = _ta_sample_next() - _ta_counted(req);
    if (_ta_sample_left >= 0) return false;
  }
  if (!p || _ta_in_sampler || !TA_EV_ON()) {
    _ta_sample_restart();
    return false;
  }
  return true;
}

TA_NOINLINE static void *_ta_sample_take(void *p, size_t req, uint32_t tag) {
  if (!_ta_sample_due(p, req)) return p;
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
  (void)_ta_sample_due(q, req); /* due or not, the realloc's hook decides */
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
