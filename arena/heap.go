// The page heap: the reservation, its descriptors, and the free spans
// (binned by length, coalesced with their neighbours, purged back to the
// OS after a delay). Everything here runs under a.mu.

package arena

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/internal/layout"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// Options are read once, by Init; set them before the first allocation.
type Options struct {
	Reserve     uintptr       // address space to reserve (default 64 GiB on Linux)
	PurgeDelay  time.Duration // a free span stays resident at most this long (default 200 ms)
	RetainBytes uintptr       // free resident memory always allowed, the retain limit's floor (default 8 MiB)
	HugeMin     uintptr       // blocks this big get their own mapping (default DefaultHugeMin, 256 MiB)
	Debug       bool          // keep a bitmap of blocks in use: exact double-free detection
}

// Free spans are filed by state, then length: bins[1] holds dirty
// (resident) spans, bins[0] purged or fresh ones; in each, bins 1..63 hold
// spans of exactly that many pages and bin 0 the longer ones.
const nBins = 64

// arena is the process's one reservation.
var a struct {
	mu   sync.Mutex
	once sync.Once
	err  error
	opt  Options

	mem   []byte         // the reservation
	base  unsafe.Pointer // &mem[0]
	size  uintptr
	descs []Span         // one per page, in a mapping of their own
	tags  unsafe.Pointer // the tag map: tagSlotBytes per page, touched by mixed spans only (span.go)
	tmem  []byte         // its mapping
	bits  []byte         // Debug: 512 bytes (4096 bits) per page: blocks in use
	top   uint32         // pages ever handed out; [top, len(descs)) is fresh
	bins  [2][nBins]uint32
	// Spans other caches' frees emptied (emptied.go): a bit a page, in a
	// mapping of their own; how many bits are set; whether a free noted
	// one since the last arena call (ReleaseSpans arms the timer).
	emptied        []atomic.Uint64
	emptiedPending atomic.Int64
	emptiedKick    atomic.Bool
	emptiedUsed    atomic.Bool // a bit was set: the map counts in Bookkeeping
	// Dirty free spans, oldest first (the order they became free in):
	// purging starts at dirty, and the span freed last is dirtyLast.
	dirty, dirtyLast uint32
	lastFreed        uint64 // bytes of the span the program freed last, before it joined its neighbours
	start            time.Time
	timer            *time.Timer // purges dirty spans after the delay
	// The retain limit's inputs (retainLimitLocked), in bytes: the heap's
	// high-water mark (decaying), and the largest span or huge block
	// allocated in the last recentWindow, with when (ns since start).
	hwm, recentBig uint64
	recentBigAt    int64
	// What the limit learned (learnLocked): room added to it, in bytes;
	// until when a span taken from clean pages counts (a second after
	// the limit purged); when the bonus last halved (ns since start).
	bonus                 uint64
	learnUntil, decayedAt int64

	// Figures, in bytes (written under mu, read by anyone).
	inUse      atomic.Uint64 // spans holding blocks
	dirtyBytes atomic.Uint64 // free and resident
	touched    atomic.Uint64 // pages ever handed out
	hugeLive   atomic.Uint64 // huge mappings
	hugeCached atomic.Uint64 // freed huge mappings waiting for reuse (huge.go)
	hugeCount  atomic.Int64
}

// ErrOutOfMemory is returned when the arena (or the OS) has no memory left.
var ErrOutOfMemory = errors.New("tagalloc: out of memory")

// MisuseError is the panic value for misuse alloc detects (double free,
// freeing memory it did not hand out).
type MisuseError struct{ Msg string }

func (e *MisuseError) Error() string { return "tagalloc: " + e.Msg }

func misuse(format string, args ...any) error { return &MisuseError{fmt.Sprintf(format, args...)} }

// Init reserves the arena. It runs once; later calls return the first
// call's result (and ignore their options).
func Init(opt Options) error {
	a.once.Do(func() { a.err = initArena(opt) })
	return a.err
}

