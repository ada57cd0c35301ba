// Modules: the loaded objects of a process (from /proc/PID/maps or the
// native side's module table), each one's build-id and load bias, and the
// lookup of the module that holds an address.

package symbolizer

import (
	"bufio"
	"bytes"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Module is one executable mapping of a loaded object, as the process saw
// it. The native side records the same fields for every loaded object (and
// again after dlopen); ReadModules builds them from /proc/PID/maps.
//
// The fields are those of tagtable.Module (the module table the native
// side records, docs/ARCHITECTURE.md, D7) in the same order, so one converts to the
// other: symbolizer.Module(m).
//
// An address addr inside the module is at ELF virtual address addr-Bias in
// the file, the address addr2line, readelf and the symbol tables use.
type Module struct {
	Start   uint64 `json:"start"`              // first address of the executable mapping
	End     uint64 `json:"end"`                // one past its last address
	Offset  uint64 `json:"offset"`             // file offset of Start
	Bias    uint64 `json:"bias"`               // load bias: address - ELF vaddr (0 for a non-PIE executable)
	BuildID string `json:"build_id,omitempty"` // hex NT_GNU_BUILD_ID of the file the process ran; "" if it had none
	Path    string `json:"path"`               // the file, as /proc/PID/maps names it
}

// Name is the base name of the module's path ("libfoo.so"): the name
// frames and roll-ups use.
func (m *Module) Name() string { return baseName(m.Path) }

func baseName(p string) string {
	p = strings.TrimSuffix(p, deletedSuffix)
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		return p[i+1:]
	}
	return p
}

// ErrNoBuildID is returned by BuildID for an ELF file without an
// NT_GNU_BUILD_ID note (linked with --build-id=none).
var ErrNoBuildID = errors.New("symbolizer: no NT_GNU_BUILD_ID note")

// maxNoteBytes bounds how much of a note segment or section is read when
// looking for the build-id: real ones are a few hundred bytes.
const maxNoteBytes = 1 << 20

// BuildID returns the hex NT_GNU_BUILD_ID of the ELF file at path, or an
// error wrapping ErrNoBuildID if it has none.
func BuildID(path string) (id string, err error) {
	defer recoverInto(&err)
	f, err := elf.Open(path)
	if err != nil {
		return "", fmt.Errorf("symbolizer: %s: %w", path, err)
	}
	defer f.Close()
	id, err = buildIDOf(f)
	if err != nil {
		return "", fmt.Errorf("symbolizer: %s: %w", path, err)
	}
	return id, nil
}

// buildIDOf finds the GNU build-id note in the PT_NOTE segments, then (for
// files without program headers, such as some debug files) in the note
// sections.
func buildIDOf(f *elf.File) (id string, err error) {
	defer recoverInto(&err)
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz == 0 || p.Filesz > maxNoteBytes {
			continue
		}
		data, rerr := io.ReadAll(p.Open())
		if rerr != nil {
			continue
		}
		if id, ok := findBuildIDNote(data, f.ByteOrder, p.Align); ok {
			return id, nil
		}
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_NOTE || s.Size == 0 || s.Size > maxNoteBytes {
			continue
		}
		data, rerr := s.Data()
		if rerr != nil {
			continue
		}
		if id, ok := findBuildIDNote(data, f.ByteOrder, s.Addralign); ok {
			return id, nil
		}
	}
	return "", ErrNoBuildID
}

// findBuildIDNote walks the notes in data (each a 12-byte header of name
// size, descriptor size and type, then the name and the descriptor, each
// padded to the alignment) for type NT_GNU_BUILD_ID (3) named "GNU".
func findBuildIDNote(data []byte, bo binary.ByteOrder, align uint64) (string, bool) {
	if align != 8 {
		align = 4
	}
	pad := func(n uint64) uint64 { return (n + align - 1) &^ (align - 1) }
	for len(data) >= 12 {
		namesz := uint64(bo.Uint32(data[0:]))
		descsz := uint64(bo.Uint32(data[4:]))
		typ := bo.Uint32(data[8:])
		size := uint64(len(data))
		if namesz > size-12 {
			return "", false
		}
		nameEnd := min(12+pad(namesz), size)
		if descsz > size-nameEnd {
			return "", false
		}
		if typ == 3 && descsz > 0 && bytes.Equal(data[12:12+namesz], []byte("GNU\x00")) {
			return hex.EncodeToString(data[nameEnd : nameEnd+descsz]), true
		}
		next := nameEnd + pad(descsz)
		if next >= size {
			break
		}
		data = data[next:]
	}
	return "", false
}

// loadBias computes address - vaddr for the mapping of [start, end) at file
// offset off: the PT_LOAD segment whose file bytes begin in the mapping
// (an executable one for preference) maps file offset p.Off to p.Vaddr, so
// start, at file offset off, is at vaddr p.Vaddr - (p.Off - off). ok is
// false when no segment matches; the bias then assumes vaddr == file
// offset, as in every file a standard linker writes.
func loadBias(f *elf.File, start, end, off uint64) (bias uint64, ok bool) {
	var best *elf.Prog
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Off < off || p.Off-off >= end-start {
			continue
		}
		if best == nil || p.Flags&elf.PF_X != 0 && best.Flags&elf.PF_X == 0 {
			best = p
		}
	}
	if best == nil {
		return start - off, false
	}
	return start - (best.Vaddr - (best.Off - off)), true
}

