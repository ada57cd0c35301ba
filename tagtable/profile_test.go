package tagtable

import (
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// The accessors of the live-block table: a block by address, and every
// block once, stopping when asked.
func TestProfileLiveAccessors(t *testing.T) {
	p := NewProfile(1, "full", 1)
	p.Stack(1, []uint64{0x10})
	for i := uint64(0); i < 10; i++ {
		p.Alloc(0x1000+i*0x100, 64, 60+i, 2, 1)
	}
	p.Free(0x1000)
	p.Resize(0x1100, 0x9000, 128, 100, Realloc{Selected: true})
	require.Equal(t, 9, p.LiveCount())
	_, ok := p.LiveBlockAt(0x1000)
	require.False(t, ok, "freed")
	_, ok = p.LiveBlockAt(0x1100)
	require.False(t, ok, "moved by realloc")
	b, ok := p.LiveBlockAt(0x9000)
	require.True(t, ok)
	require.Equal(t, LiveBlock{Usable: 128, Requested: 100, Tag: 2, Stack: 1, Weight: 1}, b)
	b, ok = p.LiveBlockAt(0x1500)
	require.True(t, ok)
	require.Equal(t, uint64(65), b.Requested)

	seen := map[uint64]uint64{}
	p.EachLive(func(addr uint64, b *LiveBlock) bool {
		seen[addr] = b.Usable
		return true
	})
	require.Len(t, seen, 9)
	require.Equal(t, uint64(128), seen[0x9000])
	n := 0
	p.EachLive(func(uint64, *LiveBlock) bool { n++; return n < 3 })
	require.Equal(t, 3, n, "stops when f returns false")
}

// check verifies the store's invariants: every slot is live or free, once;
// every site is indexed once.
func (p *Profile) check(t *testing.T) {
	t.Helper()
	st := p.store
	require.Equal(t, st.blocks.Len(), st.slotOf.Len()+len(st.freeSlots), "live + free == slots")
	seen := map[uint32]bool{}
	st.slotOf.Range(func(_ uint64, i uint32) bool {
		require.False(t, seen[i], "slot %d twice", i)
		seen[i] = true
		return true
	})
	for _, i := range st.freeSlots {
		require.False(t, seen[i], "slot %d live and free", i)
		seen[i] = true
	}
	require.Equal(t, st.sites.Len(), st.siteOf.Len())
	st.siteOf.Range(func(k uint64, i uint32) bool {
		require.Equal(t, k, st.sites.At(int(i)).SiteKey.key())
		return true
	})
}

// Slots are reused, the books stay right through moves and lost frees,
// and a Clone is a deep copy: what happens to one does not touch the
// other.
func TestProfileStoreAndClone(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	for round := uint64(0); round < 3; round++ {
		for i := uint64(0); i < 5000; i++ {
			p.Alloc(0x10000+i*64, 64, 64, uint32(i%3), 1)
		}
		p.check(t)
		for i := uint64(0); i < 5000; i += 2 {
			p.Free(0x10000 + i*64)
		}
		p.check(t)
		for i := uint64(1); i < 5000; i += 2 {
			p.Free(0x10000 + i*64)
		}
	}
	require.Equal(t, 5000, p.store.blocks.Len(), "freed slots are reused")
	p.Alloc(0x100, 16, 16, 1, 2)
	p.Alloc(0x200, 32, 32, 1, 2)
	p.Resize(0x100, 0x200, 48, 40, Realloc{Selected: true}) // 0x200's free was lost: it ends
	p.Alloc(0x200, 16, 16, 1, 2)                            // and 0x200's again
	p.check(t)
	s, ok := p.Site(SiteKey{Stack: 2, Tag: 1})
	require.True(t, ok)
	require.Equal(t, uint64(1), s.LiveSamples)
	require.Equal(t, 16.0, s.EstLiveBytes)

	c := p.Clone()
	defer c.Close()
	p.Free(0x200)
	p.Alloc(0x300, 8, 8, 1, 2)
	c.check(t)
	b, ok := c.LiveBlockAt(0x200)
	require.True(t, ok, "the clone keeps its block")
	require.Equal(t, uint64(16), b.Usable)
	_, ok = c.LiveBlockAt(0x300)
	require.False(t, ok)
	cs, _ := c.Site(SiteKey{Stack: 2, Tag: 1})
	require.Equal(t, s, cs, "the clone's site is as it was")
	ps, _ := p.Site(SiteKey{Stack: 2, Tag: 1})
	require.NotEqual(t, s, ps)
	require.Equal(t, c.SortedSites()[0].Samples, s.Samples)
}

// A live block fills one cache line, and what allocations and frees
// update in a site another: Drain's touch loads one line for each
// (segments are page-aligned).
func TestLiveBlockIsOneLine(t *testing.T) {
	require.Equal(t, uintptr(64), unsafe.Sizeof(LiveBlock{}))
	// a site is three lines, the figures of allocations and frees in the
	// first, the peaks' figures and stamps (read by every event) in the second
	require.Equal(t, uintptr(192), unsafe.Sizeof(Site{}))
	require.Equal(t, uintptr(64), unsafe.Offsetof(Site{}.PeakLiveBytes))
	require.LessOrEqual(t, unsafe.Offsetof(Site{}.tagPeakEpoch)+8, uintptr(128))
}

// A record standing for a run of in-place reallocs the library left out
// (sample.c, "thinning") counts as all of them: the same realloc and
// growth figures and estimates as a record each. A catch-up for a block
// no longer held says nothing; a run whose prior size is not the block's
// is not counted, though the realloc itself is.
func TestResizeRun(t *testing.T) {
	each, thin := NewProfile(1, "sampled", 4096), NewProfile(1, "sampled", 4096)
	defer each.Close()
	defer thin.Close()
	for _, p := range []*Profile{each, thin} {
		p.Stack(1, []uint64{0x10})
		p.Alloc(0x1000, 10240, 10000, 0, 1)
	}
	// 10000 -> 10010 -> 10010 -> 10020 -> 10030, then a shrink to 9000
	sizes := []uint64{10010, 10010, 10020, 10030}
	for _, r := range sizes {
		each.Resize(0x1000, 0x1000, 10240, r, Realloc{Selected: true})
	}
	each.Resize(0x1000, 0x1000, 10240, 9000, Realloc{Selected: true})
	// the library left out all four, then caught up (the last) before the shrink
	thin.Resize(0x1000, 0x1000, 10240, 10030, Realloc{Selected: true, Run: Run{Thinned: true, LeftOut: 3, Grew: 3, CatchUp: true, Prior: 10000}})
	thin.Resize(0x1000, 0x1000, 10240, 9000, Realloc{Selected: true})
	key := SiteKey{Stack: 1}
	a, _ := each.Site(key)
	b, _ := thin.Site(key)
	require.Equal(t, uint64(5), a.Reallocs)
	require.Equal(t, uint64(3), a.GrowSteps)
	require.Equal(t, a.Reallocs, b.Reallocs)
	require.Equal(t, a.GrowSteps, b.GrowSteps)
	require.InDelta(t, a.SumLogGrowth, b.SumLogGrowth, 1e-12)
	require.InDelta(t, a.EstAllocBytes, b.EstAllocBytes, 1e-6)
	require.InDelta(t, a.EstLiveBytes, b.EstLiveBytes, 1e-6)

	// a catch-up for a block gone, or another block now at its address
	before, _ := thin.Site(key)
	thin.Resize(0x7000, 0x7000, 64, 60, Realloc{Selected: true, Run: Run{Thinned: true, LeftOut: 4, Grew: 5, CatchUp: true, Prior: 50}})
	thin.Resize(0x1000, 0x1000, 10240, 9100, Realloc{Selected: true, Run: Run{Thinned: true, LeftOut: 4, Grew: 5, CatchUp: true, Prior: 10030}})
	after, _ := thin.Site(key)
	require.Equal(t, before, after)
	require.Zero(t, thin.UnknownFrees)
	lb, _ := thin.LiveBlockAt(0x1000)
	require.Equal(t, uint64(9000), lb.Requested)
	// not a catch-up: the realloc counts, the run before it does not
	thin.Resize(0x1000, 0x1000, 10240, 9100, Realloc{Selected: true, Run: Run{Thinned: true, LeftOut: 4, Grew: 5, Prior: 10030}})
	after, _ = thin.Site(key)
	require.Equal(t, before.Reallocs+1, after.Reallocs)
	require.Equal(t, before.GrowSteps+1, after.GrowSteps)
	lb, _ = thin.LiveBlockAt(0x1000)
	require.Equal(t, uint64(9100), lb.Requested)
}

// simulatedSampling is a sampled profile at rate (stack 1 known, closed
// with the test) and the library's countdown as it samples: one across
// all the blocks, exponential with mean rate; count(n) says whether it
// crossed zero going down by n bytes (and draws the next if so).
func simulatedSampling(t *testing.T, r *rand.Rand, rate float64) (p *Profile, count func(n uint64) bool) {
	p = NewProfile(1, "sampled", uint64(rate))
	t.Cleanup(func() { p.Close() })
	p.Stack(1, []uint64{0x10})
	left := r.ExpFloat64() * rate
	return p, func(n uint64) bool {
		left -= float64(n)
		if left >= 0 {
			return false
		}
		left = r.ExpFloat64() * rate
		return true
	}
}

// Buffers grown without a copy count their growth only, and a weighed
// one stays weighed (sample.c, _ta_sample_realloc): the live estimate
// stays unbiased. Simulated here as the library samples (one countdown,
// exponential with mean rate, across all the blocks), with sizes about
// the rate, where a wrong weight would show.
func TestGrownBuffersUnbiased(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 9))
	p, count := simulatedSampling(t, r, 512<<10)
	var exact float64
	for i := uint64(0); i < 4000; i++ {
		addr, req := 0x100000+i<<24, uint64(20<<10+r.IntN(300<<10))
		tracked := count(req)
		if tracked {
			p.Alloc(addr, req, req, 0, 1)
		}
		for end := uint64(200<<10 + r.IntN(1500<<10)); req < end; {
			d := uint64(1 + r.IntN(40<<10))
			req += d
			crossed := count(d)
			switch {
			case tracked:
				p.Resize(addr, addr, req, req, Realloc{Selected: crossed, Grown: true})
			case crossed:
				p.Alloc(addr, req, req, 0, 1)
				tracked = true
			}
		}
		exact += float64(req)
	}
	s, ok := p.Site(SiteKey{Stack: 1})
	require.True(t, ok)
	// theory: about 1% for one run of 4,000 such blocks
	require.InEpsilon(t, exact, s.EstLiveBytes, 0.04, "estimate %.0f, exact %.0f", s.EstLiveBytes, exact)
	require.Positive(t, s.LiveSamples)
}

