package books

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// processMayLive says whether a process of that pid may be running: the
// system knows the pid (a zombie's too). A file whose pid is unknown may
// still be mapped by a process of another pid namespace: takeRegion
// decides by the file itself.
func processMayLive(pid int) bool { return unix.Kill(pid, 0) != unix.ESRCH }

// takeRegion reads and removes the region file at path if no process has
// it open or mapped: a write lease (F_SETLEASE) is granted only then (a
// process's mapping of its books keeps the file open for writing). taken
// is false if the file is in use, gone, or not a region's (a symlink, a
// FIFO: ReadDir names it at the end). The file is first renamed, so that
// a new process of the same pid, making its file under that name
// meanwhile, keeps it: if the name turned out to be that one's, it goes
// back.
func takeRegion(path string, scratch *[]byte) (s *Snapshot, taken bool, err error) {
	f, err := openRegionFile(path)
	if err != nil {
		return nil, false, nil
	}
	defer f.Close()
	fd := int(f.Fd())
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return nil, false, nil // in use (or leases are off: the file stays for ReadDir)
	}
	defer unix.FcntlInt(uintptr(fd), unix.F_SETLEASE, unix.F_UNLCK)
	var mine, there unix.Stat_t
	if unix.Fstat(fd, &mine) != nil {
		return nil, false, nil
	}
	moved := path + ".swept"
	if os.Rename(path, moved) != nil {
		return nil, false, nil
	}
	if unix.Stat(moved, &there) == nil && (there.Ino != mine.Ino || there.Dev != mine.Dev) {
		os.Rename(moved, path) // a new process's file took the name first: ours is gone already
	} else {
		os.Remove(moved)
	}
	s, err = readRegion(f, scratch)
	if err != nil {
		return nil, true, fmt.Errorf("%s: %w", path, err)
	}
	return s, true, nil
}

// InUse says whether some process has the region file at path open or
// mapped (as its process has its books while it lives): a write lease
// is refused. A file that is not there is not in use.
func InUse(path string) bool {
	f, err := openRegionFile(path)
	if err != nil {
		return !os.IsNotExist(err)
	}
	defer f.Close()
	if _, err := unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_WRLCK); err != nil {
		return true
	}
	unix.FcntlInt(f.Fd(), unix.F_SETLEASE, unix.F_UNLCK)
	return false
}
