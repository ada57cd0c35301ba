package alloc

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

var sink []byte

// BenchmarkMallocFree64: one 64-byte Malloc+Free pair per op, one goroutine.
func BenchmarkMallocFree64(b *testing.B) {
	b.Run("handle", func(b *testing.B) {
		t := MustTag("bench")
		for i := 0; i < b.N; i++ {
			Free(t.Malloc(64))
		}
	})
	b.Run("string", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			Free(Malloc(64, "bench"))
		}
	})
	b.Run("calloc-handle", func(b *testing.B) {
		t := MustTag("bench")
		for i := 0; i < b.N; i++ {
			Free(t.Calloc(64))
		}
	})
}

// BenchmarkParallel: Malloc+Free pairs of 64 B on every P; ns/op falls
// with -cpu if nothing is shared.
func BenchmarkParallel(b *testing.B) {
	t := MustTag("bench-par")
	b.RunParallel(func(pb *testing.PB) {
		var ring [64][]byte
		i := 0
		for pb.Next() {
			Free(ring[i%64])
			ring[i%64] = t.Malloc(64)
			i++
		}
		for _, r := range ring {
			Free(r)
		}
	})
}

var (
	ballastOnce sync.Once
	ballast     [][]byte
)

// BenchmarkVsMake1GiBHeap compares 64-byte blocks from make (with the
// collections they cause, at a live Go heap of 1 GiB) with alloc's, in
// the same run. Each op replaces one block of a ring of 4096, so blocks
// live a little, as in a cache. Metrics: make-ns/op, alloc-ns/op and
// make/alloc.
func BenchmarkVsMake1GiBHeap(b *testing.B) {
	ballastOnce.Do(func() {
		ballast = make([][]byte, 4<<20) // 4 Mi pointers to 256-byte objects: 1 GiB to mark
		for i := range ballast {
			ballast[i] = make([]byte, 256)
		}
		runtime.GC()
	})
	t := MustTag("bench-vs")
	var ring [4096][]byte
	var gc0, gc1 runtime.MemStats
	runtime.ReadMemStats(&gc0)
	start := time.Now()
	for i := 0; i < b.N; i++ {
		ring[i%4096] = make([]byte, 64)
	}
	// Collections the make loop owes but has not run yet are part of its
	// cost: finish the cycle in progress, counted.
	runtime.GC()
	makeNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	runtime.ReadMemStats(&gc1)
	ring = [4096][]byte{}
	start = time.Now()
	for i := 0; i < b.N; i++ {
		Free(ring[i%4096])
		ring[i%4096] = t.Malloc(64)
	}
	allocNs := float64(time.Since(start).Nanoseconds()) / float64(b.N)
	for _, r := range ring {
		Free(r)
	}
	b.ReportMetric(makeNs, "make-ns/op")
	b.ReportMetric(allocNs, "alloc-ns/op")
	b.ReportMetric(makeNs/allocNs, "make/alloc")
	b.ReportMetric(float64(gc1.NumGC-gc0.NumGC), "GCs")
	runtime.KeepAlive(ballast)
}
