package arena

import (
	"math/rand/v2"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/sizeclass"
)

// newTestCache is a cache with an id no test used before: ids are taken
// once per process, and go test -count=N runs each test N times.
func newTestCache() *Cache { return NewCache(int(testCacheID.Add(1))) }

var testCacheID atomic.Int32

func init() {
	if err := Init(Options{PurgeDelay: 20 * time.Millisecond, RetainBytes: 1 << 20}); err != nil {
		panic(err)
	}
}

// checkFreeSpans walks the bins: every free span is filed once, in the
// right bin, with its tail marked, and no two free spans in the same
// state (dirty, purged) touch (they would have been joined). It returns
// the free pages.
func checkFreeSpans(t *testing.T) uint32 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[uint32]bool{}
	total := uint32(0)
	for d := range a.bins {
		for b := range a.bins[d] {
			for i := a.bins[d][b]; i != 0; i = spanAt(i).next {
				s := spanAt(i)
				if s.kind != kindFree || binOf(s.npages) != uint32(b) || binsOf(s.flags) != &a.bins[d] || seen[i] {
					t.Fatalf("span %d: kind %d, %d pages, flags %#x in bin %d/%d (seen %v)", i, s.kind, s.npages, s.flags, d, b, seen[i])
				}
				if s.npages > 1 && (spanAt(i+s.npages-1).kind != kindFreeTail || spanAt(i+s.npages-1).headOff != s.npages-1) {
					t.Fatalf("span %d: tail not marked", i)
				}
				seen[i] = true
				total += s.npages
			}
		}
	}
	for i := range seen {
		s := spanAt(i)
		if r := spanAt(i + s.npages); seen[i+s.npages] && r.flags&flagDirty == s.flags&flagDirty {
			t.Fatalf("free spans %d and %d touch, both with flags %#x and %#x", i, i+s.npages, s.flags, r.flags)
		}
	}
	return total
}

// checkFinds checks that every address of span s, a page's start or
// inside it, finds s.
func checkFinds(t *testing.T, s *Span) {
	t.Helper()
	for off := uintptr(0); off < s.Bytes(); off += sizeclass.PageSize / 2 {
		if got := SpanOf(unsafe.Add(s.Start(), off)); got != s {
			t.Fatalf("SpanOf(start+%d) = %p, want %p", off, got, s)
		}
	}
}

func TestLargeSpansCoalesceAndAreReused(t *testing.T) {
	var spans []*Span
	for i := 0; i < 10; i++ {
		s, err := AllocLarge(uintptr(i+1)*sizeclass.PageSize+1, 7)
		if err != nil {
			t.Fatal(err)
		}
		if s.npages != uint32(i+2) || s.Tag() != 7 || !s.Large() {
			t.Fatalf("span %d: %d pages, tag %d", i, s.npages, s.Tag())
		}
		checkFinds(t, s)
		spans = append(spans, s)
	}
	free0 := checkFreeSpans(t)
	top := a.top
	for i := 0; i < len(spans); i += 2 {
		FreeLarge(spans[i], spans[i].Start())
	}
	for i := 1; i < len(spans); i += 2 {
		FreeLarge(spans[i], spans[i].Start())
	}
	if got := checkFreeSpans(t); got < free0+65 { // 2+3+...+11 pages came back, coalesced
		t.Fatalf("free pages %d, want at least %d", got, free0+65)
	}
	if SpanOf(spans[3].Start()) != nil {
		t.Fatal("SpanOf finds a freed span")
	}
	// The same total again comes from the free spans, not fresh pages.
	s, err := AllocLarge(65*sizeclass.PageSize, 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.top != top {
		t.Fatalf("fresh pages taken (top %d -> %d) though 65 free pages were coalesced", top, a.top)
	}
	mustPanic(t, func() { FreeLarge(s, unsafe.Add(s.Start(), 16)) })
	FreeLarge(s, s.Start())
	mustPanic(t, func() { FreeLarge(s, s.Start()) })
	checkFreeSpans(t)
}

func TestPurgeZeroes(t *testing.T) {
	s, err := AllocLarge(4*sizeclass.PageSize, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := unsafe.Slice((*byte)(s.Start()), s.Bytes())
	for i := range b {
		b[i] = 0xee
	}
	FreeLarge(s, s.Start())
	Purge()
	if st := ReadStats(); st.FreeResident != 0 {
		t.Fatalf("after Purge, %d bytes free but resident", st.FreeResident)
	}
	for i := range b {
		if b[i] != 0 {
			t.Fatalf("purged memory byte %d is %#x", i, b[i])
		}
	}
}

func TestDelayedPurge(t *testing.T) {
	// A 512 KiB span (under the 1 MiB retain limit) whose neighbours are
	// in use, so it cannot coalesce into something bigger.
	var spans []*Span
	var s *Span
	for s == nil {
		x, err := AllocLarge(8*sizeclass.PageSize, 1)
		if err != nil {
			t.Fatal(err)
		}
		spans = append(spans, x)
		if len(spans) >= 3 {
			m := spans[len(spans)-2]
			if SpanOf(unsafe.Add(m.Start(), -1)) != nil && SpanOf(unsafe.Add(m.Start(), m.Bytes())) != nil {
				s = m
			}
		}
	}
	defer func() {
		for _, x := range spans {
			if x != s {
				FreeLarge(x, x.Start())
			}
		}
	}()
	unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
	Purge()
	FreeLarge(s, s.Start())
	if ReadStats().FreeResident == 0 {
		t.Fatal("a small free span was purged at once")
	}
	waitPurged(t)
}

// waitPurged waits (up to 2 s) for the purge timer to leave no free
// memory resident.
func waitPurged(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for ReadStats().FreeResident != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the purge timer did not purge the free spans")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCacheRemoteFreesComeBack(t *testing.T) {
	owner, other := newTestCache(), newTestCache()
	const class = 20 // 416 B, 157 per span
	cl := sizeclass.Classes[class]
	var blocks []unsafe.Pointer
	for len(blocks) < int(cl.Objects)*2 { // two full spans
		p, _ := owner.Cur(class).Pop(2)
		if p == nil {
			if p, _ = owner.Refill(class, 2); p == nil {
				s, err := NewSmall(class, 2)
				if err != nil {
					t.Fatal(err)
				}
				p, _ = owner.Install(s, 2)
			}
		}
		blocks = append(blocks, p)
	}
	first := SpanOf(blocks[0])
	if first.state != stateFull || first.used != cl.Objects {
		t.Fatalf("first span: state %d, used %d", first.state, first.used)
	}
	// Another cache frees every block of the full first span.
	for _, p := range blocks[:cl.Objects] {
		s := SpanOf(p)
		if !other.Free(s, p, Check(s, p, 1)) {
			t.Fatal(TakeMisuse())
		}
	}
	if first.remote.Load() == 0 || first.full.Load() != fullClaimed || owner.reclaim.Load() != first.page {
		t.Fatalf("remote frees: list %d, full %d, reclaim %d", first.remote.Load(), first.full.Load(), owner.reclaim.Load())
	}
	// The owner's next refill takes the span back, and releases it: empty.
	s := owner.Cur(class)
	for s.hasFree() {
		s.Pop(2)
	}
	before := ReadStats().SpansInUse
	owner.Refill(class, 2)
	ReleaseSpans(owner.TakeRelease())
	if SpanOf(blocks[0]) != nil || ReadStats().SpansInUse != before-uint64(cl.Pages)<<sizeclass.PageShift {
		t.Fatalf("the emptied span was not released (in use %d -> %d)", before, ReadStats().SpansInUse)
	}
	// A double free by the owner is refused, not counted.
	s = SpanOf(blocks[cl.Objects])
	p := blocks[cl.Objects]
	if !owner.Free(s, p, Check(s, p, 1)) {
		t.Fatal(TakeMisuse())
	}
	mustPanic(t, func() { Check(s, p, 1) })
}

func mustPanic(t *testing.T, f func()) {
	t.Helper()
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic")
		} else if _, ok := r.(*MisuseError); !ok {
			t.Fatalf("panic %v, want a *MisuseError", r)
		}
	}()
	f()
}

