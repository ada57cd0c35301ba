// Vec, the segmented vector (mozilla::SegmentedVector): typed elements in
// fixed-size segments of mmap'd memory that never move and that the GC
// never scans.

package segvec

import (
	"fmt"
	"iter"
	"os"
	"reflect"
	"slices"
	"sync/atomic"
	"unsafe"
)

var pageSize = os.Getpagesize()

// Vec is a growable array of T kept outside the Go heap, in segments of
// a power-of-two number of elements (at least SegmentBytes, default
// 64 KiB, each its own mapping). Element i lives in segment i>>shift at
// slot i&mask, so At is a shift, a mask, a load and a multiply-add.
// Append stores through a next-slot pointer and bumps it, mapping a new
// segment when the last is full; it never moves an element, so a *T
// from At or AppendZero stays valid until Truncate below it, Shrink or
// Close.
//
// T must hold no Go pointers (New checks). The zero Vec is not usable:
// call New.
//
// Concurrency: one goroutine mutates (Append, AppendZero, Grow,
// Truncate, Reset, Shrink, Close) and may call every method; no other
// goroutine may call those or At/Len/All at the same time. Other
// goroutines may read elements the writer has published: the writer
// calls Publish after appending, readers call LenAcquire and AtShared(i)
// for i < LenAcquire(). Truncate, Reset, Shrink and Close need readers
// to be quiescent (the caller's synchronization).
type Vec[T any] struct {
	// Writer-owned.
	n        int              // elements in use; 0 <= n <= cap
	next     unsafe.Pointer   // where element n goes, if next != end
	end      unsafe.Pointer   // the end of element n's segment (next == end: full, or none)
	cap      int              // == len(segs) << shift
	segs     []unsafe.Pointer // base of each segment; len(segs) == len(maps)
	maps     [][]byte         // the mappings behind segs, in order, for munmap
	shift    uint             // log2(elements per segment); fixed at New
	mask     int              // elements per segment - 1; fixed at New
	size     uintptr          // unsafe.Sizeof(T); fixed at New
	segBytes int              // bytes mapped per segment (pages); Bytes == len(maps)*segBytes
	name     string
	closed   bool

	// Published to readers: written by the writer (Publish, grow, and
	// lowered by Truncate/Reset/Shrink/Close), read by LenAcquire and
	// AtShared. pubLen <= n.
	pubLen  atomic.Int64
	pubSegs atomic.Pointer[[]unsafe.Pointer]
}

// New returns an empty Vec. It maps nothing until the first append. It
// fails with ErrHasPointers (naming the field) if T holds Go pointers,
// and with ErrOption for a bad or misplaced option.
func New[T any](opts ...Option) (*Vec[T], error) {
	c, err := build(opts, optChunk|optLimit, "Vec")
	if err != nil {
		return nil, err
	}
	if err := checkNoPointers(reflect.TypeFor[T]()); err != nil {
		return nil, err
	}
	var zero T
	size := unsafe.Sizeof(zero)
	unit := max(int(size), 1)
	per, shift := 1, uint(0)
	for per*unit < c.segmentBytes {
		per <<= 1
		shift++
	}
	segBytes := roundUp(max(per*int(size), 1), pageSize)
	name := c.name
	if name == "" {
		name = "tagalloc segvec"
	}
	v := &Vec[T]{shift: shift, mask: per - 1, size: size, segBytes: segBytes, name: name}
	v.pubSegs.Store(&[]unsafe.Pointer{})
	return v, nil
}

// MustNew is New that panics on error (for package-level Vecs of types
// known to be pointer-free).
func MustNew[T any](opts ...Option) *Vec[T] {
	v, err := New[T](opts...)
	if err != nil {
		panic(err)
	}
	return v
}

// Append adds x at the end and returns its index. It panics with an
// ErrOutOfMemory error if the OS refuses a new segment (use Grow first
// to get an error instead), and after Close.
func (v *Vec[T]) Append(x T) int {
	p := v.next
	if p == v.end {
		p = v.grow()
	}
	v.next = unsafe.Add(p, v.size)
	*(*T)(p) = x
	i := v.n
	v.n = i + 1
	return i
}

// AppendZero adds a zero element and returns a pointer to it (to fill
// in place: no copy of T) and its index.
func (v *Vec[T]) AppendZero() (*T, int) {
	p := v.next
	if p == v.end {
		p = v.grow()
	}
	v.next = unsafe.Add(p, v.size)
	var zero T
	*(*T)(p) = zero // a slot below a Truncate holds old data
	i := v.n
	v.n = i + 1
	return (*T)(p), i
}