// Small blocks resized in their size class (Realloc.Kept) count nothing
// and keep their weight, that of the size they were drawn with: the live
// estimate stays unbiased however far they grow in the class. This
// simulates the library's rule over 100,000 blocks of 4-64 KiB, each
// grown in place to the top of a class 25% larger than its first size.
func TestKeptBlocksUnbiased(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 3))
	p, count := simulatedSampling(t, r, 64<<10)
	var exact float64
	for i := uint64(0); i < 100000; i++ {
		addr, req := 0x100000+i<<20, uint64(4<<10+r.IntN(60<<10))
		usable := req + req/4 // its class
		tracked := count(req)
		if tracked {
			p.Alloc(addr, usable, req, 0, 1)
		}
		for req < usable {
			req = min(req+uint64(1+r.IntN(4<<10)), usable)
			if tracked {
				p.Resize(addr, addr, usable, req, Realloc{Kept: true})
			}
		}
		exact += float64(usable)
	}
	s, ok := p.Site(SiteKey{Stack: 1})
	require.True(t, ok)
	// 6 other seeds: +0.03% to +0.42%; weighing the blocks by their final
	// size instead of the one drawn is 14% low
	require.InEpsilon(t, exact, s.EstLiveBytes, 0.04, "estimate %.0f, exact %.0f", s.EstLiveBytes, exact)
	require.Positive(t, s.LiveSamples)
}

