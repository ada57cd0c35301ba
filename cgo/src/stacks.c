/* stacks.c: the stack of a sampled block (TA_SAMPLING builds): taken by
 * unwind.c's cached rules, or libgcc's unwinder where they do not reach
 * (or with TAGALLOC_UNWIND=1), and deduplicated into a stack id, written
 * to the ring in a STACK record the first time it is seen. */

#if TA_SAMPLING

#include <unwind.h>

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

#endif
