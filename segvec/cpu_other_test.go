//go:build !unix

package segvec

import "time"

// cpuNow: no portable CPU clock; the CPU metrics read 0 (NaN ratios).
func cpuNow() time.Duration { return 0 }