// A profile keeps the copies of its newest MaxForks forks (a child takes
// its copy at its first event, and most never do); ForkSeen says which
// forks were seen, so a child whose copy went knows it.
func TestProfileKeepsTheNewestForks(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	p.Alloc(0x1000, 64, 60, 1, 1)
	for seq := uint64(1); seq <= MaxForks+4; seq++ {
		p.Fork(seq)
	}
	require.Len(t, p.Forks, MaxForks)
	require.Equal(t, uint64(MaxForks+4), p.ForkSeen)
	for seq := uint64(1); seq <= 4; seq++ {
		require.Nil(t, p.Forks[seq], "fork %d, among the oldest", seq)
	}
	c := p.Forks[MaxForks+4]
	require.NotNil(t, c)
	require.Equal(t, 1, c.LiveCount(), "the copy holds the block live at the fork")
}

// A fork's copy begins the child's cumulative figures at the fork, as the
// child's books do: each site counts what it holds as allocated, the
// samples of blocks freed before the fork and the sites' reallocs stay
// the parent's, and a site whose blocks were all freed has no sample.
func TestForkCopyBeginsTheChildsFigures(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	for i := uint64(0); i < 5; i++ {
		p.Alloc(0x1000+i*0x100, 64, 60, 1, 1)
	}
	p.Free(0x1000)
	p.Free(0x1100)
	p.Resize(0x1200, 0x9000, 128, 120, Realloc{Selected: true})
	p.Alloc(0x5000, 4096, 4096, 2, 2)
	p.Free(0x5000)
	p.Fork(1)
	c := p.Forks[1]
	held, ok := c.Site(SiteKey{Stack: 1, Tag: 1})
	require.True(t, ok)
	require.Equal(t, [2]uint64{3, 3}, [2]uint64{held.Samples, held.LiveSamples})
	require.Equal(t, held.EstLiveBytes, held.EstAllocBytes)
	require.Equal(t, held.EstLiveBlocks, held.EstAllocBlocks)
	require.Equal(t, float64(64+64+128), held.EstAllocBytes)
	require.Zero(t, held.Reallocs+held.Moves+held.GrowSteps, "the reallocs were the parent's")
	gone, ok := c.Site(SiteKey{Stack: 2, Tag: 2})
	require.True(t, ok)
	require.Zero(t, gone.Samples, "the parent's alone")
	require.Zero(t, gone.EstAllocBytes)
	c.Alloc(0x7000, 32, 32, 2, 2)
	gone, _ = c.Site(SiteKey{Stack: 2, Tag: 2})
	require.Equal(t, [2]float64{32, 1}, [2]float64{gone.EstAllocBytes, float64(gone.Samples)}, "the child's own from there")
	parent, _ := p.Site(SiteKey{Stack: 1, Tag: 1})
	require.Equal(t, uint64(6), parent.Samples, "the parent's are its own")
	require.Equal(t, uint64(1), parent.Reallocs)
}

