package growth

// Cost is what growing a buffer cost under a policy.
type Cost struct {
	Reallocs       int   // allocations of a new capacity (the first included)
	BytesAllocated int64 // sum of the capacities allocated
	BytesCopied    int64 // bytes moved from an old buffer into a new one
}

// Simulate grows a buffer from empty to to bytes by appends of step
// bytes, under policy p, assuming every reallocation moves the buffer
// (copying its length) — no growth in place.
func Simulate(p Policy, to, step int) Cost {
	var c Cost
	cap, n := 0, 0
	for n < to {
		need := min(n+step, to)
		if need > cap {
			nc := p(cap, need)
			c.Reallocs++
			c.BytesAllocated += int64(nc)
			c.BytesCopied += int64(n)
			cap = nc
		}
		n = need
	}
	return c
}
