// The stacks in a few lines, after a run's tree: who holds the heap and
// who allocates most, so that `tagalloc run --stacks sampled -- PROG`
// answers without -o (the JSON report and `tagalloc report --format dmd`
// have every record).

package reporter

import (
	"fmt"
	"io"
	"sort"

	"github.com/dustin/go-humanize"
)

// summaryTop is how many libraries and records the summary names.
const summaryTop = 3

// summaryFrames is how many frames of a record's stack it shows.
const summaryFrames = 4

// writeStacksSummary renders st: totals, the libraries holding most and
// allocating most, then the records holding most live bytes and those
// that allocated most.
func writeStacksSummary(w io.Writer, st *Stacks) {
	tilde := st.tilde()
	how := fmt.Sprintf("sampled, one block per ~%s allocated; ~ marks estimates", humanize.IBytes(st.SampleRate))
	if tilde == "" {
		how = "full, every block"
	}
	liveKind, allocKind := recordKindNamed("Live"), recordKindNamed("Cumulative")
	liveRecs, live, liveBlocks := liveKind.ranked(st.Records)
	allocRecs, alloc, _ := allocKind.ranked(st.Records)
	fmt.Fprintf(w, "\nWho allocated it (--stacks %s)\n", how)
	fmt.Fprintf(w, "  %s%s live in %s%s blocks, %s%s allocated in all; %s samples",
		tilde, humanize.IBytes(live), tilde, humanize.Comma(int64(liveBlocks)), tilde, humanize.IBytes(alloc), humanize.Comma(int64(st.Samples)))
	if st.Dropped > 0 {
		fmt.Fprintf(w, "; %s events LOST to a full ring", humanize.Comma(int64(st.Dropped)))
	}
	fmt.Fprintln(w)
	if len(st.Records) == 0 {
		return
	}
	libs := append([]LibraryTotals(nil), st.Libraries...)
	for _, by := range []struct {
		what string
		size func(LibraryTotals) uint64
	}{
		{"holding most", func(l LibraryTotals) uint64 { return l.LiveBytes }},
		{"allocating most", func(l LibraryTotals) uint64 { return l.AllocBytes }},
	} {
		sort.SliceStable(libs, func(i, j int) bool { return by.size(libs[i]) > by.size(libs[j]) })
		fmt.Fprintf(w, "  Libraries %s:", by.what)
		for i, l := range libs {
			if i == summaryTop || by.size(l) == 0 {
				if i == 0 {
					fmt.Fprint(w, " none")
				}
				break
			}
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(w, "%s %s %s%s", sep, l.Name, tilde, humanize.IBytes(by.size(l)))
		}
		fmt.Fprintln(w)
	}
	for _, by := range []struct {
		what  string
		kind  recordKind
		recs  []StackRecord
		total uint64
	}{
		{"Holding most (live)", liveKind, liveRecs, live},
		{"Allocating most (in all)", allocKind, allocRecs, alloc},
	} {
		if len(by.recs) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", by.what)
		for _, r := range by.recs[:min(len(by.recs), summaryTop)] {
			size := by.kind.size(r)
			fmt.Fprintf(w, "    %s%s (%s) in %s%s blocks, tag %s, %s\n", tilde, humanize.IBytes(size), pct(size, by.total),
				tilde, humanize.Comma(int64(by.kind.blocks(r))), r.Tag, r.Library)
			for k, f := range r.Frames {
				if k == summaryFrames {
					fmt.Fprintf(w, "      ... %d more frames\n", len(r.Frames)-k)
					break
				}
				fmt.Fprintf(w, "      %s\n", f.String())
			}
		}
	}
	fmt.Fprintln(w, "  (every record: -o FILE.json, then tagalloc report FILE.json --format dmd)")
}

// recordKindNamed is the record kind called name: by name, not by its
// place among the DMD text's sections, which grow.
func recordKindNamed(name string) recordKind {
	for _, k := range recordKinds {
		if k.name == name {
			return k
		}
	}
	panic("reporter: no record kind " + name)
}
