package alloc

import (
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// checkWalk compares every tag's live books with a walk of the heap (the
// tag of every block in use, as the arena keeps it). Only while nothing
// else allocates or frees.
func checkWalk(t *testing.T) {
	t.Helper()
	type live struct{ bytes, blocks uint64 }
	walk := map[uint32]live{}
	arena.Walk(func(tag uint32, usable uintptr) {
		w := walk[tag]
		w.bytes += uint64(usable)
		w.blocks++
		walk[tag] = w
	})
	for id := uint32(0); id < tagSlots; id++ {
		st := sum(id)
		if w := walk[id]; w.bytes != st.LiveBytes || w.blocks != st.LiveBlocks {
			t.Fatalf("tag id %d: a walk of the heap finds %d bytes in %d blocks, the books %d in %d", id, w.bytes, w.blocks, st.LiveBytes, st.LiveBlocks)
		}
		delete(walk, id)
	}
	if len(walk) != 0 {
		t.Fatalf("blocks with tags no tag has: %v", walk)
	}
}

// TestManyTagsExact: goroutines allocate under 256 tags each, then hand
// half of their blocks to another goroutine to free. The books are exact
// (TagStats, the region, a walk of the heap) at every step, and the
// spans in use follow the bytes, not the number of tags (a tag costs
// counters, not spans).
func TestManyTagsExact(t *testing.T) {
	const goroutines, ntags = 12, 256
	sizes := []int{16, 40, 64, 200, 1000, 2048}
	tags := make([]*Tag, ntags)
	before := make([]TagStat, ntags) // (-count 2 runs again in the same process)
	for i := range tags {
		tags[i] = MustTag(fmt.Sprintf("many-exact-%d", i))
		before[i] = tags[i].Stats()
	}
	var perTag uint64 // live bytes of each tag once every goroutine allocated
	for _, n := range sizes {
		perTag += usable(n) * goroutines
	}
	spans0 := arena.ReadStats().SpansInUse
	type blk struct {
		b   []byte
		tag int
	}
	held := make([][]blk, goroutines)
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k := 0; k < ntags; k++ {
				i := (k + g*37) % ntags // goroutines take the tags in different orders
				for _, n := range sizes {
					b := tags[i].Malloc(n)
					for j := range b {
						b[j] = byte(i)
					}
					held[g] = append(held[g], blk{b, i})
				}
				if k%32 == 0 {
					runtime.Gosched()
				}
			}
		}(g)
	}
	wg.Wait()
	for i, tg := range tags {
		st := tg.Stats()
		if st.LiveBytes != perTag || st.LiveBlocks != uint64(goroutines*len(sizes)) || st.AllocBlocks-before[i].AllocBlocks != st.LiveBlocks {
			t.Fatalf("tag %d after the allocations: %+v, want %d live bytes in %d blocks", i, st, perTag, goroutines*len(sizes))
		}
	}
	checkWalk(t)
	grown := int64(arena.ReadStats().SpansInUse - spans0) // (spans of earlier tests may have been released meanwhile)
	live := perTag * ntags
	shards := uint64(runtime.GOMAXPROCS(0) + 1)
	bound := live + live/8 + shards*uint64(len(sizes))*2*sizeclass.PageSize
	t.Logf("%d tags on %d goroutines: %d KiB live, spans in use grew by %d KiB (bound %d KiB)", ntags, goroutines, live>>10, grown>>10, bound>>10)
	if grown > int64(bound) {
		t.Fatalf("spans in use grew by %d KiB for %d KiB live: tags cost spans", grown>>10, live>>10)
	}

	checkRegion(t, "many-exact-")

	// Each goroutine frees half of its blocks and hands the other half to
	// the next goroutine's receiver (on another P, most of the time),
	// which checks them and frees them, after moving every fourth with
	// Realloc (to another class: a new block, of the same tag).
	var extraBlocks, extraBytes [ntags]atomic.Uint64
	chans := make([]chan blk, goroutines)
	errs := make(chan error, goroutines)
	var recvs sync.WaitGroup
	for g := range chans {
		chans[g] = make(chan blk, 64)
		recvs.Add(1)
		go func(in chan blk) {
			defer recvs.Done()
			var err error
			k := 0
			for x := range in {
				for j := range x.b {
					if x.b[j] != byte(x.tag) && err == nil {
						err = fmt.Errorf("a block of tag %d overwritten (byte %d of %d is %d)", x.tag, j, len(x.b), x.b[j])
						break
					}
				}
				if k++; k%4 == 0 {
					n := len(x.b)*3 + 100
					u, _, _ := reallocUsable(usable(len(x.b)), false, len(x.b), n, false) // 1000 and 2048 bytes move on the grid
					x.b = Realloc(x.b, n)
					extraBlocks[x.tag].Add(1)
					extraBytes[x.tag].Add(u)
				}
				Free(x.b)
			}
			errs <- err
		}(chans[g])
	}
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for k, x := range held[g] {
				if k%2 == 0 {
					Free(x.b)
				} else {
					chans[(g+1)%goroutines] <- x
				}
			}
		}(g)
	}
	wg.Wait()
	for _, c := range chans {
		close(c)
	}
	recvs.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, tg := range tags {
		st := tg.Stats()
		wantN := before[i].AllocBlocks + uint64(goroutines*len(sizes)) + extraBlocks[i].Load()
		wantB := before[i].AllocBytes + perTag + extraBytes[i].Load()
		if st.LiveBytes != 0 || st.LiveBlocks != 0 || st.LiveRequestedBytes != 0 || st.AllocBlocks != wantN || st.AllocBytes != wantB {
			t.Fatalf("tag %d after every free: %+v, want nothing live, %d bytes in %d blocks allocated", i, st, wantB, wantN)
		}
	}
	checkWalk(t)
	checkRegion(t, "many-exact-")
}

// checkRegion compares the books region, read back as tagalloc top reads
// it, with TagStats, for the tags named with prefix.
func checkRegion(t *testing.T, prefix string) {
	t.Helper()
	r := Region()
	if r == nil {
		t.Skip("no books region")
	}
	stats := TagStats()
	snap, err := r.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]books.TagTotals{}
	for _, tt := range snap.Tags {
		got[tt.Name] = tt
	}
	n := 0
	for _, st := range stats {
		if !strings.HasPrefix(st.Name, prefix) {
			continue
		}
		n++
		g := got[st.Name]
		if g.LiveBytes != st.LiveBytes || g.LiveBlocks != st.LiveBlocks || g.AllocBytes != st.AllocBytes || g.AllocBlocks != st.AllocBlocks {
			t.Fatalf("tag %s: region %+v, TagStats %+v", st.Name, g, st)
		}
	}
	if n == 0 {
		t.Fatalf("no tag %s* in TagStats", prefix)
	}
}
