package alloc

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// usable is the size the books charge for a request of n bytes.
func usable(n int) uint64 {
	switch {
	case n <= sizeclass.MaxSmall:
		return uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(n))].Size)
	case uintptr(n) >= arena.HugeMin():
		return uint64(n+4095) &^ 4095
	default:
		return uint64(n+sizeclass.PageSize-1) &^ (sizeclass.PageSize - 1)
	}
}

// model is what the books should say about a tag.
type model struct{ liveB, liveN, allocB, allocN, liveReq uint64 }

func (m *model) alloc(n int) {
	m.liveB += usable(n)
	m.allocB += usable(n)
	m.liveN++
	m.allocN++
	m.liveReq += uint64(n)
}
func (m *model) free(n int) { m.liveB -= usable(n); m.liveN--; m.liveReq -= uint64(n) }

// realloc is Realloc from old to n bytes of a block of was usable bytes
// (huge: a mapping of its own), whose start after is at the same address
// or not (same); it returns the block's usable bytes after and whether it
// is huge. A move is a new block; a block resized where it lies is
// counted its growth (allocated) or its shrink (freed).
func (m *model) realloc(was uint64, huge bool, old, n int, same bool) (uint64, bool) {
	now, nowHuge, moved := reallocUsable(was, huge, old, n, same)
	m.liveB += now - was
	m.liveReq += uint64(n) - uint64(old)
	if moved {
		m.allocB += now
		m.allocN++
	} else if now > was {
		m.allocB += now - was
	}
	return now, nowHuge
}

// reallocUsable is the usable size of the block Realloc leaves for n > 0
// bytes of a block of was usable bytes (huge: a mapping of its own) last
// asked for old, whether it is huge, and whether it moved to a new block
// (Realloc's rules). same says whether the block's start stayed, the
// one thing the rules leave to the arena: whether the free pages after a
// large block let it grow there.
//
// A small block stays if n fits and is at least half of it; one of 1 KiB
// or more growing within the small classes moves on the grid. A large
// block stays when n needs the same pages or grows within them (old <= n
// <= was), shrinks where it lies to n's pages, and grows where it lies
// (same) or moves to the pages of a quarter more than was (n's if more,
// or if that room is huge). A huge block stays when n fits and is at
// least half of it, or grows into it (n >= old), and is otherwise
// remapped to n's OS pages, an eighth more if it grows. A move to HugeMin
// or more makes a huge block, of n's OS pages.
func reallocUsable(was uint64, huge bool, old, n int, same bool) (now uint64, nowHuge, moved bool) {
	pages4K := func(x uint64) uint64 { return (x + 4095) &^ 4095 }
	big := n > sizeclass.MaxSmall
	switch {
	case huge && big:
		need := pages4K(uint64(n))
		switch {
		case need <= was && (need >= was/2 || n >= old):
			return was, true, false
		case need > was:
			return pages4K(need + need/8), true, false
		}
		return need, true, false
	case !huge && was > sizeclass.MaxSmall && big && uintptr(n) < arena.HugeMin():
		switch {
		case usable(n) == was || (n >= old && uint64(n) <= was):
			return was, false, false
		case uint64(n) < was || same:
			return usable(n), false, false
		}
		if room := max(was+was/4, uint64(n)); uintptr(room) < arena.HugeMin() {
			return usable(int(room)), false, true
		}
	case !huge && was <= sizeclass.MaxSmall:
		switch {
		case uint64(n) <= was && uint64(n) >= was/2:
			return was, false, false
		case uint64(n) > was && n <= sizeclass.MaxSmall && was >= 1024:
			return gridAtLeast(n), false, true
		}
	}
	if uintptr(n) >= arena.HugeMin() {
		return pages4K(uint64(n)), true, true
	}
	return usable(n), false, true
}

// gridAtLeast is the smallest of 1, 1.25, 1.5 and 1.75 times a power of
// two that is n or more (1024 < n <= MaxSmall), apart from the class
// table (the native api_test's grid_at_least).
func gridAtLeast(n int) uint64 {
	for p := uint64(1024); ; p *= 2 {
		for m := uint64(4); m < 8; m++ {
			if m*p/4 >= uint64(n) {
				return m * p / 4
			}
		}
	}
}
func statOf(t *testing.T, name string) TagStat {
	t.Helper()
	for _, s := range TagStats() {
		if s.Name == name {
			return s
		}
	}
	return TagStat{Name: name}
}

func checkModel(t *testing.T, name string, m model) {
	t.Helper()
	s := statOf(t, name)
	got := model{s.LiveBytes, s.LiveBlocks, s.AllocBytes, s.AllocBlocks, s.LiveRequestedBytes}
	if got != m {
		t.Fatalf("tag %s: books %+v, want %+v", name, got, m)
	}
	if s.PeakLiveBytes < s.LiveBytes {
		t.Fatalf("tag %s: peak %d below live %d", name, s.PeakLiveBytes, s.LiveBytes)
	}
}

// sizes crosses small classes, the small/large and large/huge edges.
var sizes = []int{1, 15, 16, 17, 64, 100, 128, 129, 1000, 4096, 40000, 65536, 65537,
	sizeclass.MaxSmall - 1, sizeclass.MaxSmall, sizeclass.MaxSmall + 1, 3 << 20, 32<<20 - 1, 32 << 20, 33<<20 + 5}