func initArena(opt Options) error {
	if opt.Reserve == 0 {
		opt.Reserve = reserveDefault
	}
	if opt.PurgeDelay == 0 {
		opt.PurgeDelay = DefaultPurgeDelay
	}
	if opt.RetainBytes == 0 {
		opt.RetainBytes = DefaultRetainBytes
	}
	if opt.HugeMin == 0 {
		opt.HugeMin = DefaultHugeMin
	}
	opt.HugeMin = max(opt.HugeMin, sizeclass.MaxSmall+1)
	a.opt = opt
	var err error
	for size := opt.Reserve &^ (sizeclass.PageSize - 1); size >= 64<<20; size /= 2 {
		if a.mem, err = osReserve(size, "tagalloc-go arena"); err == nil {
			break
		}
	}
	if a.mem == nil {
		return fmt.Errorf("%w: reserving the arena: %v", ErrOutOfMemory, err)
	}
	a.base, a.size = unsafe.Pointer(&a.mem[0]), uintptr(len(a.mem))
	npages := a.size >> sizeclass.PageShift
	dm, err := osReserve(npages*unsafe.Sizeof(Span{}), "tagalloc-go descriptors")
	if err != nil {
		return fmt.Errorf("%w: reserving descriptors: %v", ErrOutOfMemory, err)
	}
	a.descs = unsafe.Slice((*Span)(unsafe.Pointer(&dm[0])), npages)
	if a.tmem, err = osReserve(npages*tagSlotBytes, "tagalloc-go block tags"); err != nil {
		return fmt.Errorf("%w: reserving the tag map: %v", ErrOutOfMemory, err)
	}
	a.tags = unsafe.Pointer(&a.tmem[0])
	em, err := osReserve((npages+63)/64*8, "tagalloc-go emptied map")
	if err != nil {
		return fmt.Errorf("%w: reserving the emptied map: %v", ErrOutOfMemory, err)
	}
	a.emptied = unsafe.Slice((*atomic.Uint64)(unsafe.Pointer(&em[0])), (npages+63)/64)
	if opt.Debug {
		if a.bits, err = osReserve(npages*512, "tagalloc-go debug bitmap"); err != nil {
			return fmt.Errorf("%w: reserving the debug bitmap: %v", ErrOutOfMemory, err)
		}
	}
	freeKey = rand.Uint64() | 1
	a.top = 1 // page 0 is never a span: index 0 means "none"
	a.start = time.Now()
	return nil
}

// Debug reports whether the arena keeps its bitmap of blocks in use.
func Debug() bool { return a.bits != nil }

// HugeMin is the size from which blocks get their own mapping.
func HugeMin() uintptr { return a.opt.HugeMin }

func (s *Span) index() uint32 { return s.page }

func spanAt(i uint32) *Span { return &a.descs[i] }

// SpanOf is the span in use holding p, or nil if p is not inside one (not
// arena memory, or a free span).
func SpanOf(p unsafe.Pointer) *Span {
	off := uintptr(p) - uintptr(a.base)
	if off >= a.size {
		return nil
	}
	i := uint32(off >> sizeclass.PageShift)
	d := &a.descs[i]
	if d.kind == kindInner && d.headOff <= i {
		if d = &a.descs[i-d.headOff]; i-d.page >= d.npages {
			return nil
		}
	}
	// (A head's page is its index: p is in its first page.)
	if d.kind != kindSmall && d.kind != kindLarge {
		return nil
	}
	return d
}

// binOf is the bin of a free span of n pages.
func binOf(n uint32) uint32 {
	if n < nBins {
		return n
	}
	return 0
}

// binsOf is the set of bins of a free span with flags: dirty or not.
func binsOf(flags uint8) *[nBins]uint32 {
	if flags&flagDirty != 0 {
		return &a.bins[1]
	}
	return &a.bins[0]
}

// listPush and listRemove keep doubly linked lists of spans by page
// index (next/prev), heads in *head.
func listPush(head *uint32, s *Span) {
	s.prev, s.next = 0, *head
	if *head != 0 {
		spanAt(*head).prev = s.page
	}
	*head = s.page
}

func listRemove(head *uint32, s *Span) {
	if s.prev != 0 {
		spanAt(s.prev).next = s.next
	} else {
		*head = s.next
	}
	if s.next != 0 {
		spanAt(s.next).prev = s.prev
	}
	s.next, s.prev = 0, 0
}

// dirtyPush appends s, just freed, to the dirty list (newest last).
func dirtyPush(s *Span) {
	s.dnext, s.dprev = 0, a.dirtyLast
	if a.dirtyLast != 0 {
		spanAt(a.dirtyLast).dnext = s.page
	} else {
		a.dirty = s.page
	}
	a.dirtyLast = s.page
	a.dirtyBytes.Add(uint64(s.Bytes()))
}

