package segvec

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"
)

// roundElems is how many records a table grows to before it is dropped
// and a new one started, in the append benchmarks: 4 Mi records, 64 MiB.
const roundElems = 1 << 22

// BenchmarkVecAppend: one 16-byte record per op, into a Vec that grows
// to 64 MiB and then is closed and replaced (fresh: mapping and faulting
// in new pages is part of the cost, about 2 us a page on the development
// VM), or reset (reused: its segments stay mapped).
func BenchmarkVecAppend(b *testing.B) {
	b.Run("fresh", func(b *testing.B) {
		v := MustNew[rec16]()
		for i := 0; i < b.N; i++ {
			if v.Len() == roundElems {
				v.Close()
				v = MustNew[rec16]()
			}
			v.Append(rec16{addr: uint64(i), size: 64})
		}
		v.Close()
	})
	b.Run("reused", func(b *testing.B) {
		v := MustNew[rec16]()
		for i := 0; i < b.N; i++ {
			if v.Len() == roundElems {
				v.Reset()
			}
			v.Append(rec16{addr: uint64(i), size: 64})
		}
		v.Close()
	})
	b.Run("slice-reused", func(b *testing.B) { // the baseline: a Go slice's memory, reused
		s := make([]rec16, 0, roundElems)
		for i := 0; i < b.N; i++ {
			if len(s) == roundElems {
				s = s[:0]
			}
			s = append(s, rec16{addr: uint64(i), size: 64})
		}
		runtime.KeepAlive(s)
	})
}

type node struct {
	next *node
	pad  [48]byte
}

var (
	ballastOnce sync.Once
	ballast     []*node
)

// BenchmarkVecVsSlice compares appending 16-byte records to a Go slice
// (growing by append, dropped every 4 Mi records as a table rebuilt
// would be) with appending to a Vec (closed every 4 Mi), both with a
// live Go heap of 4 Mi pointer-holding objects (~290 MiB) for the GC to
// mark. The slice's cost includes the collections its garbage causes
// (the owed cycle is finished and counted). Metrics: wall and CPU ns per
// record for each, their ratios, and the GCs the slice loop caused.
func BenchmarkVecVsSlice(b *testing.B) {
	ballastOnce.Do(func() {
		ballast = make([]*node, 4<<20)
		for i := range ballast {
			ballast[i] = &node{}
			if i > 0 {
				ballast[i].next = ballast[i-1]
			}
		}
		runtime.GC()
	})
	b.ResetTimer()
	var gc0, gc1 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	w0, c0 := time.Now(), cpuNow()
	var s []rec16
	for i := 0; i < b.N; i++ {
		if len(s) == roundElems {
			s = nil
		}
		s = append(s, rec16{addr: uint64(i), size: 64})
	}
	s = nil
	runtime.GC()
	sliceWall, sliceCPU := time.Since(w0), cpuNow()-c0
	runtime.ReadMemStats(&gc1)

	w0, c0 = time.Now(), cpuNow()
	v := MustNew[rec16]()
	for i := 0; i < b.N; i++ {
		if v.Len() == roundElems {
			v.Close()
			v = MustNew[rec16]()
		}
		v.Append(rec16{addr: uint64(i), size: 64})
	}
	v.Close()
	vecWall, vecCPU := time.Since(w0), cpuNow()-c0

	n := float64(b.N)
	b.ReportMetric(float64(sliceWall.Nanoseconds())/n, "slice-ns/op")
	b.ReportMetric(float64(vecWall.Nanoseconds())/n, "vec-ns/op")
	b.ReportMetric(float64(sliceWall)/float64(vecWall), "slice/vec")
	b.ReportMetric(float64(sliceCPU.Nanoseconds())/n, "slice-cpu-ns/op")
	b.ReportMetric(float64(vecCPU.Nanoseconds())/n, "vec-cpu-ns/op")
	b.ReportMetric(float64(sliceCPU)/float64(vecCPU), "slice/vec-cpu")
	b.ReportMetric(float64(gc1.NumGC-gc0.NumGC), "GCs")
	runtime.KeepAlive(ballast)
}

// BenchmarkVecAt: random reads of a 1 Mi-record Vec.
func BenchmarkVecAt(b *testing.B) {
	v := MustNew[rec16]()
	defer v.Close()
	for i := range 1 << 20 {
		v.Append(rec16{addr: uint64(i)})
	}
	idx := make([]int32, 4096)
	for i := range idx {
		idx[i] = int32(rand.IntN(1 << 20))
	}
	var sum uint64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		sum += v.At(int(idx[i&4095])).addr
	}
	runtime.KeepAlive(sum)
}

// events returns payloads shaped like encoded allocation events: sizes
// spread over [lo, hi).
func events(lo, hi int) [][]byte {
	r := rand.New(rand.NewPCG(1, 2))
	ev := make([][]byte, 1024)
	for i := range ev {
		ev[i] = make([]byte, lo+r.IntN(hi-lo))
		for j := range ev[i] {
			ev[i][j] = byte(r.Uint32())
		}
	}
	return ev
}

// BenchmarkChunkedAppend: one entry per op into a 64 MiB history of
// 1 MiB chunks, long past the limit (recycling all along). The target is
// 5 million entries/s.
func BenchmarkChunkedAppend(b *testing.B) {
	for _, sz := range []struct {
		name   string
		lo, hi int
	}{{"16-48B", 16, 48}, {"64-512B", 64, 512}} {
		b.Run(sz.name, func(b *testing.B) {
			ev := events(sz.lo, sz.hi)
			c, err := NewChunked()
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			b.SetBytes(int64(sz.lo+sz.hi) / 2)
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				c.Append(ev[i&1023])
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
		})
	}
}

// BenchmarkChunkedFirstLap: one entry per op, each history new (1 MiB
// of 16..48-byte entries into a 4 MiB one, a short-lived process's): the
// cost of bringing the pages in, which populate pays in bulk.
func BenchmarkChunkedFirstLap(b *testing.B) {
	ev := events(16, 48)
	const perHistory = 32 << 10 // entries: about 1 MiB
	var c *Chunked
	for i := 0; i < b.N; i++ {
		if i%perHistory == 0 {
			if c != nil {
				c.Close()
			}
			var err error
			if c, err = NewChunked(Limit(4 << 20)); err != nil {
				b.Fatal(err)
			}
		}
		c.Append(ev[i&1023])
	}
	c.Close()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
}

// BenchmarkChunkedRange: one entry visited per op, over a full 64 MiB
// history of 16..48-byte entries.
func BenchmarkChunkedRange(b *testing.B) {
	ev := events(16, 48)
	c, err := NewChunked()
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	for d, _ := c.Dropped(); d == 0; d, _ = c.Dropped() {
		c.Append(ev[c.Next()&1023])
	}
	b.ResetTimer()
	var sum, n int
	for n < b.N {
		c.Range(func(seq uint64, p []byte) bool {
			sum += len(p)
			n++
			return n < b.N
		})
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "entries/s")
	runtime.KeepAlive(sum)
}