// The peak: the profile's live bytes at their highest, and each site's
// share of that moment, against a model that copies every site's live
// bytes whenever the total reaches a new high; through allocations,
// frees, moves and in-place resizes (mode full: every weight is 1), and
// in a fork's copy, whose peak starts at the fork.
func TestProfilePeak(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	type blk struct {
		site   SiteKey
		usable uint64
	}
	live := map[uint64]blk{}
	var addrs []uint64
	siteLive := map[SiteKey]uint64{}
	var total, peak uint64
	var atPeak map[SiteKey]uint64
	note := func() {
		if total > peak {
			peak = total
			atPeak = map[SiteKey]uint64{}
			for k, v := range siteLive {
				atPeak[k] = v
			}
		}
	}
	next := uint64(0x10000)
	for step := 0; step < 20000; step++ {
		grow := 5 // of 10: allocations (frees 3) while it grows, then fewer
		if step%5000 >= 3000 || step >= 16000 {
			grow = 1
		}
		switch op := rng.IntN(10); {
		case op < grow || len(addrs) == 0: // alloc
			k := SiteKey{Stack: uint32(rng.IntN(6)), Tag: uint32(rng.IntN(3))}
			u := uint64(16 << rng.IntN(8))
			next += 0x1000
			p.Alloc(next, u, u-1, k.Tag, k.Stack)
			live[next] = blk{k, u}
			addrs = append(addrs, next)
			siteLive[k] += u
			total += u
		case op < grow+3: // free
			i := rng.IntN(len(addrs))
			a := addrs[i]
			addrs[i] = addrs[len(addrs)-1]
			addrs = addrs[:len(addrs)-1]
			b := live[a]
			delete(live, a)
			p.Free(a)
			siteLive[b.site] -= b.usable
			total -= b.usable
		default: // resize, moved or not
			i := rng.IntN(len(addrs))
			a := addrs[i]
			b := live[a]
			u := uint64(16 << rng.IntN(8))
			to := a
			if rng.IntN(2) == 0 {
				next += 0x1000
				to = next
			}
			p.Resize(a, to, u, u, Realloc{Selected: true})
			if to != a { // moved: the new block is live before the old is freed
				siteLive[b.site] += u
				total += u
				note()
				siteLive[b.site] -= u
				total -= u
			}
			delete(live, a)
			live[to] = blk{b.site, u}
			addrs[i] = to
			siteLive[b.site] += u - b.usable
			total += u - b.usable
		}
		note()
	}
	require.Less(t, total, peak/2, "the walk ends well below its peak")
	require.Equal(t, float64(peak), p.PeakLiveBytes)
	var sum float64
	for _, s := range p.SortedSites() {
		require.Equal(t, float64(atPeak[s.SiteKey]), s.PeakLiveBytes, "site %v", s.SiteKey)
		require.Equal(t, float64(siteLive[s.SiteKey]), s.EstLiveBytes, "site %v", s.SiteKey)
		sum += s.PeakLiveBytes
	}
	require.Equal(t, p.PeakLiveBytes, sum, "the sites' shares add up to the peak")

	// a fork's copy: its peak is what was live at the fork, then its own
	p.Fork(1)
	c := p.Forks[1]
	require.Equal(t, float64(total), c.PeakLiveBytes)
	for _, s := range c.SortedSites() {
		require.Equal(t, s.EstLiveBytes, s.PeakLiveBytes)
	}
	c.Alloc(next+0x1000, 1<<20, 1<<20, 0, 0)
	require.Equal(t, float64(total+1<<20), c.PeakLiveBytes)
	require.Equal(t, float64(peak), p.PeakLiveBytes, "the parent's is its own")
}

