//go:build !linux

package main

// lowerThreadPriority: per-thread priorities are Linux's.
func lowerThreadPriority() {}
