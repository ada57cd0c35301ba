// Opening a region file that a target process may have replaced.

package tagtable

import (
	"fmt"
	"io"
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

// nextData says where f's data goes on from off (SEEK_DATA, SEEK_HOLE):
// [start, end) is data and [off, start) a hole, which reads as zeros. A
// region file is sparse, mostly holes (tables sized for the most tags a
// program may name), and reading a hole costs what reading data does. ok
// is false when f is not a file or its filesystem cannot tell; at or past
// the last data, start and end are the file's size.
func nextData(f io.ReaderAt, off int64) (start, end int64, ok bool) {
	file, isFile := f.(*os.File)
	if !isFile {
		return 0, 0, false
	}
	fd := int(file.Fd())
	start, err := unix.Seek(fd, off, unix.SEEK_DATA)
	if err == unix.ENXIO { // no data from off on
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return 0, 0, false
		}
		return max(st.Size, off), max(st.Size, off), true
	}
	if err != nil {
		return 0, 0, false
	}
	end, err = unix.Seek(fd, start, unix.SEEK_HOLE)
	if err != nil || end < start {
		return 0, 0, false
	}
	return start, end, true
}
