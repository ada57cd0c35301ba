//go:build unix

package segvec

import (
	"syscall"
	"time"
)

// cpuNow is the process's user+system CPU time: with 2 cores, part of
// the GC runs beside the loop, which wall time would not show.
func cpuNow() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
