// Tag budgets: a limit on the live bytes of a tag and of every tag under
// it, checked when a block is allocated (issue 25; the native library's
// is cgo/src/budget.c, with the same policies and counts).
//
// A budget keeps its own charge: the usable bytes of the live blocks of
// the tags it covers, moved by every Malloc, Calloc, Realloc and Free
// under them with an atomic add (under the fail policy a compare-and-swap
// that checks the limit first, so no number of goroutines can take the
// charge past the limit). Each Tag points to the budgets covering it
// (Tag.budgets, innermost first); a tag without any has a nil pointer,
// and that is all the allocation paths look at. Free looks the freed
// block's tag up only while some budget exists (budgetsOn).
//
// The books region shows each budget (its table, books.BudgetSlot, read
// by tagalloc run, top and snapshot): a budget's slot is a copy of its
// charge, crossings, refusals and over flag, which every change of them
// stores again (mirror). The budget's own words stay the ones the
// allocation paths check; the slot is what other processes read.

package alloc

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync/atomic"
	"unsafe"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// BudgetPolicy is what happens to an allocation that takes a budget's
// charge past its limit. The values are the books' and the native
// library's (TAGALLOC_BUDGET_FAIL, _NOTIFY, _OBSERVE).
type BudgetPolicy int

const (
	// BudgetFail refuses the allocation: Malloc and Calloc return nil,
	// Realloc returns nil and leaves its block as it was. The refused
	// block is neither made nor charged.
	BudgetFail BudgetPolicy = iota + 1
	// BudgetNotify lets the allocation through and runs the OnBudget
	// callback, once per crossing.
	BudgetNotify
	// BudgetObserve lets the allocation through; the crossing is only
	// counted.
	BudgetObserve
)

// String is the policy's name: "fail", "notify" or "observe".
func (p BudgetPolicy) String() string {
	switch p {
	case BudgetFail:
		return "fail"
	case BudgetNotify:
		return "notify"
	case BudgetObserve:
		return "observe"
	}
	return fmt.Sprintf("BudgetPolicy(%d)", int(p))
}

// BudgetStat is one budget as Budgets reports it.
type BudgetStat struct {
	Tag    string // the tag (or level) it covers, and every tag under it
	Limit  uint64 // bytes
	Policy BudgetPolicy
	// Charged is the usable bytes of the live blocks of the covered tags
	// (as TagStats counts LiveBytes), plus those of allocations in
	// progress. Never past Limit under BudgetFail, unless the budget was
	// made, or its limit lowered, when the charge was already larger.
	Charged uint64
	// Crossings counts the times the charge went from at most Limit to
	// past it (once each, until it came back to at most Limit). Under
	// BudgetFail, where the charge does not pass the limit, a refusal
	// counts one unless the budget has refused since the charge last went
	// down. A budget made over a charge past its limit starts with one.
	Crossings uint64
	// Refused counts the allocations BudgetFail refused.
	Refused uint64
}

// budget is one SetBudget's state. tag, id and named never change; the
// rest is read by the allocation paths without a lock.
type budget struct {
	tag                string
	limit              atomic.Uint64
	policy             atomic.Int32 // a BudgetPolicy
	charged            atomic.Uint64
	crossings, refused atomic.Uint64
	// over is 1 while the charge is past the limit (notify, observe),
	// or under fail while refusing: a refusal counted its crossing, and
	// the charge has not gone down since (the fail policy's way to count
	// a crossing once). The books' over flag.
	over atomic.Uint32
	// slot is the budget's slot in the books region (nil: none), which
	// mirrors charged, crossings, refused and over (state.mu to store).
	slot atomic.Pointer[books.BudgetSlot]
	// id is the region's id of tag, if named (a name past the region's
	// 4096th has none: the budget is then not in the books).
	id    uint32
	named bool
}

var (
	// budgetsByTag are the budgets, by the tag they cover (state.mu).
	budgetsByTag = map[string]*budget{}
	// budgetsOn is set while a budget exists: Free then looks up the
	// budgets of the freed block's tag (else one load and branch).
	budgetsOn atomic.Bool
	// budgetFunc is OnBudget's callback (nil: none).
	budgetFunc atomic.Pointer[func(tag string, limit, charged uint64)]
)

// maxBudgets is how many budgets may be set at once: as many as the books
// region's table holds (the native library's limit too).
const maxBudgets = books.MaxBudgets