func TestTagStatsExact(t *testing.T) {
	tags := []string{"exact-a", "exact-b", "exact-c"}
	models := map[string]*model{}
	type blk struct {
		b   []byte
		tag string
	}
	var live []blk
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 600; i++ {
		tag := tags[i%len(tags)]
		n := sizes[rng.IntN(len(sizes))]
		if n >= 1<<20 && rng.IntN(4) != 0 {
			n = 1 + rng.IntN(2000) // keep the big ones few
		}
		if models[tag] == nil { // from the books as they are (go test -count=N runs this again)
			st := statOf(t, tag)
			models[tag] = &model{st.LiveBytes, st.LiveBlocks, st.AllocBytes, st.AllocBlocks, st.LiveRequestedBytes}
		}
		b := Malloc(n, tag)
		if len(b) != n || cap(b) != n {
			t.Fatalf("Malloc(%d): len %d cap %d", n, len(b), cap(b))
		}
		models[tag].alloc(n)
		live = append(live, blk{b, tag})
	}
	for _, tag := range tags {
		checkModel(t, tag, *models[tag])
	}
	// Free half here, the other half from other goroutines (other shards).
	rng.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
	half := len(live) / 2
	for _, x := range live[:half] {
		Free(x.b)
		models[x.tag].free(len(x.b))
	}
	var wg sync.WaitGroup
	ch := make(chan blk)
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for x := range ch {
				Free(x.b)
			}
		}()
	}
	for _, x := range live[half:] {
		ch <- x
		models[x.tag].free(len(x.b))
	}
	close(ch)
	wg.Wait()
	for _, tag := range tags {
		checkModel(t, tag, *models[tag])
	}
	// Handles count the same books.
	h := MustTag("exact-a")
	b := h.Calloc(200)
	models["exact-a"].alloc(200)
	if st := h.Stats(); st.LiveBytes != models["exact-a"].liveB || st.Name != "exact-a" {
		t.Fatalf("Tag.Stats %+v, want live %d", st, models["exact-a"].liveB)
	}
	Free(b)
	models["exact-a"].free(200)
	checkModel(t, "exact-a", *models["exact-a"])
	checkWalk(t)
}

func TestUntaggedAndZero(t *testing.T) {
	before := statOf(t, "untagged")
	b := Malloc(100, "")
	if st := statOf(t, "untagged"); st.LiveBytes != before.LiveBytes+usable(100) {
		t.Fatalf(`Malloc(n, "") not charged to untagged: %+v then %+v`, before, st)
	}
	Free(b)
	z := Malloc(0, "zero")
	if z == nil || len(z) != 0 || cap(z) != 0 {
		t.Fatalf("Malloc(0) = %v (nil %v), want an empty non-nil slice", z, z == nil)
	}
	Free(z)
	Free(nil)
	if st := statOf(t, "zero"); st.AllocBlocks != 0 {
		t.Fatalf("Malloc(0) counted: %+v", st)
	}
}

func TestCallocZeroes(t *testing.T) {
	for _, n := range sizes {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			// Dirty a block, free it, and Calloc the same size: often the same memory.
			for round := 0; round < 3; round++ {
				b := Malloc(n, "calloc")
				for i := range b {
					b[i] = 0xa5
				}
				Free(b)
				c := Calloc(n, "calloc")
				if i := bytes.IndexFunc(c, func(r rune) bool { return r != 0 }); i >= 0 {
					t.Fatalf("Calloc(%d) byte %d is %#x", n, i, c[i])
				}
				Free(c)
			}
		})
	}
}

func TestReallocKeepsDataAndTag(t *testing.T) {
	// 5000 -> 4000 stays (at least half of 5120), 5121 moves on the grid
	// to 6144 and grows into it, 3072 is half of it, 3071 moves.
	steps := []int{10, 16, 17, 100, 5000, 5000, 4000, 5121, 6144, 3072, 3071, sizeclass.MaxSmall, sizeclass.MaxSmall + 1,
		2 << 20, 2<<20 + 10, 40 << 20, 40<<20 + 100, 3 << 20, 1000, 1}
	before := statOf(t, "realloc")
	b := Malloc(steps[0], "realloc")
	for i := range b {
		b[i] = byte(i*7 + 1)
	}
	var m model
	m.alloc(steps[0])
	u, huge := usable(steps[0]), false
	for _, n := range steps[1:] {
		old, p := len(b), unsafe.SliceData(b)
		b = Realloc(b, n)
		u, huge = m.realloc(u, huge, old, n, unsafe.SliceData(b) == p)
		if got := blockUsable(t, b); got != u {
			t.Fatalf("Realloc %d -> %d: %d usable, want %d", old, n, got, u)
		}
		if len(b) != n || cap(b) != n {
			t.Fatalf("Realloc to %d: len %d cap %d", n, len(b), cap(b))
		}
		for i := 0; i < min(old, n); i++ {
			if b[i] != byte(i*7+1) {
				t.Fatalf("Realloc %d -> %d: byte %d is %d", old, n, i, b[i])
			}
		}
		for i := old; i < n; i++ {
			b[i] = byte(i*7 + 1)
		}
		st := statOf(t, "realloc")
		if st.LiveBytes != m.liveB || st.LiveBlocks != 1 || st.LiveRequestedBytes != uint64(n) ||
			st.AllocBytes-before.AllocBytes != m.allocB || st.AllocBlocks-before.AllocBlocks != m.allocN {
			t.Fatalf("after Realloc to %d: %+v, want live %d in 1 block, requested %d, %d bytes in %d blocks allocated",
				n, st, m.liveB, n, m.allocB, m.allocN)
		}
	}
	Free(b)
	if st := statOf(t, "realloc"); st.LiveBytes != 0 || st.LiveBlocks != 0 || st.LiveRequestedBytes != 0 {
		t.Fatalf("after Free: %+v", st)
	}
	if r := Realloc(nil, 10); len(r) != 10 {
		t.Fatal("Realloc(nil, 10)")
	} else if e := Realloc(r, 0); len(e) != 0 || cap(e) != 0 {
		t.Fatal("Realloc(b, 0) should free b and return an empty slice")
	}
}

