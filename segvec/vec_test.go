package segvec

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"unsafe"
)

// rec16 is the 16-byte record of the tests and benchmarks (a block:
// address, size, tag).
type rec16 struct {
	addr uint64
	size uint32
	tag  uint32
}

type odd struct { // 24 bytes: segments of 4096 (96 KiB)
	a, b uint64
	c    [5]uint8
}

type big struct{ b [100000]byte } // larger than a segment: one per segment

func TestNewRejectsPointers(t *testing.T) {
	type inner struct {
		ok  [4]uint64
		bad []byte
	}
	check := func(t *testing.T, err error, wantField string) {
		t.Helper()
		if wantField == "" {
			if err != nil {
				t.Fatalf("rejected: %v", err)
			}
			return
		}
		if !errors.Is(err, ErrHasPointers) || !strings.Contains(err.Error(), wantField) {
			t.Fatalf("err %v, want ErrHasPointers naming %q", err, wantField)
		}
	}
	tests := []struct {
		name, field string
		newVec      func() error
	}{
		{"numbers", "", func() error { _, err := New[rec16](); return err }},
		{"uintptr-and-arrays", "", func() error {
			_, err := New[struct {
				p uintptr
				a [3][2]float64
				z [0]*int
			}]()
			return err
		}},
		{"empty-struct", "", func() error { _, err := New[struct{}](); return err }},
		{"pointer", ".p is a pointer", func() error { _, err := New[struct{ p *int }](); return err }},
		{"unsafe-pointer", ".p is a pointer", func() error { _, err := New[struct{ p unsafe.Pointer }](); return err }},
		{"string", ".s is a string", func() error { _, err := New[struct{ s string }](); return err }},
		{"slice-nested", ".in.bad is a slice", func() error { _, err := New[struct{ in inner }](); return err }},
		{"array-of-map", ".m[0] is a map", func() error { _, err := New[struct{ m [2]map[int]int }](); return err }},
		{"interface", ".i is a interface", func() error { _, err := New[struct{ i any }](); return err }},
		{"chan", ".c is a channel", func() error { _, err := New[struct{ c chan int }](); return err }},
		{"func", ".f is a func", func() error { _, err := New[struct{ f func() }](); return err }},
		{"top-level-string", "string is a string", func() error { _, err := New[string](); return err }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { check(t, tc.newVec(), tc.field) })
	}
	t.Run("MustNew-panics", func(t *testing.T) {
		defer func() {
			if err, _ := recover().(error); !errors.Is(err, ErrHasPointers) {
				t.Errorf("MustNew panicked with %v", err)
			}
		}()
		MustNew[*int]()
	})
	t.Run("chunk-option", func(t *testing.T) {
		if _, err := New[rec16](Limit(1 << 20)); !errors.Is(err, ErrOption) || !strings.Contains(err.Error(), "Limit does not apply to Vec") {
			t.Errorf("err %v", err)
		}
		if _, err := New[rec16](SegmentBytes(0)); !errors.Is(err, ErrOption) {
			t.Errorf("SegmentBytes(0): err %v", err)
		}
	})
}

func TestVecGeometry(t *testing.T) {
	type geom interface {
		PerSegment() int
		Bytes() int
		Grow(int) error
		Close() error
	}
	tests := []struct {
		name     string
		per      int
		segBytes int
		vec      func() geom
	}{
		{"rec16", 4096, 64 << 10, func() geom { return MustNew[rec16]() }},
		{"odd24", 4096, 96 << 10, func() geom { return MustNew[odd]() }},
		{"big", 1, roundUp(100000, pageSize), func() geom { return MustNew[big]() }},
		{"byte-1MiB", 1 << 20, 1 << 20, func() geom { return MustNew[byte](SegmentBytes(1 << 20)) }},
		{"empty", 64 << 10, pageSize, func() geom { return MustNew[struct{}]() }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := tc.vec()
			defer v.Close()
			if v.PerSegment() != tc.per {
				t.Errorf("PerSegment() = %d, want %d", v.PerSegment(), tc.per)
			}
			if v.Bytes() != 0 {
				t.Errorf("Bytes() = %d before any append", v.Bytes())
			}
			if err := v.Grow(1); err != nil || v.Bytes() != tc.segBytes {
				t.Errorf("Grow(1): %v, Bytes() = %d, want one segment of %d", err, v.Bytes(), tc.segBytes)
			}
		})
	}
}

