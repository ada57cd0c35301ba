/* unwind.c: stacks without frame pointers, fast (sampling builds, x86-64).
 * The libgcc unwinder reads each frame's DWARF call-frame information
 * anew: about 170 ns a frame here, which makes --stacks full slower than
 * heaptrack. This unwinder reads the CFI of an address once, keeps the
 * rule it gives (heaptrack's libunwind and perf do the same), and then
 * walks a frame in a few loads:
 *
 *   CFA = (rule uses rbp ? rbp : rsp) + offset
 *   return address = *(CFA - 8); rbp = *(CFA + rbp_off) if it was saved
 *   rsp = CFA
 *
 * The rule of a return address comes from its FDE (found with libgcc's
 * _Unwind_Find_FDE, which uses the loader's lock-free _dl_find_object):
 * the CIE's initial instructions and the FDE's, run up to the call. Only
 * what ordinary code does is understood: the CFA from rsp or rbp plus an
 * offset, rbp saved at an offset from the CFA, the return address at
 * CFA - 8, remember/restore state. Anything else (signal frames, stack
 * realignment with expressions, 64-bit CIEs) marks the address
 * unsupported, and that stack is taken by libgcc instead, so nothing is
 * lost, only time. An address with no FDE, or whose return address is
 * undefined (_start, a thread's start), ends the stack.
 *
 * Rules live in a direct-mapped cache shared by all threads; a slot is
 * two words, written under a per-slot lock bit (the pc word is 1 while
 * written) and read optimistically (pc, rule, pc again). The cache starts
 * at one page (256 slots) and grows by 4x, up to TA_UW_SLOTS, each time
 * half its slots are taken: a fixed cache of 1 MiB, hashed, put each
 * return address a process met on a page of its own, and a page's first
 * touch (a read, then a write) was two faults of about 14 us each on the
 * 2-core VM: under pyenv's python shim, 94 faults among the few processes
 * that took a stack. The thread that fills the slot over the mark copies
 * the cache into the next (a fresh mapping) and publishes it; a thread
 * still in the old one meanwhile only loses what it writes there (a
 * cache). The smaller ones stay mapped (340 KiB of address space, of
 * which the pages touched), and a child forked while a cache was being
 * made keeps the size it has. Nothing here allocates or takes a lock but
 * the loader's.
 *
 * TAGALLOC_UNWIND: 0 this unwinder (default), 1 libgcc only, 2 both,
 * aborting if they disagree (tests). */

#if TA_SAMPLING && defined(__x86_64__)
#define TA_FAST_UNWIND 1

#include <unwind.h>

#define TA_UW_MAX_BITS 16 /* the most the cache grows to: TA_UW_SLOTS */
#define TA_UW_SLOTS (1u << TA_UW_MAX_BITS)
#define TA_UW_OK 1u
#define TA_UW_RBP_BASE 2u   /* the CFA is rbp + offset (else rsp + offset) */
#define TA_UW_RBP_SAVED 4u  /* rbp was saved at CFA + rbp_off */
#define TA_UW_END 8u        /* the return address is undefined: the outermost frame */
#define TA_UW_UNSUPPORTED 16u

typedef struct {
  _Atomic(uintptr_t) pc; /* 0 empty, 1 being written */
  _Atomic(uint64_t) rule; /* cfa_off (low 32, signed) | rbp_off << 32 (16, signed) | flags << 48 */
} _ta_uw_slot_t;

#define TA_UW_FIRST_BITS 8 /* the first cache: 256 slots, a page */
static _ta_uw_slot_t _ta_uw_first[1u << TA_UW_FIRST_BITS] __attribute__((aligned(TA_OS_PAGE)));
/* The cache and its size, one pointer to publish (descriptors are
 * written once, before they are published). */