// popOrNew pops a block of tag from cache c's class, taking a new span
// when it must.
func popOrNew(t *testing.T, c *Cache, class int, tag uint32) unsafe.Pointer {
	t.Helper()
	p, _ := c.Pop(class, tag)
	if p == nil {
		if p, _ = c.Refill(class, tag); p == nil {
			s, err := NewSmall(class, tag)
			if err != nil {
				t.Fatal(err)
			}
			p, _ = c.Install(s, tag)
		}
	}
	return p
}

// TestMixedSpanTags: one span takes blocks of several tags; each block
// keeps its own (TagOf, for the owner and for another cache's Free), the
// span turns mixed at the second tag and single again once empty, and
// Walk sees every block's tag.
func TestMixedSpanTags(t *testing.T) {
	c, other := newTestCache(), newTestCache()
	const class = 3 // 64 B
	type blk struct {
		p   unsafe.Pointer
		tag uint32
	}
	var blocks []blk
	for i := 0; i < 40; i++ {
		tag := uint32(7)
		if i >= 10 {
			tag = uint32(100 + i%5)
		}
		blocks = append(blocks, blk{popOrNew(t, c, class, tag), tag})
	}
	s := SpanOf(blocks[0].p)
	for _, b := range blocks {
		if SpanOf(b.p) != s {
			t.Fatal("40 blocks of 64 B in more than one span")
		}
		if got := s.TagOf(b.p); got != b.tag {
			t.Fatalf("block %#x: tag %d, want %d", uintptr(b.p), got, b.tag)
		}
	}
	if s.tag != tagMixed || s.flags&flagTags == 0 {
		t.Fatalf("span of 6 tags: tag field %d, flags %d", s.tag, s.flags)
	}
	walk := map[uint32]int{}
	Walk(func(tag uint32, usable uintptr) {
		if tag == 7 || tag >= 100 && tag < 105 {
			walk[tag]++
		}
	})
	if walk[7] != 10 || walk[100] != 6 || walk[104] != 6 {
		t.Fatalf("Walk: %v, want 10 of tag 7 and 6 of each of 100..104", walk)
	}
	// Another cache frees some (remote), the owner the rest; tags are
	// read before each free.
	for i, b := range blocks {
		if got := s.TagOf(b.p); got != b.tag {
			t.Fatalf("before its free, block %d: tag %d, want %d", i, got, b.tag)
		}
		fc := c
		if i%3 == 0 {
			fc = other
		}
		if !fc.Free(s, b.p, Check(s, b.p, 64)) {
			t.Fatal(TakeMisuse())
		}
	}
	// The span (current: never released) is empty once the owner
	// collects: its next block gives it a single tag again.
	s.collect()
	if s.used != 0 {
		t.Fatalf("used %d after every block came back", s.used)
	}
	p := popOrNew(t, c, class, 9)
	if SpanOf(p) != s || s.tag != 9 || s.TagOf(p) != 9 {
		t.Fatalf("the emptied span's next block: tag field %d, TagOf %d, want 9", s.tag, s.TagOf(p))
	}
	q := popOrNew(t, c, class, 9)
	if s.tag != 9 {
		t.Fatalf("a second block of the same tag mixed the span (tag field %d)", s.tag)
	}
	c.Free(s, q, Check(s, q, 64))
	c.Free(s, p, Check(s, p, 64))

	// A span that carved more than unmixMax blocks stays mixed when it
	// empties; its blocks still read their own tags.
	var many []blk
	for i := 0; i <= unmixMax; i++ {
		many = append(many, blk{popOrNew(t, c, class, 20), 20})
	}
	many = append(many, blk{popOrNew(t, c, class, 21), 21})
	if SpanOf(many[0].p) != s || s.carved <= unmixMax || s.tag != tagMixed {
		t.Fatalf("span: carved %d, tag field %d", s.carved, s.tag)
	}
	for _, b := range many {
		c.Free(s, b.p, Check(s, b.p, 64))
	}
	p = popOrNew(t, c, class, 22)
	q = popOrNew(t, c, class, 23)
	if s.tag != tagMixed || s.TagOf(p) != 22 || s.TagOf(q) != 23 {
		t.Fatalf("emptied span past unmixMax: tag field %d, tags %d %d, want mixed, 22, 23", s.tag, s.TagOf(p), s.TagOf(q))
	}
	c.Free(s, q, Check(s, q, 64))
	c.Free(s, p, Check(s, p, 64))
}