// blockUsable is the usable size of the block b starts, of any kind.
func blockUsable(t *testing.T, b []byte) uint64 {
	t.Helper()
	p := unsafe.Pointer(unsafe.SliceData(b))
	sp := arena.SpanOf(p)
	switch {
	case sp == nil:
		u, _, ok := arena.HugeOf(p)
		if !ok {
			t.Fatalf("a block of %d bytes is not a block", cap(b))
		}
		return uint64(u)
	case sp.Large():
		return uint64(sp.Bytes())
	}
	return uint64(sp.BlockSize())
}

// blockSize is the usable size of the small block b starts.
func blockSize(t *testing.T, b []byte) uint64 {
	t.Helper()
	sp := arena.SpanOf(unsafe.Pointer(unsafe.SliceData(b)))
	if sp == nil || sp.Large() {
		t.Fatalf("a block of %d bytes is not small", cap(b))
	}
	return uint64(sp.BlockSize())
}

// fillAt writes a pattern into b; checkAt checks its first n bytes.
func fillAt(b []byte) {
	for i := range b {
		b[i] = byte(i*7 + 3)
	}
}

func checkAt(t *testing.T, b []byte, n int) {
	t.Helper()
	for i := range n {
		if b[i] != byte(i*7+3) {
			t.Fatalf("a block of %d bytes lost data: byte %d is %d", len(b), i, b[i])
		}
	}
}

// The grid is the odd classes from 1 KiB: sizeclass.ClassOf(n)|1 is the
// smallest of 1, 1.25, 1.5 and 1.75 times a power of two that holds n
// (the native realloc's _ta_classes[_ta_class_of(n) | 1]: the cgo
// package's TestClassesAgreeWithGo checks the two number the classes
// alike).
func TestReallocGridIsOddClasses(t *testing.T) {
	for n := 1025; n <= sizeclass.MaxSmall; n++ {
		if got, want := uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(n))|1].Size), gridAtLeast(n); got != want {
			t.Fatalf("%d bytes: class %d (%d bytes), the grid's %d", n, sizeclass.ClassOf(uint32(n))|1, got, want)
		}
	}
}

// A small block of 1 KiB or more grown out of its block moves to the
// grid's class that holds the new size, charged as that class with the
// size asked; grown into it, it stays. 7680 -> 7732 bytes stops at 8192
// (redis's list nodes; n's class would be 8192 too, a quarter more room
// 9600 or more).
func TestReallocGrowsOnTheGrid(t *testing.T) {
	for _, tc := range []struct{ size, grow int }{
		{1000, 1}, {2000, 1}, {5000, 1}, {7680, 52}, {70000, 1}, {430000, 1},
	} {
		b := Malloc(tc.size, "realloc-grid")
		fillAt(b)
		was := blockSize(t, b)
		to := int(was) + tc.grow
		want := gridAtLeast(to)
		before := statOf(t, "realloc-grid")
		b = Realloc(b, to)
		checkAt(t, b, tc.size)
		if got := blockSize(t, b); got != want {
			t.Fatalf("grown from %d to %d: %d usable, want the grid's %d", was, to, got, want)
		}
		st := statOf(t, "realloc-grid")
		if st.LiveBytes-before.LiveBytes != want-was || st.AllocBytes-before.AllocBytes != want ||
			st.AllocBlocks-before.AllocBlocks != 1 || st.LiveRequestedBytes-before.LiveRequestedBytes != uint64(to-tc.size) {
			t.Fatalf("grown from %d to %d: books %+v, before %+v, want a block of %d bytes, %d asked", was, to, st, before, want, to)
		}
		fillAt(b)
		p := unsafe.SliceData(b)
		for _, n := range []int{to + 1, int(want)} {
			if b = Realloc(b, n); unsafe.SliceData(b) != p {
				t.Fatalf("grown from %d to %d into its %d bytes: it moved", to, n, want)
			}
			checkAt(t, b, to)
		}
		if st := statOf(t, "realloc-grid"); st.LiveBytes-before.LiveBytes != want-was || st.AllocBlocks-before.AllocBlocks != 1 ||
			st.LiveRequestedBytes-before.LiveRequestedBytes != want-uint64(tc.size) {
			t.Fatalf("grown into its room: books %+v, before %+v", st, before)
		}
		Free(b)
	}
	if st := statOf(t, "realloc-grid"); st.LiveBytes != 0 || st.LiveBlocks != 0 || st.LiveRequestedBytes != 0 {
		t.Fatalf("after Free: %+v", st)
	}
}

