// about:memory's memory-report JSON: the file Firefox's about:memory
// "Load..." button opens (memory-report.json, or .json.gz), written from a
// report, and a checker that applies about:memory's own rules to one.

package reporter

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strings"
)

// The memory-report format (nsIMemoryInfoDumper.idl; aboutMemory.js reads
// it, nsMemoryInfoDumper.cpp writes it):
//
//	{"version": 1, "hasMozMallocUsableSize": true, "reports": [
//	  {"process": "NAME (pid N)", "path": "explicit/a/b", "kind": K,
//	   "units": U, "amount": N, "description": "..."}, ...]}
//
// A path's '/' separate the nodes of a tree; its first name is the tree
// ("explicit", or another measurement). Kinds and units are
// nsIMemoryReporter's: HEAP means "counted in heap-allocated", which is
// why Firefox's own heap-overhead reports are NONHEAP.
const (
	MemKindNonheap = 0
	MemKindHeap    = 1
	MemKindOther   = 2

	MemUnitsBytes           = 0
	MemUnitsCount           = 1
	MemUnitsCountCumulative = 2
	MemUnitsPercentage      = 3 // the percentage times 100
)

// memReportVersion is aboutMemory.js's gCurrentFileFormatVersion.
const memReportVersion = 1

var (
	memKinds = map[string]int{"nonheap": MemKindNonheap, "heap": MemKindHeap, "other": MemKindOther}
	memUnits = map[string]int{"bytes": MemUnitsBytes, "count": MemUnitsCount, "count-cumulative": MemUnitsCountCumulative, "percentage": MemUnitsPercentage}
)

