//go:build !race

package books

import (
	"sync/atomic"
	"unsafe"
)

// Add adds n to a counter only the caller writes: a plain load, add and
// store. (atomic.Uint64.Store is an XCHG on amd64, a locked instruction
// that made package alloc's Malloc+Free pair 4x slower.) An aligned 64-bit
// store is never torn on the platforms Go supports, so readers' atomic
// loads see whole values; they may see it late, as with any counter.
func Add(c *atomic.Uint64, n uint64) { *(*uint64)(unsafe.Pointer(c)) += n }