// A large block grown past its pages grows where it lies when the pages
// after it are free, and otherwise moves to the pages of a quarter more
// than it had, which it grows into in place: a buffer grown 64 KiB at a
// time from 600 KiB to 4 MiB moves at most 8 times in 54 steps (every
// step moved before), and the books count each block's pages, the sizes
// asked.
func TestReallocLargeGrowsIntoRoom(t *testing.T) {
	const from, to, step = 600 << 10, 4 << 20, 64 << 10
	b, next := blockedLarge(t, from, "realloc-room")
	before := statOf(t, "realloc-room") // b's block in it
	fillAt(b)
	u := usable(from)
	moves, steps := 0, 0
	for n := from + step; n <= to; n += step {
		p, old := unsafe.SliceData(b), len(b)
		b = Realloc(b, n)
		checkAt(t, b, old)
		fillAt(b)
		same := unsafe.SliceData(b) == p
		var moved bool
		if u, _, moved = reallocUsable(u, false, old, n, same); moved == same {
			t.Fatalf("%d -> %d: moved %v, want %v", old, n, !same, moved)
		}
		if got := blockUsable(t, b); got != u {
			t.Fatalf("%d -> %d: %d usable, want %d", old, n, got, u)
		}
		if moved {
			moves++
		}
		steps++
	}
	if moves == 0 || moves > 8 || steps != 54 {
		t.Fatalf("%d moves in %d steps, want 1 to 8 in 54 (the first step moves: a block in use lies after it)", moves, steps)
	}
	Free(next)
	st := statOf(t, "realloc-room")
	if st.LiveBytes-before.LiveBytes != u-usable(from) || st.LiveBlocks != before.LiveBlocks ||
		st.AllocBlocks-before.AllocBlocks != uint64(moves) || st.LiveRequestedBytes-before.LiveRequestedBytes != uint64(len(b)-from) {
		t.Fatalf("books %+v, before %+v: want one live block of %d bytes, %d asked, %d made", st, before, u, len(b), moves)
	}
	Free(b)
	if st := statOf(t, "realloc-room"); st.LiveBytes != before.LiveBytes-usable(from) || st.LiveRequestedBytes != before.LiveRequestedBytes-from {
		t.Fatalf("after Free: %+v, before %+v", st, before)
	}
}

// blockedLarge is a large block of n bytes of tag, and the large block
// (untagged) in use right after it: Realloc cannot grow the first where
// it lies. The arena hands out the best fitting free span, else pages
// from its top, so the blocks it holds while it looks come from the top,
// one after the other, once they have taken every free span that fits.
func blockedLarge(t *testing.T, n int, tag string) (b, next []byte) {
	t.Helper()
	var held [][]byte
	defer func() {
		for _, h := range held {
			Free(h)
		}
	}()
	for range 100000 {
		b, next = Malloc(n, tag), Malloc(sizeclass.MaxSmall+1, "")
		if unsafe.Pointer(unsafe.SliceData(next)) == unsafe.Add(unsafe.Pointer(unsafe.SliceData(b)), usable(n)) {
			return b, next
		}
		held = append(held, b, next)
	}
	t.Fatalf("no two large blocks one after the other in %d tries", len(held)/2)
	return nil, nil
}

// A large block shrunk to fewer pages keeps its start and gives the rest
// back; grown again, it takes the free pages after it where it lies. The
// books count the pages it gives and takes (freed, allocated), no block
// made.
func TestReallocLargeResizesInPlace(t *testing.T) {
	before := statOf(t, "realloc-inplace")
	b := Malloc(2<<20, "realloc-inplace")
	fillAt(b)
	p := unsafe.SliceData(b)
	// Within its first 2 MiB: the pages past them may be another block's.
	for _, n := range []int{600 << 10, 1<<20 + 1, 2<<20 - 1, sizeclass.MaxSmall + 1, 2 << 20} {
		old := len(b)
		if b = Realloc(b, n); unsafe.SliceData(b) != p {
			t.Fatalf("%d -> %d: moved (the pages after it are free)", old, n)
		}
		checkAt(t, b, min(old, n))
		fillAt(b)
		if got := blockUsable(t, b); got != usable(n) {
			t.Fatalf("%d -> %d: %d usable, want %d", old, n, got, usable(n))
		}
		st := statOf(t, "realloc-inplace")
		if st.LiveBytes-before.LiveBytes != usable(n) || st.LiveBlocks-before.LiveBlocks != 1 || st.AllocBlocks-before.AllocBlocks != 1 ||
			st.LiveRequestedBytes-before.LiveRequestedBytes != uint64(n) {
			t.Fatalf("%d -> %d: books %+v, before %+v", old, n, st, before)
		}
	}
	// allocated: 2 MiB, then the growths 640 KiB -> 1088 KiB -> 2 MiB and 576 KiB -> 2 MiB
	if st := statOf(t, "realloc-inplace"); st.AllocBytes-before.AllocBytes != (2<<20)+(2<<20-640<<10)+(2<<20-576<<10) {
		t.Fatalf("allocated %d bytes", st.AllocBytes-before.AllocBytes)
	}
	Free(b)
	if st := statOf(t, "realloc-inplace"); st.LiveBytes != before.LiveBytes || st.LiveRequestedBytes != before.LiveRequestedBytes {
		t.Fatalf("after Free: %+v, before %+v", st, before)
	}
}

// A huge block (a mapping of its own) is remapped by Realloc, with an
// eighth more room when it grows and to its OS pages when it would waste
// more than half: no block is made, and the bytes stay. A large block
// growing to HugeMin moves to one. Run in a child with a 4 MiB threshold
// (TAGALLOC_HUGE_THRESHOLD), so that the blocks are a few MiB.
func TestReallocHugeRemaps(t *testing.T) {
	childSays(t, "TestReallocHugeChild", "huge realloc checks passed", "TAGALLOC_HUGE_THRESHOLD=4M")
}