// SetBudget sets a budget of bytes on the live bytes of tag and of every
// tag under it (a tag named tag, or starting with tag and "/"), with the
// policy for an allocation that takes them past it; bytes 0 removes the
// budget of tag. Setting it again changes the limit and the policy and
// keeps the charge and the counts. tag must be a valid tag name (the
// error is NewTag's); it may be a level no tag has used yet ("gfx" for
// "gfx/webgl"), or a tag not used yet: the budget applies from its first
// use. Budgets may nest ("gfx" and "gfx/webgl"): an allocation is checked
// against each budget covering its tag and charged to all of them.
//
// A budget set over blocks already live starts charged with their usable
// bytes, read from the books. Allocations and frees of the covered tags
// that run while SetBudget installs the budget may be missed or counted
// twice by that first charge (each such block once, never more; the
// charge never goes below 0); set budgets before the tags get busy where
// that matters. Blocks of names
// past the 4096th (charged to "overflow") are not under any budget but
// one on "overflow".
//
// The budgets are in the books region too, as the native library's are,
// so tagalloc run, top and snapshot show them with their charge, counts
// and whether they are over; a removed one leaves it. A budget's tag
// takes a tag name in the region (as NewTag would) if no tag has it yet;
// one on a name past the 4096th is not shown there.
func SetBudget(tag string, bytes uint64, policy BudgetPolicy) error {
	if err := books.ValidTag(tag); err != nil {
		return err
	}
	if bytes != 0 && (policy < BudgetFail || policy > BudgetObserve) {
		return fmt.Errorf("alloc: SetBudget(%q): unknown policy %v", tag, policy)
	}
	ensureInit() // the tags "untagged" and "overflow" exist from here
	state.mu.Lock()
	defer state.mu.Unlock()
	b := budgetsByTag[tag]
	switch {
	case bytes == 0:
		if b != nil {
			delete(budgetsByTag, tag)
			relistLocked(tag)
			budgetsOn.Store(len(budgetsByTag) > 0)
			if s := b.slot.Swap(nil); s != nil {
				s.Drop() // readers skip it; allocations still holding b write there harmlessly
			}
		}
		return nil
	case b != nil:
		// Two stores: an allocation racing with them may see the new
		// limit with the old policy (or the reverse), once.
		b.limit.Store(bytes)
		b.policy.Store(int32(policy))
		if s := b.slot.Load(); s != nil {
			s.Set(uint32(policy), bytes)
		}
		if policy != BudgetFail {
			b.settleOver() // past the new limit, or no longer
		}
		return nil
	case len(budgetsByTag) == maxBudgets:
		return fmt.Errorf("alloc: SetBudget(%q): more than %d budgets", tag, maxBudgets)
	}
	b = &budget{tag: tag}
	b.id, b.named = regionTagLocked(tag)
	b.limit.Store(bytes)
	b.policy.Store(int32(policy))
	// The first charge is the books' figure once the budget is installed
	// in its tags' lists (the allocations after it charge the budget
	// themselves). Until then it holds the figure from before, so that
	// allocations checked against it during the install see about the
	// right charge.
	before := liveUnder(tag)
	b.charged.Store(before)
	budgetsByTag[tag] = b
	budgetsOn.Store(true) // before any tag lists it: Free must look it up
	relistLocked(tag)
	b.add(int64(liveUnder(tag) - before)) // two's complement: the change, either sign
	if b.charged.Load() > bytes {
		b.crossings.Add(1) // set over its limit: crossed already
		b.over.Store(1)
	}
	publishLocked(b)
	return nil
}

// regionTagLocked is the books region's id of tag, registering the name
// as the native library does for a level no tag has used yet (state.mu
// held); false without a region, or for a name past the region's 4096th
// (its id would be "overflow"'s).
func regionTagLocked(tag string) (uint32, bool) {
	r := state.region
	if r == nil {
		return 0, false
	}
	if tag == "overflow" {
		return books.OverflowTag, true // the tag of the names past the 4096th
	}
	id, overflowed, err := r.Tag(tag)
	if err != nil || overflowed || id == books.OverflowTag {
		return 0, false
	}
	return id, true
}