// ModuleOf returns the module of mods (sorted by Start and not
// overlapping, as ReadModules returns them) whose mapping holds addr.
func ModuleOf(mods []Module, addr uint64) (*Module, bool) {
	i := sort.Search(len(mods), func(i int) bool { return mods[i].End > addr })
	if i < len(mods) && mods[i].Start <= addr {
		return &mods[i], true
	}
	return nil, false
}

// deletedSuffix is what /proc/PID/maps appends to a file that was removed
// or replaced after it was mapped.
const deletedSuffix = " (deleted)"

// mapping is one line of /proc/PID/maps.
type mapping struct {
	start, end, offset uint64
	perms, path        string
}

// parseMaps parses /proc/PID/maps text, keeping every line that parses.
func parseMaps(r io.Reader) ([]mapping, error) {
	var out []mapping
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		// start-end perms offset dev inode [path]; the path may hold spaces.
		fields := strings.Fields(line)
		if len(fields) < 5 {
			continue
		}
		lo, hi, found := strings.Cut(fields[0], "-")
		if !found {
			continue
		}
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fields[2], 16, 64)
		if err1 != nil || err2 != nil || err3 != nil || end <= start {
			continue
		}
		m := mapping{start: start, end: end, offset: off, perms: fields[1]}
		if len(fields) > 5 {
			// Everything after the inode field, with its spaces kept.
			rest := line
			for range 5 {
				rest = strings.TrimLeft(rest, " \t")
				j := strings.IndexAny(rest, " \t")
				if j < 0 {
					rest = ""
					break
				}
				rest = rest[j:]
			}
			m.path = strings.TrimLeft(rest, " \t")
		}
		out = append(out, m)
	}
	return out, sc.Err()
}

// ReadModules returns the modules of process pid: one per executable
// mapping of a file in /proc/PID/maps, sorted by Start, each with the
// build-id and load bias read from the file (through
// /proc/PID/map_files when the path no longer opens, e.g. a deleted or
// replaced file). A file that is not a readable ELF still gets its Module,
// with an empty BuildID and a bias that assumes vaddr == file offset;
// symbolizing it reports why. The error is only for /proc/PID/maps itself.
func ReadModules(pid int) ([]Module, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("symbolizer: reading the module table of process %d: %w", pid, err)
	}
	defer f.Close()
	maps, err := parseMaps(f)
	if err != nil {
		return nil, fmt.Errorf("symbolizer: reading the module table of process %d: %w", pid, err)
	}
	return modulesFromMaps(maps, func(m mapping) (*elf.File, error) {
		path := strings.TrimSuffix(m.path, deletedSuffix)
		if ef, err := elf.Open(path); err == nil && !strings.HasSuffix(m.path, deletedSuffix) {
			return ef, nil
		} else if err == nil {
			ef.Close()
		}
		return elf.Open(fmt.Sprintf("/proc/%d/map_files/%x-%x", pid, m.start, m.end))
	}), nil
}

// modulesFromMaps turns the executable file mappings into Modules, opening
// each file once.
func modulesFromMaps(maps []mapping, open func(mapping) (*elf.File, error)) []Module {
	type info struct {
		f  *elf.File
		id string
	}
	files := map[string]*info{}
	defer func() {
		for _, in := range files {
			if in.f != nil {
				in.f.Close()
			}
		}
	}()
	var mods []Module
	for _, mp := range maps {
		if !strings.Contains(mp.perms, "x") || !strings.HasPrefix(mp.path, "/") {
			continue // anonymous, [vdso], [stack]...: nothing to read symbols from
		}
		in := files[mp.path]
		if in == nil {
			in = &info{}
			if f, err := safeOpen(open, mp); err == nil {
				in.f = f
				in.id, _ = buildIDOf(f)
			}
			files[mp.path] = in
		}
		m := Module{Path: strings.TrimSuffix(mp.path, deletedSuffix), BuildID: in.id,
			Start: mp.start, End: mp.end, Offset: mp.offset, Bias: mp.start - mp.offset}
		if in.f != nil {
			m.Bias, _ = loadBias(in.f, mp.start, mp.end, mp.offset)
		}
		mods = append(mods, m)
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Start < mods[j].Start })
	return mods
}

// safeOpen calls open, turning a parser panic into an error.
func safeOpen(open func(mapping) (*elf.File, error), mp mapping) (f *elf.File, err error) {
	defer recoverInto(&err)
	return open(mp)
}

// cleanPath is the path a module's file is looked up at under root.
func cleanPath(root, p string) string {
	if root == "" {
		return p
	}
	return filepath.Join(root, p)
}
