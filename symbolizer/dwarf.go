// DWARF: which compile unit holds an address (indexed once per object);
// per unit, built the first time one of its addresses is asked for, a
// sorted line table and an index of its functions; per function, the
// first time, the tree of its inlined calls.

package symbolizer

import (
	"cmp"
	"debug/dwarf"
	"errors"
	"io"
	"path"
	"slices"
	"sort"
	"strings"
	"sync"
)

// dwarfIndex maps addresses to compile units.
type dwarfIndex struct {
	d      *dwarf.Data
	ranges []unitRange // sorted by lo

	nameMu sync.Mutex
	names  map[dwarf.Offset]string // function DIE -> demangled name
}

type unitRange struct {
	lo, hi uint64
	u      *unit
}

// unit is one compile unit; lines and scopes are built on first use.
type unit struct {
	entry *dwarf.Entry
	once  sync.Once
	err   error
	lines []lineRow
	files []string     // the line program's file table, by DWARF file index: names made absolute (fileNames)
	top   []scopeRange // the unit's functions at its top level, sorted by lo; their trees read on first use

	allOnce sync.Once
	allErr  error
	all     []scopeRange // every function of the unit with its tree (loadAll), sorted by lo
}

// lineRow is one row of a line program: from addr to the next row's addr
// the code came from file:line (file indexes unit.files; -1: none). end
// marks the end of a sequence (no code).
type lineRow struct {
	addr uint64
	file int32
	line int32
	end  bool
}

// scope is a function (DW_TAG_subprogram) or an inlined call of one
// (DW_TAG_inlined_subroutine) with the addresses it covers.
type scope struct {
	ranges   [][2]uint64
	die      dwarf.Offset // where the name is found (directly or through abstract_origin/specification)
	callFile int          // for an inlined call: where, in the caller, the call was
	callLine int
	children []*scope  // inlined calls inside it (of a function of unit.top: once lazy is loaded)
	lazy     *lazyTree // of a function of unit.top: its children, read on first use
}

type scopeRange struct {
	lo, hi uint64
	s      *scope
}

// attrMIPSLinkageName is DW_AT_MIPS_linkage_name, the linkage name of
// compilers from before DWARF 4 named one.
const attrMIPSLinkageName dwarf.Attr = 0x2007

// maxTopLevelNulls bounds the run of null entries between units that
// newDwarfIndex reads past.
const maxTopLevelNulls = 4096

// holdsCode is the set of DIEs whose children may be functions or inlined
// calls; the children of the others (types, call sites, variables) are
// skipped unread (through DW_AT_sibling when the compiler wrote it).
// GCC and Clang write the code of member functions, even those defined
// in their class, as DIEs at namespace or unit level pointing to the
// declaration with DW_AT_specification, so class types are skipped too.
var holdsCode = map[dwarf.Tag]bool{
	dwarf.TagCompileUnit:       true,
	dwarf.TagPartialUnit:       true,
	dwarf.TagNamespace:         true,
	dwarf.TagModule:            true,
	dwarf.TagSubprogram:        true,
	dwarf.TagLexDwarfBlock:     true,
	dwarf.TagInlinedSubroutine: true,
	dwarf.TagTryDwarfBlock:     true,
	dwarf.TagCatchDwarfBlock:   true,
	dwarf.TagEntryPoint:        true,
	dwarf.TagWithStmt:          true,
	dwarf.TagCommonDwarfBlock:  true,
}

// maxScopeDepth bounds the nesting the walk of a unit follows; deeper
// (corrupt) trees are cut there.
const maxScopeDepth = 256

// newDwarfIndex reads the compile units' address ranges. An object whose
// DWARF has no unit with ranges gives nil.
func newDwarfIndex(d *dwarf.Data) (*dwarfIndex, error) {
	x := &dwarfIndex{d: d, names: map[dwarf.Offset]string{}}
	r := d.Reader()
	nulls := 0
	for {
		e, err := r.Next()
		if err != nil {
			return nil, err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			// Padding between units, or debug/dwarf stuck at bytes that
			// all have the LEB128 continuation bit set: it then returns
			// null entries forever without moving on.
			if nulls++; nulls > maxTopLevelNulls {
				return nil, errors.New("symbolizer: .debug_info: no unit after many null entries")
			}
			continue
		}
		nulls = 0
		if e.Tag == dwarf.TagCompileUnit {
			rs, err := d.Ranges(e)
			if err == nil && len(rs) > 0 {
				u := &unit{entry: e}
				for _, rg := range rs {
					if rg[1] > rg[0] {
						x.ranges = append(x.ranges, unitRange{rg[0], rg[1], u})
					}
				}
			}
		}
		r.SkipChildren()
	}
	if len(x.ranges) == 0 {
		return nil, nil
	}
	sort.Slice(x.ranges, func(i, j int) bool { return x.ranges[i].lo < x.ranges[j].lo })
	return x, nil
}

