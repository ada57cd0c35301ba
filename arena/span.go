// Spans: the out-of-line descriptor of a run of pages, and the block
// operations on a small span (carve, pop, local and remote free, collect).

package arena

import (
	"sync/atomic"
	"unsafe"

	"github.com/tagalloc/tagalloc/sizeclass"
)

// Span kinds (Span.kind). Every page has a descriptor; a span's first
// page is its head, and its other pages record how far back the head is.
const (
	kindNone     = iota // never handed out, or an inner page of a free span
	kindFree            // head of a free span
	kindFreeTail        // last page of a free span of 2+ pages (headOff back to the head)
	kindSmall           // head of a span of blocks of one class
	kindLarge           // head of a span holding one large block
	kindInner           // a page inside a span in use (headOff back to the head)
)

// Span flags (free spans, and spans in use for the zero and tags flags).
const (
	flagDirty = 1 // free span: resident, not yet purged
	flagZero  = 2 // every byte of the span is zero (fresh or purged)
	flagTags  = 4 // the span's slots of the tag map may be resident (a span was mixed there): purge them too
)

// Owner states of a small span (Span.state), kept by its owning cache.
const (
	stateNone    = iota
	stateCur     // the bin's current span
	statePartial // on the bin's partial list: has free blocks
	stateFull    // on no list: no free block when last looked at
)

// full values: how a full span gets back to its owner.
const (
	fullNo      = 0 // on a list (or not small)
	fullYes     = 1 // full, on no list; a remote free must report it
	fullClaimed = 2 // a remote free pushed it on the owner's reclaim stack
)

// Span is a page descriptor, in a mapping of its own (docs/ARCHITECTURE.md, D4: an
// overrun of a block cannot reach it). It holds no Go pointers: links are
// page indices (0 is never a span), blocks are byte offsets in the span.
// 128 bytes, so neighbouring spans' descriptors share no cache line.
//
// Who writes what:
//
//	free, used, carved, state, next/prev (in use): the owning cache, under
//	    its exclusivity (a pinned P or the shared cache's lock).
//	remote, full, rnext: any freeing goroutine (atomic, lock-free).
//	tag of a small span, and its blocks' entries in the tag map: the
//	    owning cache; any freeing goroutine reads them (TagOf).
//	everything else: the arena lock holder, or the owner while it holds
//	    the span (class, owner are set before the span is published).
//
// Invariant (small span in use): used == carved - |free list|, and
// |remote list| <= used (blocks freed by other caches count as used
// until the owner collects them).
type Span struct {
	free    uint32 // owner: offset+1 of the first free block, 0 if none
	used    uint32 // owner: blocks handed out, not collected back
	carved  uint32 // owner: blocks carved so far; [carved, objects) never used
	objects uint32 // blocks that fit (small)
	size    uint32 // block size (small), 0 (large)
	npages  uint32 // span length in pages (heads)
	headOff uint32 // pages back to the head (inner and tail pages)
	page    uint32 // index of the first page (heads)
	tag     uint32 // opaque to the arena: the tag of every block in use, or tagMixed (small: see TagOf)
	owner   int32  // cache id owning a small span, -1 if none
	next    uint32 // free-span bin list, or the owner's partial list
	prev    uint32
	dnext   uint32 // dirty list (free spans)
	dprev   uint32
	rnext   uint32 // the owner's reclaim stack
	class   uint8  // size class (small)
	kind    uint8  // kind*
	flags   uint8  // flag*
	state   uint8  // state* (owner)
	freedAt int64  // ns (monotonic, since the arena began) the span became free (dirty spans)
	full    atomic.Uint32
	_       uint32
	remote  atomic.Uint64 // offset+1 of the first block freed by another cache (lock-free stack)
	magic   uint64        // the class's Magic: offset*magic>>MagicShift is the block index
	_       [32]byte
}

var _ [128 - unsafe.Sizeof(Span{})]byte // Span must be exactly 128 bytes
var _ [unsafe.Sizeof(Span{}) - 128]byte

