//go:build !race

package alloc

import (
	"unsafe"
)

func raceAcquire(unsafe.Pointer) {}
func raceRelease(unsafe.Pointer) {}