// TestTagMapPurged: a mixed span's slot of the tag map goes back to the
// OS with the span's pages.
func TestTagMapPurged(t *testing.T) {
	c := newTestCache()
	const class = 7 // 128 B, 512 per span
	cl := sizeclass.Classes[class]
	var ps []unsafe.Pointer
	for i := 0; i < int(cl.Objects); i++ { // one whole span: Refill retires it, so its last free releases it
		ps = append(ps, popOrNew(t, c, class, uint32(1+i%3)))
	}
	s := SpanOf(ps[0])
	if s.tag != tagMixed {
		t.Fatal("not mixed")
	}
	page := s.page
	slot := unsafe.Slice(s.tagAt(0), cl.Objects)
	popOrNew(t, c, class, 1) // a new current span; s is full, on no list
	for _, p := range ps {
		if !c.Free(s, p, Check(s, p, 1)) {
			t.Fatal(TakeMisuse())
		}
	}
	ReleaseSpans(c.TakeRelease())
	if SpanOf(ps[0]) != nil {
		t.Fatal("the emptied span was not released")
	}
	Purge()
	for i, v := range slot {
		if v != 0 {
			t.Fatalf("page %d: tag map entry %d is %d after the purge", page, i, v)
		}
	}
}

// TestInstallTakesARemoteFree: a new span is installed while the current
// one, full when the cache looked, got a block back from another cache.
// That block is handed out (the new span waits on the partial list), not
// leaked.
func TestInstallTakesARemoteFree(t *testing.T) {
	owner, other := newTestCache(), newTestCache()
	const class = 93 // 229376 B: one block per span
	p := popOrNew(t, owner, class, 4)
	cur := owner.Cur(class)
	if cur.hasFree() {
		t.Fatal("a one-block span has a free block after its block was taken")
	}
	s, err := NewSmall(class, 4) // what alloc does when Pop and Refill found nothing
	if err != nil {
		t.Fatal(err)
	}
	if !other.Free(cur, p, Check(cur, p, 1)) { // meanwhile, another cache frees the block
		t.Fatal(TakeMisuse())
	}
	q, _ := owner.Install(s, 5)
	if q != p || owner.Cur(class) != cur || cur.used != 1 || s.state != statePartial || cur.TagOf(q) != 5 {
		t.Fatalf("Install: got %#x (the freed block is %#x), cur kept %v, used %d, new span state %d", uintptr(q), uintptr(p), owner.Cur(class) == cur, cur.used, s.state)
	}
	n := 0
	Walk(func(tag uint32, usable uintptr) {
		if tag == 4 || tag == 5 {
			n++
		}
	})
	if n != 1 {
		t.Fatalf("Walk: %d blocks of tags 4 and 5 in use, want 1", n)
	}
	owner.Free(cur, q, Check(cur, q, 1))
}

// The retain limit is the native library's (arena.c): the room under the
// heap's high-water mark, never below twice the largest recent span nor
// RetainBytes.
func TestRetainLimit(t *testing.T) {
	a.mu.Lock()
	defer a.mu.Unlock()
	hwm, big, at, bonus := a.hwm, a.recentBig, a.recentBigAt, a.bonus
	defer func() { a.hwm, a.recentBig, a.recentBigAt, a.bonus = hwm, big, at, bonus }()
	a.bonus = 0 // what earlier tests taught it (TestLimitLearns)
	const MiB = 1 << 20
	now := int64(time.Since(a.start))
	used := heapBytes()
	a.recentBig, a.recentBigAt = 3*MiB, now
	a.hwm = used + 5*MiB // within the mark: all the room under it
	if got, want := retainLimitLocked(now), max(uint64(5*MiB), 6*MiB); got != want {
		t.Errorf("heap %d under its mark by 5 MiB: limit %d, want %d", used, got, want)
	}
	a.hwm = 8*used + 400*MiB // most of the heap freed: still all the room (the timer purges by age)
	if got, want := retainLimitLocked(now), 7*used+400*MiB; got != want {
		t.Errorf("heap %d far under its mark: limit %d, want %d", used, got, want)
	}
	a.hwm = used + 1*MiB // little room: twice the recent span
	if got, want := retainLimitLocked(now), max(uint64(6*MiB), uint64(a.opt.RetainBytes)); got != want {
		t.Errorf("heap %d 1 MiB under its mark: limit %d, want %d", used, got, want)
	}
	a.recentBigAt = now - 2*recentWindow // no recent span: RetainBytes at least
	a.hwm = used
	if got, want := retainLimitLocked(now), uint64(a.opt.RetainBytes); got != want {
		t.Errorf("heap at its mark, nothing recent: limit %d, want %d", got, want)
	}
}

// The limit learns (arena.c's rule): a span taken from clean pages within
// a second of a purge the limit made adds its bytes to the limit, up to
// half the high-water mark; Purge forgets it. A 6 MiB span freed with no
// room under the mark and nothing recent (over the spare's 4 MiB bound)
// is purged by the limit; the next 6 MiB span comes from clean pages and
// is learned, and the limit then keeps as much more.
func TestLimitLearns(t *testing.T) {
	noPurgeByAge(t)
	const MiB = 1 << 20
	s, err := AllocLarge(6*MiB, 1)
	if err != nil {
		t.Fatal(err)
	}
	unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
	a.mu.Lock()
	hwm, big, at := a.hwm, a.recentBig, a.recentBigAt
	a.hwm = heapBytes() - 6*MiB                                 // freed, the heap is at its mark: no room
	a.recentBigAt = int64(time.Since(a.start)) - 2*recentWindow // nothing recent: the limit is RetainBytes
	a.bonus = 0
	a.mu.Unlock()
	FreeLarge(s, s.Start())
	if r := ReadStats().FreeResident; r >= 6*MiB {
		t.Fatalf("6 MiB freed over the limit: %d bytes left resident, want it purged", r)
	}
	a.mu.Lock()
	until := a.learnUntil
	a.mu.Unlock()
	if now := int64(time.Since(a.start)); until <= now {
		t.Fatalf("the limit purged, and learns until %d, now %d", until, now)
	}
	a.mu.Lock()
	a.hwm = heapBytes() + 20*MiB // the bonus is capped at half the mark
	a.mu.Unlock()
	s, err = AllocLarge(6*MiB, 1) // clean pages
	if err != nil {
		t.Fatal(err)
	}
	a.mu.Lock()
	learned, mark := a.bonus, a.hwm
	withIt := retainLimitLocked(int64(time.Since(a.start)))
	a.bonus = 0
	without := retainLimitLocked(int64(time.Since(a.start)))
	a.bonus = learned
	a.hwm, a.recentBig, a.recentBigAt = max(hwm, a.hwm), big, at
	a.mu.Unlock()
	if want := min(uint64(6*MiB), mark/2); learned != want {
		t.Errorf("a 6 MiB span from clean pages a moment after the limit purged: learned %d, want %d", learned, want)
	}
	if withIt-without != learned {
		t.Errorf("limit %d with what it learned, %d without: want %d more", withIt, without, learned)
	}
	FreeLarge(s, s.Start())
	Purge()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.bonus != 0 {
		t.Errorf("after Purge the limit still keeps %d learned bytes", a.bonus)
	}
	a.learnUntil = int64(time.Since(a.start)) - 1 // a second since the limit last purged
	learnLocked(6 * MiB)
	if a.bonus != 0 {
		t.Errorf("a span from clean pages long after a purge: learned %d, want 0", a.bonus)
	}
}

