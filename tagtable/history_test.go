package tagtable

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// feed drives profiles with the same seeded stream of sampled allocs,
// frees and reallocs (and frees of blocks never seen), the clock moving
// one millisecond every 100 events; it returns how many events it fed.
func feed(seed uint64, n int, ps ...*Profile) int {
	r := rand.New(rand.NewPCG(seed, 1))
	var live []uint64
	next := uint64(0x10000)
	for i := 0; i < n; i++ {
		if i%100 == 0 {
			for _, p := range ps {
				p.SetClock(uint64(i / 100))
			}
		}
		switch k := r.IntN(10); {
		case k < 5 || len(live) == 0:
			size := uint64(16 + r.IntN(1<<r.IntN(20)))
			next += 1 << 20
			tag, stack := uint32(r.IntN(3)), uint32(1+r.IntN(20))
			for _, p := range ps {
				p.Alloc(next, size+size/8, size, tag, stack)
			}
			live = append(live, next)
		case k < 8:
			j := r.IntN(len(live))
			for _, p := range ps {
				p.Free(live[j])
			}
			live[j] = live[len(live)-1]
			live = live[:len(live)-1]
		case k < 9:
			j := r.IntN(len(live))
			size := uint64(16 + r.IntN(1<<r.IntN(20)))
			to := live[j]
			if r.IntN(2) == 0 {
				next += 1 << 20
				to = next
			}
			for _, p := range ps {
				p.Resize(live[j], to, size, size, Realloc{Selected: true})
			}
			live[j] = to
		default:
			for _, p := range ps {
				p.Free(0xdead0000 + uint64(i)) // never seen
			}
		}
	}
	return n
}

// A history far smaller than the stream recycles its oldest chunks and
// stays within its limit, while the live table and the sites are exactly
// those of a profile that keeps every event.
func TestHistoryBoundedBooksExact(t *testing.T) {
	const limit = 64 << 10
	small := NewProfile(1, "sampled", 4096)
	defer small.Close()
	require.NoError(t, small.SetHistoryLimit(limit))
	big := NewProfile(1, "sampled", 4096)
	defer big.Close()
	require.NoError(t, big.SetHistoryLimit(64<<20))
	none := NewProfile(1, "sampled", 4096)
	defer none.Close()
	require.NoError(t, none.SetHistoryLimit(0))
	n := feed(7, 200000, small, big, none)

	for _, p := range []*Profile{small, big} {
		require.Equal(t, none.LiveCount(), p.LiveCount())
		p.EachLive(func(addr uint64, _ *LiveBlock) bool {
			want, ok := none.LiveBlockAt(addr)
			require.True(t, ok, "%#x", addr)
			got, _ := p.LiveBlockAt(addr)
			require.Equal(t, want, got)
			return true
		})
		require.Equal(t, none.SortedSites(), p.SortedSites())
		require.Equal(t, none.UnknownFrees, p.UnknownFrees)
		p.check(t)
	}

	st := small.HistoryStats()
	require.Equal(t, uint64(limit), st.LimitBytes)
	require.LessOrEqual(t, st.Bytes, uint64(limit+HistorySlack), "the history stays within its limit")
	require.LessOrEqual(t, st.RetainedBytes, uint64(limit))
	require.Greater(t, st.Recycled, uint64(0))
	require.Equal(t, uint64(n), st.NextSeq, "every event was appended")
	require.Equal(t, uint64(n), st.Events+st.Recycled, "kept + recycled == appended")
	require.Equal(t, st.Recycled, st.FirstSeq)
	require.Less(t, st.Events, uint64(n)/4)
	require.Greater(t, st.FirstMs, uint64(0), "the oldest events are gone")
	require.Equal(t, uint64((n-1)/100), st.LastMs)
	c := small.Clone()
	cst := c.HistoryStats() // a clone's history holds the same events (numbered afresh)
	require.Equal(t, [3]uint64{st.Events, st.FirstMs, st.LastMs}, [3]uint64{cst.Events, cst.FirstMs, cst.LastMs})
	c.Close()
	t.Logf("64 KiB history of %d events: keeps %d (%d bytes), recycled %d; ms %d..%d", n, st.Events, st.RetainedBytes, st.Recycled, st.FirstMs, st.LastMs)

	bst := big.HistoryStats()
	require.Zero(t, bst.Recycled)
	require.Equal(t, uint64(n), bst.Events)
	require.Zero(t, bst.FirstMs)
	require.Equal(t, HistoryStats{}, none.HistoryStats())

	// the kept events are the newest of the full history, decoded the same
	var newest []HistoryEvent
	big.EachHistory(func(e HistoryEvent) bool {
		if e.Seq >= st.FirstSeq {
			newest = append(newest, e)
		}
		return true
	})
	var kept []HistoryEvent
	small.EachHistory(func(e HistoryEvent) bool { kept = append(kept, e); return true })
	require.Equal(t, newest, kept)
}