func dirtyRemove(s *Span) {
	if s.dprev != 0 {
		spanAt(s.dprev).dnext = s.dnext
	} else {
		a.dirty = s.dnext
	}
	if s.dnext != 0 {
		spanAt(s.dnext).dprev = s.dprev
	} else {
		a.dirtyLast = s.dprev
	}
	s.dnext, s.dprev = 0, 0
	a.dirtyBytes.Add(-uint64(s.Bytes()))
}

// markFreeLocked files pages [page, page+n) as one free span with flags.
func markFreeLocked(page, n uint32, flags uint8) *Span {
	s := spanAt(page)
	*s = Span{kind: kindFree, npages: n, page: page, flags: flags, owner: -1}
	if n > 1 {
		t := spanAt(page + n - 1)
		t.kind, t.headOff = kindFreeTail, n-1
	}
	listPush(&binsOf(flags)[binOf(n)], s)
	if flags&flagDirty != 0 {
		s.freedAt = int64(time.Since(a.start))
		dirtyPush(s)
	}
	return s
}

// unfileLocked takes a free span off its bin (and the dirty list).
func unfileLocked(s *Span) {
	listRemove(&binsOf(s.flags)[binOf(s.npages)], s)
	if s.flags&flagDirty != 0 {
		dirtyRemove(s)
	}
	if s.npages > 1 {
		spanAt(s.page + s.npages - 1).kind = kindNone
	}
	s.kind = kindNone
}

// bestFitLocked is the best fitting free span of n pages or more in bins,
// or nil.
func bestFitLocked(bins *[nBins]uint32, n uint32) *Span {
	for b := n; b < nBins; b++ {
		if bins[b] != 0 {
			return spanAt(bins[b])
		}
	}
	var s *Span
	for i := bins[0]; i != 0; i = spanAt(i).next { // the long ones
		if c := spanAt(i); c.npages >= n && (s == nil || c.npages < s.npages) {
			s = c
		}
	}
	return s
}

// allocSpanLocked takes n pages: the best fitting dirty span (split),
// else a dirty span with the free spans after it (runLocked), else the
// best fitting purged one (whose pages fault in again), else fresh pages
// from the top. Every page of the span gets its head.
func allocSpanLocked(n uint32, kind uint8) (*Span, error) {
	var page uint32
	var flags uint8
	s := bestFitLocked(&a.bins[1], n)
	if s == nil {
		if page, flags = runLocked(n); page == 0 {
			learnLocked(uint64(n) << sizeclass.PageShift)
			s = bestFitLocked(&a.bins[0], n)
		}
	}
	switch {
	case s != nil:
		page, flags = s.page, takeFreeLocked(s, s.page+n)
	case page == 0: // no run either: fresh pages
		if uintptr(a.top)+uintptr(n) > uintptr(len(a.descs)) {
			return nil, fmt.Errorf("%w: the %d MiB arena is full", ErrOutOfMemory, a.size>>20)
		}
		page, flags = a.top, flagZero
		growTopLocked(a.top + n)
	}
	s = spanAt(page)
	*s = Span{kind: kind, npages: n, page: page, flags: flags & (flagZero | flagTags), owner: -1}
	markInnerLocked(s, 1, n)
	a.inUse.Add(uint64(n) << sizeclass.PageShift)
	noteAllocLocked(uint64(n) << sizeclass.PageShift)
	return s, nil
}

// markInnerLocked makes pages [from, n) of span s its inner pages.
func markInnerLocked(s *Span, from, n uint32) {
	for i := from; i < n; i++ {
		d := spanAt(s.page + i)
		d.kind, d.headOff = kindInner, i
	}
}

// takeFreeLocked takes free span f off its bins, its pages from page to
// on (if it reaches that far) filed again as a free span in its state,
// and returns its flags.
func takeFreeLocked(f *Span, to uint32) uint8 {
	flags, end := f.flags, f.page+f.npages
	unfileLocked(f)
	if end > to {
		markFreeLocked(to, end-to, flags)
	}
	return flags
}

// growTopLocked hands out the arena's fresh pages up to page to.
func growTopLocked(to uint32) {
	a.top = to
	a.touched.Store(uint64(to) << sizeclass.PageShift)
}