// A span freed under the heap's high-water mark stays resident for reuse
// (RetainBytes alone, 1 MiB in these tests, would have purged it at once)
// until the delay passes.
func TestRetainUnderMark(t *testing.T) {
	const n = 64 // pages: 4 MiB
	var spans []*Span
	for range 4 {
		s, err := AllocLarge(n*sizeclass.PageSize, 1)
		if err != nil {
			t.Fatal(err)
		}
		unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
		spans = append(spans, s)
	}
	Purge()
	FreeLarge(spans[1], spans[1].Start())
	if r := ReadStats().FreeResident; r < n*sizeclass.PageSize {
		t.Errorf("a 4 MiB span freed under the mark: %d bytes resident, want all of it", r)
	}
	for _, s := range []*Span{spans[0], spans[2], spans[3]} {
		FreeLarge(s, s.Start())
	}
	waitPurged(t)
}

// A heap that frees most of itself gets its memory back by age: 48 MiB
// freed from a 48 MiB mark all go within the purge timer's delay, without
// another call.
func TestRetainFallsWhenHeapShrinks(t *testing.T) {
	Purge()
	var spans []*Span
	for range 48 {
		s, err := AllocLarge(1<<20, 1)
		if err != nil {
			t.Fatal(err)
		}
		unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
		spans = append(spans, s)
	}
	for _, s := range spans {
		FreeLarge(s, s.Start())
	}
	waitPurged(t)
}

// The limit spares the block freed last, not the free span it joined: a
// 2 MiB block freed beside a free 3 MiB one makes a 5 MiB span, over the
// spare's bound (4 x RetainBytes, 4 MiB here), and the span used to be
// purged whole. Now the limit grows by the block's 2 MiB and the span
// it lies in is passed over, so it stays resident (the native arena's
// rule, arena.c, _ta_purge_pick_locked).
func TestSpareIsTheBlockFreedLast(t *testing.T) {
	noPurgeByAge(t)
	const MiB = 1 << 20
	var spans []*Span
	for _, n := range []uintptr{3 * MiB, 2 * MiB, sizeclass.PageSize} { // the last keeps the two from the top
		s, err := AllocLarge(n, 1)
		if err != nil {
			t.Fatal(err)
		}
		unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
		spans = append(spans, s)
	}
	if spans[1].page != spans[0].page+spans[0].npages {
		t.Skipf("spans not adjacent (pages %d+%d, %d)", spans[0].page, spans[0].npages, spans[1].page)
	}
	FreeLarge(spans[0], spans[0].Start())
	FreeLarge(spans[1], spans[1].Start()) // joins the first: 5 MiB dirty
	a.mu.Lock()
	hwm, big, at := a.hwm, a.recentBig, a.recentBigAt
	a.hwm = heapBytes()                                         // no room under the mark
	a.recentBigAt = int64(time.Since(a.start)) - 2*recentWindow // nothing recent: the limit is RetainBytes
	purgeLocked(false)
	a.hwm, a.recentBig, a.recentBigAt = hwm, big, at
	a.mu.Unlock()
	if r := ReadStats().FreeResident; r < 5*MiB {
		t.Errorf("the 2 MiB block freed last joined a 3 MiB free span: %d bytes left resident, want 5 MiB", r)
	}
	FreeLarge(spans[2], spans[2].Start())
	Purge()
}

// noPurgeByAge purges everything, then keeps free spans from going by
// age until the test ends (only the retain limit purges meanwhile).
func noPurgeByAge(t *testing.T) {
	t.Helper()
	Purge()
	a.mu.Lock()
	delay := a.opt.PurgeDelay
	a.opt.PurgeDelay = time.Hour
	a.mu.Unlock()
	t.Cleanup(func() {
		a.mu.Lock()
		a.opt.PurgeDelay = delay
		if a.timer != nil { // set for an hour: the next tests' purges would wait for it
			a.timer.Stop()
			a.timer = nil
		}
		a.mu.Unlock()
	})
}

// inARow allocates large spans of the pages given (each written to)
// until one set lies in a row, the holes earlier tests left filled first,
// and frees the others when the test ends (then purges all).
func inARow(t *testing.T, pages ...uintptr) []*Span {
	t.Helper()
	var held []*Span
	t.Cleanup(func() {
		for _, x := range held {
			FreeLarge(x, x.Start())
		}
		Purge()
	})
	for try := 0; try < 64; try++ {
		var set []*Span
		row := true
		for k, n := range pages {
			s, err := AllocLarge(n*sizeclass.PageSize, 1)
			if err != nil {
				t.Fatal(err)
			}
			unsafe.Slice((*byte)(s.Start()), s.Bytes())[0] = 1
			row = row && (k == 0 || s.page == set[k-1].page+set[k-1].npages)
			set = append(set, s)
		}
		if row {
			return set
		}
		held = append(held, set...)
	}
	t.Fatalf("no spans of %v pages laid out in a row in 64 tries", pages)
	return nil
}