// A free small block holds, besides its link (bytes 0-3), its key in
// bytes 8-15: freeKey, a random word, xor the block's address (keyOf).
// Free finds it there on a double free (one load and compare; a block
// whose data happens to equal its key is the odds of 2^-64). Pop wipes
// it. The address makes a key good for its own block only: a program
// that copies bytes it never wrote (a large block's, whose pages held
// freed small blocks; Realloc copies them too when it moves a block)
// carries the keys of blocks that were there, and a plain key that
// landed at a block's bytes 8-15 made its Free report a double free
// (a test growing and shrinking blocks of 1 byte to 12 MiB, which
// writes a byte a page, hit it within 20 runs).
var freeKey uint64

// keyOf is the key of the free block at p.
func keyOf(p unsafe.Pointer) uint64 { return freeKey ^ uint64(uintptr(p)) }

// emptySpan has no blocks: a bin's current span before it has one, so the
// fast path needs no nil check.
var emptySpan = Span{owner: -1}

// Bytes is the span's length.
func (s *Span) Bytes() uintptr { return uintptr(s.npages) << sizeclass.PageShift }

// Start is the address of the span's first byte.
func (s *Span) Start() unsafe.Pointer {
	return unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift)
}

// Tag is the opaque tag of a large span's block. (A small span's blocks
// may have tags of their own: TagOf.)
func (s *Span) Tag() uint32 { return s.tag }

// Block tags. A small span is shared by every tag its cache allocates
// under; a tag costs the caller counters, never spans. While every block
// in use has one tag, the span's tag field says it (one load on Free).
// When a block of a second tag is handed out, the span turns mixed: the
// tags of its carved blocks are written to its slot of the tag map (a
// uint16 per block, out of line, in a reservation of its own that costs
// memory only where touched), and the field says tagMixed. A span whose
// blocks have all come back takes the tag of the next block handed out,
// single-tag again (unless it carved more than unmixMax blocks). Tags of
// small blocks must fit in 16 bits (alloc's ids are below 4098).
const tagMixed = ^uint32(0)

// tagSlotBytes is the tag map's slot per page: a uint16 for each of the
// most blocks a page can hold (the smallest class, 16 B). A span of n
// pages owns the n slots of its pages, so its blocks' tags never overlap
// another span's.
const tagSlotBytes = sizeclass.PageSize / sizeclass.MinAlign * 2

// tagAt is the entry of block idx in the span's slot of the tag map.
func (s *Span) tagAt(idx uint64) *uint16 {
	return (*uint16)(unsafe.Add(a.tags, uintptr(s.page)*tagSlotBytes+uintptr(idx)*2))
}

// TagOf is the tag of the block at p, a block of the small span s that
// the caller holds (so its tag cannot change meanwhile). p need not have
// been checked: any address inside s reads an entry of its own slot.
func (s *Span) TagOf(p unsafe.Pointer) uint32 {
	if t := atomic.LoadUint32(&s.tag); t != tagMixed {
		return t
	}
	return s.mixedTag(p)
}

func (s *Span) mixedTag(p unsafe.Pointer) uint32 {
	off := uint64(uintptr(p) - uintptr(s.Start()))
	if off >= uint64(s.npages)<<sizeclass.PageShift {
		return 0 // not in s: the caller's checks will say so
	}
	return uint32(*s.tagAt((off * s.magic) >> sizeclass.MagicShift))
}

// unmixMax bounds the blocks a mixed span may have carved to become
// single-tag again when it empties: mixing it again writes the tags of
// every carved block, and two tags alternating on a span that empties
// between them would pay that each time. A span past it stays mixed (a
// store per Pop, a load per Free) until it goes back to the arena.
const unmixMax = 256

// noteTag records that p, just handed out by the owner, has tag (the
// span's tag field said otherwise).
func (s *Span) noteTag(p unsafe.Pointer, tag uint32) {
	// p is the only block in use (blocks freed by other caches count
	// until collected): the span takes its tag. No Free reads the field
	// meanwhile (none holds a block of s), so a plain store will do: p's
	// Free sees it through whatever handed p over.
	if s.used == 1 && (s.tag != tagMixed || s.carved <= unmixMax) {
		s.tag = tag
		return
	}
	if old := s.tag; old != tagMixed {
		slot := unsafe.Slice(s.tagAt(0), s.carved)
		for i := range slot {
			slot[i] = uint16(old)
		}
		s.flags |= flagTags
		atomic.StoreUint32(&s.tag, tagMixed) // after the slot: a Free that sees mixed reads it whole
	}
	*s.tagAt((uint64(uintptr(p)-uintptr(s.Start())) * s.magic) >> sizeclass.MagicShift) = uint16(tag)
}

