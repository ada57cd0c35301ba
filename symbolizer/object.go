// Objects: one ELF file (and its separate debug file, if any) loaded for
// lookups: the sorted symbol table, the DWARF unit index, and the lookup
// of the frames at one ELF virtual address.

package symbolizer

import (
	"bytes"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
)

// object is a loaded ELF file. Its fields are set once by newObject; the
// lazily built DWARF units and the name caches have locks of their own, so
// lookups may run concurrently.
type object struct {
	syms symtab
	dw   *dwarfIndex // nil without usable DWARF
	mem  *fileMap    // the mapped file dw's sections lie in (nil: on the heap); kept while the object is

	demangle func(string) string
	demMu    sync.Mutex
	dem      map[string]string
}

// newObject loads the symbols and DWARF of exe and of its separate debug
// file dbg. Either may be nil (not both); a stripped exe with no dbg has
// only .dynsym. A parser panic on a malformed file becomes an error. The
// DWARF of a mapped image is used where it lies: the object retains that
// image's mapping.
func newObject(exeImg, dbgImg *image, demangle func(string) string) (o *object, err error) {
	defer recoverInto(&err)
	if exeImg == nil && dbgImg == nil {
		return nil, errors.New("symbolizer: no file to load")
	}
	var exe, dbg *elf.File
	if exeImg != nil {
		exe = exeImg.File
	}
	if dbgImg != nil {
		dbg = dbgImg.File
	}
	o = &object{demangle: demangle, dem: map[string]string{}}
	var syms []symbol
	var loadErr error // the first real error, reported if nothing loads
	note := func(err error) {
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) && loadErr == nil {
			loadErr = err
		}
	}
	layout := exe
	if dbg != nil {
		s, err := dbg.Symbols()
		note(err)
		syms = addSymbols(syms, dbg, s, OriginSymtab)
		if layout == nil {
			layout = dbg
		}
	}
	if exe != nil {
		s, err := exe.Symbols()
		note(err)
		syms = addSymbols(syms, exe, s, OriginSymtab)
		s, err = exe.DynamicSymbols()
		note(err)
		syms = addSymbols(syms, exe, s, OriginDynsym)
	}
	o.syms = finishSymtab(syms, layout)
	for _, im := range []*image{dbgImg, exeImg} {
		if im == nil || (im.Section(".debug_info") == nil && im.Section(".zdebug_info") == nil) {
			continue
		}
		d, mapped, err := dwarfOf(im.File, im.bytes())
		note(err)
		if err != nil {
			continue
		}
		x, err := newDwarfIndex(d)
		note(err)
		if x != nil {
			o.dw = x
			if mapped {
				o.mem = im.m
				o.mem.retain()
			}
			break
		}
	}
	if len(o.syms) == 0 && o.dw == nil && loadErr != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, loadErr)
	}
	return o, nil
}

// frames returns the frames at ELF virtual address pc, innermost first,
// without the Module field; nil when nothing names pc.
func (o *object) frames(pc uint64) (out []Frame) {
	defer func() {
		if recover() != nil {
			out = nil // malformed DWARF met late: fall back to the address
		}
	}()
	var file string
	var line int
	if o.dw != nil {
		if u := o.dw.unitFor(pc); u != nil && o.dw.load(u) == nil {
			file, line, _ = u.line(pc)
			if chain := o.dw.scopes(u, pc); len(chain) > 0 {
				return o.inlineFrames(u, chain, file, line, pc)
			}
		}
	}
	if s, ok := o.syms.lookup(pc); ok {
		return []Frame{{Function: o.demangled(s.name), File: file, Line: line, Origin: s.origin}}
	}
	if file != "" {
		return []Frame{{File: file, Line: line}} // a line but no name: Function is filled in by the caller
	}
	return nil
}

// inlineFrames turns the chain function → inlined call → ... at pc into
// frames, innermost first: the innermost frame's line is pc's row in the
// line table; each caller's line is where the inlined call was made.
func (o *object) inlineFrames(u *unit, chain []*scope, file string, line int, pc uint64) []Frame {
	return chainFrames(len(chain)-1, file, line,
		func(i int) string { return o.dw.name(chain[i].die, o.demangled) },
		func(i int) (string, int) { return u.fileName(chain[i].callFile), chain[i].callLine },
		func() string {
			if s, ok := o.syms.lookup(pc); ok {
				return o.demangled(s.name)
			}
			return ""
		})
}