typedef struct {
  _ta_uw_slot_t *slot;
  unsigned bits; /* log2 of the slots */
} _ta_uw_tab_t;
static _ta_uw_tab_t _ta_uw_tabs[(TA_UW_MAX_BITS - TA_UW_FIRST_BITS) / 2 + 1] = {{_ta_uw_first, TA_UW_FIRST_BITS}}; /* 2^8, 2^10, ... 2^16 slots */
static _ta_uw_tab_t *_ta_uw_cur = &_ta_uw_tabs[0];
static _Atomic(uint32_t) _ta_uw_used;    /* slots of the current cache filled from empty */
static _Atomic(uint32_t) _ta_uw_growing; /* a thread is making the next cache (never cleared at the last) */

struct dwarf_eh_bases {
  void *tbase, *dbase, *func;
};
extern const void *_Unwind_Find_FDE(void *pc, struct dwarf_eh_bases *bases);

static uint64_t _ta_uleb(const uint8_t **p, const uint8_t *end) {
  uint64_t v = 0;
  for (unsigned shift = 0; *p < end && shift < 64; shift += 7) {
    uint8_t b = *(*p)++;
    v |= (uint64_t)(b & 0x7f) << shift;
    if (!(b & 0x80)) break;
  }
  return v;
}

static int64_t _ta_sleb(const uint8_t **p, const uint8_t *end) {
  int64_t v = 0;
  unsigned shift = 0;
  uint8_t b = 0x80;
  while (*p < end && shift < 64 && (b & 0x80)) {
    b = *(*p)++;
    v |= (int64_t)(b & 0x7f) << shift;
    shift += 7;
  }
  if (shift < 64 && (b & 0x40)) v |= -((int64_t)1 << shift);
  return v;
}

/* Bytes of a pointer in eh_frame encoding enc (DW_EH_PE_*), or -1. */
static int _ta_enc_size(uint8_t enc) {
  switch (enc & 0x0f) {
  case 0x00: return 8;                  /* absptr */
  case 0x02: case 0x0a: return 2;       /* udata2, sdata2 */
  case 0x03: case 0x0b: return 4;       /* udata4, sdata4 */
  case 0x04: case 0x0c: return 8;       /* udata8, sdata8 */
  default: return -1;                   /* uleb128 and others: not here */
  }
}

typedef struct {
  int64_t cfa_off, rbp_off;
  uint8_t cfa_reg; /* DWARF: 6 rbp, 7 rsp */
  bool rbp_saved, ra_ok, end;
} _ta_cfi_row_t;

/* Run CFA instructions [p, end) from location loc while the location is
 * at most target; false on anything not understood. */