// TestVecAppendAt: values round-trip across segment boundaries, for
// element sizes below, at and above a segment.
func TestVecAppendAt(t *testing.T) {
	t.Run("rec16", func(t *testing.T) {
		v := MustNew[rec16](SegmentBytes(1024)) // 64 per segment: many boundaries
		defer v.Close()
		for i := range 1000 {
			if got := v.Append(rec16{uint64(i), uint32(i * 3), uint32(i)}); got != i {
				t.Fatalf("Append returned %d, want %d", got, i)
			}
		}
		for i := range 1000 {
			if r := *v.At(i); r != (rec16{uint64(i), uint32(i * 3), uint32(i)}) {
				t.Fatalf("At(%d) = %+v", i, r)
			}
		}
		if err := v.check(); err != nil {
			t.Fatal(err)
		}
		if v.Len() != 1000 || v.Cap() != 1024 || v.Bytes() != 16*pageSize {
			t.Errorf("len %d cap %d bytes %d", v.Len(), v.Cap(), v.Bytes())
		}
	})
	t.Run("big", func(t *testing.T) {
		v := MustNew[big]()
		defer v.Close()
		for i := range 5 {
			p, j := v.AppendZero()
			if j != i {
				t.Fatalf("index %d want %d", j, i)
			}
			p.b[0], p.b[len(p.b)-1] = byte(i), byte(i+1)
		}
		for i := range 5 {
			if p := v.At(i); p.b[0] != byte(i) || p.b[len(p.b)-1] != byte(i+1) {
				t.Fatalf("At(%d) lost its bytes", i)
			}
		}
	})
	t.Run("zero-size", func(t *testing.T) { // every append takes the slow path: correct, not fast
		v := MustNew[struct{}]()
		defer v.Close()
		for i := range 100_000 {
			if v.Append(struct{}{}) != i {
				t.Fatal("wrong index")
			}
		}
		if v.Len() != 100_000 || v.At(99_999) == nil || v.Bytes() != 2*pageSize {
			t.Fatalf("len %d bytes %d", v.Len(), v.Bytes())
		}
		if err := v.check(); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("out-of-range", func(t *testing.T) {
		v := MustNew[rec16]()
		defer v.Close()
		v.Append(rec16{})
		for _, i := range []int{-1, 1, 1 << 40} {
			func() {
				defer func() {
					if s := fmt.Sprint(recover()); !strings.Contains(s, "index "+strconv.Itoa(i)+" out of range [0:1]") {
						t.Errorf("At(%d): panic %q", i, s)
					}
				}()
				v.At(i)
			}()
		}
	})
}

// TestVecTruncateResetShrink: Truncate and Reset keep the segments (and
// AppendZero still gives zero), Shrink returns them.
func TestVecTruncateResetShrink(t *testing.T) {
	v := MustNew[rec16](SegmentBytes(1024))
	defer v.Close()
	for i := range 300 {
		v.Append(rec16{addr: uint64(i) + 1})
	}
	held := v.Bytes()
	v.Truncate(100)
	if v.Len() != 100 || v.Bytes() != held || v.At(99).addr != 100 {
		t.Fatalf("Truncate(100): len %d bytes %d (held %d)", v.Len(), v.Bytes(), held)
	}
	if p, i := v.AppendZero(); i != 100 || *p != (rec16{}) {
		t.Fatalf("AppendZero after Truncate: %d, %+v (want zero)", i, *p)
	}
	if err := v.Shrink(); err != nil || v.Bytes() != 2*pageSize || v.Cap() != 128 {
		t.Fatalf("Shrink: %v, bytes %d cap %d", err, v.Bytes(), v.Cap())
	}
	if v.At(100).addr != 0 || v.At(50).addr != 51 {
		t.Fatal("Shrink lost elements")
	}
	v.Reset()
	if v.Len() != 0 || v.Bytes() != 2*pageSize {
		t.Fatalf("Reset: len %d bytes %d", v.Len(), v.Bytes())
	}
	v.Shrink()
	if v.Bytes() != 0 || v.Cap() != 0 {
		t.Fatalf("Shrink after Reset: bytes %d cap %d", v.Bytes(), v.Cap())
	}
	v.Append(rec16{addr: 7})
	if err := v.Grow(1000); err != nil || v.Cap() < 1001 {
		t.Fatalf("Grow: %v cap %d", err, v.Cap())
	}
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if s, _ := recover().(string); !strings.Contains(s, "Truncate(5) with length 1") {
				t.Errorf("Truncate past the length: panic %q", s)
			}
		}()
		v.Truncate(5)
	}()
}

