package arena

import (
	"testing"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/sizeclass"
)

func init() {
	if err := Init(Options{PurgeDelay: 20 * time.Millisecond, RetainBytes: 1 << 20}); err != nil {
		panic(err)
	}
}

// checkFreeSpans walks the bins: every free span is filed once, in the
// right bin, with its tail marked, and no two free spans touch (they
// would have been coalesced). It returns the free pages.
func checkFreeSpans(t *testing.T) uint32 {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	seen := map[uint32]bool{}
	total := uint32(0)
	for b := range a.bins {
		for i := a.bins[b]; i != 0; i = spanAt(i).next {
			s := spanAt(i)
			if s.kind != kindFree || binOf(s.npages) != uint32(b) || seen[i] {
				t.Fatalf("span %d: kind %d, %d pages in bin %d (seen %v)", i, s.kind, s.npages, b, seen[i])
			}
			if s.npages > 1 && (spanAt(i+s.npages-1).kind != kindFreeTail || spanAt(i+s.npages-1).headOff != s.npages-1) {
				t.Fatalf("span %d: tail not marked", i)
			}
			seen[i] = true
			total += s.npages
		}
	}
	for i := range seen {
		if n := spanAt(i).npages; seen[i+n] {
			t.Fatalf("free spans %d and %d touch", i, i+n)
		}
	}
	return total
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
		// Every page of the span finds it, including interior addresses.
		for off := uintptr(0); off < s.Bytes(); off += sizeclass.PageSize / 2 {
			if got := SpanOf(unsafe.Add(s.Start(), off)); got != s {
				t.Fatalf("SpanOf(start+%d) = %p, want %p", off, got, s)
			}
		}
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
	deadline := time.Now().Add(2 * time.Second)
	for ReadStats().FreeResident != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the purge timer did not purge the free span")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestCacheRemoteFreesComeBack(t *testing.T) {
	owner, other := NewCache(10, 4), NewCache(11, 4)
	owner.SetBins(2, NewBins())
	other.SetBins(2, NewBins())
	const class = 20 // 416 B, 157 per span
	cl := sizeclass.Classes[class]
	var blocks []unsafe.Pointer
	for len(blocks) < int(cl.Objects)*2 { // two full spans
		p, _ := owner.Cur(2, class).Pop()
		if p == nil {
			if p, _ = owner.Refill(2, class); p == nil {
				s, err := NewSmall(class, 2)
				if err != nil {
					t.Fatal(err)
				}
				p, _ = owner.Install(s)
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
	s := owner.Cur(2, class)
	for s.hasFree() {
		s.Pop()
	}
	before := ReadStats().SpansInUse
	owner.Refill(2, class)
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
