// Caches: one per shard of package alloc (a P, or the shared shard). Per
// size class, a cache owns a current span and a list of partial spans,
// whatever the tags of their blocks (TagOf); it allocates and frees their
// blocks without locks or atomics. Frees from other caches go on the
// span's lock-free remote list.

package arena

import (
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/sizeclass"
)

// MaxCaches bounds the cache ids (a cache's id indexes the registry that
// remote frees use to find a span's owner).
const MaxCaches = 1024

// Cache is one shard's spans. Every method except NewCache and Init
// requires the caller's exclusivity over the cache (package alloc: the P
// it is pinned to, or the shared shard's lock).
type Cache struct {
	bins      Bins
	id        int32
	release   uint32        // spans to give back to the arena, linked by next (TakeRelease)
	reclaim   atomic.Uint32 // full spans other caches freed into, linked by rnext (any writer)
	refills   uint32        // Refill calls, pacing the sweep
	lastSweep int64         // when the last sweep ran (ns since the arena began)
}

// Bins are a cache's spans, per class.
type Bins [sizeclass.NumClasses]bin

type bin struct {
	cur     *Span  // never nil: &emptySpan until the first span
	partial uint32 // spans with free blocks (not cur), doubly linked
	aside   uint32 // a span set aside full with blocks still to carve, while partial spans' freed blocks go first (Refill); may be stale
}

var caches [MaxCaches]atomic.Pointer[Cache]

// NewCache makes cache id (0 <= id < MaxCaches, each id once).
func NewCache(id int) *Cache {
	c := new(Cache)
	c.Init(id)
	return c
}

// Init makes c, a zero Cache (one embedded in the caller's shard, so
// that the fast paths reach its spans without loading a pointer), cache
// id: as NewCache.
func (c *Cache) Init(id int) {
	c.id = int32(id)
	for i := range c.bins {
		c.bins[i].cur = &emptySpan
	}
	if !caches[id].CompareAndSwap(nil, c) {
		panic("arena: cache id used twice")
	}
}

// Bins are the cache's spans, for the fast path's Pop.
func (c *Cache) Bins() *Bins { return &c.bins }

// Cur is the span class's blocks are popped from (&emptySpan, which has
// none, before the first).
func (c *Cache) Cur(class int) *Span { return c.bins[class].cur }

// The allocation fast path is Pop's common case, in two parts small
// enough to inline into the caller: CanPopFast says whether the current
// span of the class has a block on its free list and already has tag,
// then PopFast takes the block. Otherwise call Pop, which does the
// rest. Not for debug mode. The caller holds the cache.
//
//	if cur := b.Cur(class); cur.CanPopFast(tag) { p := cur.PopFast(); ... }

// Cur is the class's current span (&emptySpan, which has no blocks,
// before the first).
func (b *Bins) Cur(class int) *Span { return b[class].cur }

// CanPopFast reports whether PopFast may take a block of tag from s: a
// block on the free list (whose link is sane), and s's tag is tag.
func (s *Span) CanPopFast(tag uint32) bool {
	f := s.free
	return f != 0 && s.tag == tag &&
		*(*uint32)(unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift+uintptr(f-1))) <= s.npages<<sizeclass.PageShift
}

// PopFast takes the first block of the free list of s (CanPopFast said
// yes).
func (s *Span) PopFast() unsafe.Pointer {
	p := unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift+uintptr(s.free-1))
	s.free = *(*uint32)(p)
	s.used++
	*(*uint64)(unsafe.Add(p, 8)) = 0 // no longer free: wipe the key
	return p
}