func TestVecIterators(t *testing.T) {
	v := MustNew[rec16](SegmentBytes(1024))
	defer v.Close()
	for i := range 200 {
		v.Append(rec16{addr: uint64(i)})
	}
	n := 0
	for i, p := range v.All() {
		if p.addr != uint64(i) || i != n {
			t.Fatalf("All: %d -> %+v", i, *p)
		}
		n++
	}
	if n != 200 {
		t.Fatalf("All visited %d", n)
	}
	var firsts []int
	n = 0
	for first, seg := range v.Segments() {
		firsts = append(firsts, first)
		for j := range seg {
			if seg[j].addr != uint64(first+j) {
				t.Fatalf("Segments: [%d+%d] = %+v", first, j, seg[j])
			}
		}
		n += len(seg)
	}
	if n != 200 || len(firsts) != 4 || firsts[3] != 192 {
		t.Fatalf("Segments: %d elements, firsts %v", n, firsts)
	}
	// A Truncate in the loop body ends the loop; appends are visited.
	n = 0
	for i := range v.All() {
		n++
		if i == 10 {
			v.Truncate(11)
		}
	}
	if n != 11 {
		t.Fatalf("All after Truncate in the body visited %d", n)
	}
	n = 0
	for i := range v.All() {
		if n++; i < 20 {
			v.Append(rec16{})
		}
	}
	if n != 31 {
		t.Fatalf("All with appends in the body visited %d, want 31", n)
	}
}

// TestVecPointerStability: a pointer to element 0 reads the same after
// a million appends (which map hundreds of segments).
func TestVecPointerStability(t *testing.T) {
	v := MustNew[rec16]()
	defer v.Close()
	v.Append(rec16{addr: 0xfeed, size: 1, tag: 2})
	p := v.At(0)
	q, _ := v.AppendZero()
	q.addr = 0xbeef
	for i := range 1_000_000 {
		v.Append(rec16{addr: uint64(i)})
	}
	if *p != (rec16{addr: 0xfeed, size: 1, tag: 2}) || p != v.At(0) || q.addr != 0xbeef || q != v.At(1) {
		t.Fatalf("element 0 moved or changed: %+v at %p (At(0) %p); element 1 %+v", *p, p, v.At(0), *q)
	}
	if err := v.check(); err != nil {
		t.Fatal(err)
	}
}

func TestVecUseAfterClosePanics(t *testing.T) {
	v := MustNew[rec16]()
	v.Append(rec16{})
	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	if v.Len() != 0 || v.Bytes() != 0 || v.Close() != nil {
		t.Fatalf("after Close: len %d bytes %d", v.Len(), v.Bytes())
	}
	for name, fn := range map[string]func(){
		"At":         func() { v.At(0) },
		"Append":     func() { v.Append(rec16{}) },
		"AppendZero": func() { v.AppendZero() },
		"Grow":       func() { v.Grow(1) },
	} {
		func() {
			defer func() {
				if s := fmt.Sprint(recover()); !strings.Contains(s, "segvec: Vec[segvec.rec16] used after Close") {
					t.Errorf("%s after Close: panic %q", name, s)
				}
			}()
			fn()
		}()
	}
}

