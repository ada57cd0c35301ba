package books

import (
	"os"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// mapRegion maps a new region's bytes: shared, in a file
// DIR/PID.NAME.tagalloc when $TAGALLOC_DIR is set (made under a temporary
// name and renamed into place, like the native library's), else in a memfd
// that procbooks.Read finds in the process's map; private memory, readable by
// no one else, when there is no memfd (an old kernel, a sandbox).
func mapRegion(name string) (mem []byte, path string, err error) {
	fd := -1
	if dir := os.Getenv("TAGALLOC_DIR"); dir != "" {
		path = filepath.Join(dir, strconv.Itoa(os.Getpid())+"."+name+".tagalloc")
		f, err := os.OpenFile(path+".new", os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o600)
		if err != nil {
			return nil, "", err
		}
		defer f.Close()
		fd = int(f.Fd())
	} else if m, err := unix.MemfdCreate("tagalloc-books", unix.MFD_CLOEXEC); err == nil {
		defer unix.Close(m)
		fd = m
	}
	if fd < 0 {
		mem, err = unix.Mmap(-1, 0, writerSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	} else if err = unix.Ftruncate(fd, writerSize); err == nil { // sparse
		mem, err = unix.Mmap(fd, 0, writerSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	}
	if err == nil && path != "" {
		if err = os.Rename(path+".new", path); err != nil {
			unix.Munmap(mem)
		}
	}
	if err != nil {
		if path != "" {
			os.Remove(path + ".new")
		}
		return nil, "", err
	}
	return mem, path, nil
}

func unmapRegion(mem []byte) error { return unix.Munmap(mem) }