// reachesLocked says whether the free spans from page from on (purged or
// dirty: free spans of one state never touch) and, past the last, the
// arena's fresh top hold pages up to page to.
func reachesLocked(from, to uint32) bool {
	for from < to && from < a.top && spanAt(from).kind == kindFree {
		from += spanAt(from).npages
	}
	return from >= to || from == a.top && uintptr(to) <= uintptr(len(a.descs))
}

// takeRunLocked takes pages [from, to), which reachesLocked found free
// or fresh: the free spans off their bins (what the last holds past to
// stays free, as it was), the top's fresh pages. It returns the tags
// flag of the spans and how many of the pages fault in again (purged or
// fresh).
func takeRunLocked(from, to uint32) (tags uint8, clean uint32) {
	for p := from; p < to && p < a.top; {
		f := spanAt(p)
		next := p + f.npages
		flags := takeFreeLocked(f, to)
		tags |= flags & flagTags
		if flags&flagDirty == 0 {
			clean += min(next, to) - p
		}
		p = next
	}
	if to > a.top {
		clean += to - a.top
		growTopLocked(to)
	}
	return tags, clean
}

// runTries is how many dirty spans, newest first, runLocked looks at
// (arena.c's _ta_span_alloc_run_locked tries as many).
const runTries = 64

// runLocked takes n pages that start with a dirty span too short for
// them and go on over the free spans after it and the fresh top, as
// arena.c does: only the pages after the dirty span fault in (they teach
// the retain limit, as a purged span taken does). The newest runTries
// dirty spans are tried. It returns the first page and the pages' flags
// (tags; never zero), or page 0 if no run holds n pages.
func runLocked(n uint32) (uint32, uint8) {
	tries := 0
	for i := a.dirtyLast; i != 0 && tries < runTries; i, tries = spanAt(i).dprev, tries+1 {
		d := spanAt(i)
		if !reachesLocked(d.page, d.page+n) {
			continue // a span in use, or the arena's end, comes first
		}
		page := d.page
		tags, clean := takeRunLocked(page, page+n)
		learnLocked(uint64(clean) << sizeclass.PageShift)
		return page, tags
	}
	return 0, 0
}

// joinLocked is the free span [page, page+n) joined with the free spans
// right before and after it that are in the same state (dirty if dirty,
// else purged): a dirty span never takes in purged pages, whose pages
// it would count as resident and purge again (arena.c's rule). The
// neighbours come off their bins; the tags flag of any joined dirty
// neighbour is returned.
func joinLocked(page, n uint32, dirty bool) (uint32, uint32, uint8) {
	var tags uint8
	same := func(s *Span) bool { return s.kind == kindFree && (s.flags&flagDirty != 0) == dirty }
	if page+n < a.top { // the neighbour after
		if r := spanAt(page + n); same(r) {
			tags |= r.flags & flagTags
			unfileLocked(r)
			n += r.npages
		}
	}
	if page > 1 { // the neighbour before
		l := spanAt(page - 1)
		if l.kind == kindFreeTail {
			l = spanAt(page - 1 - l.headOff)
		}
		if same(l) && l.page+l.npages == page {
			tags |= l.flags & flagTags
			unfileLocked(l)
			page, n = l.page, n+l.npages
		}
	}
	return page, n, tags
}

// freeSpanLocked returns a span to the free bins, coalesced with dirty
// free neighbours, dirty; then purges what the policy says.
func freeSpanLocked(s *Span) { freePagesLocked(s.page, s.npages, s.flags&flagTags) }

// freePagesLocked gives back pages [page, page+n) of a span in use (the
// whole span, or the tail a large block shrinks off, ResizeLarge): out of
// the pages in use, their descriptors cleared, filed as one dirty free
// span with tags joined with the dirty free spans on either side; then
// purges what the policy says.
func freePagesLocked(page, n uint32, tags uint8) {
	a.inUse.Add(-(uint64(n) << sizeclass.PageShift))
	a.lastFreed = uint64(n) << sizeclass.PageShift
	for i := uint32(0); i < n; i++ {
		spanAt(page + i).kind = kindNone
	}
	page, n, joined := joinLocked(page, n, true)
	markFreeLocked(page, n, flagDirty|tags|joined)
	purgeLocked(false)
}

