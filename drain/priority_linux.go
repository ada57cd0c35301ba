// The warmer's thread priority on Linux.

package drain

import "golang.org/x/sys/unix"

// lowerThreadPriority puts the calling thread (locked to its goroutine) at
// nice 19.
func lowerThreadPriority() { _ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19) }
