// The difference between two reports, as about:memory's "Load and
// diff...": B - A per process (matched by program), per tag and per other
// measurement.

package reporter

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// DiffSchema names the diff's JSON.
const DiffSchema = "tagalloc.diff/v1"

// Diff is what changed from one report (A) to another (B).
type Diff struct {
	Schema    string        `json:"schema"` // tagalloc.diff/v1
	Processes []ProcessDiff `json:"processes"`
}

// ProcessDiff is one process's change. Processes are matched by program
// (the base name of the command's first word, as about:memory matches
// "web (pid N)" with the pid left out); among processes of one program, a
// pid present in both is matched first, the rest in pid order. A process
// only in B is "added", only in A "removed" (its figures count from zero).
type ProcessDiff struct {
	Command []string `json:"command"`
	PIDA    int      `json:"pid_a,omitempty"`
	PIDB    int      `json:"pid_b,omitempty"`
	Status  string   `json:"status"` // changed, unchanged, added, removed
	// ExplicitBytes is the change of the explicit total (tags, heap
	// overhead and the explicit measurements of the process's reporters).
	ExplicitBytes int64 `json:"explicit_bytes"`
	// Tags: largest change of live bytes first; tags that did not change
	// at all are left out.
	Tags []TagDiff `json:"tags"`
	// Levels: the change of every level of the tag tree
	// (docs/tag-trees.md) above the changed tags: a path's prefix with a
	// changed tag under it ("gfx", "gfx/webgl" for gfx/webgl/textures),
	// summing the changes of the tags at and under it; largest change of
	// live bytes first. Left out when no tag nests.
	Levels []LevelDiff `json:"levels,omitempty"`
	// Reports: every other measurement (heap overhead, heap-mapped, the
	// process's reporters') by path, largest change first; those that did
	// not change are left out.
	Reports []ItemDiff `json:"reports"`
}

// TagDiff is B - A for one tag.
type TagDiff struct {
	Name        string `json:"name"`
	LiveBytes   int64  `json:"live_bytes"`
	LiveBlocks  int64  `json:"live_blocks"`
	AllocBytes  int64  `json:"alloc_bytes"`
	AllocBlocks int64  `json:"alloc_blocks"`
}

// LevelDiff is B - A for one level of the tag tree: the sums of TagDiff
// over the changed tags at and under Path (the tag named Path itself, if
// it changed, and those named Path/...), the untagged bytes aside.
type LevelDiff struct {
	Path        string `json:"path"`
	LiveBytes   int64  `json:"live_bytes"`
	LiveBlocks  int64  `json:"live_blocks"`
	AllocBytes  int64  `json:"alloc_bytes"`
	AllocBlocks int64  `json:"alloc_blocks"`
	Tags        int    `json:"tags"` // changed tags summed
}