// purgeLocked gives dirty spans back to the OS (the policy of the
// native library's arena.c, docs/ARCHITECTURE.md "Returning memory to
// the OS"): all of them if all; else, oldest first, those free for
// longer than the delay, and more while dirty memory exceeds the retain
// limit, sparing the block freed last (up to 4 x RetainBytes) so that a
// block freed and asked for again is not faulted back in: the span it
// lies in is passed over and the limit grows by the block, not by the
// span it joined (a 25 MiB block joined into 53 MiB lost its spare, and
// two such blocks replacing each other faulted twice as much). Each old span
// purged halves the high-water mark's distance to the heap. If dirty
// memory remains, a timer comes back after the delay.
func purgeLocked(all bool) {
	now := int64(time.Since(a.start))
	delay := int64(a.opt.PurgeDelay)
	var limit uint64
	var spare uint32
	if !all {
		limit = retainLimitLocked(now)
		if last := a.dirtyLast; last != 0 && a.lastFreed <= 4*uint64(a.opt.RetainBytes) {
			spare = last
			limit += min(a.lastFreed, uint64(spanAt(last).Bytes()))
		}
	}
	if all {
		a.bonus = 0
	}
	for a.dirty != 0 {
		s := spanAt(a.dirty)
		old := now-s.freedAt >= delay
		if !all && !old && (a.dirtyBytes.Load() <= limit || s.page == spare) {
			break
		}
		if old {
			if u := heapBytes(); a.hwm > u {
				a.hwm = u + (a.hwm-u)/2
			}
			if now-a.decayedAt >= delay {
				a.bonus, a.decayedAt = a.bonus/2, now
			}
		} else if !all {
			a.learnUntil = now + recentWindow
		}
		unfileLocked(s)
		osPurge(a.mem[uintptr(s.page)<<sizeclass.PageShift:][:s.Bytes()])
		if s.flags&flagTags != 0 {
			osPurge(a.tmem[uintptr(s.page)*tagSlotBytes:][:uintptr(s.npages)*tagSlotBytes])
		}
		page, n, _ := joinLocked(s.page, s.npages, false) // purged spans hold no tags' slots
		markFreeLocked(page, n, flagZero)                 // filed again, with the purged
	}
	cached := false
	if a.hugeCached.Load() != 0 { // entries are added with a.mu held: none is missed
		huge.mu.Lock()
		cached = expireCachedLocked(all, now, limit)
		huge.mu.Unlock()
	}
	if (a.dirty != 0 || cached || a.emptiedPending.Load() != 0) && a.timer == nil {
		a.timer = time.AfterFunc(a.opt.PurgeDelay, func() {
			a.mu.Lock()
			a.timer = nil
			lookEmptiedLocked()
			purgeLocked(false)
			a.mu.Unlock()
		})
	}
}

// The policy's defaults, the native library's (TAGALLOC_PURGE_DELAY_MS,
// TAGALLOC_RETAIN_MIN, TAGALLOC_HUGE_THRESHOLD: internal/layout, generated
// with its options table).
var (
	DefaultPurgeDelay  = time.Duration(layout.MustOption("TAGALLOC_PURGE_DELAY_MS").Value) * time.Millisecond
	DefaultRetainBytes = uintptr(layout.MustOption("TAGALLOC_RETAIN_MIN").Value)
	DefaultHugeMin     = uintptr(layout.MustOption("TAGALLOC_HUGE_THRESHOLD").Value)
)

// recentWindow is how long a big allocation counts as recent: the size
// the program is likely to ask for again.
const recentWindow = int64(time.Second)

// heapBytes is the heap: spans in use and huge blocks.
func heapBytes() uint64 { return a.inUse.Load() + a.hugeLive.Load() }

// noteAllocLocked notes an allocation of n bytes (a span or a huge
// block): the heap's high-water mark, and the largest recent one.
func noteAllocLocked(n uint64) {
	a.hwm = max(a.hwm, heapBytes())
	now := int64(time.Since(a.start))
	if n >= a.recentBig || now-a.recentBigAt > recentWindow {
		a.recentBig, a.recentBigAt = n, now
	}
}