// At returns a pointer to element i, valid until Truncate below i+1,
// Shrink or Close. It panics if i is out of range, and after Close.
func (v *Vec[T]) At(i int) *T {
	if uint(i) >= uint(v.n) {
		panic(indexError[T]{i, v.n, v.closed}) // not a call: keeps At inlinable
	}
	return (*T)(unsafe.Add(v.segs[i>>v.shift], uintptr(i&v.mask)*v.size))
}

// Len returns the number of elements.
func (v *Vec[T]) Len() int { return v.n }

// Cap returns the elements the mapped segments hold.
func (v *Vec[T]) Cap() int { return v.cap }

// PerSegment returns the elements per segment (a power of two).
func (v *Vec[T]) PerSegment() int { return v.mask + 1 }

// Bytes returns the memory the Vec holds: its mapped segments (pages
// count once touched; a Vec that has been filled has touched them). The
// segment table on the Go heap (32 bytes a segment) is not included.
func (v *Vec[T]) Bytes() int { return len(v.maps) * v.segBytes }

// All iterates over the elements in index order. Elements appended by
// the loop body are visited too; a Truncate in the body ends the loop
// at the new length.
func (v *Vec[T]) All() iter.Seq2[int, *T] {
	return func(yield func(int, *T) bool) {
		for i := 0; i < v.n; i++ {
			if !yield(i, (*T)(unsafe.Add(v.segs[i>>v.shift], uintptr(i&v.mask)*v.size))) {
				return
			}
		}
	}
}

// Segments iterates over the elements a segment at a time: the index of
// the first, and a slice of the segment's elements in use (aliasing the
// Vec's memory; do not append to it). For bulk scans and copies.
func (v *Vec[T]) Segments() iter.Seq2[int, []T] {
	return func(yield func(int, []T) bool) {
		per := v.mask + 1
		for first := 0; first < v.n; first += per {
			n := min(per, v.n-first)
			if !yield(first, unsafe.Slice((*T)(v.segs[first>>v.shift]), n)) {
				return
			}
		}
	}
}

// Grow makes sure n more elements can be appended without mapping
// memory, and returns ErrOutOfMemory (having mapped what it could) if
// the OS refuses.
func (v *Vec[T]) Grow(n int) error {
	if v.closed {
		v.useAfterClose()
	}
	if n < 0 {
		panic(fmt.Sprintf("segvec: Grow(%d): negative", n))
	}
	for v.cap-v.n < n {
		if err := v.addSegment(); err != nil {
			return err
		}
	}
	v.seek()
	return nil
}

// Truncate drops the elements from n on. It keeps every segment mapped
// (the next appends reuse them without a system call); Shrink releases
// the ones past the length. It panics unless 0 <= n <= Len.
func (v *Vec[T]) Truncate(n int) {
	if n < 0 || n > v.n {
		panic(fmt.Sprintf("segvec: Truncate(%d) with length %d", n, v.n))
	}
	v.n = n
	v.seek()
	if int64(n) < v.pubLen.Load() {
		v.pubLen.Store(int64(n))
	}
}

// Reset is Truncate(0): it empties the Vec and keeps its segments
// mapped and resident for reuse. Call Shrink after it to give the
// memory back.
func (v *Vec[T]) Reset() { v.Truncate(0) }

// Shrink unmaps the segments past those Len needs, and returns the first
// munmap error.
func (v *Vec[T]) Shrink() error {
	keep := (v.n + v.mask) >> v.shift
	var first error
	for _, b := range v.maps[keep:] {
		if err := osUnmap(b); err != nil && first == nil {
			first = err
		}
	}
	clear(v.maps[keep:])
	v.maps = slices.Clip(v.maps[:keep])
	v.segs = slices.Clip(v.segs[:keep]) // a later append copies: old snapshots stay as they were
	v.cap = keep << v.shift
	snap := v.segs
	v.pubSegs.Store(&snap)
	v.seek()
	return first
}

// Close unmaps every segment. Every pointer from At or AppendZero
// becomes invalid (using one faults); every later call except Len, Cap,
// Bytes, Reset and Close panics. Closing twice does nothing.
func (v *Vec[T]) Close() error {
	if v.closed {
		return nil
	}
	v.n = 0
	v.pubLen.Store(0)
	err := v.Shrink()
	v.segs, v.maps = nil, nil
	v.closed = true
	return err
}

// Publish makes the elements appended so far readable by other
// goroutines through LenAcquire and AtShared (a release store of the
// length; the writer's element writes happen before it).
func (v *Vec[T]) Publish() { v.pubLen.Store(int64(v.n)) }

// LenAcquire returns the published length (an acquire load): a reader on
// any goroutine may call AtShared(i) for every i below it.
func (v *Vec[T]) LenAcquire() int { return int(v.pubLen.Load()) }