// A dirty span, resident, is taken before a purged one that fits better
// (whose pages would all fault in again), as in arena.c.
func TestDirtyBeforePurged(t *testing.T) {
	noPurgeByAge(t)
	// Two spans (2 and 4 pages), each followed by one in use.
	spans := inARow(t, 2, 1, 4, 1)
	FreeLarge(spans[0], spans[0].Start())
	Purge()                               // the 2-page span (perhaps joined to free pages before it) is purged
	FreeLarge(spans[2], spans[2].Start()) // 4 pages, dirty
	checkFreeSpans(t)
	s, err := AllocLarge(2*sizeclass.PageSize, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.page != spans[2].page {
		t.Errorf("2 pages came from page %d: want the dirty span at %d (the purged one is at %d)", s.page, spans[2].page, spans[0].page)
	}
	for _, x := range []*Span{s, spans[1], spans[3]} {
		FreeLarge(x, x.Start())
	}
	checkFreeSpans(t)
}

// Free spans join only spans in their own state (arena.c's rule): a
// block freed beside purged pages stays a dirty span of its own, so the
// free memory counted resident is its pages alone; once purged it joins
// the purged span.
func TestFreeSpansJoinByState(t *testing.T) {
	noPurgeByAge(t)
	spans := inARow(t, 2, 3, 1) // A, B, and one in use after them
	A, B := spans[0], spans[1]
	FreeLarge(B, B.Start())
	Purge() // B purged (perhaps joined to purged pages before it: A is in use)
	before := ReadStats().FreeResident
	FreeLarge(A, A.Start())
	checkFreeSpans(t)
	a.mu.Lock()
	sA, sB := *spanAt(A.page), *spanAt(B.page)
	a.mu.Unlock()
	if sA.kind != kindFree || sA.npages != 2 || sA.flags&flagDirty == 0 {
		t.Errorf("A freed: %d pages, kind %d, flags %#x; want a dirty free span of its 2 pages", sA.npages, sA.kind, sA.flags)
	}
	if sB.kind != kindFree || sB.flags&(flagDirty|flagZero) != flagZero {
		t.Errorf("B: kind %d, flags %#x; want a purged free span", sB.kind, sB.flags)
	}
	if got := ReadStats().FreeResident - before; got != 2*sizeclass.PageSize {
		t.Errorf("freeing 2 pages beside purged ones counted %d bytes more resident, want %d", got, 2*sizeclass.PageSize)
	}
	Purge()
	checkFreeSpans(t)
	a.mu.Lock()
	sA = *spanAt(A.page)
	a.mu.Unlock()
	if sA.kind != kindFree || sA.npages < 5 || sA.flags != flagZero {
		t.Errorf("A purged: %d pages, kind %d, flags %#x; want one purged span over A and B", sA.npages, sA.kind, sA.flags)
	}
}

// A large block grows where it lies over the free spans after it in
// either state, a dirty one and a purged one (free spans of different
// states no longer join, so one span after it is not all there is).
func TestGrowOverDirtyAndPurged(t *testing.T) {
	noPurgeByAge(t)
	spans := inARow(t, 2, 2, 2, 1) // A, D, P, then one in use
	A, D, P := spans[0], spans[1], spans[2]
	FreeLarge(P, P.Start())
	Purge() // P purged (A and D in use)
	FreeLarge(D, D.Start())
	top := a.top
	if u := ResizeLarge(A, A.Start(), 6*sizeclass.PageSize, nil); u != 6*sizeclass.PageSize {
		t.Fatalf("A grown over a dirty and a purged span: %d usable bytes, want %d", u, 6*sizeclass.PageSize)
	}
	if a.top != top {
		t.Errorf("top %d -> %d: the growth took fresh pages", top, a.top)
	}
	checkFinds(t, A)
	checkFreeSpans(t)
	FreeLarge(A, A.Start())
}

// A request that no dirty span holds takes a dirty span with the free
// spans after it (arena.c's runs): its resident pages serve and only the
// rest faults in, and what is left of the last free span stays free in
// its state. Past the last free span the arena's fresh top serves too.
func TestRunOverDirtyAndPurged(t *testing.T) {
	noPurgeByAge(t)
	spans := inARow(t, 3, 2, 2, 1) // D, P, then one in use, then the held one
	D, P := spans[0], spans[1]
	FreeLarge(P, P.Start())
	Purge() // P purged
	FreeLarge(D, D.Start())
	top := a.top
	s, err := AllocLarge(4*sizeclass.PageSize, 1) // D's 3 pages and one of P's
	if err != nil {
		t.Fatal(err)
	}
	defer FreeLarge(s, s.Start())
	if s.page != D.page || s.npages != 4 || a.top != top {
		t.Fatalf("4 pages at page %d (top %d -> %d): want the run at %d, no fresh pages", s.page, top, a.top, D.page)
	}
	checkFinds(t, s)
	if s.Zero() {
		t.Error("a run that starts with dirty pages is not all zero")
	}
	checkFreeSpans(t)
	a.mu.Lock()
	rest := *spanAt(D.page + 4)
	a.mu.Unlock()
	if rest.kind != kindFree || rest.npages != 1 || rest.flags != flagZero {
		t.Errorf("P's last page: kind %d, %d pages, flags %#x; want a purged free span of 1 page", rest.kind, rest.npages, rest.flags)
	}

	// At the top: a dirty span that ends the arena grows over fresh pages.
	last := inARow(t, 2)[0]
	if last.page+last.npages != a.top {
		t.Skip("the span is not the last of the arena")
	}
	FreeLarge(last, last.Start())
	top = a.top
	big, err := AllocLarge(uintptr(1000)*sizeclass.PageSize, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer FreeLarge(big, big.Start())
	if big.page != last.page || a.top != last.page+1000 || top != last.page+2 {
		t.Errorf("1000 pages at %d, top %d -> %d: want the dirty span at %d and 998 fresh pages", big.page, top, a.top, last.page)
	}
	checkFreeSpans(t)
}

// A freed block of any span of the class comes before a block carved
// anew (Cache.Pop, Refill), as in the native heap (heap.c,
// _ta_find_page): carving the current span first held each class's
// high-water mark plus what it had freed since. The span set aside with
// blocks still to carve is carved once the freed blocks are used up.
func TestFreedBlocksBeforeCarving(t *testing.T) {
	c := newTestCache()
	const class = 31 // 1024 B, 64 a span
	cl := sizeclass.Classes[class]
	var first []unsafe.Pointer
	for len(first) < int(cl.Objects) { // a full span
		first = append(first, popOrNew(t, c, class, 3))
	}
	second := popOrNew(t, c, class, 3) // one block carved of the next
	s1, s2 := SpanOf(first[0]), SpanOf(second)
	if s1 == s2 || s2.carved != 1 {
		t.Fatalf("second span: same as the first %v, %d carved", s1 == s2, s2.carved)
	}
	freed := map[unsafe.Pointer]bool{}
	for _, p := range first[10:15] { // the first span goes to the partial list
		if !c.Free(s1, p, Check(s1, p, 1)) {
			t.Fatal(TakeMisuse())
		}
		freed[p] = true
	}
	for i := 0; i < 5; i++ {
		if p := popOrNew(t, c, class, 3); !freed[p] {
			t.Fatalf("block %d: %#x, not one of the 5 freed (the second span has %d carved)", i, uintptr(p), s2.carved)
		}
	}
	if s2.carved != 1 {
		t.Fatalf("the second span carved %d blocks while the first had freed ones", s2.carved)
	}
	p := popOrNew(t, c, class, 3)
	if SpanOf(p) != s2 || s2.carved != 2 {
		t.Fatalf("after the freed blocks: a block of span %p (the set-aside one is %p, %d carved)", SpanOf(p), s2, s2.carved)
	}
	all := append(first[:10:10], first[15:]...)
	all = append(all, second, p)
	for i := 0; i < 5; i++ {
		all = append(all, first[10+i]) // taken again above, in some order: the same blocks
	}
	for _, q := range all {
		s := SpanOf(q)
		if !c.Free(s, q, Check(s, q, 1)) {
			t.Fatal(TakeMisuse())
		}
	}
	ReleaseSpans(c.TakeRelease())
}

// ResizeLarge shrinks a large span where it lies, its tail filed free
// and joined with the free span after it; grows it over the free pages
// after it and the arena's top; and takes nothing where a span in use
// lies in the way, or where admit refuses. Every page finds its span.
func TestResizeLarge(t *testing.T) {
	const page = sizeclass.PageSize
	// Two spans one after the other: the arena's best fit, else its top,
	// so once the free spans that fit are taken they come from the top.
	var held []*Span
	var s, next *Span
	for s == nil {
		x, err := AllocLarge(20*page, 3)
		if err != nil {
			t.Fatal(err)
		}
		y, err := AllocLarge(20*page, 4)
		if err != nil {
			t.Fatal(err)
		}
		if y.page == x.page+x.npages {
			s, next = x, y
		} else {
			held = append(held, x, y)
		}
	}
	for _, h := range held {
		FreeLarge(h, h.Start())
	}
	free0 := checkFreeSpans(t)
	inUse := a.inUse.Load()
	if ResizeLarge(s, s.Start(), 20*page+1, nil) != 0 || s.npages != 20 {
		t.Fatal("grown over a span in use")
	}
	if got := ResizeLarge(s, s.Start(), 8*page, nil); got != 8*page || s.npages != 8 {
		t.Fatalf("shrunk to 8 pages: %d bytes, %d pages", got, s.npages)
	}
	if f := checkFreeSpans(t); f != free0+12 || a.inUse.Load() != inUse-12*page {
		t.Fatalf("free pages %d, want %d; in use %d, want %d", f, free0+12, a.inUse.Load(), inUse-12*page)
	}
	if r := spanAt(s.page + 8); r.kind != kindFree || r.npages != 12 {
		t.Fatalf("the tail: kind %d, %d pages", r.kind, r.npages)
	}
	checkFinds(t, s)
	var asked uintptr
	if ResizeLarge(s, s.Start(), 15*page, func(extra uintptr) bool { asked = extra; return false }) != 0 || asked != 7*page {
		t.Fatalf("admit refused, asked %d", asked)
	}
	if s.npages != 8 || checkFreeSpans(t) != free0+12 {
		t.Fatal("a refused growth took pages")
	}
	if got := ResizeLarge(s, s.Start(), 15*page, func(uintptr) bool { return true }); got != 15*page || s.npages != 15 {
		t.Fatalf("grown to 15 pages: %d bytes", got)
	}
	if r := spanAt(s.page + 15); r.kind != kindFree || r.npages != 5 || checkFreeSpans(t) != free0+5 {
		t.Fatalf("the rest after it: kind %d, %d pages", r.kind, r.npages)
	}
	checkFinds(t, s)
	// Grown over the span after it once that is free, and on into the top
	// if it lies there.
	FreeLarge(next, next.Start())
	if got := ResizeLarge(s, s.Start(), 40*page, nil); got != 40*page {
		t.Fatalf("grown to 40 pages over the free ones: %d bytes", got)
	}
	checkFinds(t, s)
	top := a.top
	if s.page+s.npages == top {
		if got := ResizeLarge(s, s.Start(), 50*page, nil); got != 50*page || a.top != top+10 {
			t.Fatalf("grown into the top: %d bytes, top %d -> %d", got, top, a.top)
		}
		checkFinds(t, s)
	}
	mustPanic(t, func() { ResizeLarge(s, unsafe.Add(s.Start(), 16), 8*page, nil) })
	FreeLarge(s, s.Start())
	mustPanic(t, func() { ResizeLarge(s, s.Start(), 8*page, nil) })
	checkFreeSpans(t)
}

// A freed huge mapping waits in the cache: the next huge block of about
// its size takes it (not zero), cut to size when it is a quarter bigger
// or more, grown with its pages when it is smaller; the purge delay, or
// Purge, unmaps it.
func TestHugeCache(t *testing.T) {
	const MiB = 1 << 20
	Purge()
	p, n, zero, err := AllocHuge(5*MiB, 9)
	if err != nil || n != 5*MiB || !zero {
		t.Fatalf("AllocHuge(5 MiB): %d bytes, zero %v, %v", n, zero, err)
	}
	b := unsafe.Slice((*byte)(p), n)
	for i := range b {
		b[i] = byte(i/4096) | 1
	}
	if u, tag, ok := FreeHuge(p); !ok || u != n || tag != 9 {
		t.Fatalf("FreeHuge: %d bytes, tag %d, %v", u, tag, ok)
	}
	if st := ReadStats(); st.HugeCached != 5*MiB || st.HugeLive != 0 {
		t.Fatalf("after the free: %d cached, %d live", st.HugeCached, st.HugeLive)
	}
	q, n, zero, err := AllocHuge(5*MiB-100, 9) // the same mapping
	if err != nil || q != p || n != 5*MiB || zero {
		t.Fatalf("AllocHuge again: %p (freed %p), %d bytes, zero %v, %v", q, p, n, zero, err)
	}
	if ReadStats().HugeCached != 0 {
		t.Fatal("taken, still counted cached")
	}
	FreeHuge(q)
	q, n, _, _ = AllocHuge(4*MiB, 9) // a quarter bigger: cut where it lies
	if q != p || n != 4*MiB {
		t.Fatalf("AllocHuge(4 MiB): %p (cached %p), %d bytes", q, p, n)
	}
	FreeHuge(q)
	q, n, zero, _ = AllocHuge(8*MiB, 9) // half of it: grown, its pages moved along
	if n != 8*MiB || zero {
		t.Fatalf("AllocHuge(8 MiB): %d bytes, zero %v", n, zero)
	}
	b = unsafe.Slice((*byte)(q), n)
	for i := 0; i < 4*MiB; i += 4096 {
		if b[i] != byte(i/4096)|1 {
			t.Fatalf("the cached mapping's page %d did not come along", i/4096)
		}
	}
	FreeHuge(q)
	for deadline := time.Now().Add(2 * time.Second); ReadStats().HugeCached != 0; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("still %d bytes cached 2 s after the free (purge delay %v)", ReadStats().HugeCached, a.opt.PurgeDelay)
		}
	}
	q, _, _, _ = AllocHuge(3*MiB, 9)
	FreeHuge(q)
	if ReadStats().HugeCached != 3*MiB {
		t.Fatal("not cached")
	}
	Purge()
	if st := ReadStats(); st.HugeCached != 0 || st.FreeResident != 0 {
		t.Fatalf("after Purge: %d cached, %d free resident", st.HugeCached, st.FreeResident)
	}
}