// publishLocked puts the new budget b in the books region's table
// (state.mu held). The table's slots are not reused (a removed budget's
// is left, unused: an allocation that still holds the removed budget
// may write to it); when they have all been taken, the live budgets move
// to a new table. Without a region, a name or room for a new table, b
// stays out of the books (Budgets still has it).
func publishLocked(b *budget) {
	r := state.region
	if r == nil || !b.named {
		return
	}
	s, err := r.NewBudget(b.id, uint32(b.policy.Load()), b.limit.Load(), b.counts())
	if errors.Is(err, books.ErrBudgetTableFull) {
		if r.NewBudgetTable() != nil {
			return
		}
		moved := make([]*budget, 0, len(budgetsByTag))
		for _, o := range budgetsByTag {
			if o != b && o.named {
				moved = append(moved, o)
			}
		}
		sort.Slice(moved, func(i, j int) bool { return moved[i].tag < moved[j].tag })
		for _, o := range moved { // at most maxBudgets-1: they fit
			so, err := r.NewBudget(o.id, uint32(o.policy.Load()), o.limit.Load(), o.counts())
			if err != nil {
				so = nil
			}
			o.slot.Store(so) // a copy made under way goes to the old slot: sync again
			o.sync()
		}
		s, err = r.NewBudget(b.id, uint32(b.policy.Load()), b.limit.Load(), b.counts())
	}
	if err != nil {
		return
	}
	b.slot.Store(s)
	b.sync() // what changed since counts
}

// counts are b's counters, for its slot.
func (b *budget) counts() books.BudgetCounts {
	return books.BudgetCounts{Charged: b.charged.Load(), Crossings: b.crossings.Load(), Refused: b.refused.Load(),
		Over: b.over.Load() != 0}
}

// mirror makes the slot's word dst hold the budget's src (called after
// each change of src, by the goroutine that made it): it stores the value
// it read, then reads src again, and goes on until src did not change
// meanwhile. So a late copy (a goroutine storing a value src has since
// left) is always followed by one of a newer value: the last store to
// dst is of a value src still held after the store, and once src stops
// changing, dst holds it. (Both are sequentially consistent atomics: a
// plain store could land after the read that checks it.) W is
// *atomic.Uint64 or *atomic.Uint32.
func mirror[V comparable, W interface {
	Load() V
	Store(V)
}](dst, src W) {
	for v := src.Load(); ; {
		if dst.Load() != v {
			dst.Store(v)
		}
		w := src.Load()
		if w == v {
			return
		}
		v = w
	}
}

// syncCharged copies the charge to b's slot, if it has one.
func (b *budget) syncCharged() {
	if s := b.slot.Load(); s != nil {
		mirror(&s.Charged, &b.charged)
	}
}

// sync copies every counter to b's slot, if it has one.
func (b *budget) sync() {
	if s := b.slot.Load(); s != nil {
		mirror(&s.Charged, &b.charged)
		mirror(&s.Crossings, &b.crossings)
		mirror(&s.Refused, &b.refused)
		mirror(&s.Over, &b.over)
	}
}

// settleOver makes over say whether the charge is past the limit (the
// notify and observe policies' meaning, after a change of either),
// storing it in the slot. It reads both again after each change of
// over, until they agree: two goroutines moving the charge across the
// limit each way leave over as the charge they leave.
func (b *budget) settleOver() {
	for {
		o, want := b.over.Load(), uint32(0)
		if b.charged.Load() > b.limit.Load() {
			want = 1
		}
		if o == want {
			break
		}
		b.over.CompareAndSwap(o, want)
	}
	if s := b.slot.Load(); s != nil {
		mirror(&s.Over, &b.over)
	}
}

// OnBudget sets the callback run when an allocation takes the charge of a
// budget with BudgetNotify past its limit (nil: none): f(tag, limit,
// charged) with the budget's tag and limit and the charge the allocation
// made. It runs once per crossing (again only after the charge came back
// to at most the limit), once for each budget crossed, on the goroutine
// whose allocation crossed, as the allocation is charged (before Malloc,
// Calloc or Realloc returns) and outside the package's locks (f may
// allocate, free and set budgets). It never runs for the fail and observe
// policies.
func OnBudget(f func(tag string, limit, charged uint64)) {
	if f == nil {
		budgetFunc.Store(nil)
		return
	}
	budgetFunc.Store(&f)
}

// Budgets returns every budget set, by Tag.
func Budgets() []BudgetStat {
	state.mu.Lock()
	out := make([]BudgetStat, 0, len(budgetsByTag))
	for _, b := range budgetsByTag {
		out = append(out, BudgetStat{Tag: b.tag, Limit: b.limit.Load(), Policy: BudgetPolicy(b.policy.Load()),
			Charged: b.charged.Load(), Crossings: b.crossings.Load(), Refused: b.refused.Load()})
	}
	state.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Tag < out[j].Tag })
	return out
}

