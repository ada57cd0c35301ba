package tagtable

import (
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/metrics"
	"testing"
	"time"

	"github.com/tagalloc/tagalloc/internal/size"
)

// BenchmarkLongRun feeds a profile a synthetic stream of sampled allocs,
// frees and reallocs (a churning live set of about 100k blocks over 4096
// stacks and 16 tags, sizes from 16 B to 1 MiB) for a while, and reports
// what the profiler holds against its history limit: the Go heap in use
// (after a GC) plus the segvec mappings (live blocks, sites, history).
// It is a benchmark, not a test: it runs for TAGALLOC_LONGRUN (a Go
// duration, default 3s) whatever b.N is, with the history limit
// TAGALLOC_LONGRUN_LIMIT (bytes, default 64 MiB). The ten-minute run:
//
//	TAGALLOC_LONGRUN=10m go test -run '^$' -bench LongRun -benchtime 1x -timeout 0 ./tagtable
func BenchmarkLongRun(b *testing.B) {
	dur := 3 * time.Second
	if s := os.Getenv("TAGALLOC_LONGRUN"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			b.Fatalf("TAGALLOC_LONGRUN=%s: %v", s, err)
		}
		dur = d
	}
	limit := DefaultHistoryLimit
	if s := os.Getenv("TAGALLOC_LONGRUN_LIMIT"); s != "" {
		v, err := size.Parse(s, 1<<46)
		if err != nil {
			b.Fatalf("TAGALLOC_LONGRUN_LIMIT: %v", err)
		}
		limit = int(v)
	}
	p := NewProfile(1, "sampled", 512<<10)
	defer p.Close()
	if err := p.SetHistoryLimit(limit); err != nil {
		b.Fatal(err)
	}
	for id := uint32(1); id <= 4096; id++ {
		p.Stack(id, []uint64{0x400000 + uint64(id)*16, 0x500000, 0x600000})
	}
	r := rand.New(rand.NewPCG(1, 2))
	const liveTarget = 100000
	live := make([]uint64, 0, liveTarget+1)
	next := uint64(1 << 32)
	heapOf := func() uint64 {
		runtime.GC()
		s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	heap0 := heapOf()
	var events, peakTotal, peakHeap, peakMapped uint64
	start := time.Now()
	lastCheck, lastLog := start, start
	b.ResetTimer()
	for {
		for i := 0; i < 4096; i++ {
			k := r.IntN(100)
			switch {
			case k < 50 && len(live) < liveTarget || len(live) == 0:
				size := uint64(16 + r.IntN(1<<(4+r.IntN(17))))
				next += 64
				p.Alloc(next, size, size, uint32(r.IntN(16)), uint32(1+r.IntN(4096)))
				live = append(live, next)
			case k < 95:
				j := r.IntN(len(live))
				p.Free(live[j])
				live[j] = live[len(live)-1]
				live = live[:len(live)-1]
			default:
				j := r.IntN(len(live))
				size := uint64(16 + r.IntN(1<<(4+r.IntN(17))))
				next += 64
				p.Resize(live[j], next, size, size, Realloc{Selected: true})
				live[j] = next
			}
		}
		events += 4096
		now := time.Now()
		p.SetClock(uint64(now.Sub(start).Milliseconds()))
		if now.Sub(lastCheck) < time.Second && now.Sub(start) < dur {
			continue
		}
		lastCheck = now
		b.StopTimer()
		heap := heapOf()
		heap -= min(heap0, heap)
		mapped := uint64(p.Bytes())
		peakHeap, peakMapped, peakTotal = max(peakHeap, heap), max(peakMapped, mapped), max(peakTotal, heap+mapped)
		if now.Sub(lastLog) >= time.Minute {
			lastLog = now
			hs := p.HistoryStats()
			b.Logf("%v: %d events, %d live, go heap %.1f MiB + mapped %.1f MiB (history %.1f MiB of %d MiB, %d recycled)",
				now.Sub(start).Round(time.Second), events, p.LiveCount(), mib(heap), mib(mapped), mib(hs.Bytes), limit>>20, hs.Recycled)
		}
		b.StartTimer()
		if now.Sub(start) >= dur {
			break
		}
	}
	b.StopTimer()
	hs := p.HistoryStats()
	b.Logf("%v: %d events (%.1fM/s), %d live blocks, %d sites; history: limit %d MiB, holds %.1f MiB, keeps %d events (%.1f s), recycled %d; "+
		"peak go heap %.1f MiB, peak mapped %.1f MiB, peak total %.1f MiB",
		time.Since(start).Round(time.Second), events, float64(events)/time.Since(start).Seconds()/1e6, p.LiveCount(), p.SiteCount(),
		limit>>20, mib(hs.Bytes), hs.Events, float64(hs.LastMs-hs.FirstMs)/1000, hs.Recycled, mib(peakHeap), mib(peakMapped), mib(peakTotal))
	b.ReportMetric(float64(events)/time.Since(start).Seconds(), "events/s")
	b.ReportMetric(mib(peakTotal), "peak-MiB")
	b.ReportMetric(mib(peakTotal)/mib(uint64(limit)), "peak/limit")
	if hs.Bytes > uint64(limit+HistorySlack) {
		b.Fatalf("the history holds %d bytes, over its limit %d", hs.Bytes, limit)
	}
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