// Pop is the current span's Pop in one call (the fast path's fall-back:
// a tag other than the span's, carving). A block is carved anew only
// while no partial span has freed blocks: those come first (Refill), as
// in the native heap (heap.c, _ta_find_page); carving first held each
// class's high-water mark plus what it had freed since. nil: call the
// cache's Refill. Not for debug mode (Cache.Pop). The caller holds the
// cache.
func (b *Bins) Pop(class int, tag uint32) (unsafe.Pointer, bool) {
	s := b[class].cur
	if f := s.free; f != 0 {
		p := unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift+uintptr(f-1))
		next := *(*uint32)(p)
		if next > s.npages<<sizeclass.PageShift {
			return s.popCorrupt(p)
		}
		s.free = next
		s.used++
		*(*uint64)(unsafe.Add(p, 8)) = 0 // no longer free: wipe the key
		if t := s.tag; t != tag {
			if t == tagMixed && s.used > 1 { // a mixed span's common case, inline
				*s.tagAt((uint64(f-1) * s.magic) >> sizeclass.MagicShift) = uint16(tag)
			} else {
				s.noteTag(p, tag)
			}
		}
		return p, false
	}
	if b[class].partial != 0 {
		return nil, false
	}
	return s.carve(tag)
}

// Pop is Bins.Pop, in debug mode too (PopDebug).
func (c *Cache) Pop(class int, tag uint32) (unsafe.Pointer, bool) {
	if a.bits == nil {
		return c.bins.Pop(class, tag)
	}
	if b := &c.bins[class]; b.cur.free == 0 && b.partial != 0 {
		return nil, false
	}
	return PopDebug(c.bins[class].cur, tag)
}

// The free fast path is two parts small enough to inline into the
// caller: CanFreeFast makes Check's tests (p is a block start of s below
// its carved blocks, capBytes fits, the block does not carry the free
// key) and whether the cache can take the block without more work; if
// so, PushFast does. false: nothing was done; call Check and Free. Not
// for debug mode. The caller holds c.
//
//	if off, ok := c.CanFreeFast(s, p, capBytes); ok { s.PushFast(p, off); ... }

// keepUsed is, by a span's state, the most blocks in use for which a
// free changes the owner's lists (the fast path leaves those to Free): a
// current span stays current down to no blocks, a partial span leaves
// its list at its last block, a full span comes back to a list at any
// free (stateNone: spans the owner does not hold, never fast).
var keepUsed = [4]uint32{stateNone: ^uint32(0), stateCur: 0, statePartial: 1, stateFull: ^uint32(0)}

// CanFreeFast returns p's offset in the small span s, and whether p is a
// block in use of s that c owns, capBytes fits in the block, and s stays
// on its list when the block comes back (not a full span; not the last
// block in use, unless the span is current: current spans are never
// released).
func (c *Cache) CanFreeFast(s *Span, p unsafe.Pointer, capBytes uintptr) (uintptr, bool) {
	off := uintptr(p) - uintptr(a.base) - uintptr(s.page)<<sizeclass.PageShift
	idx := (uint64(off) * s.magic) >> sizeclass.MagicShift
	return off, uintptr(idx)*uintptr(s.size) == off && idx < uint64(s.carved) && capBytes <= uintptr(s.size) &&
		s.owner == c.id && s.used > keepUsed[s.state&3] && *(*uint64)(unsafe.Add(p, 8)) != keyOf(p)
}

// PushFast puts the block at off (CanFreeFast's, which said yes) on the
// owner's free list.
func (s *Span) PushFast(p unsafe.Pointer, off uintptr) {
	*(*uint32)(p) = s.free
	*(*uint64)(unsafe.Add(p, 8)) = keyOf(p)
	s.free = uint32(off) + 1
	s.used--
}