// Each tag's own peak: the tag's live bytes at their highest, when, and
// each of its sites' share of that moment, against a model that copies
// the tag's sites' live bytes whenever the tag's total reaches a new
// high. The walk favours one tag per phase (allocations for it, frees
// of the others), so the tags peak at different moments, and what a tag
// held at its own peak differs from what it held at the heap's. Then a
// clone keeps the peaks and a fork's copy starts them at the fork; and a
// sampled profile's sites' shares add up to its tags' estimated peaks.
func TestProfileTagPeaks(t *testing.T) {
	const tags = 3
	type blk struct {
		site   SiteKey
		usable uint64
	}
	walk := func(p *Profile, check bool) {
		rng := rand.New(rand.NewPCG(5, 6))
		live := map[uint64]blk{}
		var addrs []uint64
		siteLive := map[SiteKey]uint64{}
		var tagLive, tagPeak [tags]uint64
		var tagPeakMs [tags]uint64
		var atTagPeak [tags]map[SiteKey]uint64
		note := func(tag uint32, ms uint64) {
			if tagLive[tag] > tagPeak[tag] {
				tagPeak[tag], tagPeakMs[tag] = tagLive[tag], ms
				atTagPeak[tag] = map[SiteKey]uint64{}
				for k, v := range siteLive {
					if k.Tag == tag {
						atTagPeak[tag][k] = v
					}
				}
			}
		}
		next := uint64(0x10000)
		for step := 0; step < 24000; step++ {
			p.SetClock(uint64(step))
			favoured := uint32(step / 4000 % tags)    // phases 0 1 2 0 1 2
			pick := func(tag uint32, want bool) int { // a live block of tag (want) or of another; -1 if none found
				for try := 0; try < 8 && len(addrs) > 0; try++ {
					i := rng.IntN(len(addrs))
					if (live[addrs[i]].site.Tag == tag) == want {
						return i
					}
				}
				return -1
			}
			op := rng.IntN(10)
			i := -1
			switch {
			case op < 4: // free a block of another tag
				i = pick(favoured, false)
			case op < 5: // free one of the favoured tag's
				i = pick(favoured, true)
			case op < 7: // resize one, moved or not
				if j := rng.IntN(max(len(addrs), 1)); len(addrs) > 0 {
					b := live[addrs[j]]
					a, to := addrs[j], addrs[j]
					if rng.IntN(2) == 0 {
						next += 0x1000
						to = next
					}
					u := uint64(16 << rng.IntN(8))
					p.Resize(a, to, u, u, Realloc{Selected: true})
					if to != a { // moved: the new block is live before the old is freed
						siteLive[b.site] += u
						tagLive[b.site.Tag] += u
						note(b.site.Tag, uint64(step))
						siteLive[b.site] -= u
						tagLive[b.site.Tag] -= u
					}
					delete(live, a)
					live[to] = blk{b.site, u}
					addrs[j] = to
					siteLive[b.site] += u - b.usable
					tagLive[b.site.Tag] += u - b.usable
					note(b.site.Tag, uint64(step))
				}
				continue
			}
			if i < 0 { // allocate for the favoured tag
				k := SiteKey{Stack: uint32(rng.IntN(6)), Tag: favoured}
				u := uint64(16 << rng.IntN(8))
				next += 0x1000
				p.Alloc(next, u, u, k.Tag, k.Stack)
				live[next] = blk{k, u}
				addrs = append(addrs, next)
				siteLive[k] += u
				tagLive[k.Tag] += u
				note(k.Tag, uint64(step))
				continue
			}
			a := addrs[i]
			addrs[i] = addrs[len(addrs)-1]
			addrs = addrs[:len(addrs)-1]
			b := live[a]
			delete(live, a)
			p.Free(a)
			siteLive[b.site] -= b.usable
			tagLive[b.site.Tag] -= b.usable
		}
		peaks := p.TagPeaks()
		if !check { // sampled: the sites' shares add up to each tag's estimate
			require.Len(t, peaks, tags)
			for tag, tp := range peaks {
				var sum float64
				for _, s := range p.SortedSites() {
					if s.Tag == tag {
						sum += s.TagPeakLiveBytes
					}
				}
				require.InEpsilon(t, tp.PeakLiveBytes, sum, 1e-9, "tag %d", tag)
				require.GreaterOrEqual(t, tp.PeakLiveBytes, tp.LiveBytes)
			}
			return
		}
		require.Len(t, peaks, tags)
		differs := false
		for tag := uint32(0); tag < tags; tag++ {
			tp := peaks[tag]
			require.Equal(t, float64(tagPeak[tag]), tp.PeakLiveBytes, "tag %d", tag)
			require.Equal(t, tagPeakMs[tag], tp.PeakMs, "tag %d", tag)
			require.Equal(t, float64(tagLive[tag]), tp.LiveBytes, "tag %d", tag)
			require.Less(t, tagLive[tag], tagPeak[tag], "tag %d ends below its peak", tag)
			var sum float64
			for _, s := range p.SortedSites() {
				if s.Tag != tag {
					continue
				}
				require.Equal(t, float64(atTagPeak[tag][s.SiteKey]), s.TagPeakLiveBytes, "site %v", s.SiteKey)
				sum += s.TagPeakLiveBytes
				differs = differs || s.TagPeakLiveBytes != s.PeakLiveBytes
			}
			require.Equal(t, tp.PeakLiveBytes, sum, "tag %d: its sites' shares add up to its peak", tag)
		}
		require.True(t, differs, "a tag's peak is not the heap's")
		require.NotEqual(t, peaks[0].PeakMs, peaks[1].PeakMs)
		require.NotEqual(t, peaks[1].PeakMs, peaks[2].PeakMs)
		require.NotEqual(t, peaks[0].PeakMs, peaks[2].PeakMs)
	}

	p := NewProfile(1, "full", 1)
	defer p.Close()
	walk(p, true)

	// a clone keeps each tag's peak and its sites' shares
	c := p.Clone()
	defer c.Close()
	require.Equal(t, p.TagPeaks(), c.TagPeaks())
	require.Equal(t, p.SortedSites(), c.SortedSites())

	// a fork's copy: each tag's peak is what it held at the fork, then its own
	p.SetClock(1 << 20)
	p.Fork(1)
	f := p.Forks[1]
	for tag, tp := range f.TagPeaks() {
		require.Equal(t, tp.LiveBytes, tp.PeakLiveBytes, "tag %d", tag)
		require.Equal(t, uint64(1<<20), tp.PeakMs)
	}
	for _, s := range f.SortedSites() {
		require.Equal(t, s.EstLiveBytes, s.TagPeakLiveBytes)
	}
	before := f.TagPeaks()
	f.Alloc(1<<40, 1<<20, 1<<20, 1, 0)
	after := f.TagPeaks()
	require.Equal(t, before[1].PeakLiveBytes+1<<20, after[1].PeakLiveBytes)
	require.Equal(t, before[0], after[0], "another tag's peak is its own")
	s, ok := f.Site(SiteKey{Stack: 0, Tag: 1})
	require.True(t, ok)
	require.Equal(t, s.EstLiveBytes, s.TagPeakLiveBytes)
	require.Equal(t, c.TagPeaks(), p.TagPeaks(), "the parent's are its own")

	// an id the library never hands out (a corrupt ring's) has its own peak too
	p.Alloc(1<<41, 4096, 4096, 1<<31, 0)
	p.Free(1 << 41)
	require.Equal(t, 4096.0, p.TagPeaks()[1<<31].PeakLiveBytes)
	s, _ = p.Site(SiteKey{Stack: 0, Tag: 1 << 31})
	require.Equal(t, 4096.0, s.TagPeakLiveBytes)
	require.Zero(t, s.EstLiveBytes)

	sp := NewProfile(2, "sampled", 4096)
	defer sp.Close()
	walk(sp, false)
}