// unitFor returns the compile unit whose ranges hold pc.
func (x *dwarfIndex) unitFor(pc uint64) *unit {
	i := sort.Search(len(x.ranges), func(i int) bool { return x.ranges[i].lo > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if pc < x.ranges[j].hi {
			return x.ranges[j].u
		}
	}
	return nil
}

// load builds the unit's line table and function tree, once.
func (x *dwarfIndex) load(u *unit) error {
	u.once.Do(func() {
		defer recoverInto(&u.err)
		u.err = x.loadLines(u)
		if u.err == nil {
			u.err = x.loadScopes(u)
		}
	})
	return u.err
}

func (x *dwarfIndex) loadLines(u *unit) error {
	lr, err := x.d.LineReader(u.entry)
	if err != nil || lr == nil {
		return err // a unit without a line program has no lines
	}
	// Rows name their file by index in the file table as it is at the
	// end (DW_LNE_define_file may add entries on the way); consecutive
	// rows mostly share a file, so the last one's index is tried first.
	var (
		le       dwarf.LineEntry
		lastFile *dwarf.LineFile
		lastIdx  int32 = -1
		index    map[*dwarf.LineFile]int32
	)
	for {
		if err := lr.Next(&le); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return err
		}
		if le.File != lastFile {
			lastFile, lastIdx = le.File, -1
			if le.File != nil {
				if index == nil {
					index = map[*dwarf.LineFile]int32{}
				}
				i, ok := index[le.File]
				if !ok {
					i = int32(len(index))
					index[le.File] = i
				}
				lastIdx = i
			}
		}
		u.lines = append(u.lines, lineRow{addr: le.Address, file: lastIdx, line: int32(le.Line), end: le.EndSequence})
	}
	compDir, _ := u.entry.Val(dwarf.AttrCompDir).(string)
	u.files = fileNames(lr.Files(), compDir)
	// The rows' indexes are the order files were first met: map them to
	// the file table's (the rows' files are entries of it).
	if len(index) > 0 {
		byRow := make([]int32, len(index))
		for i := range byRow {
			byRow[i] = -1
		}
		for i, f := range lr.Files() {
			if j, ok := index[f]; ok && f != nil {
				byRow[j] = int32(i)
			}
		}
		for i := range u.lines {
			if r := &u.lines[i]; r.file >= 0 {
				r.file = byRow[r.file]
			}
		}
	}
	// Sequences may come in any order; at one address an end of sequence
	// goes before the start of the next, and rows of one sequence keep
	// their order (the last row at an address describes it).
	less := func(a, b lineRow) int {
		if a.addr != b.addr {
			return cmp.Compare(a.addr, b.addr)
		}
		if a.end && !b.end {
			return -1
		}
		if b.end && !a.end {
			return 1
		}
		return 0
	}
	if !slices.IsSortedFunc(u.lines, less) {
		slices.SortStableFunc(u.lines, less)
	}
	return nil
}

// fileNames returns the names of a line program's file table (nil
// entries: ""), each relative one made absolute with the compile unit's
// directory (DW_AT_comp_dir). debug/dwarf already joins a name with its
// directory entry and, before DWARF 5, a relative directory with the
// compile unit's; but a DWARF 5 directory entry is used as written, and
// GCC writes the directory of a source named "../x.c" as "..", so the
// file comes out as "../x.c". Relative entries of a DWARF 5 table are
// relative to the compilation directory (its entry 0, which GCC and Clang
// write as DW_AT_comp_dir), and joined with it as debug/dwarf joins its
// own (path.Join: "/src/proj/build" and "../x.c" give "/src/proj/x.c").
// Without a DW_AT_comp_dir a relative name stays as it is.
func fileNames(files []*dwarf.LineFile, compDir string) []string {
	out := make([]string, len(files))
	for i, f := range files {
		if f == nil {
			continue
		}
		out[i] = absName(f.Name, compDir)
	}
	return out
}

// absName joins a relative file name with the compilation directory
// when that is an absolute Unix path; absolute names (Unix or Windows)
// and names without such a directory stay as they are.
func absName(name, compDir string) string {
	if name == "" || !strings.HasPrefix(compDir, "/") || isAbsPath(name) {
		return name
	}
	return path.Join(compDir, name)
}