// Refill finds a block of tag when Cur's span has none on its free
// list, without the arena: blocks other caches freed into the current
// span, spans they freed full spans into, the partial list, then blocks
// carved anew (from the current span, or the one set aside for the
// partial list). nil means a new span is needed (NewSmall, then Install).
func (c *Cache) Refill(class int, tag uint32) (p unsafe.Pointer, zero bool) {
	if c.refills++; c.refills%sweepEvery == 0 {
		c.maybeSweep()
	}
	b := &c.bins[class]
	cur := b.cur
	if cur != &emptySpan {
		if cur.collect(); cur.free != 0 {
			return c.pop(cur, tag)
		}
	}
	c.drainReclaim()
	if cur != &emptySpan {
		uncarved := cur.hasFree()       // its free list is empty
		if uncarved && b.partial == 0 { // nothing freed elsewhere: carve
			return c.pop(cur, tag)
		}
		if p, zero = c.retire(cur, tag); p != nil {
			return p, zero
		}
		if uncarved { // blocks still to carve: after the partial spans'
			// (one set aside before, if any, waits full for a free of one
			// of its blocks to bring it back: its uncarved tail costs no
			// memory meanwhile)
			b.aside = cur.page
		}
	}
	b.cur = &emptySpan
	for b.partial != 0 {
		s := spanAt(b.partial)
		listRemove(&b.partial, s)
		s.collect()
		s.state = stateCur
		b.cur = s
		if s.hasFree() { // always, for a span on the partial list
			return c.pop(s, tag)
		}
	}
	if i := b.aside; i != 0 {
		b.aside = 0
		// still set aside: ours, full (a free since took it to the partial
		// list, or the arena), with blocks to carve
		s := spanAt(i)
		if s.state == stateFull && s.owner == c.id && int(s.class) == class && s.hasFree() && s.full.CompareAndSwap(fullYes, fullNo) {
			s.state = stateCur
			b.cur = s
			return c.pop(s, tag)
		}
	}
	return nil, false
}

// sweepEvery paces the sweep: a cache looks at its partial spans of
// every class at most once a purge delay, at one Refill in sweepEvery
// (arena.c's periodic heap walk, _ta_heap_collect_all). A span whose
// blocks came back partly to its owner's list and partly to its remote
// list is empty with no one to see it while its class is not refilled:
// the purge timer takes only spans all of whose blocks came back
// remotely (emptied.go), and goroutines move between Ps, so a span's
// frees are often both (8,192 blocks made on one goroutine and freed on
// four others: every span).
const sweepEvery = 256

func (c *Cache) maybeSweep() {
	now := int64(time.Since(a.start))
	if now-c.lastSweep < int64(a.opt.PurgeDelay) {
		return
	}
	c.lastSweep = now
	c.sweep()
}

// sweep gives back the partial spans whose remote list holds every block
// they have in use (collected, they are empty).
func (c *Cache) sweep() {
	for class := range c.bins {
		b := &c.bins[class]
		for i := b.partial; i != 0; {
			s := spanAt(i)
			i = s.next
			if w := s.remote.Load(); w == 0 || remoteCount(w) != s.used {
				continue
			}
			if s.collect(); s.used == 0 {
				listRemove(&b.partial, s)
				c.toRelease(s)
			}
		}
	}
}

// retire files the exhausted current span as full (on no list: a free
// brings it back). If a remote free raced in, it keeps the span and pops.
// A span with no block out (its collect took back a span the purge timer
// purged, emptied.go: nothing to carve, nothing on its list) goes back to
// the arena instead, whichever collect found it.
func (c *Cache) retire(s *Span, tag uint32) (unsafe.Pointer, bool) {
	for {
		if s.used == 0 {
			c.toRelease(s)
			return nil, false
		}
		s.state = stateFull
		s.full.Store(fullYes)
		if s.remote.Load() == 0 || !s.full.CompareAndSwap(fullYes, fullNo) {
			return nil, false
		}
		s.state = stateCur
		if s.collect(); s.hasFree() {
			return c.pop(s, tag)
		}
		// none: a double free dropped the list (collect noted it), or the
		// span was purged; the loop files it again, or gives it back
	}
}

func (c *Cache) pop(s *Span, tag uint32) (unsafe.Pointer, bool) {
	if a.bits != nil {
		return PopDebug(s, tag)
	}
	return s.Pop(tag)
}

// PopDebug is Pop in debug mode: it records the block in the bitmap and
// checks the poison of a block from the free list.
func PopDebug(s *Span, tag uint32) (unsafe.Pointer, bool) {
	reused := s.free != 0
	p, z := s.Pop(tag)
	if p != nil {
		markAlloc(s, p, reused)
	}
	return p, z
}

// toReclaim pushes full span s, claimed (fullClaimed), on its owner's
// reclaim stack.
func (s *Span) toReclaim() {
	o := caches[s.owner].Load()
	for {
		old := o.reclaim.Load()
		s.rnext = old
		if o.reclaim.CompareAndSwap(old, s.page) {
			return
		}
	}
}