// Large reports whether the span holds one large block (else blocks of a
// class).
func (s *Span) Large() bool { return s.kind == kindLarge }

// Zero reports whether the span's memory is known to be zero (large
// spans: fresh or purged memory, so Calloc need not clear it).
func (s *Span) Zero() bool { return s.flags&flagZero != 0 }

// Size is the block size of a small span.
func (s *Span) Size() uint32 { return s.size }

// BlockSize is the usable size of the span's blocks (large: the span).
func (s *Span) BlockSize() uintptr {
	if s.kind == kindLarge {
		return s.Bytes()
	}
	return uintptr(s.size)
}

// Pop takes a block of tag for the owner: the free list first (LIFO: the
// block freed last is warm in cache), else the next uncarved block. zero
// is true for a never-used block of a span that was zero. nil if the
// span is exhausted.
func (s *Span) Pop(tag uint32) (p unsafe.Pointer, zero bool) {
	if f := s.free; f != 0 {
		p = unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift+uintptr(f-1))
		next := *(*uint32)(p)
		if next > s.npages<<sizeclass.PageShift {
			return s.popCorrupt(p)
		}
		s.free = next
		s.used++
		*(*uint64)(unsafe.Add(p, 8)) = 0 // no longer free: wipe the key
		if s.tag != tag {
			s.noteTag(p, tag)
		}
		return p, false
	}
	return s.carve(tag)
}

// carve hands out the next never-used block (Pop's second half, out of
// line so that Pop stays small).
func (s *Span) carve(tag uint32) (unsafe.Pointer, bool) {
	if s.carved >= s.objects {
		return nil, false
	}
	p := unsafe.Add(a.base, uintptr(s.page)<<sizeclass.PageShift+uintptr(s.carved)*uintptr(s.size))
	s.carved++
	s.used++
	if s.tag != tag {
		s.noteTag(p, tag)
	}
	if s.flags&flagZero != 0 {
		return p, true
	}
	*(*uint64)(unsafe.Add(p, 8)) = 0 // reused memory may hold a stale key
	return p, false
}

//go:noinline
func (s *Span) popCorrupt(p unsafe.Pointer) (unsafe.Pointer, bool) {
	corruptList(s, p) // drops the rest of the list: leaks, but hands out nothing wrong
	s.free = 0
	return nil, false
}

// offset is p's offset in the small span s, checked to be a block start
// (cheap: a multiply and a compare).
func (s *Span) offset(p unsafe.Pointer) (uint32, bool) {
	off := uintptr(p) - uintptr(s.Start())
	idx := (uint64(off) * s.magic) >> sizeclass.MagicShift
	if off >= uintptr(s.carved)*uintptr(s.size) || uintptr(idx)*uintptr(s.size) != off {
		return 0, false
	}
	return uint32(off), true
}

// pushLocal returns a block to its owner's free list; false (and nothing
// done) if the span has no block in use: a double free.
func (s *Span) pushLocal(p unsafe.Pointer, off uint32) bool {
	if s.used == 0 {
		noteMisuse(misuse("double Free of %#x (its span has no blocks in use)", uintptr(p)))
		return false
	}
	*(*uint32)(p) = s.free
	*(*uint64)(unsafe.Add(p, 8)) = keyOf(p)
	s.free = off + 1
	s.used--
	return true
}

// The remote word: the offset+1 of the first block of the list other
// caches freed into (bits 0-31), how many blocks it holds (bits 32-47),
// and, for a span every block of which is on it, its state as the purge
// timer sees it (emptied.go; arena.c's TA_XF_SEEN, PURGING, PURGED). A
// push clears the state (a double free then: the count passes the
// span's blocks).
const (
	remoteCountShift = 32
	remoteCountMask  = 0xffff
	remoteSeen       = 1 << 56
	remotePurging    = 1 << 57
	remotePurged     = 1 << 58
)

