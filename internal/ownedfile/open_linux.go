// Opening a file that a target process may have replaced.

package ownedfile

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// Open opens path (unix.O_RDONLY or O_RDWR) without blocking and without
// following a final symlink, and refuses anything but a regular file: the
// target process owns the books directory's entries, and a FIFO put in
// place of its file would hang the reader in open or read, a symlink could
// send it to a device or another file. Those refusals wrap bad (the
// caller's format error).
func Open(path string, mode int, bad error) (*os.File, error) {
	fd, err := unix.Open(path, mode|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, fmt.Errorf("%s: %w: a symbolic link, not a books file", path, bad)
		}
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	f := os.NewFile(uintptr(fd), path)
	fi, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s: %w: not a regular file (%s)", path, bad, fi.Mode().Type())
	}
	return f, nil
}
