// The race detector does not know that pinning to a P excludes the other
// goroutines: tell it that each pinned section happens after the last.

//go:build race

package alloc

import (
	"runtime"
	"unsafe"
)

func raceAcquire(p unsafe.Pointer) { runtime.RaceAcquire(p) }
func raceRelease(p unsafe.Pointer) { runtime.RaceRelease(p) }