// chainFrames lays out an inlined chain of scopes 0 (the function) to n
// (the innermost inlined call) at a row file:line, innermost first: name(i)
// names scope i, call(i) is where scope i was called from (i >= 1). A frame
// whose scope has no name takes sym() (the symbol at the address; "" if
// none) if it is the function's own, else "??". One layout for the object
// (inlineFrames) and for the unit index that stands for it (unitBlock.frames).
func chainFrames(n int, file string, line int, name func(i int) string, call func(i int) (string, int), sym func() string) []Frame {
	out := make([]Frame, 0, n+1)
	out = append(out, Frame{Function: name(n), File: file, Line: line, Inlined: n > 0, Origin: OriginDWARF})
	for i := n; i >= 1; i-- {
		f, l := call(i)
		out = append(out, Frame{Function: name(i - 1), File: f, Line: l, Inlined: i-1 > 0, Origin: OriginDWARF})
	}
	for i := range out {
		if out[i].Function != "" {
			continue
		}
		if s := sym(); s != "" && i == len(out)-1 {
			out[i].Function = s
		} else {
			out[i].Function = "??"
		}
	}
	return out
}

// demangled returns name demangled (cached); names that are not mangled
// are returned as they are.
func (o *object) demangled(name string) string {
	if o.demangle == nil || !isMangled(name) {
		return name
	}
	o.demMu.Lock()
	d, ok := o.dem[name]
	o.demMu.Unlock()
	if ok {
		return d
	}
	d = o.demangle(name)
	o.demMu.Lock()
	o.dem[name] = d
	o.demMu.Unlock()
	return d
}

// isMangled reports whether name is an Itanium C++ or Rust v0 mangled name.
func isMangled(name string) bool {
	return strings.HasPrefix(name, "_Z") || strings.HasPrefix(name, "_R")
}

// ErrMalformed is wrapped by the errors for files the ELF or DWARF parser
// could not make sense of.
var ErrMalformed = errors.New("symbolizer: malformed object file")

// recoverInto turns a panic (of debug/elf or debug/dwarf on a malformed
// file) into an error wrapping ErrMalformed.
func recoverInto(err *error) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%w (%v)", ErrMalformed, r)
	}
}

// openDebugByID opens the separate debug file of build id under each of
// dirs (DIR/.build-id/ab/cdef....debug), checking its build-id.
func openDebugByID(dirs []string, id string) *image {
	if len(id) < 3 {
		return nil
	}
	for _, dir := range dirs {
		p := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
		if f := openDebug(p); f != nil {
			if got, _ := buildIDOf(f.File); got == id {
				return f
			}
			f.Close()
		}
	}
	return nil
}

// openDebugLink follows the .gnu_debuglink section of exe (a file name
// and the CRC-32 of that file) to DIR/name, DIR/.debug/name and
// DEBUGDIR/ORIG/name, where DIR is the directory of path (where exe was
// opened) and ORIG that of the path the process had, taking the first
// whose CRC matches.
func openDebugLink(dirs []string, exe *elf.File, path, orig string) *image {
	sec := exe.Section(".gnu_debuglink")
	if sec == nil || sec.Size > 4096 {
		return nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil
	}
	nul := bytes.IndexByte(data, 0)
	if nul <= 0 {
		return nil
	}
	name := string(data[:nul])
	crcOff := (nul + 4) &^ 3
	if crcOff+4 > len(data) || strings.Contains(name, "/") {
		return nil
	}
	var want uint32
	if exe.ByteOrder == binary.ByteOrder(binary.BigEndian) {
		want = binary.BigEndian.Uint32(data[crcOff:])
	} else {
		want = binary.LittleEndian.Uint32(data[crcOff:])
	}
	dir := filepath.Dir(path)
	cands := []string{filepath.Join(dir, name), filepath.Join(dir, ".debug", name)}
	for _, d := range dirs {
		cands = append(cands, filepath.Join(d, filepath.Dir(orig), name))
	}
	self, _ := os.Stat(path)
	for _, c := range cands {
		if fi, err := os.Stat(c); err != nil || self != nil && os.SameFile(fi, self) {
			continue
		}
		if crcOf(c) != want {
			continue
		}
		if f := openDebug(c); f != nil {
			return f
		}
	}
	return nil
}

func openDebug(p string) *image {
	if _, err := os.Stat(p); err != nil {
		return nil
	}
	f, err := openImage(p)
	if err != nil {
		return nil
	}
	return f
}

func crcOf(p string) uint32 {
	f, err := os.Open(p)
	if err != nil {
		return 0
	}
	defer f.Close()
	h := crc32.NewIEEE()
	if _, err := io.Copy(h, f); err != nil {
		return 0
	}
	return h.Sum32()
}