static bool _ta_cfi_run(const uint8_t *p, const uint8_t *end, uintptr_t loc, uintptr_t target, uint64_t code_align,
                        int64_t data_align, const _ta_cfi_row_t *initial, _ta_cfi_row_t *row) {
  _ta_cfi_row_t saved[4];
  int depth = 0;
  while (p < end) {
    uint8_t op = *p++, low = op & 0x3f;
    uint64_t adv = 0;
    bool advance = false;
    switch (op >> 6) {
    case 1: adv = low, advance = true; break;                         /* advance_loc */
    case 2: {                                                         /* offset */
      int64_t off = (int64_t)_ta_uleb(&p, end) * data_align;
      if (low == 6) row->rbp_saved = true, row->rbp_off = off;
      else if (low == 16) row->ra_ok = off == -8;
      continue;
    }
    case 3:                                                           /* restore */
      if (low == 6) row->rbp_saved = initial->rbp_saved, row->rbp_off = initial->rbp_off;
      else if (low == 16) row->ra_ok = initial->ra_ok;
      continue;
    default: break;
    }
    if (!advance) {
      uint64_t reg;
      int64_t off;
      switch (op) {
      case 0x00: continue;                                            /* nop */
      case 0x02: if (p + 1 > end) return false; adv = p[0], p += 1, advance = true; break;
      case 0x03: if (p + 2 > end) return false; adv = (uint64_t)p[0] | (uint64_t)p[1] << 8, p += 2, advance = true; break;
      case 0x04:
        if (p + 4 > end) return false;
        adv = (uint64_t)p[0] | (uint64_t)p[1] << 8 | (uint64_t)p[2] << 16 | (uint64_t)p[3] << 24, p += 4, advance = true;
        break;
      case 0x05: case 0x11:                                           /* offset_extended(_sf) */
        reg = _ta_uleb(&p, end);
        off = (op == 0x05 ? (int64_t)_ta_uleb(&p, end) : _ta_sleb(&p, end)) * data_align;
        if (reg == 6) row->rbp_saved = true, row->rbp_off = off;
        else if (reg == 16) row->ra_ok = off == -8;
        continue;
      case 0x06:                                                      /* restore_extended */
        reg = _ta_uleb(&p, end);
        if (reg == 6) row->rbp_saved = initial->rbp_saved, row->rbp_off = initial->rbp_off;
        else if (reg == 16) row->ra_ok = initial->ra_ok;
        continue;
      case 0x07: case 0x08:                                           /* undefined, same_value */
        reg = _ta_uleb(&p, end);
        if (reg == 6) row->rbp_saved = false;
        else if (reg == 16) {
          if (op == 0x07) row->end = true;
          else return false;
        }
        continue;
      case 0x09:                                                      /* register */
        reg = _ta_uleb(&p, end);
        (void)_ta_uleb(&p, end);
        if (reg == 6 || reg == 16) return false;
        continue;
      case 0x0a:                                                      /* remember_state */
        if (depth == 4) return false;
        saved[depth++] = *row;
        continue;
      case 0x0b:                                                      /* restore_state */
        if (depth == 0) return false;
        *row = saved[--depth];
        continue;
      case 0x0c: case 0x12:                                           /* def_cfa(_sf) */
        row->cfa_reg = (uint8_t)_ta_uleb(&p, end);
        row->cfa_off = op == 0x0c ? (int64_t)_ta_uleb(&p, end) : _ta_sleb(&p, end) * data_align;
        continue;
      case 0x0d: row->cfa_reg = (uint8_t)_ta_uleb(&p, end); continue; /* def_cfa_register */
      case 0x0e: row->cfa_off = (int64_t)_ta_uleb(&p, end); continue; /* def_cfa_offset */
      case 0x13: row->cfa_off = _ta_sleb(&p, end) * data_align; continue;
      case 0x10: case 0x16:                                           /* expression, val_expression */
        reg = _ta_uleb(&p, end);
        {
          uint64_t n = _ta_uleb(&p, end);
          if (n > (uint64_t)(end - p)) return false;
          p += n;
        }
        if (reg == 6 || reg == 16 || reg == 7) return false;
        continue;
      case 0x2e: (void)_ta_uleb(&p, end); continue;                  /* GNU_args_size */
      default: return false;                                          /* def_cfa_expression and the rest */
      }
    }
    if (advance) {
      loc += adv * code_align;
      if (loc > target) return true;
    }
  }
  return true;
}