// TestVecPublish: readers on other goroutines read published elements
// while the writer appends (run with -race).
func TestVecPublish(t *testing.T) {
	v := MustNew[rec16](SegmentBytes(1024))
	defer v.Close()
	const n = 100_000
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for r := range 2 {
		wg.Go(func() {
			seen := 0
			for seen < n {
				l := v.LenAcquire()
				for i := max(seen-5, 0); i < l; i += 1 + r {
					if p := v.AtShared(i); p.addr != uint64(i)*3 || p.tag != uint32(i) {
						errs <- "reader saw " + strconv.Itoa(i) + " unwritten"
						return
					}
				}
				seen = l
				runtime.Gosched()
			}
		})
	}
	for i := range n {
		v.Append(rec16{addr: uint64(i) * 3, tag: uint32(i)})
		if i%97 == 0 || i == n-1 {
			v.Publish()
		}
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
	v.Truncate(10)
	if v.LenAcquire() != 10 {
		t.Errorf("Truncate left the published length at %d", v.LenAcquire())
	}
}

func heapAlloc() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// bigN is the element count of the memory tests: 10 Mi records, 160 MiB
// (-short: 1 Mi).
func bigN() int {
	if testing.Short() {
		return 1 << 20
	}
	return 10 << 20
}

// TestVecNotOnGoHeap: 160 MiB of records leave the Go heap as it was
// (the GC neither counts nor scans them).
func TestVecNotOnGoHeap(t *testing.T) {
	if !offHeap {
		t.Skip("the fallback keeps segments on the Go heap")
	}
	n := bigN()
	before := heapAlloc()
	v := MustNew[rec16]()
	defer v.Close()
	for i := range n {
		v.Append(rec16{addr: uint64(i), size: uint32(i)})
	}
	after := heapAlloc()
	t.Logf("Go heap %d -> %d bytes with %d MiB in a Vec", before, after, v.Bytes()>>20)
	if grew := int64(after) - int64(before); grew > 4<<20 {
		t.Errorf("Go heap grew %d bytes for %d MiB in a Vec, want < 4 MiB", grew, v.Bytes()>>20)
	}
	if v.Bytes() < n*16 || v.At(n-1).addr != uint64(n-1) {
		t.Errorf("Bytes() = %d for %d records", v.Bytes(), n)
	}
}

// rssKiB reads VmRSS from /proc/self/status.
func rssKiB(t *testing.T) int {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Skip("no VmRSS")
	return 0
}

// TestCloseReleasesMemory: RSS rises by what a Vec (and a Chunked) hold
// and falls back at Close.
func TestCloseReleasesMemory(t *testing.T) {
	if !offHeap {
		t.Skip("the fallback's memory goes back when the GC frees it")
	}
	n := max(bigN(), 4<<20) // 64 MiB at least: well above the runtime's own RSS noise
	dataKiB := n * 16 >> 10
	t.Run("Vec", func(t *testing.T) {
		debug.FreeOSMemory() // so the scavenger does not return pages while we measure
		r0 := rssKiB(t)
		v := MustNew[rec16]()
		for i := range n {
			v.Append(rec16{addr: uint64(i)})
		}
		r1 := rssKiB(t)
		v.Close()
		r2 := rssKiB(t)
		t.Logf("RSS %d -> %d -> Close %d KiB", r0, r1, r2)
		if r1-r0 < dataKiB*9/10 || r1-r2 < dataKiB*9/10 {
			t.Errorf("RSS %d -> %d -> %d KiB for %d KiB of records: want a rise and a fall of about that", r0, r1, r2, dataKiB)
		}
	})
	t.Run("Chunked", func(t *testing.T) {
		debug.FreeOSMemory()
		r0 := rssKiB(t)
		c, err := NewChunked(Limit(dataKiB << 10))
		if err != nil {
			t.Fatal(err)
		}
		p := make([]byte, 1000)
		for c.Next() < uint64(dataKiB) {
			c.Append(p)
		}
		r1 := rssKiB(t)
		c.Reset()
		r2 := rssKiB(t)
		for c.Next() < 2*uint64(dataKiB) {
			c.Append(p)
		}
		r2b := rssKiB(t)
		c.Close()
		r3 := rssKiB(t)
		t.Logf("RSS %d -> %d -> Reset %d -> refilled %d -> Close %d KiB", r0, r1, r2, r2b, r3)
		if r1-r0 < dataKiB*9/10 || r1-r2 < dataKiB*9/10 || r2b-r3 < dataKiB*9/10 {
			t.Errorf("RSS %d -> %d -> Reset %d -> Close %d KiB for %d KiB of history: want a rise and falls of about that", r0, r1, r2, r3, dataKiB)
		}
	})
}