// A moved realloc holds both blocks for a moment (the new one is taken
// before the old is freed), as the books count it: that moment can be
// the heap's and the tag's peak, the site's share two blocks. An
// in-place resize has no such moment.
func TestReallocMomentIsAPeak(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	p.Alloc(0x1000, 1000, 1000, 3, 1)
	p.Alloc(0x9000, 500, 500, 4, 2) // another tag's: in the heap's peak, not tag 3's
	p.SetClock(7)
	p.Resize(0x1000, 0x2000, 1500, 1500, Realloc{Selected: true})
	require.Equal(t, 3000.0, p.PeakLiveBytes)
	require.Equal(t, TagPeak{LiveBytes: 1500, PeakLiveBytes: 2500, PeakMs: 7}, p.TagPeaks()[3])
	s, _ := p.Site(SiteKey{Stack: 1, Tag: 3})
	require.Equal(t, [4]float64{2500, 2, 2500, 2}, [4]float64{s.PeakLiveBytes, s.PeakLiveBlocks, s.TagPeakLiveBytes, s.TagPeakLiveBlocks})
	require.Equal(t, [2]float64{1500, 1}, [2]float64{s.EstLiveBytes, s.EstLiveBlocks})

	p.SetClock(9)
	p.Resize(0x2000, 0x2000, 2400, 2400, Realloc{Selected: true}) // in place: 2,400 at most
	require.Equal(t, 3000.0, p.PeakLiveBytes)
	require.Equal(t, 2500.0, p.TagPeaks()[3].PeakLiveBytes)
	p.Resize(0x2000, 0x2000, 2600, 2600, Realloc{Selected: true})
	require.Equal(t, TagPeak{LiveBytes: 2600, PeakLiveBytes: 2600, PeakMs: 9}, p.TagPeaks()[3])
	s, _ = p.Site(SiteKey{Stack: 1, Tag: 3})
	require.Equal(t, [2]float64{2600, 1}, [2]float64{s.TagPeakLiveBytes, s.TagPeakLiveBlocks})
}
