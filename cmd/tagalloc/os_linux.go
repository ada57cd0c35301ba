// What run needs of Linux beyond the portable os package.

package main

import "golang.org/x/sys/unix"

// tmpfsWithRoom says whether dir is a tmpfs this user may write, with at
// least room bytes free.
func tmpfsWithRoom(dir string, room uint64) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.TMPFS_MAGIC {
		return false
	}
	return st.Bavail*uint64(st.Bsize) >= room && unix.Access(dir, unix.W_OK) == nil
}

// lowerThreadPriority puts the calling thread (locked to its goroutine) at
// nice 19.
func lowerThreadPriority() { _ = unix.Setpriority(unix.PRIO_PROCESS, unix.Gettid(), 19) }
