// The about:memory-style tree.

package reporter

import (
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// WriteTree renders every process as an about:memory tree.
func (r *Report) WriteTree(w io.Writer) error {
	for i, p := range r.Processes {
		if i > 0 {
			fmt.Fprintln(w)
		}
		if err := p.WriteTree(w); err != nil {
			return err
		}
	}
	return nil
}

// WriteSummary renders the first process as a tree (and, with stacks,
// who holds and who allocates most) and the others (the children it
// forked or executed) grouped by command, as tagalloc run prints it
// (which ends with WriteWithoutBooks).
func (r *Report) WriteSummary(w io.Writer) error {
	if len(r.Processes) == 0 {
		_, err := fmt.Fprintln(w, "tagalloc: no process wrote its books")
		return err
	}
	if err := r.Processes[0].WriteTree(w); err != nil {
		return err
	}
	if st := r.Processes[0].Stacks; st != nil {
		writeStacksSummary(w, st)
	}
	if len(r.Processes) > 1 {
		writeGroups(w, r.Processes)
	}
	return nil
}

// WriteOverview renders the first process as a tree and the others
// grouped by command (tagalloc report's tree): a report of a thousand
// processes is one tree and a line per command. WriteTree renders them
// all.
func (r *Report) WriteOverview(w io.Writer) error {
	if len(r.Processes) == 0 {
		_, err := fmt.Fprintln(w, "tagalloc: no process wrote its books")
		r.WriteWithoutBooks(w)
		return err
	}
	if err := r.Processes[0].WriteTree(w); err != nil {
		return err
	}
	if len(r.Processes) > 1 {
		writeGroups(w, r.Processes)
	}
	r.WriteWithoutBooks(w)
	return nil
}

func (p Process) ending() string {
	switch {
	case p.Signal != "":
		return "killed by " + p.Signal
	case p.ExitCode != nil:
		return fmt.Sprintf("exit %d", *p.ExitCode)
	}
	return p.Ended
}

func pct(a, total uint64) string {
	if total == 0 {
		return "100.00%"
	}
	return fmt.Sprintf("%.2f%%", 100*float64(a)/float64(total))
}

// WriteTree renders one process.
func (p Process) WriteTree(w io.Writer) error {
	cmd := termtext.Cut(strings.Join(p.Command, " "), 100) // the program's: hostile
	fmt.Fprintf(w, "%s (pid %d) -- %s\n", cmd, p.PID, p.ending())
	if p.Torn {
		fmt.Fprintln(w, "  (read while running: figures may be off by what changed meanwhile)")
	}
	fmt.Fprintln(w, "Explicit Allocations")
	h := p.Heap
	overhead := h.FreeCachedBytes + h.BookkeepingBytes
	// what reporters in the process said (Go's runtime), besides the books
	own := map[string]bool{}
	for _, it := range items(p) {
		own[it.Path] = true
	}
	var explicit, other []Item
	var reported uint64
	for _, it := range p.Reports {
		switch {
		case own[it.Path]:
		case strings.HasPrefix(it.Path, "explicit/") && it.Units == "bytes":
			explicit = append(explicit, it)
			if it.Kind != "heap" { // heap items are part of the live heap, claimed from the tags
				reported += it.Amount
			}
		default:
			other = append(other, it)
		}
	}
	total := h.LiveBytes + overhead + reported
	fmt.Fprintf(w, "%s (100.00%%) -- explicit\n", humanize.IBytes(total))
	for _, it := range explicit {
		fmt.Fprintf(w, "├──%s (%s) ── %s\n", humanize.IBytes(it.Amount), pct(it.Amount, total), termtext.Clean(strings.TrimPrefix(it.Path, "explicit/")))
	}
	p.writeHeapLevels(w, total)
	fmt.Fprintf(w, "└──%s (%s) -- heap-overhead\n", humanize.IBytes(overhead), pct(overhead, total))
	fmt.Fprintf(w, "   ├──%s (%s) ── free-cached\n", humanize.IBytes(h.FreeCachedBytes), pct(h.FreeCachedBytes, total))
	fmt.Fprintf(w, "   └──%s (%s) ── bookkeeping\n", humanize.IBytes(h.BookkeepingBytes), pct(h.BookkeepingBytes, total))
	p.writeBudgets(w) // beside the tags they limit, before the other measurements
	fmt.Fprintln(w, "Other Measurements")
	fmt.Fprintf(w, "%s -- heap-mapped\n", humanize.IBytes(h.MappedBytes))
	fmt.Fprintf(w, "%s -- heap-span-free (free blocks and never-touched room in spans in use)\n", humanize.IBytes(h.SpanFreeBytes))
	fmt.Fprintf(w, "%s blocks -- heap-live-blocks\n", humanize.Comma(int64(p.Heap.LiveBlocks)))
	if pk := h.Peak(); pk != "" {
		fmt.Fprintf(w, "%s -- heap-peak (live bytes of all tags at once; a bound shows as +X or ≥)\n", pk)
	}
	if why := p.requestedUnknown(); why != "" {
		fmt.Fprintln(w, why)
	}
	for _, l := range p.Resident.treeLines() {
		fmt.Fprintln(w, l)
	}
	for _, it := range other {
		if it.Units == "bytes" {
			fmt.Fprintf(w, "%s -- %s\n", humanize.IBytes(it.Amount), termtext.Clean(it.Path))
		} else {
			fmt.Fprintf(w, "%s -- %s (%s)\n", humanize.Comma(int64(it.Amount)), termtext.Clean(it.Path), termtext.Clean(it.Units))
		}
	}
	return nil
}

// writeHeapLevels writes the tags' lines of the explicit tree: the
// untagged bytes as heap-unclassified, and the other tags nested by path
// under heap/ (docs/tag-trees.md), each level with the exact sums of the
// tags under it, and a peak for a tag alone.
func (p Process) writeHeapLevels(w io.Writer, total uint64) {
	claims := p.heapClaims()
	var untagged []int // heap-unclassified: apart from the tree (twice only in a report that repeats the name)
	for i, t := range p.Tags {
		if t.Name == DefaultTag {
			untagged = append(untagged, i)
		}
	}
	levels := buildTagTree(tagNames(p.Tags), func(i int) bool { return p.Tags[i].Name == DefaultTag }, true)
	tw := treeWriter{w: w, p: &p, claims: claims, total: total}
	for k := 0; k <= len(levels); k++ {
		// heap-unclassified where the untagged tag is in the books' order
		for len(untagged) > 0 && (k == len(levels) || levels[k].first > untagged[0]) {
			tw.tag(untagged[0], "├──", "heap-unclassified")
			untagged = untagged[1:]
		}
		if k < len(levels) {
			tw.level(levels[k], "│  ", "├──", "heap/"+termtext.Clean(levels[k].Name))
		}
	}
}

// treeWriter writes a process's tag levels.
type treeWriter struct {
	w      io.Writer
	p      *Process
	claims map[string]uint64
	total  uint64
}

// tag writes the line of one tag, after branch.
func (tw treeWriter) tag(i int, branch, name string) {
	t := tw.p.Tags[i]
	req := tw.p.requestedNote(&t)
	c := tw.claims[t.Name]
	if c > 0 {
		req += fmt.Sprintf(", less %s claimed by reporters", humanize.IBytes(c))
	}
	shown := t.LiveBytes - c
	fmt.Fprintf(tw.w, "%s%s (%s) ── %s  [%s blocks%s; %s allocated in all, peak %s]\n",
		branch, humanize.IBytes(shown), pct(shown, tw.total), name,
		humanize.Comma(int64(t.LiveBlocks)), req, humanize.IBytes(t.AllocBytes), t.Peak())
}

// level writes a level and, under it, its children. A level that is one
// tag is that tag's line; a level of several tags (above others, or one
// name given twice) has their sums and no peak: the peak of a sum is not
// the sum of the peaks.
func (tw treeWriter) level(l *TagLevel, indent, branch, name string) {
	if i, ok := l.Tag(); ok {
		tw.tag(i, branch, name)
		return
	}
	var shown, blocks, alloc, claimed uint64
	var req requestedSum
	l.Each(func(i int) {
		t := &tw.p.Tags[i]
		c := min(tw.claims[t.Name], t.LiveBytes)
		shown = addSat64(shown, t.LiveBytes-c)
		claimed = addSat64(claimed, c)
		blocks = addSat64(blocks, t.LiveBlocks)
		alloc = addSat64(alloc, t.AllocBytes)
		req.add(tw.p, t)
	})
	note := req.note()
	if claimed > 0 {
		note += fmt.Sprintf(", less %s claimed by reporters", humanize.IBytes(claimed))
	}
	sep, peak := "--", ""
	if l.Leaf() { // one name, several tags (a report that repeats a name)
		sep, peak = "──", fmt.Sprintf(", %d tags of this name: no peak", len(l.Tags))
	}
	fmt.Fprintf(tw.w, "%s%s (%s) %s %s  [%s blocks%s; %s allocated in all%s]\n",
		branch, humanize.IBytes(shown), pct(shown, tw.total), sep, name,
		humanize.Comma(int64(min(blocks, math.MaxInt64))), note, humanize.IBytes(alloc), peak)
	for k, c := range l.Children {
		b, next := "├──", "│  "
		if k == len(l.Children)-1 {
			b, next = "└──", "   "
		}
		tw.level(c, indent+next, indent+b, termtext.Clean(c.Name))
	}
}