// The timeline of a history that kept everything adds up to the sites'
// estimates; each event lands in its bucket.
func TestHistoryTimeline(t *testing.T) {
	p := NewProfile(1, "sampled", 4096)
	defer p.Close()
	feed(3, 50000, p)
	tl := p.Timeline(10, 3)
	require.Equal(t, uint64(0), tl.StartMs)
	require.Equal(t, uint64(50), tl.BucketMs, "500 ms in 10 buckets")
	require.Len(t, tl.Total.AllocBytes, 10)
	require.Len(t, tl.Sites, 3)
	var alloc, freed, live float64
	for _, s := range p.SortedSites() {
		alloc += s.EstAllocBytes
		live += s.EstLiveBytes
	}
	var ta, tf uint64
	for i := range tl.Total.AllocBytes {
		ta += tl.Total.AllocBytes[i]
		tf += tl.Total.FreeBytes[i]
		require.Positive(t, tl.Total.AllocBytes[i], "bucket %d", i)
	}
	freed = alloc - live
	require.InDelta(t, alloc, float64(ta), alloc*1e-6+float64(p.HistoryStats().Events))
	require.InDelta(t, freed, float64(tf), alloc*1e-6+float64(p.HistoryStats().Events))
	// the top site's series is its own events
	top := tl.Sites[0]
	var siteAlloc uint64
	for _, v := range top.AllocBytes {
		siteAlloc += v
	}
	s, ok := p.Site(top.Site)
	require.True(t, ok)
	require.InDelta(t, s.EstAllocBytes, float64(siteAlloc), s.EstAllocBytes*1e-6+float64(s.Samples+s.Reallocs))
	for _, o := range tl.Sites[1:] {
		var a uint64
		for _, v := range o.AllocBytes {
			a += v
		}
		require.LessOrEqual(t, a, siteAlloc, "top sites first")
	}

	// a fork's copy starts its own history; Clone copies it
	c := p.Clone()
	defer c.Close()
	require.Equal(t, p.HistoryStats(), c.HistoryStats())
	p.Fork(9)
	require.Zero(t, p.Forks[9].HistoryStats().Events)
	require.Equal(t, p.LiveCount(), p.Forks[9].LiveCount())
}

// BenchmarkTimeline: the report's timeline over a full history (64 MiB of
// the feed's events, about 3M), the work a report does after the program
// has exited.
func BenchmarkTimeline(b *testing.B) {
	p := NewProfile(1, "sampled", 512<<10)
	defer p.Close()
	for seed := uint64(1); p.HistoryStats().Recycled == 0; seed++ {
		feed(seed, 1_000_000, p)
	}
	for b.Loop() {
		p.Timeline(100, 10)
	}
	b.ReportMetric(float64(p.HistoryStats().Events), "events")
}

// A resize's entry says where the block was and where it went: in place,
// moved up, moved down (the new address is kept as a difference).
func TestHistoryResizeAddresses(t *testing.T) {
	p := NewProfile(1, "sampled", 1)
	defer p.Close()
	require.NoError(t, p.SetHistoryLimit(1<<20))
	const a, up, down = 0x7f12_3456_7000, 0x7f12_9999_0000, 0x5555_0000_1000
	p.Alloc(a, 64, 60, 1, 1)
	p.Resize(a, a, 80, 70, Realloc{Selected: true})
	p.Resize(a, up, 4096, 4000, Realloc{Selected: true})
	p.Resize(up, down, 96, 90, Realloc{Selected: true})
	var got [][3]uint64
	p.EachHistory(func(e HistoryEvent) bool {
		if e.Kind == "resize" {
			got = append(got, [3]uint64{e.Addr, e.NewAddr, e.Req})
		}
		return true
	})
	require.Equal(t, [][3]uint64{{a, a, 70}, {a, up, 4000}, {up, down, 90}}, got)
	b, ok := p.LiveBlockAt(down)
	require.True(t, ok)
	require.Equal(t, uint64(96), b.Usable)
}
