//go:build !linux

package main

import (
	"errors"
	"time"
)

// openPidfd: pidfds are Linux's; the poller checks the start time instead.
func openPidfd(pid int) (int, error) { return -1, errors.New("no pidfd") }

func pidfdExited(fd int) bool { return false }

func closePidfd(fd int) {}

// threadCPU: unknown here; the poller paces itself by wall time.
func threadCPU() time.Duration { return -1 }
