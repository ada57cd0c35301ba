// The dark-matter report (DMD's dark-matter mode): the live sampled heap
// split by what memory reporters said of each block in their last
// collection (tagalloc_report_block): unreported blocks (heap-unclassified:
// the dark matter) by the stack that allocated them, once-reported blocks
// by allocating and reporting stack, and twice-reported blocks (a reporter
// bug: the bytes count twice) with both reporting stacks.

package reporter

import (
	"bufio"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/tagalloc/tagalloc/tagtable"
)

// DarkMatter is the dark-matter section of a process's stacks. Bytes and
// blocks are estimates in sampled mode (exact with --stacks full). As in
// DMD's own output, records name their stacks by id and Traces holds each
// stack's frames once.
type DarkMatter struct {
	// Collections is how many times the process ran its reporters
	// (tagalloc_collect_reports); the marks are those of the last one.
	Collections uint64 `json:"collections"`
	// UnknownReports measured blocks the profile does not hold (not
	// sampled blocks are never reported as events: only sampled ones).
	UnknownReports uint64             `json:"unknown_reports,omitempty"`
	Unreported     DarkMatterTotals   `json:"unreported"`
	OnceReported   DarkMatterTotals   `json:"once_reported"`
	TwiceReported  DarkMatterTotals   `json:"twice_reported"`
	Records        []DarkMatterRecord `json:"records"`
	// Traces are the frames of every stack a record names, innermost
	// first, by stack id.
	Traces map[uint32][]Frame `json:"traces"`
}

// DarkMatterTotals add up one kind of record.
type DarkMatterTotals struct {
	Records        uint64 `json:"records"`
	Blocks         uint64 `json:"blocks"`
	Bytes          uint64 `json:"bytes"`
	RequestedBytes uint64 `json:"requested_bytes"`
}

// DarkMatterRecord is the live blocks of one kind (unreported, once,
// twice) allocated at one stack under one tag and, once or twice
// reported, measured from the same stacks (ids into Traces; 0: none).
type DarkMatterRecord struct {
	Kind           string `json:"kind"` // unreported, once-reported or twice-reported
	Tag            string `json:"tag"`
	Library        string `json:"library"`
	Blocks         uint64 `json:"blocks"`
	Bytes          uint64 `json:"bytes"`
	RequestedBytes uint64 `json:"requested_bytes"`
	Allocated      uint32 `json:"allocated_at"`
	Reported       uint32 `json:"reported_at,omitempty"`
	ReportedAgain  uint32 `json:"reported_again_at,omitempty"`
}

var darkKinds = [3]string{"unreported", "once-reported", "twice-reported"}

// darkMatter sorts the live sampled blocks of p by their report marks;
// stackFrames names a stack id's frames. Nil when the process never
// collected its reporters.
func darkMatter(p *tagtable.Profile, names map[uint32]string, stackFrames func(id uint32) []Frame) *DarkMatter {
	if p.Collections == 0 {
		return nil
	}
	entries := sortDark(sumDark(p))
	dm := &DarkMatter{Collections: p.Collections, UnknownReports: p.UnknownReports, Records: []DarkMatterRecord{},
		Traces: map[uint32][]Frame{}}
	libs := map[uint32]string{}
	for _, e := range entries {
		dm.addRecord(e, names, libs, stackFrames)
	}
	return dm
}

// darkKey is what makes a dark-matter record: the kind (0 unreported, 1
// once, 2 twice reported), the allocating tag and stack, and the
// reporting stacks (0: none).
type darkKey struct {
	kind       int
	tag, stack uint32
	rep        [2]uint32
}

// darkSum adds up the live blocks of one darkKey: estimated blocks,
// usable bytes and requested bytes.
type darkSum struct{ blocks, bytes, req float64 }

// darkEntry is one record to be: its key and its sums.
type darkEntry struct {
	darkKey
	*darkSum
}