// drainReclaim takes back the full spans other caches freed into: to the
// partial list, or to the arena if every block came back.
func (c *Cache) drainReclaim() {
	for i := c.reclaim.Swap(0); i != 0; {
		s := spanAt(i)
		i = s.rnext
		s.full.Store(fullNo)
		s.collect()
		if s.used == 0 {
			c.toRelease(s)
			continue
		}
		s.state = statePartial
		listPush(&c.bins[s.class].partial, s)
	}
}

// Install gives the cache a new span (from NewSmall) and pops a block of
// tag from the span's class.
func (c *Cache) Install(s *Span, tag uint32) (unsafe.Pointer, bool) {
	s.owner = c.id
	b := &c.bins[s.class]
	if b.cur.hasFree() { // the cache found blocks meanwhile: keep the span for later
		s.state = statePartial
		listPush(&b.partial, s)
		return c.pop(b.cur, tag)
	}
	if cur := b.cur; cur != &emptySpan {
		// cur had no free block, but another cache may have freed one
		// into it meanwhile: then retire keeps it current and pops that
		// block, and the new span waits on the partial list. (Ignoring
		// that block leaked it, and the span with it.)
		if p, zero := c.retire(cur, tag); p != nil {
			s.state = statePartial
			listPush(&b.partial, s)
			return p, zero
		}
	}
	s.state = stateCur
	b.cur = s
	return c.pop(s, tag)
}

// Check validates a small block before Free (outside exclusivity: it may
// panic): p must be a block start of s and capBytes fit in the block. In
// debug mode it also checks and clears the block's bit (a double free is
// caught here, exactly) and poisons the block. off is for Free.
func Check(s *Span, p unsafe.Pointer, capBytes uintptr) (off uint32) {
	off, ok := s.offset(p)
	if !ok || capBytes > uintptr(s.size) || a.bits != nil || *(*uint64)(unsafe.Add(p, 8)) == keyOf(p) {
		checkSlow(s, p, capBytes, off, ok)
	}
	return off
}

// checkSlow is Check's misuse reports and debug work (out of line so that
// Check inlines).
//
//go:noinline
func checkSlow(s *Span, p unsafe.Pointer, capBytes uintptr, off uint32, ok bool) {
	if !ok {
		panic(misuse("Free of %#x: not the start of a block alloc handed out (a sub-slice, or foreign memory)", uintptr(p)))
	}
	if capBytes > uintptr(s.size) {
		panic(misuse("Free of %#x: cap %d exceeds its %d-byte block (not a slice alloc handed out)", uintptr(p), capBytes, s.size))
	}
	if a.bits != nil {
		markFree(s, p, off)
	} else {
		panic(misuse("double Free of %#x (a %d-byte block)", uintptr(p), s.size))
	}
}

// Validate is Check without its debug side effects (Realloc's check); in
// debug mode it checks the block is in use.
func Validate(s *Span, p unsafe.Pointer, capBytes uintptr) {
	off, ok := s.offset(p)
	if !ok || capBytes > uintptr(s.size) {
		panic(misuse("Realloc of %#x: not a block alloc handed out (a sub-slice, or foreign memory)", uintptr(p)))
	}
	if *(*uint64)(unsafe.Add(p, 8)) == keyOf(p) {
		panic(misuse("Realloc of %#x: the block was freed", uintptr(p)))
	}
	if a.bits != nil {
		idx := uint32((uint64(off) * s.magic) >> sizeclass.MagicShift)
		w := (*uint32)(unsafe.Pointer(&a.bits[uintptr(s.page)*512+uintptr(idx/32)*4]))
		if atomic.LoadUint32(w)&(1<<(idx%32)) == 0 {
			panic(misuse("Realloc of %#x: the block was freed", uintptr(p)))
		}
	}
}