// Random large and huge block operations, resizes among them: after each,
// the free spans are filed and joined right (checkFreeSpans), every page
// handed out is in use or free (none lost), the dirty
// bytes are the dirty spans' (walked), the spans in use are the live
// blocks' (besides what other tests hold), every page of a live block
// finds it, and its first and last bytes are its own.
func TestArenaRandomOps(t *testing.T) {
	const page = sizeclass.PageSize
	rng := rand.New(rand.NewPCG(3, 5))
	type blk struct {
		s    *Span          // large, or nil
		p    unsafe.Pointer // its start
		n    uintptr        // usable bytes
		seed byte
	}
	var live []blk
	inUse0 := a.inUse.Load()
	mark := func(b blk) {
		*(*byte)(b.p) = b.seed
		*(*byte)(unsafe.Add(b.p, b.n-1)) = b.seed ^ 0xff
	}
	check := func(b blk) {
		t.Helper()
		if *(*byte)(b.p) != b.seed || *(*byte)(unsafe.Add(b.p, b.n-1)) != b.seed^0xff {
			t.Fatalf("a block of %d bytes lost its bytes", b.n)
		}
		if b.s != nil {
			checkFinds(t, b.s)
		}
	}
	dirtyWalked := func() (n uint64) {
		for i := a.dirty; i != 0; i = spanAt(i).dnext {
			n += uint64(spanAt(i).Bytes())
		}
		return n
	}
	for op := 0; op < 3000; op++ {
		switch r := rng.IntN(10); {
		case r < 4 || len(live) == 0:
			n := uintptr(sizeclass.MaxSmall+1) + uintptr(rng.IntN(40*int(page)))
			if rng.IntN(8) == 0 { // huge
				p, u, _, err := AllocHuge(n, 1)
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, blk{nil, p, u, byte(op)})
			} else {
				s, err := AllocLarge(n, 1)
				if err != nil {
					t.Fatal(err)
				}
				live = append(live, blk{s, s.Start(), s.Bytes(), byte(op)})
			}
			mark(live[len(live)-1])
		case r < 7:
			k := rng.IntN(len(live))
			b := &live[k]
			check(*b)
			n := uintptr(sizeclass.MaxSmall+1) + uintptr(rng.IntN(60*int(page)))
			if b.s != nil {
				if u := ResizeLarge(b.s, b.p, n, nil); u != 0 {
					b.n = u
					if *(*byte)(b.p) != b.seed {
						t.Fatal("a resized block lost its first byte")
					}
					mark(*b)
				}
			} else {
				m := (n + 4095) &^ 4095
				if q := ResizeHuge(b.p, m, nil); q != nil {
					if *(*byte)(q) != b.seed {
						t.Fatal("a remapped block lost its first byte")
					}
					b.p, b.n = q, m
					mark(*b)
				}
			}
		default:
			k := rng.IntN(len(live))
			b := live[k]
			check(b)
			if b.s != nil {
				FreeLarge(b.s, b.p)
			} else if _, _, ok := FreeHuge(b.p); !ok {
				t.Fatal("FreeHuge of a live block")
			}
			live[k] = live[len(live)-1]
			live = live[:len(live)-1]
		}
		free := checkFreeSpans(t)
		a.mu.Lock()
		d, w := a.dirtyBytes.Load(), dirtyWalked()
		top, inUse := a.top, a.inUse.Load()
		a.mu.Unlock()
		if uint64(free)+inUse/page != uint64(top-1) { // every page handed out is in use or free
			t.Fatalf("op %d: %d pages free and %d in use, %d handed out", op, free, inUse/page, top-1)
		}
		if d != w {
			t.Fatalf("op %d: %d dirty bytes counted, %d on the dirty list", op, d, w)
		}
		var spans uint64
		for _, b := range live {
			if b.s != nil {
				spans += uint64(b.n)
			}
		}
		if got := a.inUse.Load() - inUse0; got != spans {
			t.Fatalf("op %d: %d bytes of spans in use more than before, the live blocks' %d", op, got, spans)
		}
	}
	for _, b := range live {
		check(b)
		if b.s != nil {
			FreeLarge(b.s, b.p)
		} else {
			FreeHuge(b.p)
		}
	}
	checkFreeSpans(t)
}