func TestReallocHugeChild(t *testing.T) {
	inChild(t, "TestReallocHugeRemaps")
	before := statOf(t, "realloc-huge")
	b := Malloc(3<<20, "realloc-huge") // large
	if arena.HugeMin() != 4<<20 {
		t.Fatalf("huge threshold %d", arena.HugeMin())
	}
	fillAt(b)
	var m model
	m.alloc(len(b))
	u, huge := usable(len(b)), false
	remaps := 0
	for _, n := range []int{6 << 20, 6<<20 + 100, 6<<20 + 4096, 7 << 20, 12 << 20, 5 << 20, 5<<20 + 1, 3 << 20, 2 << 20, 600 << 10, 200 << 10} {
		old := len(b)
		was, wasHuge := u, huge
		b = Realloc(b, n)
		checkAt(t, b, min(old, n))
		fillAt(b)
		u, huge = m.realloc(u, huge, old, n, false)
		if got := blockUsable(t, b); got != u {
			t.Fatalf("%d -> %d: %d usable, want %d", old, n, got, u)
		}
		if _, _, isHuge := arena.HugeOf(unsafe.Pointer(unsafe.SliceData(b))); isHuge != huge {
			t.Fatalf("%d -> %d: huge %v, want %v", old, n, isHuge, huge)
		}
		if wasHuge && huge && u != was {
			remaps++
		}
		st := statOf(t, "realloc-huge")
		if st.LiveBytes-before.LiveBytes != m.liveB || st.LiveBlocks-before.LiveBlocks != 1 ||
			st.AllocBytes-before.AllocBytes != m.allocB || st.AllocBlocks-before.AllocBlocks != m.allocN {
			t.Fatalf("%d -> %d: books %+v, before %+v; want %+v", old, n, st, before, m)
		}
	}
	// 6 MiB: a move; 6 MiB+100: an eighth more; 6 MiB+4096: in its room;
	// 7 MiB: an eighth more; 12 MiB: again; 5 MiB: less than half, cut;
	// 5 MiB+1: an eighth more; 3 MiB: half of it or more, kept; 2 MiB and
	// 600 KiB: cut; 200 KiB: a small block.
	if m.allocN != 3 || remaps != 7 {
		t.Fatalf("%d blocks made, %d remaps: want 3 (the first, the move to 6 MiB, the one under 512 KiB) and 7", m.allocN, remaps)
	}
	Free(b)
	if st := statOf(t, "realloc-huge"); st.LiveBytes != before.LiveBytes || st.LiveRequestedBytes != before.LiveRequestedBytes {
		t.Fatalf("after Free: %+v, before %+v", st, before)
	}

	// A budget is asked for a remap's growth, its room included.
	require.NoError(t, SetBudget("bt-realloc-huge", 5<<20+512<<10, BudgetFail))
	defer func() { require.NoError(t, SetBudget("bt-realloc-huge", 0, BudgetFail)) }()
	h := Malloc(5<<20, "bt-realloc-huge")
	require.Equal(t, uint64(5<<20), budgetOf(t, "bt-realloc-huge").Charged)
	require.True(t, Realloc(h, 5<<20+4096) == nil, "5 MiB and 4 KiB fit in 5.5 MiB; with an eighth more room they do not")
	require.Equal(t, uint64(5<<20), budgetOf(t, "bt-realloc-huge").Charged)
	checkAt(t, h, 0)
	require.NoError(t, SetBudget("bt-realloc-huge", 16<<20, BudgetFail))
	h = Realloc(h, 5<<20+4096)
	want := uint64(5<<20+4096+(5<<20+4096)/8+4095) &^ 4095 // an eighth more, in OS pages
	require.Equal(t, want, blockUsable(t, h))
	require.Equal(t, want, budgetOf(t, "bt-realloc-huge").Charged)
	h = Realloc(h, 1<<20) // cut: the budget gets it back
	require.Equal(t, uint64(1<<20), budgetOf(t, "bt-realloc-huge").Charged)
	Free(h)
	require.Zero(t, budgetOf(t, "bt-realloc-huge").Charged)

	// A freed huge block's mapping is kept for the next (arena's cache):
	// Malloc takes it as it is, Calloc clears it.
	arena.Purge() // the cache empty: the blocks freed above wait there
	x := Malloc(6<<20, "realloc-huge")
	fillAt(x)
	px := unsafe.SliceData(x)
	Free(x)
	require.Equal(t, uint64(6<<20), arena.ReadStats().HugeCached)
	x = Calloc(6<<20, "realloc-huge")
	require.True(t, unsafe.SliceData(x) == px, "the cached mapping not taken")
	require.Zero(t, arena.ReadStats().HugeCached)
	require.Equal(t, -1, bytes.IndexFunc(x, func(r rune) bool { return r != 0 }), "Calloc of a cached mapping: not zero")
	Free(x)
	// The region says so (tagalloc top reads it), and says when the purge
	// timer has unmapped it, with nothing allocated meanwhile: the
	// figures are published once a second too.
	snap, err := Region().Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(6<<20), snap.Allocator.HugeCached)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		snap, err = Region().Snapshot()
		require.NoError(t, err)
		if snap.Allocator.HugeCached == 0 && arena.ReadStats().HugeCached == 0 {
			break
		}
		require.True(t, time.Now().Before(deadline), "the region still shows %d bytes cached (the arena %d)", snap.Allocator.HugeCached, arena.ReadStats().HugeCached)
	}
	fmt.Println("huge realloc checks passed")
}

