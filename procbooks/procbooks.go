// Finding a running process's books: its memory map, its memory, and the
// native library's symbol for its private region.

package procbooks

import (
	"debug/elf"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/tagalloc/tagalloc/books"
)

// Read reads the books of a running process. They are found in its
// memory map: the files DIR/PID*.tagalloc when it was started by tagalloc
// run; else the memfd a Go program's books live in ("/memfd:tagalloc-books")
// and the private region of the preloaded library (its address is in the
// library's tagalloc_books symbol), both read through /proc/PID/mem (which
// needs the right to trace the process: the same user, and no stricter
// ptrace policy). A process with several regions (a cgo program: the
// native library's and package alloc's) gets them merged.
func Read(pid int) (*books.Snapshot, error) {
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		if os.IsPermission(err) {
			return nil, fmt.Errorf("process %d belongs to another user: its books are not readable", pid)
		}
		return nil, fmt.Errorf("process %d: %w", pid, err)
	}
	p := &procReader{pid: pid}
	defer p.close()
	libBase, libPath, err := p.readMapped(maps)
	if err != nil {
		return nil, err
	}
	if libPath != "" && !anyNative(p.snaps) {
		if err := p.readLibrary(libBase, libPath); err != nil {
			return nil, err
		}
	}
	if len(p.snaps) == 0 {
		return nil, fmt.Errorf("process %d has no tagalloc books (not preloaded, and no Go books)", pid)
	}
	return books.Merge(p.snaps...), nil
}

// procReader gathers the regions of process pid, reading its memory
// through /proc/PID/mem, opened at the first need.
type procReader struct {
	pid   int
	mem   *os.File
	snaps []*books.Snapshot
}

func (p *procReader) open() (*os.File, error) {
	if p.mem != nil {
		return p.mem, nil
	}
	var err error
	if p.mem, err = os.Open(fmt.Sprintf("/proc/%d/mem", p.pid)); err != nil {
		return nil, fmt.Errorf("process %d: reading its memory: %w (start it with tagalloc run, or check ptrace permissions)", p.pid, err)
	}
	return p.mem, nil
}

func (p *procReader) close() {
	if p.mem != nil {
		p.mem.Close()
	}
}

// read reads the region at addr in the process's memory.
func (p *procReader) read(addr uint64) error {
	m, err := p.open()
	if err != nil {
		return err
	}
	s, err := books.ReadRegionAt(io.NewSectionReader(m, int64(addr), 1<<40))
	if err != nil {
		return fmt.Errorf("process %d: %w", p.pid, err)
	}
	p.snaps = append(p.snaps, s)
	return nil
}

// readMapped reads the regions that the memory map (maps) names: region
// files and Go's memfd. It returns where the native library is loaded
// (libPath "" if it is not).
func (p *procReader) readMapped(maps []byte) (libBase uint64, libPath string, err error) {
	seen := map[string]bool{}
	for _, line := range strings.Split(string(maps), "\n") {
		i := strings.Index(line, "/")
		f := strings.Fields(line)
		if i < 0 || len(f) < 6 {
			continue
		}
		start, _, _ := strings.Cut(f[0], "-")
		addr, _ := strconv.ParseUint(start, 16, 64)
		switch path := line[i:]; {
		case strings.HasSuffix(path, ".tagalloc"):
			if seen[path] {
				continue
			}
			seen[path] = true
			s, err := books.ReadFile(path)
			if err != nil {
				return 0, "", fmt.Errorf("process %d: %w", p.pid, err)
			}
			p.snaps = append(p.snaps, s)
		case strings.HasPrefix(path, "/memfd:tagalloc-books") && f[2] == "00000000":
			if err := p.read(addr); err != nil {
				return 0, "", err
			}
		case libPath == "" && strings.HasSuffix(path, "/libtagalloc.so") && f[2] == "00000000":
			// the library's first mapping (file offset 0) is its load base
			libBase, libPath = addr, path
		}
	}
	return libBase, libPath, nil
}

// readLibrary reads the private region of the native library loaded at
// libBase from libPath, found through its tagalloc_books symbol.
func (p *procReader) readLibrary(libBase uint64, libPath string) error {
	sym, err := booksSymbol(libPath)
	if err != nil {
		return fmt.Errorf("process %d: %w", p.pid, err)
	}
	m, err := p.open()
	if err != nil {
		return err
	}
	var b [8]byte
	if _, err := m.ReadAt(b[:], int64(libBase+sym)); err != nil {
		return fmt.Errorf("process %d: reading its memory: %w", p.pid, err)
	}
	if addr := binary.LittleEndian.Uint64(b[:]); addr != 0 {
		return p.read(addr)
	} else if len(p.snaps) == 0 {
		return fmt.Errorf("process %d has no tagalloc books yet (it has not allocated)", p.pid)
	}
	return nil
}

// anyNative reports whether one of snaps is the native library's (it
// keeps heap records; the Go writer's regions have none). The native
// library's region file is found in the map when it has one.
func anyNative(snaps []*books.Snapshot) bool {
	for _, s := range snaps {
		if s.Native() {
			return true
		}
	}
	return false
}

// booksSymbol is the offset of tagalloc_books in the library file.
func booksSymbol(path string) (uint64, error) {
	f, err := elf.Open(path)
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	defer f.Close()
	syms, err := f.DynamicSymbols()
	if err != nil {
		return 0, fmt.Errorf("reading %s: %w", path, err)
	}
	for _, s := range syms {
		if s.Name == "tagalloc_books" {
			return s.Value, nil
		}
	}
	return 0, fmt.Errorf("%s has no tagalloc_books symbol (an older tagalloc?)", path)
}
