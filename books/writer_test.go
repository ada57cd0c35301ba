package books

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// charge books n blocks of size bytes to id on thread th (as package
// alloc does), and frees f of them.
func charge(t *testing.T, th *Thread, id uint32, n, f, size uint64) {
	c, err := th.Counters(id)
	require.NoError(t, err)
	Add(&c.AllocBytes, n*size)
	Add(&c.AllocBlocks, n)
	Add(&c.FreeBytes, f*size)
	Add(&c.FreeBlocks, f)
	Add(&c.AllocReq, n*size)
	Add(&c.FreeReq, f*size)
}

func TestWriterRegionParses(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	require.NoError(t, err)
	defer r.Close()
	require.Empty(t, r.Path(), "no TAGALLOC_DIR: a memfd")

	cache, _, err := r.Tag("cache")
	require.NoError(t, err)
	again, _, err := r.Tag("cache")
	require.NoError(t, err)
	require.Equal(t, cache, again)
	un, _, err := r.Tag("untagged")
	require.NoError(t, err)
	require.Equal(t, uint32(Untagged), un)
	bufs, _, err := r.Tag("buffers")
	require.NoError(t, err)
	require.Equal(t, "buffers", r.Name(bufs))

	// Two writers (shards): one allocates, the other frees some.
	a, err := r.NewThread()
	require.NoError(t, err)
	b, err := r.NewThread()
	require.NoError(t, err)
	charge(t, a, cache, 10, 0, 4096)
	charge(t, b, cache, 0, 3, 4096)
	charge(t, a, bufs, 2, 0, 65536)
	charge(t, b, Untagged, 5, 5, 64)
	r.NotePeak(cache, 10*4096)
	r.NotePeak(cache, 4096) // never lowers
	r.SetAllocator(Allocator{SpansInUse: 1 << 20})

	s, err := r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, os.Getpid(), s.PID)
	require.NotEmpty(t, s.Command)
	require.False(t, s.native)
	require.Equal(t, uint64(1<<20), s.Allocator.SpansInUse)
	got := tagMap(s)
	require.Equal(t, uint64(7*4096), got["cache"].LiveBytes)
	require.Equal(t, uint64(7), got["cache"].LiveBlocks)
	require.Equal(t, uint64(10), got["cache"].AllocBlocks)
	require.Equal(t, uint64(10*4096), got["cache"].PeakLiveBytes)
	require.Equal(t, uint64(7*4096), *got["cache"].LiveRequestedBytes)
	require.Equal(t, uint64(2*65536), got["buffers"].LiveBytes)
	require.Equal(t, uint64(0), got["untagged"].LiveBytes)
	require.Equal(t, uint64(5), got["untagged"].AllocBlocks)
	// An outside reader finds the memfd in the map and reads the same:
	// procbooks.TestReadFindsMemfd.
}

func TestWriterFileInBooksDir(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("TAGALLOC_DIR", dir)
	r, err := Create("go")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, strconv.Itoa(os.Getpid())+".go.tagalloc"), r.Path())
	id, _, err := r.Tag("t")
	require.NoError(t, err)
	th, err := r.NewThread()
	require.NoError(t, err)
	charge(t, th, id, 3, 1, 16)

	snaps, err := ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, snaps, 1)
	require.Equal(t, uint64(32), tagMap(snaps[0])["t"].LiveBytes)
	require.NoError(t, r.Close())
	_, err = os.Stat(r.Path())
	require.True(t, os.IsNotExist(err), "Close removes the file")
}

func TestWriterTagNames(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	require.NoError(t, err)
	defer r.Close()
	for _, bad := range []string{"", strings.Repeat("x", 64), "a\x00b",
		"a//b", "/a", "a/", "/", "a/../b", "..", ".", "gfx/./x"} { // a name is a path of levels
		_, _, err := r.Tag(bad)
		require.ErrorIs(t, err, ErrBadTag, "%q", bad)
	}
	for _, good := range []string{"gfx/webgl/textures", "...", "a.b/.c", "x/..y"} {
		require.NoError(t, ValidTag(good), "%q", good)
	}
	_, _, err = r.Tag(strings.Repeat("x", 63))
	require.NoError(t, err)
	// 4096 names fit (one is taken); then overflow, once per name.
	for i := 1; i < MaxTags; i++ {
		id, over, err := r.Tag("tag-" + strconv.Itoa(i))
		require.NoError(t, err)
		require.False(t, over)
		require.Less(t, id, uint32(MaxTags+1))
	}
	id, over, err := r.Tag("one-too-many")
	require.NoError(t, err)
	require.True(t, over)
	require.Equal(t, uint32(OverflowTag), id)
	th, err := r.NewThread()
	require.NoError(t, err)
	charge(t, th, id, 1, 0, 48)
	s, err := r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(48), tagMap(s)["overflow"].LiveBytes)
}