// Below 1 KiB a block grown out of its block moves to the class of the
// new size, without room (the grid's class would be larger in each case).
func TestReallocNoRoomBelow1KiB(t *testing.T) {
	for _, tc := range []struct{ size, to int }{{300, 321}, {512, 513}, {600, 641}, {960, 1100}} {
		b := Malloc(tc.size, "realloc-noroom")
		fillAt(b)
		was := blockSize(t, b)
		want := uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(tc.to))].Size)
		if grid := uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(tc.to))|1].Size); was >= 1024 || uint64(tc.to) <= was || grid == want {
			t.Fatalf("bad case %+v: a block of %d bytes, the grid's class %d bytes", tc, was, grid)
		}
		before := statOf(t, "realloc-noroom")
		b = Realloc(b, tc.to)
		checkAt(t, b, tc.size)
		if got := blockSize(t, b); got != want {
			t.Fatalf("grown from %d to %d: %d usable, want %d", was, tc.to, got, want)
		}
		if st := statOf(t, "realloc-noroom"); st.LiveBytes-before.LiveBytes != want-was || st.AllocBytes-before.AllocBytes != want {
			t.Fatalf("grown from %d to %d: books %+v, before %+v", was, tc.to, st, before)
		}
		Free(b)
	}
}

// A small block shrunk to at least half of it stays where it is, still
// charged its usable bytes; below half it moves to the new size's class.
func TestReallocShrinksInPlaceToHalf(t *testing.T) {
	for _, size := range []int{32, 200, 1024, 5000, 100000, sizeclass.MaxSmall} {
		b := Malloc(size, "realloc-shrink")
		fillAt(b)
		was := blockSize(t, b)
		p := unsafe.SliceData(b)
		before := statOf(t, "realloc-shrink")
		half := int(was / 2)
		if b = Realloc(b, half); unsafe.SliceData(b) != p {
			t.Fatalf("%d bytes shrunk to %d, half of its block: it moved", size, half)
		}
		checkAt(t, b, half)
		st := statOf(t, "realloc-shrink")
		if st.LiveBytes != before.LiveBytes || st.AllocBlocks != before.AllocBlocks ||
			before.LiveRequestedBytes-st.LiveRequestedBytes != uint64(size-half) {
			t.Fatalf("%d bytes shrunk to %d in place: books %+v, before %+v", size, half, st, before)
		}
		if b = Realloc(b, half-1); unsafe.SliceData(b) == p {
			t.Fatalf("%d bytes shrunk to %d, below half of its block: it stayed", size, half-1)
		}
		checkAt(t, b, half-1)
		if got, want := blockSize(t, b), usable(half-1); got != want {
			t.Fatalf("%d bytes shrunk to %d: %d usable, want %d", size, half-1, got, want)
		}
		Free(b)
	}
	if st := statOf(t, "realloc-shrink"); st.LiveBytes != 0 || st.LiveBlocks != 0 || st.LiveRequestedBytes != 0 {
		t.Fatalf("after Free: %+v", st)
	}
}