// Free returns a small block of span s (off from Check), from any cache.
// A span that empties goes on the release list. false (nothing done,
// misuse noted) for a double free caught by the owner's count.
func (c *Cache) Free(s *Span, p unsafe.Pointer, off uint32) bool {
	if s.owner != c.id {
		if s.pushRemote(p, off) {
			s.toReclaim()
		}
		return true
	}
	if !s.pushLocal(p, off) {
		return false
	}
	switch s.state {
	case stateFull:
		if !s.full.CompareAndSwap(fullYes, fullNo) {
			return true // claimed by a remote free: on the reclaim stack already
		}
		if s.used == 0 {
			c.toRelease(s)
			return true
		}
		s.state = statePartial
		listPush(&c.bins[s.class].partial, s)
	case statePartial:
		if s.used == 0 {
			listRemove(&c.bins[s.class].partial, s)
			c.toRelease(s)
		}
	}
	return true
}

func (c *Cache) toRelease(s *Span) {
	s.state, s.owner = stateNone, -1
	s.next = c.release
	c.release = s.page
}

// TakeRelease takes the list of spans to give back: pass it to
// ReleaseSpans once outside exclusivity.
func (c *Cache) TakeRelease() uint32 {
	r := c.release
	c.release = 0
	return r
}

// ReleaseSpans gives a TakeRelease list back to the arena.
func ReleaseSpans(list uint32) {
	if list == 0 && !a.emptiedKick.Load() {
		return
	}
	a.mu.Lock()
	if a.emptiedKick.Swap(false) && list == 0 {
		purgeLocked(false) // arms the timer for the spans a free emptied (emptied.go)
	}
	for list != 0 {
		s := spanAt(list)
		list = s.next
		if a.bits != nil {
			clear(a.bits[uintptr(s.page)*512:][:512])
		}
		freeSpanLocked(s)
	}
	a.mu.Unlock()
}

// NewSmall takes a span for blocks of class, for Install; its first
// block will be tag's (the span takes other tags' blocks too).
func NewSmall(class int, tag uint32) (*Span, error) {
	cl := &sizeclass.Classes[class]
	a.mu.Lock()
	s, err := allocSpanLocked(cl.Pages, kindSmall)
	a.mu.Unlock()
	if err != nil {
		return nil, err
	}
	s.class, s.size, s.objects, s.tag, s.magic = uint8(class), cl.Size, cl.Objects, tag, cl.Magic
	return s, nil
}

// Class is the size class of a small span.
func (s *Span) Class() int { return int(s.class) }

// markAlloc (debug) records that p is in use, and checks that a reused
// block was not written after it was freed.
func markAlloc(s *Span, p unsafe.Pointer, reused bool) {
	off := uint32(uintptr(p) - uintptr(s.Start()))
	idx := uint32((uint64(off) * sizeclass.Classes[s.class].Magic) >> sizeclass.MagicShift)
	w := (*uint32)(unsafe.Pointer(&a.bits[uintptr(s.page)*512+uintptr(idx/32)*4]))
	if atomic.OrUint32(w, 1<<(idx%32))&(1<<(idx%32)) != 0 {
		noteMisuse(misuse("block %#x handed out twice: the free list is corrupt", uintptr(p)))
	}
	if !reused {
		return
	}
	blk := unsafe.Slice((*byte)(p), s.size)
	for i := 16; i < len(blk); i++ {
		if blk[i] != poison {
			noteMisuse(misuse("block %#x (%d bytes) was written %d bytes in, after it was freed", uintptr(p), s.size, i))
			break
		}
	}
}

// poison fills freed blocks in debug mode (after the link and the key).
const poison = 0xdf

// markFree (debug) checks that p is in use, clears its bit and poisons it.
func markFree(s *Span, p unsafe.Pointer, off uint32) {
	idx := uint32((uint64(off) * sizeclass.Classes[s.class].Magic) >> sizeclass.MagicShift)
	w := (*uint32)(unsafe.Pointer(&a.bits[uintptr(s.page)*512+uintptr(idx/32)*4]))
	if atomic.AndUint32(w, ^uint32(1<<(idx%32)))&(1<<(idx%32)) == 0 {
		panic(misuse("double Free of %#x (a %d-byte block)", uintptr(p), s.size))
	}
	blk := unsafe.Slice((*byte)(p), s.size)
	for i := 16; i < len(blk); i++ {
		blk[i] = poison
	}
}