// AtShared is At for readers on other goroutines: i must be below the
// published length. Safe while the writer appends and publishes.
func (v *Vec[T]) AtShared(i int) *T {
	n := v.pubLen.Load()
	if uint64(i) >= uint64(n) {
		panic(indexError[T]{i, int(n), v.closed})
	}
	segs := *v.pubSegs.Load()
	return (*T)(unsafe.Add(segs[i>>v.shift], uintptr(i&v.mask)*v.size))
}

// grow makes room for element n, in the next segment (mapped if need
// be), and returns its slot.
func (v *Vec[T]) grow() unsafe.Pointer {
	if v.closed {
		v.useAfterClose()
	}
	if v.n == v.cap {
		if err := v.addSegment(); err != nil {
			panic(err)
		}
	}
	v.seek()
	return v.next
}

// seek points next at element n's slot and end at its segment's end
// (both nil when n == cap).
func (v *Vec[T]) seek() {
	if v.n == v.cap {
		v.next, v.end = nil, nil
		return
	}
	seg := v.segs[v.n>>v.shift]
	v.next = unsafe.Add(seg, uintptr(v.n&v.mask)*v.size)
	v.end = unsafe.Add(seg, uintptr(v.mask+1)*v.size)
}

// addSegment maps one segment at the end and publishes the new table.
func (v *Vec[T]) addSegment() error {
	// Huge pages from the second segment on: a Vec that has filled one
	// segment of 2 MiB is a large table, and one that has not keeps its
	// resident memory to the pages it touched.
	b, err := osMap(v.segBytes, v.name, false, len(v.maps) > 0)
	if err != nil {
		return fmt.Errorf("%w: mapping a %d-byte Vec segment with %d bytes held: %v", ErrOutOfMemory, v.segBytes, v.Bytes(), err)
	}
	v.maps = append(v.maps, b)
	v.segs = append(v.segs, unsafe.Pointer(unsafe.SliceData(b)))
	v.cap += v.mask + 1
	snap := v.segs
	v.pubSegs.Store(&snap)
	return nil
}

// indexError is the panic of At and AtShared: out of range, or closed.
type indexError[T any] struct {
	i, n   int
	closed bool
}

func (e indexError[T]) Error() string {
	if e.closed {
		return closedMessage[T]()
	}
	return fmt.Sprintf("segvec: index %d out of range [0:%d]", e.i, e.n)
}

func (v *Vec[T]) useAfterClose() { panic(closedMessage[T]()) }

func closedMessage[T any]() string {
	return fmt.Sprintf("segvec: Vec[%s] used after Close", reflect.TypeFor[T]())
}

// check verifies the Vec's invariants (tests call it after every step).
func (v *Vec[T]) check() error {
	switch {
	case len(v.segs) != len(v.maps):
		return fmt.Errorf("segvec: %d segments but %d mappings", len(v.segs), len(v.maps))
	case v.cap != len(v.segs)<<v.shift:
		return fmt.Errorf("segvec: cap %d != %d segments << %d", v.cap, len(v.segs), v.shift)
	case v.n < 0 || v.n > v.cap:
		return fmt.Errorf("segvec: length %d outside [0, cap %d]", v.n, v.cap)
	case v.n < v.cap && v.next != v.end && (v.next != unsafe.Add(v.segs[v.n>>v.shift], uintptr(v.n&v.mask)*v.size) ||
		v.end != unsafe.Add(v.segs[v.n>>v.shift], uintptr(v.mask+1)*v.size)):
		return fmt.Errorf("segvec: next slot %p, end %p: not element %d's", v.next, v.end, v.n)
	case v.n == v.cap && v.next != v.end:
		return fmt.Errorf("segvec: full, but next slot %p != end %p", v.next, v.end)
	case v.pubLen.Load() > int64(v.n):
		return fmt.Errorf("segvec: published length %d > length %d", v.pubLen.Load(), v.n)
	case len(*v.pubSegs.Load()) < (int(v.pubLen.Load())+v.mask)>>v.shift:
		return fmt.Errorf("segvec: published table has %d segments for published length %d", len(*v.pubSegs.Load()), v.pubLen.Load())
	}
	for k, b := range v.maps {
		if len(b) != v.segBytes || unsafe.Pointer(unsafe.SliceData(b)) != v.segs[k] {
			return fmt.Errorf("segvec: segment %d: mapping of %d bytes at %p, table says %p (want %d bytes)", k, len(b), unsafe.SliceData(b), v.segs[k], v.segBytes)
		}
	}
	return nil
}

func roundUp(n, to int) int { return (n + to - 1) / to * to }
