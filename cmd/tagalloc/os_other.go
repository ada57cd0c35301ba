//go:build !linux

package main

// tmpfsWithRoom: no tmpfs is known here.
func tmpfsWithRoom(dir string, room uint64) bool { return false }

// lowerThreadPriority: per-thread priorities are Linux's.
func lowerThreadPriority() {}