// sumDark adds up the live sampled blocks of p by darkKey, from the marks
// of p's last collection: each block weighs its sampling weight.
func sumDark(p *tagtable.Profile) map[darkKey]*darkSum {
	sums := map[darkKey]*darkSum{}
	p.EachLive(func(_ uint64, b *tagtable.LiveBlock) bool {
		n, stacks := p.Marks(b)
		k := darkKey{kind: int(min(n, 2)), tag: b.Tag, stack: b.Stack}
		switch k.kind {
		case 1:
			k.rep[0] = stacks[0]
		case 2:
			k.rep = stacks
		}
		a := sums[k]
		if a == nil {
			a = &darkSum{}
			sums[k] = a
		}
		a.blocks += b.Weight
		a.bytes += b.Weight * float64(b.Usable)
		a.req += b.Weight * float64(b.Requested)
		return true
	})
	return sums
}

// sortDark puts the sums in the report's order: twice-reported (bugs)
// first, as DMD, then unreported, then once-reported; in each, most bytes
// first, then by stack, tag and reporting stacks (every key differs, so
// the order is set).
func sortDark(sums map[darkKey]*darkSum) []darkEntry {
	entries := make([]darkEntry, 0, len(sums))
	for k, a := range sums {
		entries = append(entries, darkEntry{k, a})
	}
	rank := [3]int{1, 2, 0}
	sort.Slice(entries, func(i, j int) bool {
		a, b := entries[i], entries[j]
		if a.kind != b.kind {
			return rank[a.kind] < rank[b.kind]
		}
		if a.bytes != b.bytes {
			return a.bytes > b.bytes
		}
		if a.stack != b.stack {
			return a.stack < b.stack
		}
		if a.tag != b.tag {
			return a.tag < b.tag
		}
		return a.rep[0] < b.rep[0] || a.rep[0] == b.rep[0] && a.rep[1] < b.rep[1]
	})
	return entries
}

// addRecord appends e's record to dm and counts it in its kind's totals. The
// stacks it names get their frames in dm.Traces (stackFrames, once per
// stack, in the order records first name them); libs keeps the library
// of each allocating stack met so far, so that it is worked out once.
func (dm *DarkMatter) addRecord(e darkEntry, names map[uint32]string, libs map[uint32]string, stackFrames func(id uint32) []Frame) {
	trace := func(id uint32) uint32 {
		if _, ok := dm.Traces[id]; !ok {
			dm.Traces[id] = stackFrames(id)
		}
		return id
	}
	tag, ok := names[e.tag]
	if !ok {
		tag = DefaultTag
	}
	r := DarkMatterRecord{Kind: darkKinds[e.kind], Tag: tag, Blocks: round(e.blocks), Bytes: round(e.bytes),
		RequestedBytes: round(e.req), Allocated: trace(e.stack)}
	lib, ok := libs[e.stack]
	if !ok {
		lib = library(dm.Traces[e.stack])
		libs[e.stack] = lib
	}
	r.Library = lib
	if e.kind >= 1 {
		r.Reported = trace(e.rep[0])
	}
	if e.kind == 2 {
		r.ReportedAgain = trace(e.rep[1])
	}
	t := [3]*DarkMatterTotals{&dm.Unreported, &dm.OnceReported, &dm.TwiceReported}[e.kind]
	t.Records++
	t.Blocks += r.Blocks
	t.Bytes += r.Bytes
	t.RequestedBytes += r.RequestedBytes
	dm.Records = append(dm.Records, r)
}

// WriteDarkMatter writes, for every process whose reporters ran, DMD's
// dark-matter report: twice-reported records (bugs), then unreported
// ones (the dark matter, by allocating stack), then once-reported ones.
func (r *Report) WriteDarkMatter(w io.Writer) error {
	any := false
	for _, p := range r.Processes {
		if p.Stacks == nil || p.Stacks.DarkMatter == nil {
			continue
		}
		any = true
		if err := p.writeDarkMatter(w); err != nil {
			return err
		}
	}
	if !any {
		_, err := fmt.Fprintln(w, "# no dark-matter marks in this report: run with tagalloc run --stacks sampled (or full), "+
			"and have the program register memory reporters and call tagalloc_collect_reports (it runs at exit too)")
		return err
	}
	return nil
}

