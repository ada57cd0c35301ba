//go:build !linux

package drain

// lowerThreadPriority: per-thread priorities are Linux's.
func lowerThreadPriority() {}