// Writers on many goroutines, each its own record, against a reader.
func TestWriterConcurrent(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	require.NoError(t, err)
	defer r.Close()
	id, _, err := r.Tag("busy")
	require.NoError(t, err)
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		th, err := r.NewThread()
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, _ := th.Counters(id)
			for i := 0; i < 10000; i++ {
				Add(&c.AllocBytes, 16)
				Add(&c.AllocBlocks, 1)
			}
		}()
	}
	for i := 0; i < 20; i++ {
		_, err := r.Snapshot()
		require.NoError(t, err)
	}
	wg.Wait()
	s, err := r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, uint64(8*10000*16), tagMap(s)["busy"].LiveBytes)
}

func TestMergeSumsTagsByName(t *testing.T) {
	req := uint64(5)
	a := &Snapshot{PID: 7, native: true, Command: []string{"prog"}, Tags: []TagTotals{{Name: "x", LiveBytes: 10, LiveBlocks: 1, AllocBytes: 10, AllocBlocks: 1, LiveRequestedBytes: &req}}}
	b := &Snapshot{PID: 7, Tags: []TagTotals{{Name: "x", LiveBytes: 20, LiveBlocks: 2, AllocBytes: 30, AllocBlocks: 3}, {Name: "y", LiveBytes: 100}}, Torn: true}
	m := Merge(b, a)
	require.Equal(t, []string{"prog"}, m.Command, "identity from the native region")
	require.True(t, m.Torn)
	got := tagMap(m)
	require.Equal(t, TagTotals{Name: "x", LiveBytes: 30, LiveBlocks: 3, AllocBytes: 40, AllocBlocks: 4, PeakLiveBytes: 30}, got["x"],
		"the merged peak is at least the live sum; unbounded, as one side is")
	require.Equal(t, "y", m.Tags[0].Name, "sorted by live bytes")
	require.Equal(t, uint64(5), req, "inputs untouched")
}

func TestWriterReports(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	require.NoError(t, err)
	defer r.Close()
	r.SetReports([]Report{
		{Path: "explicit/go/heap/objects", Description: "Go heap objects.", Kind: 0, Units: 0, Amount: 123456},
		{Path: "go/gc-cycles", Description: "bad\x01byte dropped", Kind: 2, Units: 2, Amount: 7},
	})
	s, err := r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, []Report{
		{Path: "explicit/go/heap/objects", Description: "Go heap objects.", Amount: 123456},
		{Path: "go/gc-cycles", Description: "badbyte dropped", Kind: 2, Units: 2, Amount: 7},
	}, s.Reports)
	// a slot scribbled over is an error, not a crash
	off := uint64(r.hdr.ReportsOff)
	r.mem[off] = 9
	_, err = r.Snapshot()
	require.ErrorIs(t, err, ErrFormat)
	r.mem[off] = 0
	for i := off + 16; i < off+reportSize; i++ {
		r.mem[i] = 'x' // no NUL
	}
	_, err = r.Snapshot()
	require.ErrorIs(t, err, ErrFormat)
}

// The budget slot and the header are laid out as the native library's
// (cgo/src/budget.c, books.c), which is how readers take them.
func TestWriterBudgetLayout(t *testing.T) {
	var s BudgetSlot
	require.Equal(t, uintptr(budgetSize), unsafe.Sizeof(s))
	require.Equal(t, []uintptr{0, 4, 8, 16, 24, 32, 40, 44},
		[]uintptr{unsafe.Offsetof(s.tag), unsafe.Offsetof(s.policy), unsafe.Offsetof(s.limit), unsafe.Offsetof(s.Charged),
			unsafe.Offsetof(s.Crossings), unsafe.Offsetof(s.Refused), unsafe.Offsetof(s.parent), unsafe.Offsetof(s.Over)})
	require.Equal(t, uintptr(headerV6), unsafe.Sizeof(header{}))
	require.Equal(t, headerV6, binary.Size(header{}))
}