/* The rule for return address pc (its call is at pc - 1), packed. */
static uint64_t _ta_uw_compute(uintptr_t pc) {
  const uint64_t unsupported = (uint64_t)TA_UW_UNSUPPORTED << 48;
  struct dwarf_eh_bases bases;
  const uint8_t *fde = _Unwind_Find_FDE((void *)(pc - 1), &bases);
  if (!fde) return (uint64_t)TA_UW_END << 48; /* no CFI: the stack ends (or code we cannot know) */
  uint32_t flen;
  memcpy(&flen, fde, 4);
  if (flen == 0 || flen == 0xffffffffu) return unsupported;
  const uint8_t *fend = fde + 4 + flen;
  int32_t cie_delta;
  memcpy(&cie_delta, fde + 4, 4);
  const uint8_t *cie = fde + 4 - cie_delta;
  uint32_t clen;
  memcpy(&clen, cie, 4);
  if (clen == 0 || clen == 0xffffffffu) return unsupported;
  const uint8_t *cend = cie + 4 + clen, *p = cie + 8;
  uint8_t version = *p++;
  const char *aug = (const char *)p;
  size_t auglen = strnlen(aug, (size_t)(cend - p));
  p += auglen + 1;
  if (version == 4) p += 2; /* address and segment sizes */
  uint64_t code_align = _ta_uleb(&p, cend);
  int64_t data_align = _ta_sleb(&p, cend);
  if (version == 1) p++;
  else (void)_ta_uleb(&p, cend); /* return address register */
  uint8_t fde_enc = 0x00;
  bool z = aug[0] == 'z';
  if (z) {
    uint64_t n = _ta_uleb(&p, cend);
    const uint8_t *q = p, *qend = p + n;
    if (qend > cend) return unsupported;
    for (size_t i = 1; i < auglen; i++) {
      switch (aug[i]) {
      case 'R': if (q >= qend) return unsupported; fde_enc = *q++; break;
      case 'L': if (q >= qend) return unsupported; q++; break;
      case 'P': {
        if (q >= qend) return unsupported;
        int s = _ta_enc_size(*q++);
        if (s < 0) return unsupported;
        q += s;
        break;
      }
      case 'S': return unsupported; /* a signal frame */
      default: return unsupported;
      }
    }
    p = qend;
  } else if (auglen) {
    return unsupported;
  }
  _ta_cfi_row_t init = {0, 0, 7, false, false, false};
  if (!_ta_cfi_run(p, cend, 0, 0, code_align, data_align, &init, &init)) return unsupported;
  /* the FDE: pc_begin, pc_range, augmentation data, instructions */
  int s = _ta_enc_size(fde_enc);
  if (s < 0) return unsupported;
  const uint8_t *q = fde + 8 + 2 * s;
  if (z) {
    uint64_t n = _ta_uleb(&q, fend);
    q += n;
  }
  if (q > fend) return unsupported;
  _ta_cfi_row_t row = init;
  if (!_ta_cfi_run(q, fend, (uintptr_t)bases.func, pc - 1, code_align, data_align, &init, &row)) return unsupported;
  if (row.end) return (uint64_t)TA_UW_END << 48;
  if (!row.ra_ok || (row.cfa_reg != 6 && row.cfa_reg != 7) || row.cfa_off < INT32_MIN || row.cfa_off > INT32_MAX ||
      (row.rbp_saved && (row.rbp_off < INT16_MIN || row.rbp_off > INT16_MAX)))
    return unsupported;
  uint64_t flags = TA_UW_OK | (row.cfa_reg == 6 ? TA_UW_RBP_BASE : 0) | (row.rbp_saved ? TA_UW_RBP_SAVED : 0);
  return (uint64_t)(uint32_t)(int32_t)row.cfa_off | (uint64_t)(uint16_t)(int16_t)row.rbp_off << 32 | flags << 48;
}

static inline _ta_uw_slot_t *_ta_uw_slot(const _ta_uw_tab_t *t, uintptr_t pc) {
  return &t->slot[(pc * 0x9E3779B97F4A7C15ull) >> (64 - t->bits)];
}

/* Put rule r of pc in slot s unless another thread is writing it; true
 * if s was empty. */
static bool _ta_uw_put(_ta_uw_slot_t *s, uintptr_t pc, uint64_t r) {
  uintptr_t a = atomic_load_explicit(&s->pc, memory_order_relaxed);
  if (a == 1 || !atomic_compare_exchange_strong_explicit(&s->pc, &a, 1, memory_order_acquire, memory_order_relaxed))
    return false;
  atomic_store_explicit(&s->rule, r, memory_order_release);
  atomic_store_explicit(&s->pc, pc, memory_order_release);
  return a == 0;
}

/* Half of cache t is taken: make the next, 4x larger, with t's rules in
 * it, and publish it (one thread does; the others go on with t). */