func remoteHead(w uint64) uint32  { return uint32(w) }
func remoteCount(w uint64) uint32 { return uint32(w>>remoteCountShift) & remoteCountMask }

// remoteGone says the list went with the span's pages (purged, or being
// purged): every block came back, and none may be read.
func remoteGone(w uint64) bool { return w&(remotePurging|remotePurged) != 0 }

// pushRemote returns a block from another cache: a lock-free push (only
// the owner ever takes, and it takes the whole list, so there is no ABA).
// It reports whether the span was full and is now the caller's to hand
// to the owner's reclaim stack. If the push makes the list every block of
// the span, the span is noted for the purge timer (emptied.go).
func (s *Span) pushRemote(p unsafe.Pointer, off uint32) (claimed bool) {
	*(*uint64)(unsafe.Add(p, 8)) = keyOf(p)
	page, objects := s.page, s.objects // before the push: then the owner may collect, and give the span back
	var n uint32
	for {
		old := s.remote.Load()
		*(*uint32)(p) = remoteHead(old)
		n = remoteCount(old) + 1
		if s.remote.CompareAndSwap(old, uint64(off)+1|uint64(n&remoteCountMask)<<remoteCountShift) {
			break
		}
	}
	if n == objects {
		noteEmptied(page)
	}
	// After the push: the owner sets full, then looks at remote; one of us
	// sees the other.
	return s.full.Load() == fullYes && s.full.CompareAndSwap(fullYes, fullClaimed)
}

// collect moves the blocks other caches freed to the owner's free list,
// returning how many. A span the purge timer purged (or is purging),
// every block on the list, has its blocks back and no list: it is empty,
// with nothing to carve (its memory goes back to the arena, and the arena
// lock orders that after the purge: emptied.go).
func (s *Span) collect() uint32 {
	w := s.remote.Load()
	if w == 0 {
		return 0
	}
	for !s.remote.CompareAndSwap(w, 0) { // the purge timer may mark it meanwhile
		w = s.remote.Load()
	}
	if remoteGone(w) {
		if n := remoteCount(w); n == s.used && s.free == 0 {
			s.used = 0
			return n
		}
		noteMisuse(misuse("double Free into the span at %#x (more blocks freed back than the %d in use)", uintptr(s.Start()), s.used))
		return 0
	}
	head := remoteHead(w)
	n := uint32(0)
	last := head
	limit := uint32(s.npages) << sizeclass.PageShift
	for off := head; off != 0; n++ {
		if off > limit || n >= s.used {
			if off > limit {
				corruptList(s, unsafe.Add(s.Start(), off-1))
			} else {
				noteMisuse(misuse("double Free into the span at %#x (more blocks freed back than the %d in use)", uintptr(s.Start()), s.used))
			}
			return 0 // the list is dropped: leaks, but hands out nothing wrong
		}
		last = off
		off = *(*uint32)(unsafe.Add(s.Start(), off-1))
	}
	*(*uint32)(unsafe.Add(s.Start(), last-1)) = s.free
	s.free = head
	s.used -= n
	return n
}

// hasFree reports whether Pop would succeed.
func (s *Span) hasFree() bool { return s.free != 0 || s.carved < s.objects }

func corruptList(s *Span, p unsafe.Pointer) {
	noteMisuse(misuse("free list of the span at %#x (class %d) is corrupt at %#x: memory written after Free?",
		uintptr(s.Start()), s.class, uintptr(p)))
}

// Misuse found where alloc may not panic (pinned to a P, or holding a
// lock) is noted here; alloc raises it (TakeMisuse) once it may.
var pendingMisuse atomic.Pointer[MisuseError]

func noteMisuse(err error) { pendingMisuse.CompareAndSwap(nil, err.(*MisuseError)) }

// TakeMisuse returns (and clears) misuse noted since the last call.
func TakeMisuse() error {
	if e := pendingMisuse.Swap(nil); e != nil {
		return e
	}
	return nil
}
