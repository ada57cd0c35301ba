//go:build !race

package alloc

import (
	"sync/atomic"
	"unsafe"
)

func raceAcquire(unsafe.Pointer) {}
func raceRelease(unsafe.Pointer) {}

// add adds n to a counter only this shard writes: a plain load, add and
// store. (tagtable.Add's atomic Store is an XCHG on amd64, a locked
// instruction that made a Malloc+Free pair 4x slower.) An aligned 64-bit
// store is never torn on the platforms Go supports, so readers' atomic
// loads see whole values; they may see it late, as with any counter.
func add(c *atomic.Uint64, n uint64) { *(*uint64)(unsafe.Pointer(c)) += n }
