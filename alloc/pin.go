// Pinning to the P: the shard of a goroutine is its P's, held without a
// lock for the few nanoseconds of a fast path.

package alloc

import (
	_ "unsafe" // go:linkname
)

// procPin disables preemption and returns the current P's id; procUnpin
// enables it again. sync.Pool and sync/atomic's Value use them; they are
// on the runtime's list of linknames kept working for outside packages.
// While pinned, code must not block, park, take a sync.Mutex, or panic.
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()