TA_NOINLINE static void _ta_uw_grow(_ta_uw_tab_t *t) {
  uint32_t no = 0;
  if (!atomic_compare_exchange_strong_explicit(&_ta_uw_growing, &no, 1, memory_order_acquire, memory_order_relaxed)) return;
  if (t != __atomic_load_n(&_ta_uw_cur, __ATOMIC_ACQUIRE)) { /* grown since this thread looked */
    atomic_store_explicit(&_ta_uw_growing, 0, memory_order_release);
    return;
  }
  _ta_uw_tab_t *n = t + 1;
  n->bits = t->bits + 2;
  n->slot = _ta_os_map(sizeof(_ta_uw_slot_t) << n->bits, TA_OS_PAGE);
  if (!n->slot) return; /* stays this size (and growing stays set) */
  uint32_t used = 0;
  for (size_t i = 0; i < (size_t)1 << t->bits; i++) {
    _ta_uw_slot_t *s = &t->slot[i];
    uintptr_t pc = atomic_load_explicit(&s->pc, memory_order_acquire);
    if (pc <= 1) continue;
    uint64_t r = atomic_load_explicit(&s->rule, memory_order_acquire);
    if (atomic_load_explicit(&s->pc, memory_order_acquire) != pc) continue;
    used += _ta_uw_put(_ta_uw_slot(n, pc), pc, r);
  }
  atomic_store_explicit(&_ta_uw_used, used, memory_order_relaxed);
  __atomic_store_n(&_ta_uw_cur, n, __ATOMIC_RELEASE);
  if (n->bits < TA_UW_MAX_BITS) atomic_store_explicit(&_ta_uw_growing, 0, memory_order_release); /* the last stays set */
}

/* The rule of return address pc, from the cache or computed into it. */
static uint64_t _ta_uw_rule(uintptr_t pc) {
  _ta_uw_tab_t *t = __atomic_load_n(&_ta_uw_cur, __ATOMIC_ACQUIRE);
  _ta_uw_slot_t *s = _ta_uw_slot(t, pc);
  if (atomic_load_explicit(&s->pc, memory_order_acquire) == pc) {
    uint64_t r = atomic_load_explicit(&s->rule, memory_order_acquire);
    if (atomic_load_explicit(&s->pc, memory_order_acquire) == pc) return r;
  }
  uint64_t r = _ta_uw_compute(pc);
  if (_ta_uw_put(s, pc, r) && (atomic_fetch_add_explicit(&_ta_uw_used, 1, memory_order_relaxed) + 1) * 2 > (1u << t->bits) &&
      t->bits < TA_UW_MAX_BITS)
    _ta_uw_grow(t);
  return r;
}

/* The caller's return address, its stack pointer after the return, and
 * rbp: the registers a walk starts from. */
__attribute__((naked, noinline)) static void _ta_uw_regs(__attribute__((unused)) uintptr_t out[3]) {
  __asm__ volatile("movq (%rsp), %rax\n\t"
                   "movq %rax, 0(%rdi)\n\t"
                   "leaq 8(%rsp), %rax\n\t"
                   "movq %rax, 8(%rdi)\n\t"
                   "movq %rbp, 16(%rdi)\n\t"
                   "ret\n\t");
}

/* The calling thread's stack, innermost first, without our own frames
 * (up to max); -1 if a frame's rule is unsupported (use libgcc). */
TA_NOINLINE static int _ta_unwind_fast(uintptr_t *out, int max) {
  uintptr_t regs[3];
  _ta_uw_regs(regs);
  uintptr_t pc = regs[0], rsp = regs[1], rbp = regs[2];
  int n = 0;
  for (int steps = 0; steps < 4 * TA_STACK_MAX && n < max; steps++) {
    if (!(n == 0 && pc >= _ta_self.start && pc < _ta_self.end)) out[n++] = pc; /* ours: left out */
    uint64_t r = _ta_uw_rule(pc);
    uint32_t flags = (uint32_t)(r >> 48);
    if (flags & TA_UW_END) break;
    if (!(flags & TA_UW_OK)) return -1;
    uintptr_t cfa = ((flags & TA_UW_RBP_BASE) ? rbp : rsp) + (intptr_t)(int32_t)(uint32_t)r;
    if (cfa <= rsp || cfa - rsp > (64u << 20)) return -1; /* the stack grows down: a wrong rule would not */
    uintptr_t ra = *(const uintptr_t *)(cfa - 8);
    if (flags & TA_UW_RBP_SAVED) rbp = *(const uintptr_t *)(cfa + (intptr_t)(int16_t)(uint16_t)(r >> 32));
    rsp = cfa;
    if (ra == 0) break;
    pc = ra;
  }
  return n;
}

#endif
