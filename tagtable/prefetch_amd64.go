package tagtable

// prefetch asks the CPU to bring the cache line at each address into the
// caches, without waiting for it (PREFETCHT0: an instruction that retires
// at once and never faults, so a stale or wild address costs nothing but
// the fetch). Drain issues the lines the next batches of events will read
// while it decodes the current one.
//
//go:noescape
func prefetch(addrs []uintptr)