// retainLimitLocked is how much free memory may stay resident, in bytes:
// while the heap plus its free memory stays under the heap's high-water
// mark, all of it (peak RSS is then about the heap's peak); never less
// than twice the largest span asked for in the last second (a block freed
// and asked for again keeps its pages), nor than RetainBytes. A program
// that frees most of its heap gets its RSS back by age, from the purge
// timer (purgeLocked), and the mark decays as old spans go (arena.c's
// _ta_retain_limit_pages, which no longer caps the room at once when the
// heap falls under a quarter of its mark: a heap that swings faulted its
// big blocks in again and again); plus what the limit learned
// (learnLocked).
func retainLimitLocked(now int64) uint64 {
	used := heapBytes()
	var room uint64 // the mark is kept where the heap grows (noteAllocLocked)
	if a.hwm > used {
		room = a.hwm - used
	}
	var recent uint64
	if now-a.recentBigAt <= recentWindow {
		recent = a.recentBig
	}
	return max(max(room, 2*recent)+a.bonus, uint64(a.opt.RetainBytes))
}

// learnLocked notes a span of n bytes taken from clean pages (purged or
// fresh), whose pages fault in again: within a second of a purge the
// retain limit made, the program came back for memory the limit gave
// away, and n is added to the limit (arena.c's _ta_retain_learn: a heap
// that turns over, as buffers grown by realloc do, reuses free spans of
// one to three times its size). This arena counts every free page as
// resident and measures nothing, so all of a span's pages count (the
// native arena weighs a large span's by the share of big blocks' pages
// programs touch). The bonus is capped at half the high-water mark,
// halves at most once a purge delay while spans are purged for age, and
// is dropped by Purge.
func learnLocked(n uint64) {
	if int64(time.Since(a.start)) >= a.learnUntil {
		return
	}
	a.bonus = min(a.bonus+n, a.hwm/2)
}

// Purge gives every free span's memory back to the OS now, and unmaps
// the cached huge mappings.
func Purge() {
	a.mu.Lock()
	purgeLocked(true)
	a.mu.Unlock()
}

// AllocLarge takes a span of whole pages for one block of size bytes,
// charged to tag.
func AllocLarge(size uintptr, tag uint32) (*Span, error) {
	n := uint32((size + sizeclass.PageSize - 1) >> sizeclass.PageShift)
	a.mu.Lock()
	s, err := allocSpanLocked(n, kindLarge)
	if err == nil {
		s.tag = tag
	}
	a.mu.Unlock()
	return s, err
}

// FreeLarge returns a large block's span. p must be its start.
func FreeLarge(s *Span, p unsafe.Pointer) {
	a.mu.Lock()
	if s.kind != kindLarge || p != s.Start() {
		a.mu.Unlock()
		panic(misuse("Free of %#x: not a block in use (double Free, or a sub-slice)", uintptr(p)))
	}
	freeSpanLocked(s)
	a.mu.Unlock()
}

// ResizeLarge resizes the large block s (p its start) where it lies to
// the pages of size bytes (size > sizeclass.MaxSmall), as the native
// realloc does (arena.c's _ta_span_grow_inplace and
// _ta_span_shrink_inplace): the pages past them go back to the free
// spans, or the free pages right after it (free spans, dirty or purged,
// then the arena's fresh top) join it. It returns the block's new usable bytes, or 0 if it
// cannot grow there (the caller moves the block). Before it takes pages
// it asks admit, if not nil, for the extra bytes (under the arena lock:
// admit must not call the arena); a false answer takes nothing and
// returns 0.
func ResizeLarge(s *Span, p unsafe.Pointer, size uintptr, admit func(extra uintptr) bool) uintptr {
	n := uint32((size + sizeclass.PageSize - 1) >> sizeclass.PageShift)
	a.mu.Lock()
	defer a.mu.Unlock()
	if s.kind != kindLarge || p != s.Start() {
		panic(misuse("Realloc of %#x: not a block in use (double Free, or a sub-slice)", uintptr(p)))
	}
	have := s.npages
	switch {
	case n < have:
		s.npages = n
		freePagesLocked(s.page+n, have-n, s.flags&flagTags)
	case n > have:
		if !growLocked(s, n, admit) {
			return 0
		}
	}
	return s.Bytes()
}

