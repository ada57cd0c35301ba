// Opening a region file that a target process may have replaced.

package tagtable

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// openRegionFile opens path for reading without blocking and without
// following a final symlink, and refuses anything but a regular file: the
// target process owns the books directory's entries, and a FIFO put in
// place of its file would hang the reader in open or read, a symlink could
// send it to a device or another file.
func openRegionFile(path string) (*os.File, error) { return openOwnedFile(path, unix.O_RDONLY) }

// openOwnedFile opens path (O_RDONLY or O_RDWR) as openRegionFile says.
func openOwnedFile(path string, mode int) (*os.File, error) {
	fd, err := unix.Open(path, mode|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if err == unix.ELOOP {
			return nil, fmt.Errorf("%s: %w: a symbolic link, not a books file", path, ErrFormat)
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
		return nil, fmt.Errorf("%s: %w: not a regular file (%s)", path, ErrFormat, fi.Mode().Type())
	}
	return f, nil
}

// recoverFault turns a fault on a mapping into an error: the process
// truncated the file it shares with us, and the pages past its new end
// raise SIGBUS. Use with the fault panics on, in the function that reads
// the mapping:
//
//	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
//	defer recoverFault(&err)
func recoverFault(err *error) {
	r := recover()
	if r == nil {
		return
	}
	if f, ok := r.(interface{ Addr() uintptr }); ok {
		*err = fail("the file shrank while it was read (fault at %#x): the process truncated it", f.Addr())
		return
	}
	panic(r)
}
