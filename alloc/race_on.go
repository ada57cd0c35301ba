// The race detector does not know that pinning to a P excludes the other
// goroutines: tell it that each pinned section happens after the last.

//go:build race

package alloc

import (
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/tagalloc/tagalloc/tagtable"
)

func raceAcquire(p unsafe.Pointer) { runtime.RaceAcquire(p) }
func raceRelease(p unsafe.Pointer) { runtime.RaceRelease(p) }

// add is tagtable.Add under the race detector, which checks it (the
// plain store of race_off.go is a race by the memory model's letter).
func add(c *atomic.Uint64, n uint64) { tagtable.Add(c, n) }