// TestStress: goroutines allocate under a few tags, write a pattern, and
// free their own blocks or hand them to another goroutine, which checks
// the pattern first. Then every tag's books must be back where they were.
// runWorkers runs work(0) to work(n-1) on goroutines of their own, all at
// once, and returns the first error any of them returned once all are done.
func runWorkers(n int, work func(w int) error) error {
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for w := 0; w < n; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- work(w)
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func TestStress(t *testing.T) {
	const workers = 8
	ops := 40000
	if testing.Short() {
		ops = 8000
	}
	tags := []*Tag{MustTag("stress-0"), MustTag("stress-1"), MustTag("stress-2")}
	var before []TagStat
	for _, tg := range tags {
		before = append(before, tg.Stats())
	}
	chans := make([]chan []byte, workers)
	for i := range chans {
		chans[i] = make(chan []byte, 64)
	}
	fill := func(b []byte) {
		seed := byte(len(b)*31) ^ byte(uintptr(len(b))>>8)
		for i := range b {
			b[i] = seed + byte(i)
		}
	}
	check := func(b []byte) error {
		seed := byte(len(b)*31) ^ byte(uintptr(len(b))>>8)
		for i := range b {
			if b[i] != seed+byte(i) {
				return fmt.Errorf("block of %d bytes: byte %d is %d, want %d", len(b), i, b[i], seed+byte(i))
			}
		}
		return nil
	}
	err := runWorkers(workers, func(w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 99))
		var mine [][]byte
		var err error
		for i := 0; i < ops && err == nil; i++ {
			select {
			case b := <-chans[w]:
				err = check(b)
				Free(b)
				continue
			default:
			}
			switch r := rng.IntN(100); {
			case r < 45 || len(mine) == 0:
				n := 1 + rng.IntN(600)
				if rng.IntN(50) == 0 {
					n = rng.IntN(sizeclass.MaxSmall + 200000)
				}
				b := tags[rng.IntN(len(tags))].Malloc(n)
				fill(b)
				mine = append(mine, b)
			case r < 50:
				k := rng.IntN(len(mine))
				if err = check(mine[k]); err == nil {
					mine[k] = Realloc(mine[k], 1+rng.IntN(3000))
					fill(mine[k])
				}
			default:
				k := rng.IntN(len(mine))
				b := mine[k]
				mine[k] = mine[len(mine)-1]
				mine = mine[:len(mine)-1]
				if err = check(b); err != nil {
					break
				}
				if r < 75 {
					Free(b)
				} else {
					select {
					case chans[rng.IntN(workers)] <- b:
					default:
						Free(b)
					}
				}
			}
		}
		for _, b := range mine {
			if err == nil {
				err = check(b)
			}
			Free(b)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range chans {
		close(c)
		for b := range c {
			if err := check(b); err != nil {
				t.Fatal(err)
			}
			Free(b)
		}
	}
	for i, tg := range tags {
		st := tg.Stats()
		if st.LiveBytes != before[i].LiveBytes || st.LiveBlocks != before[i].LiveBlocks || st.LiveRequestedBytes != before[i].LiveRequestedBytes {
			t.Fatalf("%s after everything was freed: %+v, before %+v", tg.Name(), st, before[i])
		}
		if st.AllocBlocks <= before[i].AllocBlocks {
			t.Fatalf("%s allocated nothing?", tg.Name())
		}
	}
	checkWalk(t)
}

func TestGoHeapDoesNotGrow(t *testing.T) {
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	var bs [][]byte
	total := 0
	for total < 400<<20 {
		n := 1 << 20
		if len(bs)%2 == 0 {
			n = 4000 // small blocks too
		}
		b := Malloc(n, "offheap")
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		bs = append(bs, b)
		total += n
	}
	runtime.ReadMemStats(&m1)
	grew := int64(m1.HeapAlloc) - int64(m0.HeapAlloc)
	t.Logf("400 MiB from alloc: Go heap %+d KiB (%d blocks; the slice of them alone is %d KiB)", grew>>10, len(bs), cap(bs)*24>>10)
	if grew > 8<<20 {
		t.Fatalf("the Go heap grew by %d MiB for 400 MiB from alloc", grew>>20)
	}
	if st := statOf(t, "offheap"); st.LiveBytes < 400<<20 {
		t.Fatalf("books: %+v", st)
	}
	for _, b := range bs {
		Free(b)
	}
}

func rss(t *testing.T) int64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Skip("no VmRSS")
	return 0
}

func TestRSSFallsAfterFree(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the heap-backed fallback does not return memory")
	}
	base := rss(t)
	var bs [][]byte
	for total := 0; total < 512<<20; {
		n := 1<<20 + 12345
		if len(bs)%4 == 0 {
			n = 200 << 10 // small classes, whole spans
		}
		b := Malloc(n, "rss")
		for i := 0; i < len(b); i += 4096 {
			b[i] = 1
		}
		bs = append(bs, b)
		total += n
	}
	full := rss(t)
	for _, b := range bs {
		Free(b)
	}
	grown := full - base
	deadline := time.Now().Add(3 * time.Second)
	for {
		now := rss(t)
		drop := float64(full-now) / float64(grown)
		if drop >= 0.8 {
			t.Logf("RSS %d MiB -> %d MiB -> %d MiB (%.0f%% of the growth returned)", base>>20, full>>20, now>>20, 100*drop)
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("RSS %d MiB -> %d MiB -> %d MiB after freeing: only %.0f%% returned", base>>20, full>>20, now>>20, 100*drop)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// mustPanic runs f and returns its panic's message, failing if none.
func mustPanic(t *testing.T, want string, f func()) {
	t.Helper()
	defer func() {
		t.Helper()
		r := recover()
		if r == nil {
			t.Fatalf("no panic, want one containing %q", want)
		}
		if msg := fmt.Sprint(r); !strings.Contains(msg, want) {
			t.Fatalf("panic %q, want one containing %q", msg, want)
		}
	}()
	f()
}

func TestMisuse(t *testing.T) {
	for _, n := range []int{64, 3000, 2 << 20, 40 << 20} {
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			keep := Malloc(n, "misuse") // the span keeps a block in use
			b := Malloc(n, "misuse")
			before := statOf(t, "misuse")
			mustPanic(t, "not", func() { Free(b[1:]) })
			Free(b)
			mustPanic(t, "Free", func() { Free(b) })
			after := statOf(t, "misuse")
			if after.LiveBytes != before.LiveBytes-usable(n) || after.LiveBlocks != before.LiveBlocks-1 {
				t.Fatalf("books after a double free: %+v, before %+v", after, before)
			}
			mustPanic(t, "Realloc", func() { Realloc(b, n+1) })
			Free(keep)
		})
	}
	mustPanic(t, "not", func() { Free(make([]byte, 100)) })
	var onStack [64]byte
	mustPanic(t, "not", func() { Free(onStack[:]) })
	mustPanic(t, "negative", func() { Malloc(-1, "misuse") })
	mustPanic(t, "too large", func() { Malloc(1<<62, "misuse") })
	mustPanic(t, "tag", func() { Malloc(10, strings.Repeat("x", 64)) })
	mustPanic(t, "tag", func() { Malloc(10, "a\x00b") })
	if _, err := NewTag(strings.Repeat("y", 64)); !errors.Is(err, books.ErrBadTag) {
		t.Fatalf("NewTag of 64 bytes: %v, want ErrBadTag", err)
	}
	// A slice header claiming more than its block: caught by the cap check.
	b := Malloc(100, "misuse")
	mustPanic(t, "cap", func() { Free(unsafe.Slice(&b[0], 200)) })
	Free(b)
}

// Goroutines Malloc, Realloc and Free blocks of 1 byte to 12 MiB (a
// log-uniform size), with a 4 MiB huge threshold: small, large and huge
// blocks resized into each other, where they lie and moved, huge
// mappings taken from the cache, all at once; half of the blocks under a
// tag with a fail budget that refuses some. Every block keeps its bytes
// (sampled a page apart, and its last), a refused Realloc leaves its
// block as it was, and the books and the budget's charge end where they
// began. Run in a child by TestReallocStress.
func TestReallocStress(t *testing.T) {
	childSays(t, "TestReallocStressChild", "realloc stress passed", "TAGALLOC_HUGE_THRESHOLD=4M")
}

func TestReallocStressChild(t *testing.T) {
	inChild(t, "TestReallocStress")
	const workers, slots = 4, 12
	ops := 1500
	if testing.Short() {
		ops = 300
	}
	tags := []*Tag{MustTag("realloc-stress"), MustTag("realloc-stress-budget")}
	require.NoError(t, SetBudget("realloc-stress-budget", 16<<20, BudgetFail))
	var before [2]TagStat
	for i, tag := range tags {
		before[i] = tag.Stats()
	}
	// A block's bytes at the positions checked: a seed of its own, then
	// the position's page.
	mark := func(b []byte, seed byte) {
		for i := 0; i < len(b); i += 4096 {
			b[i] = seed ^ byte(i>>12)
		}
		if len(b) > 0 {
			b[len(b)-1] = seed ^ 0x5a
		}
	}
	check := func(b []byte, seed byte, n int) error { // the first n bytes
		for i := 0; i < n && i < len(b); i += 4096 {
			if b[i] != seed^byte(i>>12) {
				return fmt.Errorf("block of %d bytes: byte %d is %d, want %d", len(b), i, b[i], seed^byte(i>>12))
			}
		}
		return nil
	}
	size := func(rng *rand.Rand) int { return max(1, int(math.Exp2(rng.Float64()*23.6))) } // 1 B .. 12 MiB
	// Blocks handed to the next worker, which resizes and frees them on
	// another P, most of the time: slot k's parity is its tag's.
	type handed struct {
		b    []byte
		seed byte
		odd  bool
	}
	inbox := make([]chan handed, workers)
	for w := range inbox {
		inbox[w] = make(chan handed, 4)
	}
	err := runWorkers(workers, func(w int) error {
		rng := rand.New(rand.NewPCG(uint64(w), 7))
		var blocks [slots][]byte
		var seeds [slots]byte
		var err error
		for i := 0; i < ops && err == nil; i++ {
			k := rng.IntN(slots)
			select {
			case h := <-inbox[w]: // into a free slot of its tag's parity, else freed
				if k = rng.IntN(slots/2) * 2; h.odd {
					k++
				}
				if blocks[k] != nil {
					if err = check(h.b, h.seed, len(h.b)-1); err == nil {
						Free(h.b)
					}
					continue
				}
				blocks[k], seeds[k] = h.b, h.seed
			default:
			}
			b := blocks[k]
			switch {
			case b != nil && rng.IntN(20) == 0:
				select {
				case inbox[(w+1)%workers] <- handed{b, seeds[k], k%2 == 1}:
					b = nil
				default:
				}
			case b == nil:
				if b = tags[k%2].Malloc(size(rng)); b != nil { // nil: the budget refused
					seeds[k] = byte(rng.Uint32())
					mark(b, seeds[k])
				}
			case rng.IntN(4) == 0:
				err = check(b, seeds[k], len(b)-1)
				Free(b)
				b = nil
			default:
				n, old := size(rng), len(b)
				if err = check(b, seeds[k], len(b)-1); err == nil {
					if nb := Realloc(b, n); nb != nil {
						b = nb
					} else if n = old; k%2 == 0 { // refused: b as it was
						err = fmt.Errorf("Realloc of an untagged block to %d bytes refused", n)
						break
					}
					if err = check(b, seeds[k], min(old, n)-1); err == nil {
						mark(b, seeds[k]) // the old last byte may lie where a page's mark goes
					}
				}
			}
			blocks[k] = b
		}
		for _, b := range blocks {
			if b != nil {
				Free(b)
			}
		}
		return err
	})
	for _, in := range inbox { // handed over after their worker stopped
		close(in)
		for h := range in {
			Free(h.b)
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	for i, tag := range tags {
		if st := tag.Stats(); st.LiveBytes != before[i].LiveBytes || st.LiveBlocks != before[i].LiveBlocks || st.LiveRequestedBytes != before[i].LiveRequestedBytes {
			t.Fatalf("after every block is freed: %+v, before %+v", st, before[i])
		}
	}
	if b := budgetOf(t, "realloc-stress-budget"); b.Charged != 0 || b.Refused == 0 {
		t.Fatalf("the budget after every block is freed: %+v (want nothing charged, some refusals)", b)
	}
	if st := arena.ReadStats(); st.HugeLive != 0 {
		t.Fatalf("%d bytes of huge blocks live after every block is freed", st.HugeLive)
	}
	fmt.Println("realloc stress passed")
}

// A block holding, at its bytes 8-15, what another freed block held there
// (the program copied bytes it never wrote: a freed block's key, which
// large blocks and Realloc's copies carry) frees as any block does; a
// double free is still one.
func TestFreeWithAnotherBlocksKey(t *testing.T) {
	keep := Malloc(48, "key-copy") // the span stays
	a, b := Malloc(48, "key-copy"), Malloc(48, "key-copy")
	Free(a)
	copy(b[8:16], unsafe.Slice(unsafe.SliceData(a), 16)[8:]) // a's key, read after its free
	Free(b)
	mustPanic(t, "double Free", func() { Free(b) })
	Free(keep)
	if st := statOf(t, "key-copy"); st.LiveBlocks != 0 || st.LiveBytes != 0 {
		t.Fatalf("after the frees: %+v", st)
	}
}