// isAbsPath: a Unix absolute path, or a Windows one with a drive letter
// or UNC prefix (as debug/dwarf tells them apart).
func isAbsPath(p string) bool {
	if strings.HasPrefix(p, "/") || strings.HasPrefix(p, `\\`) {
		return true
	}
	return len(p) >= 3 && p[1] == ':' && (p[2] == '\\' || p[2] == '/') &&
		('a' <= p[0]|0x20 && p[0]|0x20 <= 'z')
}

// line returns the file and line of pc in the unit's line table.
func (u *unit) line(pc uint64) (string, int, bool) {
	i := sort.Search(len(u.lines), func(i int) bool { return u.lines[i].addr > pc }) - 1
	if i < 0 || u.lines[i].end {
		return "", 0, false
	}
	r := &u.lines[i]
	return u.fileName(int(r.file)), int(r.line), true
}

// fileName returns the name of entry i of the unit's file table.
func (u *unit) fileName(i int) string {
	if i < 0 || i >= len(u.files) {
		return ""
	}
	return u.files[i]
}

// loadScopes indexes the unit's functions: the subprograms with code at
// its top level (and in namespaces and modules), without reading their
// children, which hold most of a unit's entries (parameters, variables,
// blocks, inlined calls, call sites). A function's tree of inlined calls
// is read the first time an address in it is looked up (scope.load).
func (x *dwarfIndex) loadScopes(u *unit) error {
	r := x.d.Reader()
	r.Seek(u.entry.Offset)
	cu, err := r.Next()
	if err != nil || cu == nil || !cu.Children {
		return err
	}
	depth := 1 // of the next entry: 1 is the unit's children
	for depth > 0 {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			depth--
			continue
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit || e.Tag == dwarf.TagTypeUnit {
			break // the next unit: this one's last terminator was left out
		}
		if e.Tag == dwarf.TagSubprogram || e.Tag == dwarf.TagInlinedSubroutine {
			if rs, err := x.d.Ranges(e); err == nil && len(rs) > 0 {
				s := &scope{ranges: rs, die: e.Offset, lazy: &lazyTree{}}
				for _, rg := range rs {
					if rg[1] > rg[0] {
						u.top = append(u.top, scopeRange{rg[0], rg[1], s})
					}
				}
			}
			// Its children are read with it (scope.load); those of a
			// subprogram without code (a declaration, an abstract
			// instance) hold none, save a nested function's, which the
			// walk of the whole unit finds (unit.scopes).
			r.SkipChildren()
			continue
		}
		if e.Children {
			if !holdsCode[e.Tag] || depth >= maxScopeDepth {
				r.SkipChildren()
				continue
			}
			depth++
		}
	}
	sort.Slice(u.top, func(i, j int) bool { return u.top[i].lo < u.top[j].lo })
	return nil
}

// lazyTree is a function's tree of inlined calls and nested functions,
// read on first use.
type lazyTree struct {
	once   sync.Once
	err    error
	nested []scopeRange // functions defined inside it (GNU C), sorted by lo
}

// walkTree reads the entries from r (positioned after an entry that has
// children) to the end of that entry's children, adding the inlined calls
// of root (or of its descendants) to their parents' children and the
// functions met to *funcs. root is nil at a unit's top level.
func (x *dwarfIndex) walkTree(r *dwarf.Reader, root *scope, funcs *[]scopeRange) error {
	// stack[i] is the innermost scope enclosing the entries at depth i+1
	// (nil outside any function).
	stack := []*scope{root}
	for len(stack) > 0 {
		e, err := r.Next()
		if err != nil {
			return err
		}
		if e == nil {
			break
		}
		if e.Tag == 0 {
			stack = stack[:len(stack)-1]
			continue
		}
		if e.Tag == dwarf.TagCompileUnit || e.Tag == dwarf.TagPartialUnit || e.Tag == dwarf.TagTypeUnit {
			break // the next unit: this one's last terminator was left out
		}
		parent := stack[len(stack)-1]
		var s *scope
		switch e.Tag {
		case dwarf.TagSubprogram, dwarf.TagInlinedSubroutine:
			rs, err := x.d.Ranges(e)
			if err != nil || len(rs) == 0 {
				break
			}
			s = &scope{ranges: rs, die: e.Offset}
			if e.Tag == dwarf.TagInlinedSubroutine && parent != nil {
				f, _ := e.Val(dwarf.AttrCallFile).(int64)
				l, _ := e.Val(dwarf.AttrCallLine).(int64)
				s.callFile, s.callLine = int(f), int(l)
				parent.children = append(parent.children, s)
			} else {
				// A function (even one nested in another, as GNU C
				// allows) is a frame of its own.
				for _, rg := range rs {
					if rg[1] > rg[0] {
						*funcs = append(*funcs, scopeRange{rg[0], rg[1], s})
					}
				}
			}
		}
		if e.Children {
			if !holdsCode[e.Tag] || len(stack) >= maxScopeDepth {
				r.SkipChildren()
				continue
			}
			if s == nil {
				s = parent
			}
			stack = append(stack, s)
		}
	}
	sort.Slice(*funcs, func(i, j int) bool { return (*funcs)[i].lo < (*funcs)[j].lo })
	return nil
}

