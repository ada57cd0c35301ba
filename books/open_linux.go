// Opening a region file that a target process may have replaced.

package books

import (
	"io"
	"os"

	"golang.org/x/sys/unix"

	"github.com/tagalloc/tagalloc/internal/ownedfile"
)

// openRegionFile opens path for reading without blocking and without
// following a final symlink, and refuses anything but a regular file: the
// target process owns the books directory's entries, and a FIFO put in
// place of its file would hang the reader in open or read, a symlink could
// send it to a device or another file.
func openRegionFile(path string) (*os.File, error) {
	return ownedfile.Open(path, unix.O_RDONLY, ErrFormat)
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