// ItemDiff is B - A for one measurement (Item, with a signed amount).
type ItemDiff struct {
	Path        string `json:"path"`
	Kind        string `json:"kind"`
	Units       string `json:"units"`
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

// sub is b - a, clamped to the int64 range.
func sub(b, a uint64) int64 {
	if b >= a {
		return int64(min(b-a, math.MaxInt64))
	}
	if d := a - b; d <= math.MaxInt64 {
		return -int64(d)
	}
	return math.MinInt64
}

func addClamped(a, b int64) int64 {
	switch {
	case b > 0 && a > math.MaxInt64-b:
		return math.MaxInt64
	case b < 0 && a < math.MinInt64-b:
		return math.MinInt64
	}
	return a + b
}

// program is what processes are matched by.
func program(p Process) string {
	if len(p.Command) == 0 {
		return ""
	}
	return filepath.Base(p.Command[0])
}

// Compare computes B - A. Processes come in B's order (changed or added),
// then those only in A.
func Compare(a, b *Report) *Diff {
	byPID := func(ps []Process) []int { // indexes, in pid order
		ix := make([]int, len(ps))
		for i := range ix {
			ix[i] = i
		}
		sort.SliceStable(ix, func(i, j int) bool { return ps[ix[i]].PID < ps[ix[j]].PID })
		return ix
	}
	// Per program: A's processes in pid order, not yet matched.
	free := map[string][]int{}
	for _, i := range byPID(a.Processes) {
		k := program(a.Processes[i])
		free[k] = append(free[k], i)
	}
	take := func(k string, match func(int) bool) int {
		for n, i := range free[k] {
			if match(i) {
				free[k] = append(free[k][:n:n], free[k][n+1:]...)
				return i
			}
		}
		return -1
	}
	partner := make([]int, len(b.Processes)) // B's index -> A's, or -1
	for i := range partner {
		pb := b.Processes[i]
		partner[i] = take(program(pb), func(j int) bool { return a.Processes[j].PID == pb.PID })
	}
	for _, i := range byPID(b.Processes) {
		if partner[i] < 0 {
			partner[i] = take(program(b.Processes[i]), func(int) bool { return true })
		}
	}
	d := &Diff{Schema: DiffSchema, Processes: []ProcessDiff{}}
	matched := make([]bool, len(a.Processes))
	for i, pb := range b.Processes {
		if j := partner[i]; j >= 0 {
			matched[j] = true
			d.Processes = append(d.Processes, diffProcess(&a.Processes[j], &pb))
		} else {
			d.Processes = append(d.Processes, diffProcess(nil, &pb))
		}
	}
	for j := range a.Processes {
		if !matched[j] {
			d.Processes = append(d.Processes, diffProcess(&a.Processes[j], nil))
		}
	}
	return d
}

// diffProcess is B - A for one process; a missing side counts as empty.
func diffProcess(pa, pb *Process) ProcessDiff {
	var a, b Process
	pd := ProcessDiff{Status: "changed"}
	switch {
	case pa == nil:
		b, pd.Status = *pb, "added"
		pd.Command, pd.PIDB = b.Command, b.PID
	case pb == nil:
		a, pd.Status = *pa, "removed"
		pd.Command, pd.PIDA = a.Command, a.PID
	default:
		a, b = *pa, *pb
		pd.Command, pd.PIDA, pd.PIDB = b.Command, a.PID, b.PID
	}
	pd.Tags = diffTags(a.Tags, b.Tags)
	pd.Levels = diffLevels(pd.Tags)
	if pa != nil {
		a.Reports = append(heapItems(a.Heap), a.reporterItems()...)
	}
	if pb != nil {
		b.Reports = append(heapItems(b.Heap), b.reporterItems()...)
	}
	pd.Reports = diffItems(a.Reports, b.Reports)
	if pd.Status == "changed" && len(pd.Tags) == 0 && len(pd.Reports) == 0 {
		pd.Status = "unchanged"
	}
	for _, t := range pd.Tags {
		pd.ExplicitBytes = addClamped(pd.ExplicitBytes, t.LiveBytes)
	}
	for _, it := range pd.Reports {
		if it.explicit() {
			pd.ExplicitBytes = addClamped(pd.ExplicitBytes, it.Amount)
		}
	}
	return pd
}

func absInt(v int64) uint64 {
	if v < 0 {
		return uint64(-(v + 1)) + 1 // MinInt64 too
	}
	return uint64(v)
}

// diffTags is B - A per tag name; a name a report gives twice counts
// once, with the sums of its tags (as about:memory sums a duplicate path).
func diffTags(a, b []Tag) []TagDiff {
	sums := func(tags []Tag) map[string]Tag {
		m := map[string]Tag{}
		for _, t := range tags {
			s := m[t.Name]
			s.LiveBytes = addSat64(s.LiveBytes, t.LiveBytes)
			s.LiveBlocks = addSat64(s.LiveBlocks, t.LiveBlocks)
			s.AllocBytes = addSat64(s.AllocBytes, t.AllocBytes)
			s.AllocBlocks = addSat64(s.AllocBlocks, t.AllocBlocks)
			m[t.Name] = s
		}
		return m
	}
	old, now := sums(a), sums(b)
	out := []TagDiff{}
	seen := map[string]bool{}
	add := func(ta, tb Tag, name string) {
		td := TagDiff{name, sub(tb.LiveBytes, ta.LiveBytes), sub(tb.LiveBlocks, ta.LiveBlocks),
			sub(tb.AllocBytes, ta.AllocBytes), sub(tb.AllocBlocks, ta.AllocBlocks)}
		if td != (TagDiff{Name: name}) {
			out = append(out, td)
		}
	}
	for _, tb := range b {
		if !seen[tb.Name] {
			seen[tb.Name] = true
			add(old[tb.Name], now[tb.Name], tb.Name)
		}
	}
	for _, ta := range a {
		if !seen[ta.Name] {
			seen[ta.Name] = true
			add(old[ta.Name], Tag{}, ta.Name)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		return biggerChange(out[i].LiveBytes, out[i].AllocBytes, out[i].Name, out[j].LiveBytes, out[j].AllocBytes, out[j].Name)
	})
	return out
}

// biggerChange orders changes (of tags or levels) for a diff: the larger
// change of live bytes first, then of allocated bytes, then by name.
func biggerChange(liveA, allocA int64, nameA string, liveB, allocB int64, nameB string) bool {
	if x, y := absInt(liveA), absInt(liveB); x != y {
		return x > y
	}
	if x, y := absInt(allocA), absInt(allocB); x != y {
		return x > y
	}
	return nameA < nameB
}

// heapLevels nests tag changes by path, the untagged bytes left out (they
// are heap-unclassified); merged as the tree shows them, or every level.
func heapLevels(tags []TagDiff, merge bool) []*TagLevel {
	names := make([]string, len(tags))
	for i, t := range tags {
		names[i] = t.Name
	}
	return buildTagTree(names, func(i int) bool { return tags[i].Name == DefaultTag }, merge)
}

// sumDiff is the level's change: the sums of its tags'.
func (l *TagLevel) sumDiff(tags []TagDiff) LevelDiff {
	d := LevelDiff{Path: l.Path}
	l.Each(func(i int) {
		t := &tags[i]
		d.LiveBytes = addClamped(d.LiveBytes, t.LiveBytes)
		d.LiveBlocks = addClamped(d.LiveBlocks, t.LiveBlocks)
		d.AllocBytes = addClamped(d.AllocBytes, t.AllocBytes)
		d.AllocBlocks = addClamped(d.AllocBlocks, t.AllocBlocks)
		d.Tags++
	})
	return d
}

// diffLevels is the change of every level above a changed tag; nil when
// no tag nests.
func diffLevels(tags []TagDiff) []LevelDiff {
	var out []LevelDiff
	for _, top := range heapLevels(tags, false) {
		top.Walk(func(l *TagLevel, _ int) {
			if !l.Leaf() {
				out = append(out, l.sumDiff(tags))
			}
		})
	}
	sort.SliceStable(out, func(i, j int) bool {
		return biggerChange(out[i].LiveBytes, out[i].AllocBytes, out[i].Path, out[j].LiveBytes, out[j].AllocBytes, out[j].Path)
	})
	return out
}

// diffItems is B - A by path (duplicate paths summed, as about:memory
// does); kind, units and description are B's where B has the path.
func diffItems(a, b []Item) []ItemDiff {
	type acc struct {
		it   Item
		a, b uint64
	}
	byPath := map[string]*acc{}
	var order []string
	sum := func(x, y uint64) uint64 {
		if x+y < x {
			return math.MaxUint64
		}
		return x + y
	}
	for side, items := range [][]Item{b, a} {
		for _, it := range items {
			c := byPath[it.Path]
			if c == nil {
				c = &acc{it: it}
				byPath[it.Path] = c
				order = append(order, it.Path)
			}
			if side == 0 {
				c.b = sum(c.b, it.Amount)
			} else {
				c.a = sum(c.a, it.Amount)
			}
		}
	}
	out := []ItemDiff{}
	for _, path := range order {
		c := byPath[path]
		if d := sub(c.b, c.a); d != 0 {
			out = append(out, ItemDiff{c.it.Path, c.it.Kind, c.it.Units, d, c.it.Description})
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		x, y := absInt(out[i].Amount), absInt(out[j].Amount)
		if x != y {
			return x > y
		}
		return out[i].Path < out[j].Path
	})
	return out
}

func (it ItemDiff) explicit() bool {
	return strings.HasPrefix(it.Path, "explicit/") && it.Units == "bytes"
}

// signed formats a byte change: +1.5 MiB, -200 KiB, 0 B.
func signed(v int64) string {
	switch {
	case v > 0:
		return "+" + humanize.IBytes(uint64(v))
	case v < 0:
		return "-" + humanize.IBytes(absInt(v))
	}
	return "0 B"
}

// signedCount formats a count's change: +1,234, -5, 0.
func signedCount(v int64) string {
	if v > 0 {
		return "+" + humanize.Comma(v)
	}
	if v == math.MinInt64 {
		return "-9,223,372,036,854,775,808"
	}
	return humanize.Comma(v)
}

// signedAmount formats a change in the item's units.
func (it ItemDiff) signedAmount() string {
	switch it.Units {
	case "bytes":
		return signed(it.Amount)
	case "percentage": // times 100, as nsIMemoryReporter has it
		return fmt.Sprintf("%+.2f%%", float64(it.Amount)/100)
	}
	return signedCount(it.Amount)
}

// WriteText writes the diff as about:memory's diff view shows one: per
// process, the explicit tree's changes (tags and the rest, largest change
// first), then the other measurements'.
func (d *Diff) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, p := range d.Processes {
		fmt.Fprintf(&b, "%s -- ", termtext.Clean(strings.Join(p.Command, " "))) // the program's: hostile
		switch p.Status {
		case "added":
			fmt.Fprintf(&b, "added (pid %d)\n", p.PIDB)
		case "removed":
			fmt.Fprintf(&b, "removed (pid %d)\n", p.PIDA)
		case "unchanged":
			fmt.Fprintf(&b, "pid %d -> %d: no change\n", p.PIDA, p.PIDB)
			continue
		default:
			fmt.Fprintf(&b, "pid %d -> %d\n", p.PIDA, p.PIDB)
		}
		type line struct {
			size uint64   // |change|, for the order
			text string   // the line
			kids []string // the lines under it, without the branch before them
		}
		var explicit, other []line
		for _, t := range p.Tags {
			if t.Name == DefaultTag { // the tree below leaves it out
				explicit = append(explicit, line{absInt(t.LiveBytes), tagDiffText(t, "heap-unclassified"), nil})
			}
		}
		for _, l := range heapLevels(p.Tags, true) {
			sum := l.sumDiff(p.Tags)
			text, kids := levelDiffText(l, p.Tags, "heap/"+termtext.Clean(l.Name))
			explicit = append(explicit, line{absInt(sum.LiveBytes), text, kids})
		}
		for _, it := range p.Reports {
			path := termtext.Clean(it.Path)
			if it.explicit() {
				explicit = append(explicit, line{absInt(it.Amount), fmt.Sprintf("%10s ── %s", signed(it.Amount), strings.TrimPrefix(path, "explicit/")), nil})
			} else if it.Units == "bytes" || it.Units == "percentage" {
				other = append(other, line{text: fmt.Sprintf("%10s -- %s", it.signedAmount(), path)})
			} else {
				other = append(other, line{text: fmt.Sprintf("%10s -- %s (%s)", it.signedAmount(), path, termtext.Clean(it.Units))})
			}
		}
		sort.SliceStable(explicit, func(i, j int) bool { return explicit[i].size > explicit[j].size })
		if len(explicit) == 0 && len(other) == 0 {
			b.WriteString("nothing measured\n\n")
			continue
		}
		b.WriteString("Explicit Allocations\n")
		fmt.Fprintf(&b, "%s -- explicit\n", signed(p.ExplicitBytes))
		for i, l := range explicit {
			branch, under := "├──", "│  "
			if i == len(explicit)-1 {
				branch, under = "└──", "   "
			}
			b.WriteString(branch + l.text + "\n")
			for _, k := range l.kids {
				b.WriteString(under + k + "\n")
			}
		}
		if len(other) > 0 {
			b.WriteString("Other Measurements\n")
			for _, l := range other {
				b.WriteString(l.text + "\n")
			}
		}
		b.WriteString("\n")
	}
	if len(d.Processes) == 0 {
		b.WriteString("no processes in either report\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// tagDiffText is one tag's change, as a line of the diff's tree.
func tagDiffText(t TagDiff, name string) string {
	return fmt.Sprintf("%10s ── %s  [%s blocks; %s allocated in all]", signed(t.LiveBytes), name, signedCount(t.LiveBlocks), signed(t.AllocBytes))
}

// levelDiffText is a level's change (its own line, the sums of its tags'
// changes) and the lines of its children under it, largest change first,
// each with its branch.
func levelDiffText(l *TagLevel, tags []TagDiff, name string) (string, []string) {
	if i, ok := l.Tag(); ok {
		return tagDiffText(tags[i], name), nil
	}
	sum := l.sumDiff(tags)
	sep := "--"
	if l.Leaf() {
		sep = "──" // one name, several tags
	}
	text := fmt.Sprintf("%10s %s %s  [%s blocks; %s allocated in all]", signed(sum.LiveBytes), sep, name, signedCount(sum.LiveBlocks), signed(sum.AllocBytes))
	kids := append([]*TagLevel(nil), l.Children...)
	sums := make(map[*TagLevel]LevelDiff, len(kids))
	for _, c := range kids {
		sums[c] = c.sumDiff(tags)
	}
	sort.SliceStable(kids, func(i, j int) bool {
		x, y := sums[kids[i]], sums[kids[j]]
		if a, b := absInt(x.LiveBytes), absInt(y.LiveBytes); a != b {
			return a > b
		}
		return absInt(x.AllocBytes) > absInt(y.AllocBytes)
	})
	var lines []string
	for i, c := range kids {
		branch, under := "├──", "│  "
		if i == len(kids)-1 {
			branch, under = "└──", "   "
		}
		t, sub := levelDiffText(c, tags, termtext.Clean(c.Name))
		lines = append(lines, branch+t)
		for _, s := range sub {
			lines = append(lines, under+s)
		}
	}
	return text, lines
}

// WriteJSON writes the diff as JSON.
func (d *Diff) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