// loadTree reads the tree of a function found by loadScopes, once.
func (x *dwarfIndex) loadTree(s *scope) error {
	t := s.lazy
	t.once.Do(func() {
		defer recoverInto(&t.err)
		r := x.d.Reader()
		r.Seek(s.die)
		e, err := r.Next()
		if err != nil || e == nil || !e.Children {
			t.err = err
			return
		}
		t.err = x.walkTree(r, s, &t.nested)
	})
	return t.err
}

// loadAll reads the whole unit's tree, once: for an address no function
// of the index holds (a nested function's, found only inside another).
func (x *dwarfIndex) loadAll(u *unit) error {
	u.allOnce.Do(func() {
		defer recoverInto(&u.allErr)
		r := x.d.Reader()
		r.Seek(u.entry.Offset)
		cu, err := r.Next()
		if err != nil || cu == nil || !cu.Children {
			u.allErr = err
			return
		}
		u.allErr = x.walkTree(r, nil, &u.all)
	})
	return u.allErr
}

// findScope returns the function whose range holds pc among rs (sorted by
// lo), the one starting last when several do.
func findScope(rs []scopeRange, pc uint64) *scope {
	i := sort.Search(len(rs), func(i int) bool { return rs[i].lo > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if pc < rs[j].hi {
			return rs[j].s
		}
	}
	return nil
}

// scopes returns the chain of scopes holding pc, outermost (the function)
// first, then each inlined call inside it.
func (x *dwarfIndex) scopes(u *unit, pc uint64) []*scope {
	s := findScope(u.top, pc)
	if s != nil {
		if x.loadTree(s) != nil {
			return nil
		}
		if n := findScope(s.lazy.nested, pc); n != nil {
			s = n
		}
	} else if x.loadAll(u) == nil {
		s = findScope(u.all, pc)
	}
	var chain []*scope
	for s != nil && len(chain) < maxScopeDepth {
		chain = append(chain, s)
		var next *scope
		for _, c := range s.children {
			if c.holds(pc) {
				next = c
				break
			}
		}
		s = next
	}
	return chain
}

func (s *scope) holds(pc uint64) bool {
	for _, r := range s.ranges {
		if r[0] <= pc && pc < r[1] {
			return true
		}
	}
	return false
}

// name returns the name of the function a scope is (an instance of), the
// linkage name demangled when it is a mangled one, else DW_AT_name, following
// DW_AT_abstract_origin and DW_AT_specification.
func (x *dwarfIndex) name(off dwarf.Offset, demangle func(string) string) string {
	x.nameMu.Lock()
	n, ok := x.names[off]
	x.nameMu.Unlock()
	if ok {
		return n
	}
	n = x.resolveName(off, demangle)
	x.nameMu.Lock()
	x.names[off] = n
	x.nameMu.Unlock()
	return n
}

func (x *dwarfIndex) resolveName(off dwarf.Offset, demangle func(string) string) (name string) {
	defer func() {
		if recover() != nil {
			name = ""
		}
	}()
	r := x.d.Reader()
	plain, asmName := "", ""
	for range 8 {
		r.Seek(off)
		e, err := r.Next()
		if err != nil || e == nil {
			break
		}
		for _, a := range []dwarf.Attr{dwarf.AttrLinkageName, attrMIPSLinkageName} {
			if ln, ok := e.Val(a).(string); ok && ln != "" {
				if isMangled(ln) {
					return demangle(ln)
				}
				// An asm label (glibc's __GI_ aliases): the source name
				// says more.
				asmName = ln
			}
		}
		if n, ok := e.Val(dwarf.AttrName).(string); ok && n != "" && plain == "" {
			plain = n
		}
		next, ok := e.Val(dwarf.AttrAbstractOrigin).(dwarf.Offset)
		if !ok {
			next, ok = e.Val(dwarf.AttrSpecification).(dwarf.Offset)
		}
		if !ok || next == off {
			break
		}
		off = next
	}
	if plain == "" {
		return asmName
	}
	return plain
}
