// Naming frames: ELF symbol tables and DWARF line tables of the modules a
// profile's stacks run through, read from disk after the process is gone
// and trusted only when the file's build-id is the one the process had.

package reporter

import (
	"debug/dwarf"
	"debug/elf"
	"encoding/hex"
	"errors"
	"io"
	"path/filepath"
	"sort"
	"sync"

	"github.com/ianlancetaylor/demangle"

	"github.com/tagalloc/tagalloc/tagtable"
)

// ELFSymbols symbolizes return addresses from the files of their modules;
// each file is read once (its symbols sorted, its line table indexed).
// Safe for concurrent use.
type ELFSymbols struct {
	mu    sync.Mutex
	files map[string]*elfInfo // by path and build-id
}

type elfSym struct {
	addr, size uint64
	name       string
}

type elfLine struct {
	addr uint64
	file string
	line int
}

type elfInfo struct {
	err   error
	progs []elf.ProgHeader // executable PT_LOADs: file offset to address
	syms  []elfSym
	lines []elfLine
}

// NewELFSymbols makes an empty symbolizer.
func NewELFSymbols() *ELFSymbols { return &ELFSymbols{files: map[string]*elfInfo{}} }

// Symbolize names return address pc of module m (the caller is at pc-1).
func (s *ELFSymbols) Symbolize(m *tagtable.Module, pc uint64) (function, file string, line int) {
	info := s.load(m)
	if info.err != nil {
		return "", "", 0
	}
	off := pc - m.Start + m.Offset - 1 // the call, not the instruction after it
	addr, ok := uint64(0), false
	for _, p := range info.progs {
		if off >= p.Off && off < p.Off+p.Filesz {
			addr, ok = off-p.Off+p.Vaddr, true
			break
		}
	}
	if !ok {
		return "", "", 0
	}
	if i := sort.Search(len(info.syms), func(i int) bool { return info.syms[i].addr > addr }) - 1; i >= 0 {
		sy := info.syms[i]
		if addr < sy.addr+max(sy.size, 1) || sy.size == 0 {
			function = sy.name
		}
	}
	if i := sort.Search(len(info.lines), func(i int) bool { return info.lines[i].addr > addr }) - 1; i >= 0 {
		file, line = filepath.Base(info.lines[i].file), info.lines[i].line
	}
	return function, file, line
}

func (s *ELFSymbols) load(m *tagtable.Module) *elfInfo {
	key := m.Path + "\x00" + m.BuildID
	s.mu.Lock()
	defer s.mu.Unlock()
	if info := s.files[key]; info != nil {
		return info
	}
	info := readELF(m.Path, m.BuildID)
	s.files[key] = info
	return info
}

var errStale = errors.New("the file's build-id is not the process's (rebuilt since)")

func readELF(path, buildID string) *elfInfo {
	info := &elfInfo{}
	f, err := elf.Open(path)
	if err != nil {
		info.err = err
		return info
	}
	defer f.Close()
	if id := elfBuildID(f); buildID != "" && id != "" && id != buildID {
		info.err = errStale
		return info
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			info.progs = append(info.progs, p.ProgHeader)
		}
	}
	addSyms := func(syms []elf.Symbol) {
		for _, sy := range syms {
			if elf.ST_TYPE(sy.Info) == elf.STT_FUNC && sy.Value != 0 {
				info.syms = append(info.syms, elfSym{sy.Value, sy.Size, demangle.Filter(sy.Name)})
			}
		}
	}
	if syms, err := f.Symbols(); err == nil {
		addSyms(syms)
	}
	if syms, err := f.DynamicSymbols(); err == nil {
		addSyms(syms)
	}
	sort.Slice(info.syms, func(i, j int) bool { return info.syms[i].addr < info.syms[j].addr })
	dw, err := f.DWARF()
	if err != nil && buildID != "" && len(buildID) > 2 { // a separate debug file, by build-id
		if df, err2 := elf.Open(filepath.Join("/usr/lib/debug/.build-id", buildID[:2], buildID[2:]+".debug")); err2 == nil {
			dw, err = df.DWARF()
			defer df.Close()
		}
	}
	if err == nil {
		info.lines = dwarfLines(dw)
	}
	return info
}

// dwarfLines is every row of every line table, sorted by address.
func dwarfLines(dw *dwarf.Data) []elfLine {
	var out []elfLine
	r := dw.Reader()
	for {
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		if e.Tag != dwarf.TagCompileUnit {
			r.SkipChildren()
			continue
		}
		lr, err := dw.LineReader(e)
		if err != nil || lr == nil {
			continue
		}
		var le dwarf.LineEntry
		for lr.Next(&le) == nil { // until io.EOF, or a table we stop trusting
			if le.EndSequence || le.File == nil {
				continue
			}
			out = append(out, elfLine{le.Address, le.File.Name, le.Line})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].addr < out[j].addr })
	return out
}

// elfBuildID is the hex GNU build-id of f, or "".
func elfBuildID(f *elf.File) string {
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		b, err := io.ReadAll(p.Open())
		if err != nil {
			continue
		}
		for len(b) >= 12 {
			nsz, dsz, typ := le32(b), le32(b[4:]), le32(b[8:])
			name := 12 + (nsz+3)&^3
			end := name + (dsz+3)&^3
			if uint64(end) > uint64(len(b)) || uint64(name+dsz) > uint64(len(b)) {
				break
			}
			if typ == 3 && nsz == 4 && string(b[12:15]) == "GNU" {
				return hex.EncodeToString(b[name : name+dsz])
			}
			b = b[end:]
		}
	}
	return ""
}

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}
