package alloc

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/procbooks"
)

// TestRegionMatchesTagStats: the books region, read back as tagalloc
// top/snapshot read it, says what TagStats says.
func TestRegionMatchesTagStats(t *testing.T) {
	ensureInit() // HugeMin is 0 until the arena is made: run alone, this test made no huge block
	var bs [][]byte
	for i, n := range []int{10, 300, 5000, 700 << 10, int(arena.HugeMin()) + 1<<20} {
		for k := 0; k <= i; k++ {
			bs = append(bs, Malloc(n, fmt.Sprintf("region-%d", k)))
		}
	}
	Free(bs[0])
	bs = bs[1:]
	defer func() {
		for _, b := range bs {
			Free(b)
		}
	}()
	r := Region()
	if r == nil {
		t.Fatal("no books region")
	}
	stats := TagStats()
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	proc, err := procbooks.Read(os.Getpid())
	if err != nil {
		t.Fatalf("procbooks.Read (as tagalloc top): %v", err)
	}
	for _, s := range []*books.Snapshot{snap, proc} {
		got := map[string]books.TagTotals{}
		for _, tt := range s.Tags {
			got[tt.Name] = tt
		}
		for _, st := range stats {
			g, ok := got[st.Name]
			if !ok {
				t.Fatalf("tag %s missing from the region", st.Name)
			}
			if g.LiveBytes != st.LiveBytes || g.LiveBlocks != st.LiveBlocks || g.AllocBytes != st.AllocBytes ||
				g.AllocBlocks != st.AllocBlocks || g.PeakLiveBytes != st.PeakLiveBytes ||
				g.LiveRequestedBytes == nil || *g.LiveRequestedBytes != st.LiveRequestedBytes {
				t.Fatalf("tag %s: region %+v, TagStats %+v", st.Name, g, st)
			}
		}
		if s.Allocator.HugeLive < uint64(arena.HugeMin()) || s.Allocator.SpansInUse == 0 {
			t.Fatalf("allocator figures not published: %+v", s.Allocator)
		}
	}
	if st := statOf(t, "region-0"); st.LiveBlocks != 4 {
		t.Fatalf("region-0: %+v", st)
	}
}

// childSays runs this test binary's test name in a child with env added
// (the child sees ALLOC_CHILD=1: inChild), fails unless it passes and its
// output holds want (the line it prints when its checks pass), and
// returns the output.
func childSays(t *testing.T, name, want string, env ...string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v")
	cmd.Env = append(append(os.Environ(), "ALLOC_CHILD=1"), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", name, err, out)
	}
	if !strings.Contains(string(out), want) {
		t.Fatalf("child output:\n%s", out)
	}
	return string(out)
}

// inChild skips a test that only the test parent runs, as a child.
func inChild(t *testing.T, parent string) {
	t.Helper()
	if os.Getenv("ALLOC_CHILD") == "" {
		t.Skip("run by " + parent)
	}
}

func TestDebugMode(t *testing.T) {
	// one P: the LIFO reuse it checks is per P, and a goroutine moved
	// to another P between Free and Malloc (a loaded machine) gets another
	childSays(t, "TestDebugChild", "debug checks passed", "TAGALLOC_GO_DEBUG=1", "GOMAXPROCS=1")
}

func TestDebugChild(t *testing.T) {
	inChild(t, "TestDebugMode")
	if !Debug() {
		t.Fatal("TAGALLOC_GO_DEBUG=1 did not turn debug mode on")
	}
	// A double free while other blocks of the span are in use and the
	// freed block was reused meanwhile: only the bitmap sees it.
	keep := Malloc(48, "debug")
	b := Malloc(48, "debug")
	Free(b)
	c := Malloc(48, "debug") // b's block again (LIFO)
	if &c[0] != &b[0] {
		t.Fatal("LIFO reuse expected")
	}
	Free(c)
	mustPanic(t, "double Free", func() { Free(b) })
	// A write after free is caught when the block is handed out again.
	d := Malloc(48, "debug")
	Free(d)
	d[30] = 1
	mustPanic(t, "written 30 bytes in, after it was freed", func() { Malloc(48, "debug") })
	Free(keep)
	fmt.Println("debug checks passed")
}

func TestOverflowTag(t *testing.T) {
	childSays(t, "TestOverflowChild", "overflow checks passed")
}

func TestOverflowChild(t *testing.T) {
	inChild(t, "TestOverflowTag")
	var bs [][]byte
	for i := 1; i <= books.MaxTags+10; i++ {
		bs = append(bs, Malloc(16, fmt.Sprintf("tag-%d", i)))
	}
	stats := TagStats()
	var over *TagStat
	for i := range stats {
		if stats[i].Name == "overflow" {
			over = &stats[i]
		}
	}
	// ids 1..4096 hold names; the last 10 overflow.
	if over == nil || over.LiveBlocks != 10 || over.LiveBytes != 160 || len(stats) != books.MaxTags+1 {
		t.Fatalf("%d tags, overflow %+v", len(stats), over)
	}
	if MustTag(fmt.Sprintf("tag-%d", books.MaxTags+5)).Name() != "overflow" {
		t.Fatal("a name past the limit should have the overflow handle")
	}
	snap, err := Region().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range snap.Tags {
		if tt.Name == "overflow" && tt.LiveBlocks != 10 {
			t.Fatalf("region overflow: %+v", tt)
		}
	}
	for _, b := range bs {
		Free(b)
	}
	fmt.Println("overflow checks passed")
}

func TestBooksWithoutRegion(t *testing.T) {
	out := childSays(t, "TestNoRegionChild", "no-region checks passed", "TAGALLOC_DIR=/nonexistent/dir")
	if strings.Count(out, "keeps its books privately") != 1 {
		t.Fatalf("child output:\n%s", out)
	}
}

func TestNoRegionChild(t *testing.T) {
	inChild(t, "TestBooksWithoutRegion")
	if Region() != nil {
		t.Fatal("a region under a missing TAGALLOC_DIR?")
	}
	var bs [][]byte
	for _, n := range []int{10, 100, 1 << 20} {
		bs = append(bs, Malloc(n, "private"), Malloc(n, "private"))
	}
	Free(bs[0])
	st := statOf(t, "private")
	want := 2*(usable(100)+usable(1<<20)) + usable(10)
	if st.LiveBytes != want || st.LiveBlocks != 5 || st.AllocBlocks != 6 || st.PeakLiveBytes < want {
		t.Fatalf("private books %+v, want live %d", st, want)
	}
	for _, b := range bs[1:] {
		Free(b)
	}
	fmt.Println("no-region checks passed")
}

// TAGALLOC_HUGE_THRESHOLD is read as the native library reads it: with
// 4M, a 5 MiB block is huge (its own mapping), a 3 MiB one a span.
func TestHugeThresholdOption(t *testing.T) {
	childSays(t, "TestHugeThresholdChild", "huge threshold 4194304", "TAGALLOC_HUGE_THRESHOLD=4M")
}

func TestHugeThresholdChild(t *testing.T) {
	inChild(t, "TestHugeThresholdOption")
	big, small := Malloc(5<<20, "huge-opt"), Malloc(3<<20, "huge-opt")
	before := arena.ReadStats().HugeLive
	if before < 5<<20 || before >= 8<<20 {
		t.Fatalf("a 5 MiB and a 3 MiB block under TAGALLOC_HUGE_THRESHOLD=4M: %d bytes huge, want the 5 MiB one's", before)
	}
	Free(big)
	Free(small)
	fmt.Println("huge threshold", arena.HugeMin())
}
