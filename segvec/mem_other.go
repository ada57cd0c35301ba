// OS memory elsewhere: a fallback backed by the Go heap, so the package
// builds and works on every platform. The memory is then on the Go heap:
// the GC counts it, though it never scans it (it is allocated as
// []uint64, which holds no pointers, and that also gives 8-byte
// alignment); purging only zeroes it.

//go:build !linux

package segvec

import "unsafe"

// The block is a word longer than asked, so that a Vec's next-slot
// pointer at the end of a full segment stays inside the allocation (Go
// forbids pointers past the end of one).
func osMap(size int, name string, noReserve, huge bool) ([]byte, error) {
	w := make([]uint64, size/8+2)
	return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(w))), size), nil
}

func osUnmap(b []byte) error { return nil }

func osPurge(b []byte) { clear(b) }

func osHuge(b []byte) {}

func osPopulate(b []byte) {}

const offHeap = false