func (p Process) writeDarkMatter(w io.Writer) error {
	st, dm := p.Stacks, p.Stacks.DarkMatter
	tilde := st.tilde()
	b := bufio.NewWriterSize(w, 256<<10) // 20 MB texts: no copy of the whole
	heap := dm.Unreported.Bytes + dm.OnceReported.Bytes + dm.TwiceReported.Bytes
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n")
	fmt.Fprintf(b, "# tagalloc dark-matter report: process %d (%s)\n", p.PID, strings.Join(p.Command, " "))
	fmt.Fprintf(b, "# marks of the last of %s collections of the memory reporters; stacks: %s\n", comma(dm.Collections), st.Mode)
	for _, t := range []struct {
		name string
		tot  DarkMatterTotals
	}{{"Twice-reported", dm.TwiceReported}, {"Unreported", dm.Unreported}, {"Once-reported", dm.OnceReported}} {
		fmt.Fprintf(b, "# %-15s %s%s bytes in %s%s block(s), %s record(s) (%.2f%% of the sampled heap)\n", t.name+":",
			tilde, comma(t.tot.Bytes), tilde, comma(t.tot.Blocks), comma(t.tot.Records), pctf(t.tot.Bytes, heap))
	}
	if dm.UnknownReports > 0 {
		fmt.Fprintf(b, "# %s reports of blocks no longer live or never seen\n", comma(dm.UnknownReports))
	}
	b.WriteString("\n")
	texts := stackTexts{}
	counts := map[string]int{}
	for _, r := range dm.Records {
		counts[r.Kind]++
	}
	i, last := 0, ""
	var run uint64
	for _, r := range dm.Records {
		if r.Kind != last {
			i, last, run = 0, r.Kind, 0
			fmt.Fprintf(b, "#-----------------------------------------------------------------\n# %s records: %s\n\n", title(r.Kind), comma(uint64(counts[r.Kind])))
		}
		i++
		run += r.Bytes
		blk := "blocks"
		if r.Blocks == 1 {
			blk = "block"
		}
		slop := uint64(0)
		if r.Bytes > r.RequestedBytes {
			slop = r.Bytes - r.RequestedBytes
		}
		fmt.Fprintf(b, "%s {\n", title(r.Kind))
		fmt.Fprintf(b, "  %s%s %s in heap block record %s of %s (tag %s)\n", tilde, comma(r.Blocks), blk, comma(uint64(i)), comma(uint64(counts[r.Kind])), r.Tag)
		fmt.Fprintf(b, "  %s%s bytes (%s%s requested / %s%s slop)\n", tilde, comma(r.Bytes), tilde, comma(r.RequestedBytes), tilde, comma(slop))
		fmt.Fprintf(b, "  %.2f%% of the heap (%.2f%% cumulative)\n", pctf(r.Bytes, heap), pctf(run, heap))
		for _, s := range []struct {
			what string
			id   uint32
		}{{"Allocated at", r.Allocated}, {"Reported at", r.Reported}, {"Reported again at", r.ReportedAgain}} {
			if s.id == 0 && s.what != "Allocated at" {
				continue
			}
			fmt.Fprintf(b, "  %s {\n", s.what)
			b.WriteString(texts.text(dm.Traces[s.id], "    "))
			b.WriteString("  }\n")
		}
		b.WriteString("}\n\n")
	}
	return b.Flush()
}

// title capitalizes a kind for a heading: "unreported" -> "Unreported".
func title(kind string) string { return strings.ToUpper(kind[:1]) + kind[1:] }
