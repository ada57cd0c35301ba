// What run needs of Linux beyond the portable os package.

package main

import (
	"os"

	"golang.org/x/sys/unix"
)

// lowerThreadPriority puts the calling thread (locked to its goroutine) at
// nice 19.
func lowerThreadPriority() { _ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19) }

// watchCreates sends on the channel it returns (without blocking: one
// pending wake is enough) each time a file is created in dir or moved
// into it, until stop is closed; nil if dir cannot be watched. The
// drainer comes soon to a new process's events file (the library makes it
// under a temporary name and renames it into place).
func watchCreates(dir string, stop <-chan struct{}) <-chan struct{} {
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil
	}
	if _, err := unix.InotifyAddWatch(fd, dir, unix.IN_CREATE|unix.IN_MOVED_TO); err != nil {
		unix.Close(fd)
		return nil
	}
	f := os.NewFile(uintptr(fd), "inotify") // non-blocking: reads park in the poller
	wake := make(chan struct{}, 1)
	go func() {
		<-stop
		f.Close() // ends the reader's Read
	}()
	go func() {
		buf := make([]byte, 4096)
		for {
			if _, err := f.Read(buf); err != nil {
				return
			}
			select {
			case wake <- struct{}{}:
			default:
			}
		}
	}()
	return wake
}
