package main

import (
	"time"

	"golang.org/x/sys/unix"
)

// openPidfd opens a pidfd for pid: it refers to that process alone, so
// the pid cannot silently name a later process while it is open.
func openPidfd(pid int) (int, error) { return unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK) }

// pidfdExited says whether the process of fd has ended (its pidfd is
// readable).
func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, 0)
		if err == unix.EINTR {
			continue
		}
		return err == nil && n > 0 && fds[0].Revents&(unix.POLLIN|unix.POLLHUP|unix.POLLERR|unix.POLLNVAL) != 0
	}
}

func closePidfd(fd int) { _ = unix.Close(fd) }

// threadCPU is the calling thread's CPU time (-1 if unknown).
func threadCPU() time.Duration {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts) != nil {
		return -1
	}
	return time.Duration(ts.Nano())
}
