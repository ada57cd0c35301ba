package alloc

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/tagalloc/tagalloc/arena"
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

// BenchmarkManyTagsPairs: 64-byte Malloc+Free pairs, one goroutine, the
// tag changing at every pair among 256, 64 blocks live (a ring): blocks
// of many tags share spans, so their tags are kept per block.
func BenchmarkManyTagsPairs(b *testing.B) {
	tags := make([]*Tag, 256)
	for i := range tags {
		tags[i] = MustTag(fmt.Sprintf("bench-tags-%d", i))
	}
	var ring [64][]byte
	for i := 0; i < b.N; i++ {
		Free(ring[i%64])
		ring[i%64] = tags[i%256].Malloc(64)
	}
	for _, r := range ring {
		Free(r)
	}
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

// The many-tags workload (issue 26, item 3): one goroutine per P, each
// holding one block of each of five sizes under each of 256 tags, every
// byte written. A tag must cost counters, not spans: alloc's peak RSS
// should stay near make's.
var (
	manyTagsSizes = []int{16, 64, 256, 1024, 2048}
	manyTagsProcs = []int{1, 8, 32}
)

const manyTagsN = 256

// manyTags runs the workload with blocks from get, returning them (held).
func manyTags(get func(tag, n int) []byte) [][]byte {
	procs := runtime.GOMAXPROCS(0)
	held := make([][][]byte, procs)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for g := 0; g < procs; g++ {
		ready.Add(1)
		done.Add(1)
		go func(g int) {
			defer done.Done()
			mine := make([][]byte, 0, manyTagsN*len(manyTagsSizes))
			ready.Done()
			<-start
			for tag := 0; tag < manyTagsN; tag++ {
				for _, n := range manyTagsSizes {
					b := get(tag, n)
					for i := range b {
						b[i] = byte(i + tag)
					}
					mine = append(mine, b)
				}
				if tag%16 == 15 {
					runtime.Gosched() // let the goroutines interleave on the Ps
				}
			}
			held[g] = mine
		}(g)
	}
	ready.Wait()
	close(start)
	done.Wait()
	var all [][]byte
	for _, h := range held {
		all = append(all, h...)
	}
	return all
}

// peakRSS is VmHWM (bytes), or 0 if unknown.
func peakRSS() int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// TestManyTagsRSSChild is BenchmarkManyTagsRSS's child (a fresh process
// per measurement: peak RSS is the process's): ALLOC_RSS_CHILD=make or
// alloc. The alloc child also checks that every tag's books are exact.
func TestManyTagsRSSChild(t *testing.T) {
	mode := os.Getenv("ALLOC_RSS_CHILD")
	var get func(tag, n int) []byte
	switch mode {
	case "":
		t.Skip("run by BenchmarkManyTagsRSS")
	case "make":
		get = func(_, n int) []byte { return make([]byte, n) }
	case "alloc":
		tags := make([]*Tag, manyTagsN)
		for i := range tags {
			tags[i] = MustTag(fmt.Sprintf("many-%d", i))
		}
		get = func(tag, n int) []byte { return tags[tag].Malloc(n) }
	default:
		t.Fatalf("ALLOC_RSS_CHILD=%q", mode)
	}
	held := manyTags(get)
	peak := peakRSS()
	if mode == "alloc" {
		var per uint64
		for _, n := range manyTagsSizes {
			per += usable(n)
		}
		want := per * uint64(runtime.GOMAXPROCS(0))
		for i := 0; i < manyTagsN; i++ {
			if st := MustTag(fmt.Sprintf("many-%d", i)).Stats(); st.LiveBytes != want || st.LiveBlocks != uint64(len(manyTagsSizes)*runtime.GOMAXPROCS(0)) {
				t.Fatalf("tag many-%d: %+v, want %d live bytes", i, st, want)
			}
		}
	}
	runtime.KeepAlive(held)
	fmt.Printf("rss-child %s peak %d\n", mode, peak)
}

// rssChild runs TestManyTagsRSSChild in a fresh process and returns its
// peak RSS.
func rssChild(tb testing.TB, mode string, procs int) int64 {
	cmd := exec.Command(os.Args[0], "-test.run=^TestManyTagsRSSChild$")
	cmd.Env = append(os.Environ(), "ALLOC_RSS_CHILD="+mode, fmt.Sprintf("GOMAXPROCS=%d", procs))
	out, err := cmd.CombinedOutput()
	if err != nil {
		tb.Fatalf("%s at %d Ps: %v\n%s", mode, procs, err, out)
	}
	for _, l := range strings.Split(string(out), "\n") {
		var m string
		var peak int64
		if n, _ := fmt.Sscanf(l, "rss-child %s peak %d", &m, &peak); n == 2 && peak > 0 {
			return peak
		}
	}
	tb.Fatalf("%s at %d Ps: no peak RSS in\n%s", mode, procs, out)
	return 0
}

func median(xs []int64) int64 {
	s := append([]int64(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

// BenchmarkManyTagsRSS measures the many-tags workload's peak RSS with
// alloc and with make, each in fresh processes, interleaved (three of
// each per op), at 1, 8 and 32 Ps. Metrics per P count: the medians in
// MB and alloc/make.
func BenchmarkManyTagsRSS(b *testing.B) {
	if runtime.GOOS != "linux" {
		b.Skip("peak RSS from /proc/self/status")
	}
	samples := map[string][]int64{}
	for i := 0; i < b.N; i++ {
		for round := 0; round < 3; round++ {
			for _, p := range manyTagsProcs {
				for _, mode := range []string{"make", "alloc"} {
					k := fmt.Sprintf("%d/%s", p, mode)
					samples[k] = append(samples[k], rssChild(b, mode, p))
				}
			}
		}
	}
	for _, p := range manyTagsProcs {
		m, a := median(samples[fmt.Sprintf("%d/make", p)]), median(samples[fmt.Sprintf("%d/alloc", p)])
		b.ReportMetric(float64(m)/1e6, fmt.Sprintf("make-MB-%dP", p))
		b.ReportMetric(float64(a)/1e6, fmt.Sprintf("alloc-MB-%dP", p))
		b.ReportMetric(float64(a)/float64(m), fmt.Sprintf("alloc/make-%dP", p))
	}
}

// BenchmarkReallocChain: one op grows a buffer 64 bytes a Realloc, then
// frees it (the native realloc_chain's pattern): small, from 1 KiB to 256
// KiB, large, from 1 MiB to 4 MiB 4 KiB a step, and huge, from 1 MiB to
// 64 MiB 64 KiB a step. Beside each, Go's own
// append growing a slice the same way (the peer: the Go runtime's growth
// rule, garbage collected).
func BenchmarkReallocChain(b *testing.B) {
	b.Run("small", func(b *testing.B) { benchReallocChain(b, 1<<10, 256<<10, 64) })
	b.Run("large", func(b *testing.B) { benchReallocChain(b, 1<<20, 4<<20, 4<<10) })
	b.Run("huge", func(b *testing.B) { benchReallocChain(b, 1<<20, 64<<20, 64<<10) })
}

func benchReallocChain(b *testing.B, from, to, step int) {
	b.Run("alloc", func(b *testing.B) {
		t := MustTag("bench-realloc")
		for i := 0; i < b.N; i++ {
			buf := t.Malloc(from)
			for n := from + step; n <= to; n += step {
				buf = Realloc(buf, n)
				buf[n-1] = 1
			}
			Free(buf)
		}
	})
	b.Run("append", func(b *testing.B) {
		chunk := make([]byte, step)
		for i := 0; i < b.N; i++ {
			buf := make([]byte, from)
			for len(buf)+step <= to {
				buf = append(buf, chunk...)
				buf[len(buf)-1] = 1
			}
			sink = buf
		}
	})
}

// BenchmarkLargeLoop: the native large_loop (bench/workloads) in Go: 64
// slots of blocks of 64 KiB to 4 MiB replace each other at random, each
// new block written at its first and last byte, alloc's against make's
// (benchVsMake). Run with -benchtime=20000x for the native row's count.
func BenchmarkLargeLoop(b *testing.B) {
	const slots, lo, hi = 64, 64 << 10, 4 << 20
	benchVsMake(b, "bench-large-loop", func(get func(n int) []byte, put func([]byte)) {
		var ring [slots][]byte
		rng := uint64(1)
		for i := 0; i < b.N; i++ {
			rng ^= rng << 13
			rng ^= rng >> 7
			rng ^= rng << 17
			k := rng % slots
			if ring[k] != nil {
				put(ring[k])
			}
			n := lo + int(rng>>8)%(hi-lo+1)
			buf := get(n)
			buf[0], buf[n-1] = byte(i), byte(i)
			ring[k] = buf
		}
		for _, r := range ring {
			if r != nil {
				put(r)
			}
		}
	})
}

// benchVsMake runs work's b.N ops with alloc's blocks (Malloc under tag,
// Free), then with make's (the Go heap, which zeroes every block and
// frees by collection), and reports each one's time and minor page faults
// an op (the arena's retain limit, purge delay and huge cache at work:
// every fault is a page the OS hands in again) and make's time over
// alloc's.
func benchVsMake(b *testing.B, tag string, work func(get func(n int) []byte, put func([]byte))) {
	measure := func(get func(n int) []byte, put func([]byte)) (ns, faults float64) {
		f0, start := minorFaults(), time.Now()
		work(get, put)
		return float64(time.Since(start).Nanoseconds()) / float64(b.N), float64(minorFaults()-f0) / float64(b.N)
	}
	allocNs, allocFaults := measure(MustTag(tag).Malloc, Free)
	makeNs, makeFaults := measure(func(n int) []byte { return make([]byte, n) }, func(b []byte) { sink = b })
	sink = nil
	runtime.GC()
	b.ReportMetric(allocNs, "alloc-ns/op")
	b.ReportMetric(makeNs, "make-ns/op")
	b.ReportMetric(makeNs/allocNs, "make/alloc")
	b.ReportMetric(allocFaults, "alloc-faults/op")
	b.ReportMetric(makeFaults, "make-faults/op")
}

// minorFaults is the process's minor page faults so far.
func minorFaults() int64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return ru.Minflt
}

// BenchmarkHugeCycle: one op makes a huge block (the huge threshold and a
// MiB more), writes a byte a page and frees it: the arena's cache of
// freed mappings hands the same resident pages back, where a fresh
// mapping faults every page in again; alloc's against make's
// (benchVsMake).
func BenchmarkHugeCycle(b *testing.B) {
	ensureInit() // HugeMin is 0 until the arena is made
	n := int(arena.HugeMin()) + 1<<20
	benchVsMake(b, "bench-huge-cycle", func(get func(n int) []byte, put func([]byte)) {
		for i := 0; i < b.N; i++ {
			buf := get(n)
			for k := 0; k < len(buf); k += 4096 {
				buf[k] = byte(i)
			}
			put(buf)
		}
	})
}
