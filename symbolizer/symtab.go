// Symbol tables: the FUNC symbols of .symtab and .dynsym, sorted once by
// address, for the frames DWARF does not cover.

package symbolizer

import (
	"debug/elf"
	"sort"
	"strings"
)

// symbol is one function: the addresses [lo, hi) it covers.
type symbol struct {
	lo, hi uint64
	name   string // as in the table, without an "@VERSION" suffix
	origin Origin
	rank   int // lower is the better name among aliases at one address
}

// symtab is sorted by lo; aliases (several names at one address) are
// merged into one entry with the best name.
type symtab []symbol

// maxOverlapScan is how many entries before the nearest preceding symbol a
// lookup also tries, for the rare symbols that overlap (a function nested
// in another's range, as some hand-written assembly has).
const maxOverlapScan = 8

// addSymbols appends the FUNC and IFUNC symbols of syms that are defined
// in a section. A size of 0 (assembly without .size) is left for
// finishSymtab.
func addSymbols(out []symbol, f *elf.File, syms []elf.Symbol, origin Origin) []symbol {
	for _, s := range syms {
		t := elf.ST_TYPE(s.Info)
		if t != elf.STT_FUNC && t != elf.STT_GNU_IFUNC {
			continue
		}
		if s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE || s.Value == 0 || s.Name == "" {
			continue
		}
		name := s.Name
		if i := strings.IndexByte(name, '@'); i > 0 {
			name = name[:i]
		}
		hi := uint64(0)
		if s.Size > 0 && s.Value+s.Size > s.Value {
			hi = s.Value + s.Size
		}
		out = append(out, symbol{lo: s.Value, hi: hi, name: name, origin: origin, rank: symbolRank(s, name, origin)})
	}
	return out
}

// symbolRank orders aliases: .symtab before .dynsym, global before weak
// before local, sized before unsized, fewer leading underscores first
// (malloc before __libc_malloc).
func symbolRank(s elf.Symbol, name string, origin Origin) int {
	r := 0
	if origin != OriginSymtab {
		r += 1000
	}
	switch elf.ST_BIND(s.Info) {
	case elf.STB_GLOBAL:
	case elf.STB_WEAK:
		r += 100
	default:
		r += 200
	}
	if s.Size == 0 {
		r += 50
	}
	r += min(len(name)-len(strings.TrimLeft(name, "_")), 9)
	return r
}

// finishSymtab sorts the symbols, merges aliases and gives every unsized
// symbol the range up to the next symbol, never past the end of its
// section (so an unsized _init does not swallow the static functions of
// .text that a stripped file no longer names).
func finishSymtab(syms []symbol, f *elf.File) symtab {
	sort.Slice(syms, func(i, j int) bool {
		if syms[i].lo != syms[j].lo {
			return syms[i].lo < syms[j].lo
		}
		if syms[i].rank != syms[j].rank {
			return syms[i].rank < syms[j].rank
		}
		return syms[i].name < syms[j].name
	})
	out := syms[:0]
	for _, s := range syms {
		if n := len(out); n > 0 && out[n-1].lo == s.lo {
			out[n-1].hi = max(out[n-1].hi, s.hi)
			continue
		}
		out = append(out, s)
	}
	for i := range out {
		if out[i].hi != 0 {
			continue
		}
		end := out[i].lo + 1
		if i+1 < len(out) {
			end = out[i+1].lo
		}
		if secEnd := sectionEnd(f, out[i].lo); secEnd > out[i].lo {
			end = min(end, secEnd)
			if i+1 == len(out) {
				end = secEnd
			}
		}
		out[i].hi = end
	}
	return symtab(out)
}

// sectionEnd returns the end address of the allocated section holding
// addr, or 0.
func sectionEnd(f *elf.File, addr uint64) uint64 {
	if f == nil {
		return 0
	}
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC != 0 && s.Addr <= addr && addr-s.Addr < s.Size {
			return s.Addr + s.Size
		}
	}
	return 0
}

// lookup returns the symbol whose range holds addr.
func (t symtab) lookup(addr uint64) (*symbol, bool) {
	i := sort.Search(len(t), func(i int) bool { return t[i].lo > addr }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if addr < t[j].hi {
			return &t[j], true
		}
	}
	return nil, false
}