// TestEmptiedSpansPurged: spans every block of which another cache freed
// are purged where they are at the purge timer's second look (emptied.go),
// their owner's next refill takes them back empty and gives them to the
// arena; a span its owner collects between the looks is not purged. The
// looks are made here (the timer is kept away).
func TestEmptiedSpansPurged(t *testing.T) {
	noPurgeByAge(t)
	owner, other := newTestCache(), newTestCache()
	const class = 20 // 416 B, 157 per span
	n := int(sizeclass.Classes[class].Objects)
	var blocks []unsafe.Pointer
	for len(blocks) < 3*n { // two full spans and a current one with every block out
		p := popOrNew(t, owner, class, 2)
		unsafe.Slice((*byte)(p), 416)[100] = 0x5a
		blocks = append(blocks, p)
	}
	spans := []*Span{SpanOf(blocks[0]), SpanOf(blocks[n]), SpanOf(blocks[2*n])}
	if spans[2] != owner.Cur(class) || spans[2].used != uint32(n) || spans[0].state != stateFull || spans[1].state != stateFull {
		t.Fatalf("spans: states %d %d %d, current %p used %d", spans[0].state, spans[1].state, spans[2].state, owner.Cur(class), spans[2].used)
	}
	free := func(bs []unsafe.Pointer) {
		for _, p := range bs {
			if s := SpanOf(p); !other.Free(s, p, Check(s, p, 1)) {
				t.Fatal(TakeMisuse())
			}
		}
		ReleaseSpans(other.TakeRelease()) // as alloc does after a free: arms the timer
	}
	look := func() {
		a.mu.Lock()
		lookEmptiedLocked()
		a.mu.Unlock()
	}
	live := func() (blocks int) {
		Walk(func(tag uint32, usable uintptr) {
			if tag == 2 && usable == 416 {
				blocks++
			}
		})
		return blocks
	}
	before := live()
	free(blocks[:n])   // the first full span
	free(blocks[2*n:]) // the current one
	if p := a.emptiedPending.Load(); p != 2 {
		t.Fatalf("%d spans noted emptied, want 2", p)
	}
	look()
	for _, i := range []int{0, 2} {
		if w := spans[i].remote.Load(); w&remoteSeen == 0 || w&remotePurged != 0 || unsafe.Slice((*byte)(blocks[i*n+1]), 416)[100] != 0x5a {
			t.Fatalf("span %d after the first look: word %#x", i, w)
		}
	}
	look()
	for _, i := range []int{0, 2} {
		if w := spans[i].remote.Load(); w&remotePurged == 0 || remoteCount(w) != uint32(n) {
			t.Fatalf("span %d after the second look: word %#x", i, w)
		}
		for _, p := range blocks[i*n : (i+1)*n] {
			if b := unsafe.Slice((*byte)(p), 416); b[100] != 0 || *(*uint64)(unsafe.Add(p, 8)) != 0 {
				t.Fatalf("span %d: a block of it still holds its bytes after the purge", i)
			}
		}
	}
	if got := live(); got != before-2*n {
		t.Fatalf("the walk counts %d blocks, want %d (the purged spans' none)", got, before-2*n)
	}
	// The owner's refill takes both back, empty, and gives them back.
	inUse := ReadStats().SpansInUse
	if p, _ := owner.Refill(class, 2); p != nil {
		t.Fatal("a block from an emptied span")
	}
	ReleaseSpans(owner.TakeRelease())
	if SpanOf(blocks[0]) != nil || SpanOf(blocks[2*n]) != nil || ReadStats().SpansInUse != inUse-2*uint64(sizeclass.Classes[class].Pages)<<sizeclass.PageShift {
		t.Fatalf("the emptied spans were not given back (in use %d -> %d)", inUse, ReadStats().SpansInUse)
	}
	// Collected between the looks: kept as it was, never purged.
	free(blocks[n : 2*n])
	look()
	if p, _ := owner.Refill(class, 2); p != nil {
		t.Fatal("a block from an emptied span")
	}
	if s := spans[1]; s.used != 0 || s.remote.Load() != 0 || unsafe.Slice((*byte)(blocks[n+1]), 416)[100] != 0x5a {
		t.Fatalf("collected after the first look: used %d, word %#x", s.used, s.remote.Load())
	}
	look()
	if a.emptiedPending.Load() != 0 {
		t.Fatalf("a collected span looked at again: %d pending", a.emptiedPending.Load())
	}
	ReleaseSpans(owner.TakeRelease())
	if SpanOf(blocks[n]) != nil {
		t.Fatal("the span collected between the looks was not given back")
	}
}

