//go:build !linux

package main

// lowerThreadPriority: per-thread priorities are Linux's.
func lowerThreadPriority() {}

// watchCreates: no inotify; the drainer finds new files at its passes.
func watchCreates(dir, suffix string, stop <-chan struct{}) *dirWatch { return nil }
