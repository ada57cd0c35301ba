// The public API: Malloc, Calloc, Realloc, Free, and the Tag handle's
// fast paths.

package alloc

import (
	"fmt"
	"unsafe"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// empty is what a zero-byte request returns: non-nil, len and cap 0, not
// a block (Free ignores it, and nothing is counted).
var empty = []byte{}

// maxRequest bounds a request (beyond it, a panic): far below what
// rounding up to pages could overflow.
const maxRequest = 1 << 46

// Malloc returns n bytes (len and cap n) charged to tag ("" is untagged),
// off the Go heap: the garbage collector neither scans nor counts them,
// so they must not hold Go pointers. The contents are undefined; Free
// them. Malloc(0) returns an empty slice that is not a block. It panics
// on a negative or absurd n, on a bad tag name (1..63 bytes, no NUL), and
// when memory runs out. It returns nil (and only then) when a fail
// budget covering tag refuses the block (SetBudget).
func Malloc(n int, tag string) []byte { return tagOf(tag).Malloc(n) }

// Calloc is Malloc with the bytes zeroed (nil as Malloc's).
func Calloc(n int, tag string) []byte { return tagOf(tag).Calloc(n) }

// Malloc is the package's Malloc under the handle's tag: no name lookup.
// Under a fail budget it returns nil when the block would take the
// budget's charge past its limit (SetBudget).
func (t *Tag) Malloc(n int) []byte {
	l := t.budgets.Load()
	if l != nil && !chargeAlloc(*l, n) { // a budget covers the tag, and refused (budget.go)
		return nil
	}
	if uint(n-1) < sizeclass.MaxSmall { // (no shard is pinned in debug mode)
		c := classOf(n)
		if s := pinned(procPin()); s != nil {
			raceAcquire(unsafe.Pointer(s))
			if ch := s.ctrs[t.id/ctrChunkTags&127].Load(); ch != nil {
				ctr := &ch[t.id%ctrChunkTags]
				if cur := s.cache.Bins().Cur(c); cur.CanPopFast(t.id) {
					p := cur.PopFast()
					countAlloc(ctr, cur.Size(), n)
					raceRelease(unsafe.Pointer(s))
					procUnpin()
					return unsafe.Slice((*byte)(p), n)
				}
				if p, _ := s.cache.Bins().Pop(c, t.id); p != nil {
					countAlloc(ctr, sizeclass.Classes[c].Size, n)
					raceRelease(unsafe.Pointer(s))
					procUnpin()
					return unsafe.Slice((*byte)(p), n)
				}
			}
			raceRelease(unsafe.Pointer(s))
		}
		procUnpin()
	}
	if l != nil { // charged: given back if the slow path panics (budget.go)
		p, _ := t.allocCharged(n, *l)
		return unsafe.Slice((*byte)(p), n)
	}
	p, _ := t.alloc(n)
	return unsafe.Slice((*byte)(p), n)
}

// Calloc is Malloc with the bytes zeroed (memory known to be zero, fresh
// from the OS, is not cleared again); nil as Malloc's under a fail budget.
func (t *Tag) Calloc(n int) []byte {
	l := t.budgets.Load()
	if l != nil && !chargeAlloc(*l, n) {
		return nil
	}
	if uint(n-1) < sizeclass.MaxSmall { // (no shard is pinned in debug mode)
		c := classOf(n)
		if s := pinned(procPin()); s != nil {
			raceAcquire(unsafe.Pointer(s))
			if ch := s.ctrs[t.id/ctrChunkTags&127].Load(); ch != nil {
				ctr := &ch[t.id%ctrChunkTags]
				if cur := s.cache.Bins().Cur(c); cur.CanPopFast(t.id) {
					p := cur.PopFast()
					countAlloc(ctr, cur.Size(), n)
					raceRelease(unsafe.Pointer(s))
					procUnpin()
					b := unsafe.Slice((*byte)(p), n)
					clear(b) // a block from the free list: used before
					return b
				}
				if p, zero := s.cache.Bins().Pop(c, t.id); p != nil {
					countAlloc(ctr, sizeclass.Classes[c].Size, n)
					raceRelease(unsafe.Pointer(s))
					procUnpin()
					b := unsafe.Slice((*byte)(p), n)
					if !zero {
						clear(b)
					}
					return b
				}
			}
			raceRelease(unsafe.Pointer(s))
		}
		procUnpin()
	}
	var p unsafe.Pointer
	var zero bool
	if l != nil {
		p, zero = t.allocCharged(n, *l)
	} else {
		p, zero = t.alloc(n)
	}
	b := unsafe.Slice((*byte)(p), n)
	if !zero {
		clear(b)
	}
	return b
}

// countAlloc charges a small block of usable bytes, n asked for, to a
// shard's counters of its tag (the caller is on the shard).
func countAlloc(ctr *books.Counters, usable uint32, n int) {
	books.Add(&ctr.AllocBytes, uint64(usable))
	books.Add(&ctr.AllocBlocks, 1)
	books.Add(&ctr.AllocReq, uint64(n))
}

// classOf is sizeclass.ClassOf for 1 <= n <= MaxSmall, without its test
// of 0.
func classOf(n int) int {
	if n <= 128 {
		return (n - 1) >> 4
	}
	return sizeclass.ClassOf(uint32(n))
}

// alloc is the slow path of every size: a new span, a large or huge
// block, the first use of a tag on a shard, debug mode, misuse checks.
func (t *Tag) alloc(n int) (unsafe.Pointer, bool) {
	switch {
	case n == 0:
		return unsafe.Pointer(unsafe.SliceData(empty)), true
	case n < 0:
		panic(fmt.Sprintf("alloc: negative size %d", n))
	case n > maxRequest:
		panic(fmt.Sprintf("alloc: size %d is too large", n))
	case n <= sizeclass.MaxSmall:
		return t.allocSmall(sizeclass.ClassOf(uint32(n)), n)
	case uintptr(n) >= arena.HugeMin():
		p, usable, zero, err := arena.AllocHuge(uintptr(n), t.id)
		if err != nil {
			panic(err)
		}
		t.count(uint64(usable), uint64(n))
		return p, zero
	default:
		sp, err := arena.AllocLarge(uintptr(n), t.id)
		if err != nil {
			panic(err)
		}
		t.count(uint64(sp.Bytes()), uint64(n))
		return sp.Start(), sp.Zero()
	}
}

// count charges a block from the slow path to the tag, samples its peak
// and publishes the arena's figures.
func (t *Tag) count(usable, req uint64) {
	s, ctr := acquireFor(t.id)
	books.Add(&ctr.AllocBytes, usable)
	books.Add(&ctr.AllocBlocks, 1)
	books.Add(&ctr.AllocReq, req)
	s.release()
	samplePeak(t.id)
	publish()
}

// allocSmall is the slow path of a small block of class c for a request
// of n bytes: n's own class (alloc), or a larger one Realloc grows a
// block into (its grid).
func (t *Tag) allocSmall(c, n int) (unsafe.Pointer, bool) {
	var fresh *arena.Span // a new span, carried to whichever shard we are on next
	for {
		s, ctr := acquireFor(t.id)
		var p unsafe.Pointer
		var zero bool
		if fresh != nil {
			p, zero = s.cache.Install(fresh, t.id)
			fresh = nil
		} else {
			p, zero = s.cache.Pop(c, t.id)
		}
		if p == nil {
			p, zero = s.cache.Refill(c, t.id)
		}
		if p != nil {
			books.Add(&ctr.AllocBytes, uint64(sizeclass.Classes[c].Size))
			books.Add(&ctr.AllocBlocks, 1)
			books.Add(&ctr.AllocReq, uint64(n))
		}
		rel := s.cache.TakeRelease()
		s.release()
		arena.ReleaseSpans(rel)
		if err := arena.TakeMisuse(); err != nil {
			panic(err)
		}
		if p != nil {
			samplePeak(t.id)
			return p, zero
		}
		var err error
		if fresh, err = arena.NewSmall(c, t.id); err != nil {
			panic(err)
		}
		publish()
	}
}

// Free returns a block from Malloc, Calloc or Realloc (from any
// goroutine; the block's tag and its budgets are debited). A slice with cap 0 (nil, or
// Malloc(0)'s) is ignored. It panics on a slice alloc did not hand out
// or not at a block's start, and on a double free: always for large and
// huge blocks, for small ones when the span shows it (its count of
// blocks in use), and always in debug mode.
func Free(b []byte) {
	if cap(b) == 0 {
		return
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	sp := arena.SpanOf(p)
	if sp == nil || sp.Large() {
		freeBig(sp, p, uint64(cap(b)), true)
		return
	}
	if s := pinned(procPin()); s != nil { // (none in debug mode)
		raceAcquire(unsafe.Pointer(s))
		if off, ok := s.cache.CanFreeFast(sp, p, uintptr(cap(b))); ok {
			sp.PushFast(p, off)
			// The block is on this P's free list now, and only this P
			// (pinned here) hands it out again: its tag still reads.
			id := sp.TagOf(p)
			if ch := s.ctrs[id/ctrChunkTags&127].Load(); ch != nil {
				ctr := &ch[id%ctrChunkTags]
				usable := uint64(sp.Size())
				books.Add(&ctr.FreeBytes, usable)
				books.Add(&ctr.FreeBlocks, 1)
				books.Add(&ctr.FreeReq, uint64(cap(b)))
				raceRelease(unsafe.Pointer(s))
				procUnpin()
				freed(id, usable) // the tag's budgets, if any (budget.go)
				return
			}
			raceRelease(unsafe.Pointer(s))
			procUnpin()
			countFree(id, uint64(sp.Size()), uint64(cap(b))) // the tag's first use on this shard
			return
		}
		raceRelease(unsafe.Pointer(s))
	}
	procUnpin()
	freeSmallSlow(sp, p, uint64(cap(b)), true)
}

// countFree debits a freed block from tag id's books (and budgets), on
// whichever shard the caller is on (Free's fast path when the shard had
// no counters for the tag yet).
func countFree(id uint32, usable, req uint64) {
	s, ctr := acquireFor(id)
	books.Add(&ctr.FreeBytes, usable)
	books.Add(&ctr.FreeBlocks, 1)
	books.Add(&ctr.FreeReq, req)
	s.release()
	freed(id, usable)
}

// freeSmallSlow is Free's slow path for small blocks: misuse checks
// (which panic), debug mode, lists to update, spans to release, first use
// of the tag on this shard. budgets: debit the tag's budgets too (not
// for Realloc's move, which passes the charge to the new block).
func freeSmallSlow(sp *arena.Span, p unsafe.Pointer, req uint64, budgets bool) {
	off := arena.Check(sp, p, uintptr(req))
	// The block's tag and size, read before it can be handed out again
	// (or its span released).
	id, usable := sp.TagOf(p), uint64(sp.BlockSize())
	s, ctr := acquireFor(id)
	ok := s.cache.Free(sp, p, off)
	if ok {
		books.Add(&ctr.FreeBytes, usable)
		books.Add(&ctr.FreeBlocks, 1)
		books.Add(&ctr.FreeReq, req)
	}
	rel := s.cache.TakeRelease()
	s.release()
	arena.ReleaseSpans(rel)
	if !ok {
		panic(arena.TakeMisuse())
	}
	if rel != 0 {
		publish()
	}
	if budgets {
		freed(id, usable)
	}
}

// freeBig frees a large block (span sp) or a huge one (sp nil); budgets
// as freeSmallSlow's.
func freeBig(sp *arena.Span, p unsafe.Pointer, req uint64, budgets bool) {
	var usable uint64
	var id uint32
	if sp != nil {
		arena.CheckLarge(sp, p)
		if req > uint64(sp.Bytes()) {
			panic(fmt.Sprintf("alloc: Free of %#x: cap %d exceeds its block (not a slice alloc handed out)", uintptr(p), req))
		}
		usable, id = uint64(sp.Bytes()), sp.Tag()
		arena.FreeLarge(sp, p) // checks again under the lock: a racing double free panics here
	} else {
		u, tag, ok := arena.FreeHuge(p)
		if !ok {
			panic(fmt.Sprintf("alloc: Free of %#x: not a block alloc handed out (foreign memory, a sub-slice, or a double Free)", uintptr(p)))
		}
		usable, id = uint64(u), tag
	}
	s, ctr := acquireFor(id)
	books.Add(&ctr.FreeBytes, usable)
	books.Add(&ctr.FreeBlocks, 1)
	books.Add(&ctr.FreeReq, req)
	s.release()
	publish()
	if budgets {
		freed(id, usable)
	}
}

// Realloc resizes a block to n bytes, keeping its tag and its first
// min(cap(b), n) bytes; the result has len and cap n (the bytes past
// cap(b) are not cleared). It follows the native realloc's rules:
//
//   - A small block (at most 512 KiB, sizeclass.MaxSmall) stays when n
//     fits it and is at least half of it (usable/2 <= n <= usable, usable
//     its class's size).
//   - A large block (more than 512 KiB, under the huge threshold,
//     TAGALLOC_HUGE_THRESHOLD, 256 MiB by default: whole 64 KiB pages)
//     stays when n needs the same pages or grows into its room (cap(b) <=
//     n <= usable); else, for n over 512 KiB and under the threshold, it
//     is resized where it lies: shrunk to n's pages, the rest freed, or
//     grown over the free pages right after it.
//   - A huge block (the threshold or more: a mapping of its own) stays
//     when n fits it and is at least half of it or grows into it (n >=
//     cap(b)); else, for n over 512 KiB, it is remapped (mremap: its
//     bytes are not copied) to n's OS pages, an eighth more if it grows.
//
// A block kept or resized where it lies is counted its new usable size,
// n requested. Otherwise the block moves and b must not be used again:
// to a block for n bytes, except that a small block of 1 KiB or more
// growing past its usable size (to at most 512 KiB) moves to the
// smallest class of 1, 1.25, 1.5 or 1.75 times a power of two that holds
// n; and a large block growing past its pages moves to pages for a
// quarter more than it had (unless that is less than n, or would make it
// huge), which it then grows into in place. Realloc of a cap 0 slice is
// Malloc(n, ""); Realloc(b, 0) frees b and returns an empty slice. Misuse
// panics as in Free. When a fail budget covering the tag refuses the
// growth (SetBudget), Realloc returns nil and b is untouched, still
// allocated and charged.
func Realloc(b []byte, n int) []byte {
	if cap(b) == 0 {
		return Malloc(n, "")
	}
	if n < 0 {
		panic(fmt.Sprintf("alloc: negative size %d", n))
	}
	if n == 0 {
		Free(b)
		return empty
	}
	p := unsafe.Pointer(unsafe.SliceData(b))
	old := uintptr(cap(b))
	var usable uintptr
	var id uint32
	inPlace, small, large := false, false, false
	sp := arena.SpanOf(p)
	if sp == nil {
		u, tag, ok := arena.HugeOf(p)
		if !ok {
			panic(fmt.Sprintf("alloc: Realloc of %#x: not a block alloc handed out (foreign memory, a sub-slice, or freed)", uintptr(p)))
		}
		usable, id = u, tag
		// Stay when n fits and wastes less than half, or grows into the
		// room a remap gave the block (below): huge.c's _ta_huge_stays.
		need := arena.HugeSize(uintptr(n))
		inPlace = n > sizeclass.MaxSmall && need <= usable && (need >= usable/2 || uintptr(n) >= old)
	} else if sp.Large() {
		arena.CheckLarge(sp, p)
		usable, id, large = sp.Bytes(), sp.Tag(), true
		// Stay when n needs the same pages, or grows into the room a move
		// gave the block (below; cap(b) is the size last asked): the
		// native realloc's _ta_large_stays.
		inPlace = n > sizeclass.MaxSmall && uintptr(n) < arena.HugeMin() &&
			(usableOf(n) == uint64(usable) || (uintptr(n) >= old && uintptr(n) <= usable))
	} else {
		arena.Validate(sp, p, old)
		usable, id, small = sp.BlockSize(), sp.TagOf(p), true
		// Stay if it fits and would not waste more than half (the native
		// realloc's rule, _ta_realloc_rest): a block grown onto the grid
		// (below) then grows into its room without a move.
		inPlace = uintptr(n) <= usable && uintptr(n) >= usable/2
	}
	if old > usable {
		panic(fmt.Sprintf("alloc: Realloc of %#x: cap %d exceeds its block (not a slice alloc handed out)", uintptr(p), old))
	}
	if inPlace { // countResize's case of the same usable bytes, without its call: the common one
		s, ctr := acquireFor(id)
		addResizeReq(ctr, old, n)
		s.release()
		return unsafe.Slice((*byte)(p), n)
	}
	t := state.byID[id].Load()
	l := t.budgets.Load() // the budgets are charged the growth only (budget.go)
	if !small && n > sizeclass.MaxSmall && (!large || uintptr(n) < arena.HugeMin()) {
		// A large block resized where it lies (its pages cut, or joined
		// by the free ones after it), a huge one remapped.
		if q, refused := resizeBig(sp, p, id, l, old, usable, n); q != nil {
			return unsafe.Slice((*byte)(q), n)
		} else if refused {
			return nil
		}
	}
	room := uintptr(n) // what the new block holds: n, or more to grow into
	switch {
	case small && uintptr(n) > usable && n <= sizeclass.MaxSmall && usable >= reallocGridMin:
		room = uintptr(sizeclass.Classes[sizeclass.ClassOf(uint32(n))|1].Size) // the grid's class
	case large && uintptr(n) > usable:
		room = reallocRoom(usable, n)
	}
	if l != nil {
		return t.reallocBudgeted(*l, p, old, usable, n, room)
	}
	var nb []byte
	if room > uintptr(n) {
		nb = unsafe.Slice((*byte)(t.reallocBlock(n, room)), n)
	} else {
		nb = t.Malloc(n)
	}
	copy(nb, unsafe.Slice((*byte)(p), min(old, uintptr(n))))
	Free(unsafe.Slice((*byte)(p), old))
	return nb
}

// resizeBig resizes the large block sp (or, sp nil, the huge one) at p,
// of tag id, cap old and usable bytes, for n bytes where it lies, as the
// native realloc does: a large block's pages past n's go back to the
// arena, or the free pages after it join it (arena.ResizeLarge); a huge
// block moves to a mapping of n's OS pages with mremap, an eighth more
// if it grows (arena.ResizeHuge: page tables move, bytes are not copied;
// the room makes a buffer grown a page at a time remap every eighth).
// The budgets l, if any, are asked for the growth first; refused: nil
// and refused true, the block untouched. nil and refused false: it
// cannot (the caller moves it). The books count the block's new usable
// bytes, n requested.
func resizeBig(sp *arena.Span, p unsafe.Pointer, id uint32, l *[]*budget, old, usable uintptr, n int) (q unsafe.Pointer, refused bool) {
	var fired []crossing
	var admit func(extra uintptr) bool
	if l != nil {
		admit = func(extra uintptr) bool {
			var ok bool
			ok, fired = charge(*l, uint64(extra))
			refused = !ok
			return ok
		}
	}
	nu := uintptr(0)
	if sp != nil {
		if nu = arena.ResizeLarge(sp, p, uintptr(n), admit); nu != 0 {
			q = p
		}
	} else {
		if nu = arena.HugeSize(uintptr(n)); nu > usable {
			nu = arena.HugeSize(nu + nu/8)
		}
		q = arena.ResizeHuge(p, nu, admit)
	}
	notify(fired)
	if q == nil {
		return nil, refused
	}
	if l != nil && nu < usable {
		uncharge(*l, uint64(usable-nu))
	}
	countResize(id, uint64(usable), uint64(nu), old, n)
	return q, false
}

// addResizeReq counts a resize's request: old bytes asked before, freed,
// and n asked again (the stats' requested bytes).
func addResizeReq(ctr *books.Counters, old uintptr, n int) {
	books.Add(&ctr.AllocReq, uint64(n))
	books.Add(&ctr.FreeReq, uint64(old))
}

// countResize counts a block of tag id resized where it lies, from ou
// usable bytes to nu, asked for n bytes instead of old: a growth is
// allocated bytes, a shrink freed ones, and the request is counted as
// freed and asked again (the native _ta_count_resize).
func countResize(id uint32, ou, nu uint64, old uintptr, n int) {
	s, ctr := acquireFor(id)
	if nu > ou {
		books.Add(&ctr.AllocBytes, nu-ou)
	} else if nu < ou {
		books.Add(&ctr.FreeBytes, ou-nu)
	}
	addResizeReq(ctr, old, n)
	s.release()
	if nu != ou {
		if nu > ou {
			samplePeak(id)
		}
		publish()
	}
}

// reallocRoom is the bytes a large block of usable bytes growing to n
// moves into: a quarter more than it had (tcmalloc's rule, and the native
// realloc's), so a buffer grown a page at a time moves every quarter and
// not at every page; n itself if that is more, or if the room would make
// the block huge (HugeMin or more: a mapping of its own, which has its
// own room, resizeBig).
//
// The native realloc moves a block growing past 8 MiB to a mapping of its
// own (TA_REALLOC_MAP), and its cache of freed mappings gives a growing
// buffer a mapping with room, keeping the rest cached for it. Taken here
// without those pieces (714fd34, before the Go arena had a cache), a
// buffer grown from 100 KiB to 64 MiB and freed, 20 times over, faulted
// its 64 MiB in again each time (40.5 ms and 16.4k faults a cycle,
// against 14.4 ms and 1.9k with the arena keeping its spans); so here
// blocks under HugeMin stay in the arena, where they grow where they lie
// (1.5 ms and 823 faults a cycle).
func reallocRoom(usable uintptr, n int) uintptr {
	room := max(usable+usable/4, uintptr(n))
	if room >= arena.HugeMin() {
		return uintptr(n)
	}
	return room
}

// reallocBlock is the slow path of Realloc's new block for n bytes that
// holds room bytes (room >= n; no budget checked or charged): room's
// small class, the pages of room, or n's huge block.
func (t *Tag) reallocBlock(n int, room uintptr) unsafe.Pointer {
	switch {
	case room <= sizeclass.MaxSmall:
		q, _ := t.allocSmall(sizeclass.ClassOf(uint32(room)), n)
		return q
	case room > uintptr(n):
		sp, err := arena.AllocLarge(room, t.id)
		if err != nil {
			panic(err)
		}
		t.count(uint64(sp.Bytes()), uint64(n))
		return sp.Start()
	default:
		q, _ := t.alloc(n)
		return q
	}
}

// reallocGridMin is the usable size from which a small block Realloc
// grows out of its class moves on the grid of four classes a doubling
// (1, 1.25, 1.5 and 1.75 times a power of two: the odd classes,
// sizeclass.ClassOf(n)|1, mimalloc's and jemalloc's steps) rather than
// to n's class. The small classes are eight a doubling from 256 bytes,
// so a buffer grown a little at a time moved eight times a doubling,
// copying 11 times its final size (the native realloc_chain 8 2: 152M
// instructions of copying, 96M on the grid, mimalloc's 86M). A quarter
// more room (tcmalloc's rule) overshoots the limits programs set at
// powers of two: redis's 8 KiB list nodes grew from 7680 to 10240
// bytes, 12% more peak RSS; on the grid they stop at 8192. The last
// small class (512 KiB) is odd, so the grid never leaves the small
// classes. Below 1 KiB copies are short, and the room would be kept by
// every small string a program grows once (with a quarter more room from
// 1 or 256 bytes, the native realloc_chain faulted 10.8-15.8k times
// against 9.6k from 1 KiB): the native TA_REALLOC_ROOM_MIN
// (cgo/src/alloc.c, whose rule this is).
const reallocGridMin = 1024
