package main

import (
	"os"
	"path/filepath"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// childrenMaySwitchUser says whether a child of ours can become another
// user without a set-user-ID program: we may set user ids (root, or
// CAP_SETUID in our permitted set). A set-user-ID program runs in the
// loader's secure mode, which ignores LD_PRELOAD and removes it from the
// environment, so without that right no child of the run loads the
// library as another user.
func childrenMaySwitchUser() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return unix.Geteuid() == 0
	}
	return data[0].Permitted&(1<<unix.CAP_SETUID) != 0
}

// noExec says whether dir's filesystem is mounted noexec: the loader could
// not map a library from it.
func noExec(dir string) bool {
	var st unix.Statfs_t
	return unix.Statfs(dir, &st) == nil && st.Flags&unix.ST_NOEXEC != 0
}

// memBooksRoom is the room a memory filesystem must have free to take a
// run's books: they hold memory until the run ends (a small process's
// books file, ~30 KiB written) and its events rings while their
// processes live (4 MiB at most each; drain.Drainer removes the ring of
// a process that has ended). A page written past a full filesystem would
// be a SIGBUS in the program: with less room (a container's 64 MiB
// /dev/shm) the books stay on disk.
const memBooksRoom = 1 << 30

// memBase is the memory filesystem (tmpfs) a run's books go in: /dev/shm
// when it is one, every user can reach it, and it has memBooksRoom free;
// else "" (the books stay in the run's directory).
func memBase() string {
	const dir = "/dev/shm"
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil || st.Type != unix.TMPFS_MAGIC || st.Flags&unix.ST_RDONLY != 0 {
		return ""
	}
	if uint64(st.Bavail)*uint64(st.Bsize) < memBooksRoom || !everyoneCanSearch(dir) {
		return ""
	}
	return dir
}

// lockDir takes an exclusive lock (flock) on dir for as long as the
// returned file stays open: a run's directory on the memory filesystem
// is locked while the run lasts, so that a later run can tell it from
// one left behind (sweepMemBase). nil if the lock cannot be had.
func lockDir(dir string) *os.File {
	f, err := os.Open(dir)
	if err != nil {
		return nil
	}
	if unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB) != nil {
		f.Close()
		return nil
	}
	return f
}

// staleAfter is how old a run's directory must be before a run may take
// it for left behind: one just made is not locked yet.
const staleAfter = time.Minute

// sweepMemBase removes the run directories in base that no run holds
// any more: left by a tagalloc killed before it could remove them
// (SIGKILL, the OOM killer, a crash). On a memory filesystem they held
// memory until the next boot. Only directories of this user's, made
// staleAfter ago or more, on which the lock can be taken.
func sweepMemBase(base string) {
	dirs, _ := filepath.Glob(filepath.Join(base, "tagalloc-run-*"))
	for _, d := range dirs {
		fi, err := os.Lstat(d)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < staleAfter {
			continue
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Geteuid() {
			continue
		}
		if f := lockDir(d); f != nil {
			os.RemoveAll(d)
			f.Close()
		}
	}
}