// TestSweepGivesBackMixedSpans: a span whose blocks came back partly to
// its owner (local frees) and partly from another cache is empty, on the
// owner's partial list, with no one to see it while its class is not
// refilled: the owner's sweep (every sweepEvery-th Refill of any class,
// at most once a purge delay) gives it back.
func TestSweepGivesBackMixedSpans(t *testing.T) {
	owner, other := newTestCache(), newTestCache()
	const class, otherClass = 21, 22 // 448 B and 480 B
	n := int(sizeclass.Classes[class].Objects)
	var blocks []unsafe.Pointer
	for len(blocks) < 2*n { // a full span, and a current one
		blocks = append(blocks, popOrNew(t, owner, class, 2))
	}
	s := SpanOf(blocks[0])
	for i, p := range blocks[:n] { // every other block freed here, the rest elsewhere
		c := owner
		if i%2 == 1 {
			c = other
		}
		if !c.Free(s, p, Check(s, p, 1)) {
			t.Fatal(TakeMisuse())
		}
	}
	ReleaseSpans(other.TakeRelease())
	if s.state != statePartial || remoteCount(s.remote.Load()) != s.used || s.used == 0 {
		t.Fatalf("mixed span: state %d, used %d, remote %d", s.state, s.used, remoteCount(s.remote.Load()))
	}
	// Refills of another class: the sweep waits for its turn and its delay.
	popOrNew(t, owner, otherClass, 2)
	owner.refills = sweepEvery - 2
	owner.lastSweep = int64(time.Since(a.start)) // just swept
	owner.Refill(otherClass, 2)
	owner.Refill(otherClass, 2)
	if SpanOf(blocks[0]) != s || s.state != statePartial {
		t.Fatal("swept before a purge delay passed")
	}
	owner.refills = sweepEvery - 1
	owner.lastSweep -= int64(a.opt.PurgeDelay)
	owner.Refill(otherClass, 2)
	ReleaseSpans(owner.TakeRelease())
	if SpanOf(blocks[0]) != nil {
		t.Fatalf("the emptied span stayed: state %d, used %d", s.state, s.used)
	}
	for _, p := range blocks[n:] { // the current span's, freed at home
		s := SpanOf(p)
		owner.Free(s, p, Check(s, p, 1))
	}
	ReleaseSpans(owner.TakeRelease())
}