// The Go writer's budgets: published whole, their counters stored in
// place, a dropped one skipped; a full table is replaced by a new one.
func TestWriterBudgets(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	require.NoError(t, err)
	defer r.Close()
	require.Equal(t, uint32(WriterVersion), r.hdr.Version)
	require.Equal(t, uint32(headerV6), r.hdr.HeaderSize)
	s, err := r.Snapshot()
	require.NoError(t, err)
	require.Nil(t, s.Budgets)

	gfx, _, err := r.Tag("gfx") // a level no block is charged to
	require.NoError(t, err)
	tex, _, err := r.Tag("gfx/tex")
	require.NoError(t, err)
	th, err := r.NewThread()
	require.NoError(t, err)
	charge(t, th, tex, 3, 1, 4096)
	a, err := r.NewBudget(gfx, 1, 8192, BudgetCounts{Charged: 8192, Crossings: 1, Refused: 4, Over: true})
	require.NoError(t, err)
	b, err := r.NewBudget(tex, 3, 1024, BudgetCounts{})
	require.NoError(t, err)
	gone, err := r.NewBudget(Untagged, 2, 1, BudgetCounts{})
	require.NoError(t, err)
	b.Charged.Store(2 * 4096)
	b.Crossings.Add(1)
	b.Over.Store(1)
	gone.Drop()
	a.Set(2, 1<<20)
	a.Over.Store(0)
	s, err = r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, []Budget{
		{Tag: "gfx", Limit: 1 << 20, Policy: "notify", Charged: 8192, Crossings: 1, Refused: 4},
		{Tag: "gfx/tex", Limit: 1024, Policy: "observe", Charged: 8192, Crossings: 1, Over: true},
	}, s.Budgets)
	require.Equal(t, uint64(8192), tagMap(s)["gfx/tex"].LiveBytes)

	_, err = r.NewBudget(tagSlots, 1, 1, BudgetCounts{})
	require.Error(t, err)
	_, err = r.NewBudget(gfx, 0, 1, BudgetCounts{})
	require.Error(t, err, "policy 0 is an unused slot")

	// Slots are not reused: the table fills up, dropped slots and all.
	for i := 3; i < MaxBudgets; i++ {
		_, err := r.NewBudget(Untagged, 3, uint64(i), BudgetCounts{})
		require.NoError(t, err)
	}
	_, err = r.NewBudget(Untagged, 3, 1, BudgetCounts{})
	require.ErrorIs(t, err, ErrBudgetTableFull)
	s, err = r.Snapshot()
	require.NoError(t, err)
	require.Len(t, s.Budgets, MaxBudgets-1)

	// A new table: empty, until the live budgets are published again;
	// writes to the old slots are not read.
	old := r.hdr.BudgetsOff
	require.NoError(t, r.NewBudgetTable())
	require.NotEqual(t, old, r.hdr.BudgetsOff)
	s, err = r.Snapshot()
	require.NoError(t, err)
	require.Nil(t, s.Budgets)
	c, err := r.NewBudget(tex, 1, 4096, BudgetCounts{Charged: 4096})
	require.NoError(t, err)
	b.Charged.Store(1)
	s, err = r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, []Budget{{Tag: "gfx/tex", Limit: 4096, Policy: "fail", Charged: 4096}}, s.Budgets)
	c.Charged.Store(0)
	c.Refused.Store(9)
	s, err = r.Snapshot()
	require.NoError(t, err)
	require.Equal(t, []Budget{{Tag: "gfx/tex", Limit: 4096, Policy: "fail", Refused: 9}}, s.Budgets)

	// A reader that pairs the new table with the old count (a header
	// copied as it changed) sees the unused slots as unused.
	copyOf := append([]byte(nil), r.mem[:atomic.LoadUint64(&r.hdr.Used)]...)
	binary.LittleEndian.PutUint32(copyOf[unsafe.Offsetof(r.hdr.BudgetsCount):], MaxBudgets)
	s, err = Parse(copyOf)
	require.NoError(t, err)
	require.Len(t, s.Budgets, 1)
}

// A process's two regions (the native library's, package alloc's) merge
// with the budgets of both, by tag.
func TestMergeKeepsEveryRegionsBudgets(t *testing.T) {
	native := &Snapshot{PID: 7, native: true, Budgets: []Budget{{Tag: "c", Policy: "fail"}, {Tag: "x", Policy: "fail"}}}
	goSide := &Snapshot{PID: 7, Budgets: []Budget{{Tag: "a", Policy: "observe"}, {Tag: "x", Policy: "notify"}}}
	m := Merge(goSide, native)
	require.Equal(t, []Budget{{Tag: "a", Policy: "observe"}, {Tag: "c", Policy: "fail"}, {Tag: "x", Policy: "fail"}, {Tag: "x", Policy: "notify"}},
		m.Budgets)
	require.Len(t, native.Budgets, 2, "inputs untouched")
	require.Equal(t, "c", native.Budgets[0].Tag)
}