// covers reports whether a budget on tag covers the tag named name.
func covers(tag, name string) bool {
	return strings.HasPrefix(name, tag) && (len(name) == len(tag) || name[len(tag)] == '/')
}

// budgetsOfLocked is the list of budgets covering the tag named name,
// innermost (longest tag) first, or nil if none does (state.mu held).
func budgetsOfLocked(name string) *[]*budget {
	var l []*budget
	for tag, b := range budgetsByTag {
		if covers(tag, name) {
			l = append(l, b)
		}
	}
	if l == nil {
		return nil
	}
	sort.Slice(l, func(i, j int) bool { return len(l[i].tag) > len(l[j].tag) })
	return &l
}

// relistLocked gives every tag covered by a budget on tag (set or
// removed) its new list of budgets (state.mu held: no tag is made
// meanwhile, and NewTag lists the budgets of the next ones).
func relistLocked(tag string) {
	for id := range state.byID {
		if t := state.byID[id].Load(); t != nil && covers(tag, t.name) {
			t.budgets.Store(budgetsOfLocked(t.name))
		}
	}
}

// liveUnder sums the live bytes of the tags a budget on tag covers, from
// the books (0 if a race with frees on other shards makes it negative).
func liveUnder(tag string) uint64 {
	var live int64
	for id := range state.byID {
		if t := state.byID[id].Load(); t != nil && covers(tag, t.name) {
			live += int64(sum(uint32(id)).LiveBytes) // wrapped below 0 by a race: negative
		}
	}
	return uint64(max(live, 0))
}

// add moves the charge by d (either sign), never below 0.
func (b *budget) add(d int64) {
	for {
		c := b.charged.Load()
		n := c + uint64(d)
		if d < 0 && uint64(-d) > c {
			n = 0
		}
		if b.charged.CompareAndSwap(c, n) {
			b.syncCharged()
			return
		}
	}
}

// reserve charges u bytes to a fail budget if that keeps the charge at
// most the limit, else counts a refusal (and a crossing, the first time
// since the charge last went down) and charges nothing.
func (b *budget) reserve(u uint64) bool {
	limit := b.limit.Load()
	for c := b.charged.Load(); ; c = b.charged.Load() {
		if c+u > limit || c+u < c {
			b.refused.Add(1)
			if b.over.CompareAndSwap(0, 1) {
				b.crossings.Add(1)
			}
			b.sync()
			return false
		}
		if b.charged.CompareAndSwap(c, c+u) {
			b.syncCharged()
			return true
		}
	}
}

// uncharge takes u bytes off the charge (a free, a shrink), never below 0;
// back at most the limit, a fail budget counts its next refusal as a new
// crossing, and a notify or observe budget is no longer over.
func (b *budget) uncharge(u uint64) {
	b.add(-int64(u))
	if BudgetPolicy(b.policy.Load()) != BudgetFail {
		b.settleOver()
		return
	}
	if b.over.Load() != 0 && b.charged.Load() <= b.limit.Load() {
		b.over.Store(0)
		if s := b.slot.Load(); s != nil {
			mirror(&s.Over, &b.over)
		}
	}
}

// crossing is a notify budget's crossing, for its callback.
type crossing struct {
	b              *budget
	limit, charged uint64
}

// charge charges u bytes to every budget of l (a tag's list, of at most
// 32 budgets: a name of 63 bytes has at most 32 levels). The fail
// budgets first, innermost first, each with a compare-and-swap that
// checks its limit: if one refuses, those before it give the bytes back
// and charge returns false (the bytes they held meanwhile may have made a
// concurrent allocation be refused: refusals can only come early, the
// limit is never passed). Then the others, with an add; those it takes
// past their limits count a crossing, and the notify ones are returned for
// their callback.
func charge(l []*budget, u uint64) (ok bool, fired []crossing) {
	var held uint64 // bit i: l[i] is a fail budget charged here
	for i, b := range l {
		if BudgetPolicy(b.policy.Load()) != BudgetFail {
			continue
		}
		if !b.reserve(u) {
			for j := range i {
				if held&(1<<j) != 0 {
					l[j].add(-int64(u))
				}
			}
			return false, nil
		}
		held |= 1 << i
	}
	for i, b := range l {
		if held&(1<<i) != 0 {
			continue
		}
		limit := b.limit.Load()
		now := b.charged.Add(u)
		b.syncCharged()
		if now-u <= limit && now > limit { // this add crossed: no other one did
			b.crossings.Add(1)
			if s := b.slot.Load(); s != nil {
				mirror(&s.Crossings, &b.crossings)
			}
			if BudgetPolicy(b.policy.Load()) == BudgetNotify {
				fired = append(fired, crossing{b, limit, now})
			}
		}
		b.settleOver()
	}
	return true, fired
}