// MemReport is one measurement of a memory-report file.
type MemReport struct {
	Process     string `json:"process"`
	Path        string `json:"path"`
	Kind        int    `json:"kind"`
	Units       int    `json:"units"`
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

// MemReportFile is a whole memory-report file.
type MemReportFile struct {
	Version                int         `json:"version"`
	HasMozMallocUsableSize bool        `json:"hasMozMallocUsableSize"`
	Reports                []MemReport `json:"reports"`
}

// The trees tagalloc adds besides explicit (one per units: about:memory
// refuses a tree whose nodes differ in units).
const (
	memLiveBlocks = "tagalloc-live-blocks/"
	memAllocBytes = "tagalloc-alloc-bytes/"
	memAllocBlock = "tagalloc-alloc-blocks/"
	memRequested  = "tagalloc-requested-bytes/"
)

// memPaths are the tags' paths in an about:memory tree, by tag index:
// a tag's name nests by path (gfx/webgl/textures, docs/tag-trees.md),
// since about:memory makes its trees from a path's '/'. A tag that is
// also a level above others reports its own bytes as the child OwnLevel:
// about:memory refuses a report that is both a leaf and a node. A name
// that is not a path (TagPath) is one node, its '/' written '\' as
// Firefox writes a URL's (about:memory shows '\' as '/'). Two siblings
// that would write the same name (a flat "a/" and a tag "a\", which
// about:memory would both show as a/; names that differ only in invalid
// UTF-8, which JSON writes as U+FFFD) are told apart by " (2)", " (3)",
// ...; each report's description has the tag's real name. Tags for
// which skip is true have no path.
func memPaths(tags []Tag, skip func(i int) bool) map[int]string {
	out := map[int]string{}
	var walk func(l *TagLevel, prefix string, used map[string]bool)
	walk = func(l *TagLevel, prefix string, used map[string]bool) {
		// as JSON will write it: invalid UTF-8 becomes U+FFFD
		base := strings.ToValidUTF8(strings.ReplaceAll(l.Name, "/", `\`), "\uFFFD")
		if base == "" {
			base = "(empty)" // no report has one (Read refuses it); about:memory refuses an empty name
		}
		name := base
		for n := 2; used[name]; n++ {
			name = fmt.Sprintf("%s (%d)", base, n)
		}
		used[name] = true
		path := prefix + name
		for _, i := range l.Tags {
			out[i] = path
		}
		kids := map[string]bool{}
		for _, c := range l.Children {
			walk(c, path+"/", kids)
		}
	}
	top := map[string]bool{}
	for _, l := range buildTagTree(tagNames(tags), skip, false) {
		walk(l, "", top)
	}
	return out
}

// memProcess names a process as Firefox does ("web (pid 1234)"): its
// program and pid. about:memory's diff matches processes by this name with
// the pid left out.
func memProcess(p Process) string {
	name := "unknown"
	if len(p.Command) > 0 && p.Command[0] != "" {
		name = filepath.Base(p.Command[0])
	}
	return fmt.Sprintf("%s (pid %d)", name, p.PID)
}

// MemoryReport maps the report to about:memory's form. Per process:
//
//	explicit/heap/TAG                   heap     bytes  live bytes of each tag but untagged, nested
//	                                                    by path (memPaths): explicit/heap/gfx/webgl
//	heap-allocated                      other    bytes  live bytes over all tags; about:memory shows
//	                                                    heap-allocated - (the heap reports above) as
//	                                                    explicit/heap-unclassified: the untagged bytes
//	explicit/heap-overhead/page-cache   nonheap  bytes  free memory kept resident (free_cached_bytes)
//	explicit/heap-overhead/bookkeeping  nonheap  bytes  page descriptors and books
//	heap-mapped, heap-span-free         other    bytes  as in the tree
//	resident, resident-peak,            other    bytes  VmRSS, VmHWM and the private resident bytes,
//	resident-unique                                     when known (Resident): about:memory's headline
//	tagalloc-live-blocks/TAG            other    count             every tag's live blocks
//	tagalloc-alloc-blocks/TAG           other    count-cumulative  blocks allocated in all
//	tagalloc-alloc-bytes/TAG            other    bytes             bytes allocated in all
//	tagalloc-requested-bytes/TAG        other    bytes             live requested bytes, where known
//
// and what the process's memory reporters published (explicit/go/...) as
// it is. The result passes CheckMemoryReport, or it is an error.
func (r *Report) MemoryReport() (*MemReportFile, error) {
	f := &MemReportFile{Version: memReportVersion, HasMozMallocUsableSize: true, Reports: []MemReport{}}
	for _, p := range r.Processes {
		reps, err := memReports(p)
		if err != nil {
			return nil, fmt.Errorf("about:memory form of pid %d: %w", p.PID, err)
		}
		f.Reports = append(f.Reports, reps...)
	}
	if err := f.Check(); err != nil {
		return nil, err
	}
	return f, nil
}

func memReports(p Process) ([]MemReport, error) {
	proc := memProcess(p)
	var out []MemReport
	var bad error
	add := func(path string, kind, units int, amount uint64, desc string) {
		if amount > math.MaxInt64 && bad == nil {
			bad = fmt.Errorf("%s: amount %d is out of range", path, amount)
		}
		out = append(out, MemReport{proc, path, kind, units, int64(amount), desc})
	}
	var heapAllocated uint64
	claims := p.heapClaims() // reporters' heap items come out of the tags' lines
	heapPaths := memPaths(p.Tags, func(i int) bool { return p.Tags[i].Name == DefaultTag })
	for i, t := range p.Tags {
		if heapAllocated+t.LiveBytes < heapAllocated {
			return nil, errors.New("live bytes over all tags overflow")
		}
		heapAllocated += t.LiveBytes
		if t.Name != DefaultTag {
			add("explicit/heap/"+heapPaths[i], MemKindHeap, MemUnitsBytes, t.LiveBytes-claims[t.Name],
				fmt.Sprintf("Live heap blocks tagged %q (usable bytes).", t.Name))
		}
	}
	h := p.Heap
	add("heap-allocated", MemKindOther, MemUnitsBytes, heapAllocated,
		"Live heap blocks over all tags (usable bytes). The part no tag claims (tagalloc's \"untagged\") is explicit/heap-unclassified.")
	add("explicit/heap-overhead/page-cache", MemKindNonheap, MemUnitsBytes, h.FreeCachedBytes,
		"Free heap memory the allocator keeps resident for reuse (tagalloc's free-cached).")
	add("explicit/heap-overhead/bookkeeping", MemKindNonheap, MemUnitsBytes, h.BookkeepingBytes,
		"The allocator's page descriptors and books.")
	add("heap-mapped", MemKindOther, MemUnitsBytes, h.MappedBytes,
		"Memory the allocator has from the OS for the heap (spans in use, free resident, huge).")
	add("heap-span-free", MemKindOther, MemUnitsBytes, h.SpanFreeBytes,
		"Room in spans in use holding no live block: free blocks and never-touched space (no RAM).")
	theirs := map[string]bool{}
	for _, it := range p.reporterItems() {
		theirs[it.Path] = true
	}
	for _, r := range p.Resident.memReports() {
		if !theirs[r.Path] { // a program that reports its own resident keeps it
			add(r.Path, r.Kind, r.Units, uint64(r.Amount), r.Description)
		}
	}
	tagPaths := memPaths(p.Tags, nil) // the trees of every tag, untagged's too
	for i, t := range p.Tags {
		name := tagPaths[i]
		of := fmt.Sprintf("tagged %q", t.Name)
		if t.Name == DefaultTag {
			of = "allocated while no tag was set"
		}
		add(memLiveBlocks+name, MemKindOther, MemUnitsCount, t.LiveBlocks, "Live heap blocks "+of+".")
		add(memAllocBlock+name, MemKindOther, MemUnitsCountCumulative, t.AllocBlocks, "Heap blocks "+of+", allocated over the process's life.")
		add(memAllocBytes+name, MemKindOther, MemUnitsBytes, t.AllocBytes, "Heap bytes "+of+", allocated over the process's life (usable bytes).")
		if t.LiveRequestedBytes != nil {
			add(memRequested+name, MemKindOther, MemUnitsBytes, *t.LiveRequestedBytes, "What the program asked for, of the live heap blocks "+of+".")
		}
	}
	ours := map[string]bool{}
	for _, r := range out {
		ours[r.Path] = true
	}
	for _, it := range p.reporterItems() {
		k, ok1 := memKinds[it.Kind]
		u, ok2 := memUnits[it.Units]
		if !ok1 || !ok2 {
			return nil, fmt.Errorf("%s: kind %q, units %q have no memory-report form", it.Path, it.Kind, it.Units)
		}
		if ours[it.Path] || it.Path == "explicit/heap-unclassified" {
			return nil, fmt.Errorf("%s: a memory reporter's path is one of tagalloc's own", it.Path)
		}
		desc := it.Description
		if desc == "" {
			desc = it.Path
		}
		add(it.Path, k, u, it.Amount, desc)
	}
	return out, bad
}

// WriteMemoryReport writes the report as memory-report JSON, one
// measurement a line (about:memory reads it as memory-report.json).
func (r *Report) WriteMemoryReport(w io.Writer) error {
	f, err := r.MemoryReport()
	if err != nil {
		return err
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "{\n  \"version\": %d,\n  \"hasMozMallocUsableSize\": %t,\n  \"reports\": [", f.Version, f.HasMozMallocUsableSize)
	for i, rep := range f.Reports {
		line, err := json.Marshal(rep)
		if err != nil {
			return err
		}
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("\n    ")
		b.Write(line)
	}
	b.WriteString("\n  ]\n}\n")
	_, err = w.Write(b.Bytes())
	return err
}

// WriteMemoryReportGzip is WriteMemoryReport gzipped: about:memory reads a
// file gzipped exactly when its name ends in .gz (memory-report.json.gz).
func (r *Report) WriteMemoryReportGzip(w io.Writer) error {
	z := gzip.NewWriter(w)
	if err := r.WriteMemoryReport(z); err != nil {
		return err
	}
	return z.Close()
}

// ErrMemReport wraps every complaint about a memory-report file.
var ErrMemReport = errors.New("not a memory report about:memory loads cleanly")

// ReadMemoryReport parses a memory-report file (gzipped or not), strictly:
// every field of every report present and of its JSON type, as
// aboutMemory.js expects them. Check applies the rest of its rules.
func ReadMemoryReport(data []byte) (*MemReportFile, error) {
	if len(data) >= 2 && data[0] == 0x1f && data[1] == 0x8b {
		z, err := gzip.NewReader(bytes.NewReader(data))
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMemReport, err)
		}
		if data, err = io.ReadAll(z); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrMemReport, err)
		}
	}
	var top map[string]json.RawMessage
	if err := json.Unmarshal(data, &top); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMemReport, err)
	}
	var f MemReportFile
	var version float64
	// aboutMemory.js: aObj.version === 1; hasMozMallocUsableSize !== undefined;
	// reports instanceof Array.
	if err := json.Unmarshal(top["version"], &version); err != nil || version != memReportVersion {
		return nil, fmt.Errorf("%w: data version number missing or not %d", ErrMemReport, memReportVersion)
	}
	f.Version = memReportVersion
	if err := json.Unmarshal(top["hasMozMallocUsableSize"], &f.HasMozMallocUsableSize); err != nil {
		return nil, fmt.Errorf("%w: missing or non-boolean 'hasMozMallocUsableSize' property", ErrMemReport)
	}
	var reports []map[string]json.RawMessage
	if err := json.Unmarshal(top["reports"], &reports); err != nil || reports == nil {
		return nil, fmt.Errorf("%w: missing or non-array 'reports' property", ErrMemReport)
	}
	f.Reports = make([]MemReport, len(reports))
	for i, rep := range reports {
		r := &f.Reports[i]
		for _, fld := range []struct {
			name string
			into any
		}{{"process", &r.Process}, {"path", &r.Path}, {"kind", &r.Kind}, {"units", &r.Units}, {"amount", &r.Amount}, {"description", &r.Description}} {
			raw, ok := rep[fld.name]
			if !ok || string(raw) == "null" {
				return nil, fmt.Errorf("%w: report %d has no %s", ErrMemReport, i, fld.name)
			}
			if err := json.Unmarshal(raw, fld.into); err != nil {
				return nil, fmt.Errorf("%w: report %d: %s %s: %v", ErrMemReport, i, fld.name, raw, err)
			}
		}
	}
	return &f, nil
}

// CheckMemoryReport reads a memory-report file and checks it (Check).
func CheckMemoryReport(data []byte) error {
	f, err := ReadMemoryReport(data)
	if err != nil {
		return err
	}
	return f.Check()
}

// maxExact is the largest amount a JavaScript number holds exactly.
const maxExact = 1 << 53

// addSat adds two amounts in [0, maxExact], saturating.
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// Check applies aboutMemory.js's rules for a loaded (not diffed) file:
// those that make it refuse the file (an explicit report that is not
// heap/nonheap bytes; a path both a leaf and a node; a tree whose nodes
// differ in units; a kind or units it does not know) and those that make
// it print a warning (no heap-allocated; hasMozMallocUsableSize false; a
// negative value, heap-unclassified included). It also wants what makes
// the page readable: a description on every report, no empty name in a
// path, amounts a JavaScript number holds exactly. Duplicate paths are
// allowed: about:memory sums them and marks the line "[2]".
func (f *MemReportFile) Check() error {
	if f.Version != memReportVersion {
		return badMemReport("version %d, want %d", f.Version, memReportVersion)
	}
	if !f.HasMozMallocUsableSize {
		return badMemReport("hasMozMallocUsableSize is false (about:memory warns that most of the heap is unclassified)")
	}
	procs := map[string]*memCheckProc{}
	var order []string
	for i, r := range f.Reports {
		where := fmt.Sprintf("report %d (%s, %s)", i, r.Process, r.Path)
		names, err := checkMemReportFields(r, where)
		if err != nil {
			return err
		}
		p := procs[r.Process]
		if p == nil {
			p = &memCheckProc{leaves: map[string]bool{}, treeUnits: map[string]int{}}
			procs[r.Process] = p
			order = append(order, r.Process)
		}
		if err := p.add(r, names, where); err != nil {
			return err
		}
	}
	for _, name := range order {
		if err := procs[name].check(name); err != nil {
			return err
		}
	}
	return nil
}

// badMemReport is an error of Check: ErrMemReport, then what is wrong.
func badMemReport(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrMemReport}, args...)...)
}

// checkMemReportFields applies Check's rules that look at one report
// alone (its process, kind, units, description, amount, the names of its
// path, and an explicit report's kind and units), so that the per-process
// sums below only ever see reports about:memory would load. It returns
// the path's names; where says which report it is, for the error.
func checkMemReportFields(r MemReport, where string) ([]string, error) {
	if r.Process == "" {
		return nil, badMemReport("%s: no process name (about:memory would take it for its own main process)", where)
	}
	if r.Kind < MemKindNonheap || r.Kind > MemKindOther {
		return nil, badMemReport("%s: kind %d", where, r.Kind)
	}
	if r.Units < MemUnitsBytes || r.Units > MemUnitsPercentage {
		return nil, badMemReport("%s: bad units %d", where, r.Units)
	}
	if r.Description == "" {
		return nil, badMemReport("%s: no description", where)
	}
	if r.Amount < 0 || r.Amount > maxExact {
		return nil, badMemReport("%s: amount %d is negative or too large (about:memory flags it invalid)", where, r.Amount)
	}
	names := strings.Split(r.Path, "/")
	for _, n := range names {
		if n == "" {
			return nil, badMemReport("%s: an empty name in the path", where)
		}
	}
	if strings.HasPrefix(r.Path, "explicit/") {
		if r.Kind != MemKindHeap && r.Kind != MemKindNonheap {
			return nil, badMemReport("%s: bad explicit kind %d (heap or nonheap)", where, r.Kind)
		}
		if r.Units != MemUnitsBytes {
			return nil, badMemReport("%s: bad explicit units %d (bytes)", where, r.Units)
		}
	}
	return names, nil
}

// memCheckProc is what Check gathers of one process's reports: the rules
// about trees (a path both a leaf and a node, units within a tree) and
// about the explicit tree against heap-allocated need all of them.
type memCheckProc struct {
	leaves       map[string]bool
	treeUnits    map[string]int // tree name -> units
	heapTotal    int64          // explicit heap reports
	heapAlloc    int64
	hasHeapAlloc bool
	hasExplicit  bool
	hasUnclass   bool
}

// add takes in one report of the process (already through
// checkMemReportFields; names is its path's), refusing one whose units
// differ from its tree's: a one-name path is a degenerate tree (Other
// Measurements), of which only heap-allocated counts, and must be bytes;
// any other is a leaf of its tree, summed into the explicit heap total if
// it is an explicit heap report.
func (p *memCheckProc) add(r MemReport, names []string, where string) error {
	if len(names) == 1 { // a degenerate tree: one node, in Other Measurements
		if r.Path == "heap-allocated" {
			if r.Units != MemUnitsBytes {
				return badMemReport("%s: heap-allocated is not in bytes", where)
			}
			p.hasHeapAlloc = true
			p.heapAlloc = addSat(p.heapAlloc, r.Amount)
		}
		return nil
	}
	if u, ok := p.treeUnits[names[0]]; ok && u != r.Units {
		return badMemReport("%s: units within the tree %q are inconsistent (%d and %d)", where, names[0], u, r.Units)
	}
	p.treeUnits[names[0]] = r.Units
	p.leaves[r.Path] = true
	if names[0] == "explicit" {
		p.hasExplicit = true
		if r.Kind == MemKindHeap {
			p.heapTotal = addSat(p.heapTotal, r.Amount)
		}
		if r.Path == "explicit/heap-unclassified" {
			p.hasUnclass = true
		}
	}
	return nil
}

// check applies the rules on the whole of process name's reports, once
// all are in: no report's path is a node above another's, and an explicit
// tree comes with a heap-allocated that its heap reports do not exceed
// (unless heap-unclassified is reported, about:memory computes it as the
// difference, and a negative one is flagged).
func (p *memCheckProc) check(name string) error {
	for leaf := range p.leaves {
		for i := len(leaf) - 1; i > 0; i-- {
			if leaf[i] == '/' && p.leaves[leaf[:i]] {
				return badMemReport("process %s: %s is a report and also a node above %s (about:memory: _amount already set for non-leaf node)", name, leaf[:i], leaf)
			}
		}
	}
	if !p.hasExplicit {
		return nil
	}
	if !p.hasHeapAlloc {
		return badMemReport("process %s: an explicit tree but no heap-allocated (about:memory warns that heap-unclassified is not shown)", name)
	}
	if !p.hasUnclass && p.heapTotal > p.heapAlloc {
		return badMemReport("process %s: the explicit heap reports sum to %d, more than heap-allocated %d (a negative heap-unclassified)", name, p.heapTotal, p.heapAlloc)
	}
	return nil
}
