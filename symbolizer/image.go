// Images: an object file mapped read-only into memory, so its DWARF
// sections are used where they lie instead of being copied onto the heap
// (libpython's are 16 MB, read again by every run that meets a new
// address); debug/elf reads the headers and symbol tables from the same
// mapping.

package symbolizer

import (
	"bytes"
	"debug/dwarf"
	"debug/elf"
	"fmt"
	"os"
	"runtime"
	"strings"
	"sync"
)

// maxMapBytes bounds the files mapped; bigger ones (and anything that is
// not a regular file) are read through debug/elf as before.
const maxMapBytes = 1 << 34

// image is an ELF file opened for loading: through a read-only mapping of
// the whole file when that worked (data non-nil), else read by debug/elf.
// A file truncated while mapped makes the pages past its new end fault;
// every goroutine that reads an image's bytes (Symbolizer.frames, the
// only entry point) runs with debug.SetPanicOnFault, so that becomes a
// panic, which the loader and the lookups recover as an ErrMalformed
// error or the address's fallback frame.
type image struct {
	*elf.File
	m *fileMap // nil: not mapped
}

// fileMap is a read-only mapping of a file. It is unmapped by release,
// unless retain was called (an object keeps slices of it: its DWARF),
// in which case it is unmapped when the fileMap becomes unreachable,
// with the object holding it.
type fileMap struct {
	data []byte

	mu       sync.Mutex
	retained bool
	gone     bool
	cleanup  runtime.Cleanup
}

// openImage opens the ELF file at path, mapped if it can be.
func openImage(path string) (*image, error) {
	if data, err := mapFile(path); err == nil {
		m := &fileMap{data: data}
		m.cleanup = runtime.AddCleanup(m, func(b []byte) { _ = unmap(b) }, data)
		f, err := newFileFrom(data)
		if err != nil {
			m.release()
			return nil, err
		}
		return &image{File: f, m: m}, nil
	}
	f, err := elf.Open(path)
	if err != nil {
		return nil, err
	}
	return &image{File: f}, nil
}

// newFileFrom is elf.NewFile on the bytes of a mapped file, a fault or a
// panic of debug/elf returned as an error.
func newFileFrom(data []byte) (f *elf.File, err error) {
	defer recoverInto(&err)
	return elf.NewFile(bytes.NewReader(data))
}

// Close closes the file and unmaps it unless an object retained it. nil
// is a no-op.
func (im *image) Close() {
	if im == nil {
		return
	}
	im.File.Close()
	if im.m != nil {
		im.m.release()
	}
}

// data returns the mapped bytes (nil when not mapped or nil).
func (im *image) bytes() []byte {
	if im == nil || im.m == nil {
		return nil
	}
	return im.m.data
}

func (m *fileMap) retain() {
	m.mu.Lock()
	m.retained = true
	m.mu.Unlock()
}

func (m *fileMap) release() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.retained || m.gone {
		return
	}
	m.gone = true
	m.cleanup.Stop()
	_ = unmap(m.data)
}

// dwarfSections are the sections debug/dwarf reads (as elf.File.DWARF
// passes them to dwarf.New and AddSection); the others (.debug_loclists,
// .debug_aranges, .debug_frame ...) are not needed.
var dwarfSections = map[string]bool{
	"abbrev": true, "info": true, "str": true, "line": true, "ranges": true,
	"addr": true, "line_str": true, "str_offsets": true, "rnglists": true, "types": true,
}

// dwarfOf returns the DWARF of f, whose whole file is data (nil: not
// mapped), from the sections debug/dwarf reads: each sliced from data
// where it lies uncompressed, else read onto the heap (decompressed). A
// file that needs relocations (ET_REL) or has .zdebug sections goes
// through elf.File.DWARF, which handles those. used says whether the
// result holds slices of data.
func dwarfOf(f *elf.File, data []byte) (d *dwarf.Data, used bool, err error) {
	if f.Type == elf.ET_REL {
		d, err = f.DWARF()
		return d, false, err
	}
	dat := map[string][]byte{}
	var types [][]byte
	for _, s := range f.Sections {
		if strings.HasPrefix(s.Name, ".zdebug_") {
			d, err = f.DWARF()
			return d, false, err
		}
		name, ok := strings.CutPrefix(s.Name, ".debug_")
		if !ok || !dwarfSections[name] {
			continue
		}
		var b []byte
		if data != nil && s.Flags&elf.SHF_COMPRESSED == 0 && s.Type != elf.SHT_NOBITS &&
			s.Offset <= uint64(len(data)) && s.Size <= uint64(len(data))-s.Offset {
			b = data[s.Offset : s.Offset+s.Size : s.Offset+s.Size]
			used = true
		} else if b, err = s.Data(); err != nil {
			return nil, false, err
		}
		if name == "types" {
			types = append(types, b)
		} else {
			dat[name] = b
		}
	}
	d, err = dwarf.New(dat["abbrev"], nil, nil, dat["info"], dat["line"], nil, dat["ranges"], dat["str"])
	if err != nil {
		return nil, false, err
	}
	for _, name := range []string{"addr", "line_str", "str_offsets", "rnglists"} {
		if b, ok := dat[name]; ok {
			if err := d.AddSection(".debug_"+name, b); err != nil {
				return nil, false, err
			}
		}
	}
	for i, b := range types {
		if err := d.AddTypes(fmt.Sprintf("types-%d", i), b); err != nil {
			return nil, false, err
		}
	}
	return d, used, nil
}

// regularSize returns the size of the regular file f, or an error if it
// is not one or is empty or too big to map.
func regularSize(f *os.File) (int, error) {
	fi, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if !fi.Mode().IsRegular() || fi.Size() <= 0 || fi.Size() > maxMapBytes {
		return 0, fmt.Errorf("symbolizer: %s: not a regular file of a size to map", f.Name())
	}
	return int(fi.Size()), nil
}