// uncharge takes u bytes off every budget of l.
func uncharge(l []*budget, u uint64) {
	for _, b := range l {
		b.uncharge(u)
	}
}

// notify runs the callback for the crossings an allocation made.
func notify(fired []crossing) {
	if len(fired) == 0 {
		return
	}
	if f := budgetFunc.Load(); f != nil {
		for _, c := range fired {
			(*f)(c.b.tag, c.limit, c.charged)
		}
	}
}

// usableOf is the usable size of a block of n bytes (0 < n <=
// maxRequest), as the books charge it: its size class, its whole pages
// (large), or its whole OS pages (huge).
func usableOf(n int) uint64 {
	switch {
	case n <= sizeclass.MaxSmall:
		return uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(n))].Size)
	case uintptr(n) >= arena.HugeMin():
		return uint64(arena.HugeSize(uintptr(n)))
	default:
		return (uint64(n) + sizeclass.PageSize - 1) &^ (sizeclass.PageSize - 1)
	}
}

// chargeAlloc charges a block of n bytes to the budgets l of its tag
// (Malloc and Calloc, before making it) and runs the callback of the
// notify budgets it crossed. false: a fail budget refused, nothing is
// charged. A size that makes no block (0) or panics is not charged.
func chargeAlloc(l []*budget, n int) bool {
	if n <= 0 || n > maxRequest {
		return true
	}
	ok, fired := charge(l, usableOf(n))
	notify(fired)
	return ok
}

// allocCharged is the slow path of a block chargeAlloc charged to l: if
// it panics (out of memory), the panic goes on and the charge goes back.
func (t *Tag) allocCharged(n int, l []*budget) (p unsafe.Pointer, zero bool) {
	if n <= 0 || n > maxRequest { // not charged
		return t.alloc(n)
	}
	made := false
	defer func() {
		if !made {
			uncharge(l, usableOf(n))
		}
	}()
	p, zero = t.alloc(n)
	made = true
	return p, zero
}

// freed debits a freed block's usable bytes from its tag's budgets while
// any budget exists (else a load and a branch: it is inlined in Free).
func freed(id uint32, usable uint64) {
	if budgetsOn.Load() {
		freedBudgeted(id, usable)
	}
}

// freedBudgeted is freed's look-up of the tag's budgets (id's handle
// exists: a block was allocated under it).
func freedBudgeted(id uint32, usable uint64) {
	if l := state.byID[id].Load().budgets.Load(); l != nil {
		uncharge(*l, usable)
	}
}

// reallocBudgeted is Realloc's move of the block at p (cap old, usable
// bytes) to a new block of n bytes that holds room bytes (room >= n:
// Realloc's room to grow), for a tag with budgets l: they are charged
// the growth of the usable bytes only (refused: nil, the block
// untouched), the old block's charge passing to the new one, and given
// back a shrink's. (Malloc then Free would charge both blocks for a
// moment, and refuse a growth that fits.)
func (t *Tag) reallocBudgeted(l []*budget, p unsafe.Pointer, old, usable uintptr, n int, room uintptr) []byte {
	if n > maxRequest {
		panic(fmt.Sprintf("alloc: size %d is too large", n))
	}
	// the room is live bytes too: charged as Free will debit it
	nu, ou := usableOf(int(room)), uint64(usable)
	var fired []crossing
	if nu > ou {
		var ok bool
		if ok, fired = charge(l, nu-ou); !ok {
			return nil
		}
	}
	notify(fired)
	made := false
	defer func() {
		if !made && nu > ou { // out of memory: the old block stays, with its own charge
			uncharge(l, nu-ou)
		}
	}()
	q := t.reallocBlock(n, room) // the slow path (Malloc would check and charge again)
	made = true
	nb := unsafe.Slice((*byte)(q), n)
	copy(nb, unsafe.Slice((*byte)(p), min(old, uintptr(n))))
	// Free without the budgets' debit (the slow paths take any block).
	if sp := arena.SpanOf(p); sp == nil || sp.Large() {
		freeBig(sp, p, uint64(old), false)
	} else {
		freeSmallSlow(sp, p, uint64(old), false)
	}
	if nu < ou {
		uncharge(l, ou-nu)
	}
	return nb
}
