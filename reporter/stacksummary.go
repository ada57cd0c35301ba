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
	tilde := "~"
	how := fmt.Sprintf("sampled, one block per ~%s allocated; ~ marks estimates", humanize.IBytes(st.SampleRate))
	if st.Mode == "full" {
		tilde, how = "", "full, every block"
	}
	var live, alloc, liveBlocks uint64
	for _, r := range st.Records {
		live += r.LiveBytes
		alloc += r.AllocBytes
		liveBlocks += r.LiveBlocks
	}
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
	recs := append([]StackRecord(nil), st.Records...)
	for _, by := range []struct {
		what         string
		size, blocks func(StackRecord) uint64
		total        uint64
	}{
		{"Holding most (live)", func(r StackRecord) uint64 { return r.LiveBytes }, func(r StackRecord) uint64 { return r.LiveBlocks }, live},
		{"Allocating most (in all)", func(r StackRecord) uint64 { return r.AllocBytes }, func(r StackRecord) uint64 { return r.AllocBlocks }, alloc},
	} {
		sort.SliceStable(recs, func(i, j int) bool { return by.size(recs[i]) > by.size(recs[j]) })
		if len(recs) == 0 || by.size(recs[0]) == 0 {
			continue
		}
		fmt.Fprintf(w, "  %s:\n", by.what)
		for i, r := range recs {
			if i == summaryTop || by.size(r) == 0 {
				break
			}
			fmt.Fprintf(w, "    %s%s (%s) in %s%s blocks, tag %s, %s\n", tilde, humanize.IBytes(by.size(r)), pct(by.size(r), by.total),
				tilde, humanize.Comma(int64(by.blocks(r))), r.Tag, r.Library)
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