// growLocked extends the large span s to n pages (n > s.npages) over the
// free spans right after it (dirty or purged) and, past them, the arena's
// fresh top; false, and nothing taken, if they do not reach or admit
// refuses. Pages that were not resident (purged or fresh) teach the
// retain limit, as a span taken from them does (allocSpanLocked).
func growLocked(s *Span, n uint32, admit func(extra uintptr) bool) bool {
	have := s.npages
	if !reachesLocked(s.page+have, s.page+n) {
		return false // a span in use, or the arena's end, before n pages
	}
	if admit != nil && !admit(uintptr(n-have)<<sizeclass.PageShift) {
		return false
	}
	tags, clean := takeRunLocked(s.page+have, s.page+n)
	s.flags |= tags
	markInnerLocked(s, have, n)
	s.npages = n
	s.flags &^= flagZero
	a.inUse.Add(uint64(n-have) << sizeclass.PageShift)
	noteAllocLocked(uint64(n) << sizeclass.PageShift)
	if clean != 0 {
		learnLocked(uint64(clean) << sizeclass.PageShift)
	}
	return true
}

// CheckLarge panics unless p is the start of the large block s (the check
// before the books are debited; FreeLarge checks again under the lock).
func CheckLarge(s *Span, p unsafe.Pointer) {
	if s.kind != kindLarge || p != s.Start() {
		panic(misuse("Free of %#x: not a block in use (double Free, or a sub-slice)", uintptr(p)))
	}
}

// Stats are the arena's figures, in bytes: FreeResident is the free
// spans', HugeCached the freed huge mappings kept for reuse.
type Stats struct {
	SpansInUse, FreeResident, Touched, HugeLive, HugeCached, Bookkeeping uint64
	HugeBlocks                                                           int64
}

// ReadStats reads the figures (without the lock: each is one atomic word).
// emptiedMapBytes is the OS pages of the emptied map's words up to
// touched bytes of the arena, once a bit was set (emptied.go).
func emptiedMapBytes(touched uint64) uint64 {
	if !a.emptiedUsed.Load() {
		return 0
	}
	const osPage = 4096 // the map is a mapping of its own: whole OS pages from its start
	return (touched/sizeclass.PageSize/64*8 + 8 + osPage - 1) &^ (osPage - 1)
}

func ReadStats() Stats {
	t := a.touched.Load()
	return Stats{
		SpansInUse:   a.inUse.Load(),
		FreeResident: a.dirtyBytes.Load(),
		Touched:      t,
		HugeLive:     a.hugeLive.Load(),
		HugeCached:   a.hugeCached.Load(),
		Bookkeeping:  t/sizeclass.PageSize*uint64(unsafe.Sizeof(Span{})) + emptiedMapBytes(t),
		HugeBlocks:   a.hugeCount.Load(),
	}
}

// Walk calls fn for every block in use: its tag and usable size (small:
// its class's size; large: the span; huge: the mapping). It is a check
// of the books (they must equal a walk), for tests and tools: it is exact
// only while no goroutine allocates or frees, and it takes the arena's
// lock (fn must not allocate from the arena).
func Walk(fn func(tag uint32, usable uintptr)) {
	a.mu.Lock()
	var inFree []bool
	for i := uint32(1); i < a.top; {
		s := spanAt(i)
		switch s.kind {
		case kindLarge:
			fn(s.tag, s.Bytes())
		case kindSmall:
			// Blocks on the free list and the remote list are not in use.
			inFree = append(inFree[:0], make([]bool, s.carved)...)
			mark := func(off uint32) {
				for ; off != 0 && off <= s.npages<<sizeclass.PageShift; off = *(*uint32)(unsafe.Add(s.Start(), off-1)) {
					idx := (uint64(off-1) * s.magic) >> sizeclass.MagicShift
					if idx >= uint64(s.carved) || inFree[idx] {
						return // corrupt: the owner will say so
					}
					inFree[idx] = true
				}
			}
			w := s.remote.Load()
			if remoteGone(w) {
				break // every block came back, the list purged with the pages (emptied.go)
			}
			mark(s.free)
			mark(remoteHead(w))
			for idx, free := range inFree {
				if free {
					continue
				}
				tag := s.tag
				if tag == tagMixed {
					tag = uint32(*s.tagAt(uint64(idx)))
				}
				fn(tag, uintptr(s.size))
			}
		}
		i += max(s.npages, 1)
	}
	a.mu.Unlock()
	huge.mu.Lock()
	for _, b := range huge.blocks {
		fn(b.tag, uintptr(len(b.mem)))
	}
	huge.mu.Unlock()
}
