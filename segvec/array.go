// Array: a fixed-length array of pointer-free elements outside the Go
// heap, for tables that index it directly (open-addressing hash tables).

package segvec

import (
	"fmt"
	"reflect"
	"unsafe"
)

// Array is n zeroed elements of T in one mapping outside the Go heap (on
// the Go heap, as pointer-free memory, elsewhere than Linux): the GC
// neither scans nor counts it, and at 2 MiB or more it asks for huge
// pages. Unlike a Vec it does not grow: a table that outgrows it makes a
// larger one and closes the old.
type Array[T any] struct {
	s   []T
	mem []byte
}

// NewArray maps an Array of n elements (n > 0). It fails with
// ErrHasPointers if T holds Go pointers, with ErrOption for a bad n or
// option (only Name applies), and with ErrOutOfMemory if the mapping
// fails.
func NewArray[T any](n int, opts ...Option) (*Array[T], error) {
	c, err := build(opts, optSegment|optChunk|optLimit, "Array")
	if err != nil {
		return nil, err
	}
	if err := checkNoPointers(reflect.TypeFor[T]()); err != nil {
		return nil, err
	}
	size := unsafe.Sizeof(*new(T))
	if n <= 0 || size == 0 || uint64(n) > (1<<40)/uint64(size) {
		return nil, fmt.Errorf("%w: NewArray(%d) of %d-byte elements: want 1 to 1 TiB", ErrOption, n, size)
	}
	name := c.name
	if name == "" {
		name = "tagalloc segvec"
	}
	mem, err := osMap(roundUp(n*int(size), pageSize), name, false, true)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping an Array of %d %d-byte elements: %v", ErrOutOfMemory, n, size, err)
	}
	return &Array[T]{s: unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(mem))), n), mem: mem}, nil
}

// S is the elements: a slice valid until Close.
func (a *Array[T]) S() []T { return a.s }

// Bytes is the memory mapped.
func (a *Array[T]) Bytes() int { return len(a.mem) }

// Close unmaps the array; the slice from S becomes invalid (using it
// faults). Closing twice does nothing.
func (a *Array[T]) Close() error {
	if a.mem == nil {
		return nil
	}
	a.s = nil
	err := osUnmap(a.mem)
	a.mem = nil
	return err
}
