//go:build unix

package symbolizer

import (
	"os"

	"golang.org/x/sys/unix"
)

// mapFile maps the regular file at path read-only (private: nothing is
// written through it).
func mapFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n, err := regularSize(f)
	if err != nil {
		return nil, err
	}
	return unix.Mmap(int(f.Fd()), 0, n, unix.PROT_READ, unix.MAP_PRIVATE)
}

func unmap(b []byte) error { return unix.Munmap(b) }
