// DMD-style reports of the stacks section: live, peak, tag-peak and cumulative records,
// as Firefox's DMD prints them (records sorted by size, requested and slop
// bytes, each record's share of the heap and the running share), then
// per-library totals.

package reporter

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// WriteDMD writes, for every process with stacks, its live and cumulative
// DMD-style reports.
func (r *Report) WriteDMD(w io.Writer) error {
	any := false
	for _, p := range r.Processes {
		if p.Stacks == nil {
			continue
		}
		any = true
		if err := p.writeDMD(w); err != nil {
			return err
		}
	}
	if !any {
		_, err := fmt.Fprintln(w, "# no stacks in this report: run with tagalloc run --stacks sampled (or full)")
		return err
	}
	return nil
}

func comma(n uint64) string { return humanize.Comma(int64(n)) }

// tilde marks the figures of st that are estimates: all of them, unless
// every block was recorded.
func (st *Stacks) tilde() string {
	if st.Mode == "full" {
		return ""
	}
	return "~"
}

// recordKind ranks stack records: by the bytes they hold live, by what
// they held at the heap's peak, by what they held at their own tag's
// peak, or by all they ever allocated (DMD's live and cumulative records,
// and tagalloc's peaks).
type recordKind struct {
	name         string
	size, blocks func(StackRecord) uint64
	of           string // what a record's share is of
	peak         bool   // the records at the peak: a report has them if it has a peak
	byTag        bool   // the records at their tags' peaks: tag by tag, if the report has the tags' peaks
}

var recordKinds = [...]recordKind{
	{"Live", func(r StackRecord) uint64 { return r.LiveBytes }, func(r StackRecord) uint64 { return r.LiveBlocks }, "the heap", false, false},
	{"Peak", func(r StackRecord) uint64 { return r.PeakBytes }, func(r StackRecord) uint64 { return r.PeakBlocks }, "the peak", true, false},
	{"Tag peak", func(r StackRecord) uint64 { return r.TagPeakBytes }, func(r StackRecord) uint64 { return r.TagPeakBlocks }, "the tag's peak", false, true},
	{"Cumulative", func(r StackRecord) uint64 { return r.AllocBytes }, func(r StackRecord) uint64 { return r.AllocBlocks }, "the heap", false, false},
}

// ranked returns the records of recs with any of k's bytes, largest
// first (a copy), and their total bytes and blocks.
func (k recordKind) ranked(recs []StackRecord) (out []StackRecord, bytes, blocks uint64) {
	for _, r := range recs {
		if k.size(r) > 0 {
			out = append(out, r)
			bytes += k.size(r)
			blocks += k.blocks(r)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return k.size(out[i]) > k.size(out[j]) })
	return out, bytes, blocks
}

func (p Process) writeDMD(w io.Writer) error {
	st := p.Stacks
	tilde := st.tilde()
	b := bufio.NewWriterSize(w, 256<<10) // 20 MB texts: no copy of the whole
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n")
	fmt.Fprintf(b, "# tagalloc DMD-style report: process %d (%s)\n", p.PID, strings.Join(p.Command, " "))
	fmt.Fprintf(b, "# stacks: %s", st.Mode)
	if st.Mode != "full" {
		fmt.Fprintf(b, ", one sample per ~%s allocated (figures marked ~ are estimates)", humanize.IBytes(st.SampleRate))
	}
	fmt.Fprintf(b, "; %s samples", comma(st.Samples))
	if st.Dropped > 0 {
		fmt.Fprintf(b, "; %s events LOST to a full ring", comma(st.Dropped))
	}
	b.WriteString("\n\n")
	p.writeDMDTags(b)
	texts := stackTexts{}
	for _, k := range recordKinds {
		switch {
		case k.peak && st.Peak == nil, k.byTag && st.TagPeaks == nil:
			continue // a report made before peaks were kept
		case k.byTag:
			writeTagPeaks(b, st, k, texts)
			continue
		}
		recs, total, _ := k.ranked(st.Records)
		fmt.Fprintf(b, "#-----------------------------------------------------------------\n# %s records: %s\n", k.name, comma(uint64(len(recs))))
		if k.peak {
			fmt.Fprintf(b, "# what was live at %s: %s%s bytes, at %s\n", st.peakName("the heap's peak", "the peak of the sampled blocks' estimate"), tilde, comma(st.Peak.LiveBytes), msString(st.Peak.Ms))
		}
		b.WriteString("\n")
		writeRecords(b, st, k, recs, total, texts)
	}
	if len(st.Growth) > 0 {
		fmt.Fprintf(b, "#-----------------------------------------------------------------\n# Growth of realloc chains, by call site\n\n")
		for _, f := range st.Growth {
			mark := "  "
			if f.Flagged {
				mark = "! "
			}
			fmt.Fprintf(b, "%s%-12s %s: %s growth reallocs of %.3fx, ~%s copied\n", mark, f.Verdict, f.Name, comma(f.GrowSteps), f.MeanRatio, humanize.IBytes(f.BytesCopied))
			if f.Fix != "" {
				fmt.Fprintf(b, "    fix: %s\n", f.Fix)
			}
		}
		b.WriteString("\n")
	}
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n# Libraries (the first frame outside libc and the allocator)\n\n")
	for _, l := range st.Libraries {
		fmt.Fprintf(b, "  %s%10s live in %s%s blocks, %s%10s allocated in all  %s\n", tilde, humanize.IBytes(l.LiveBytes),
			tilde, comma(l.LiveBlocks), tilde, humanize.IBytes(l.AllocBytes), l.Name)
	}
	b.WriteString("\n")
	if st.History != nil {
		writeHistory(b, st.History, tilde)
	}
	return b.Flush()
}

// peakName names the moment of a peak of st: exact in mode full, else
// sampled (the peak of an estimate).
func (st *Stacks) peakName(exact, sampled string) string {
	if st.Mode == "full" {
		return exact
	}
	return sampled
}

// writeRecords writes recs, ranked by k (totalling total bytes), as DMD
// records of kind k.
func writeRecords(b *bufio.Writer, st *Stacks, k recordKind, recs []StackRecord, total uint64, texts stackTexts) {
	tilde := st.tilde()
	n := len(recs)
	var run uint64
	for i, r := range recs {
		run += k.size(r)
		blk := "blocks"
		if k.blocks(r) == 1 {
			blk = "block"
		}
		fmt.Fprintf(b, "%s {\n", k.name)
		fmt.Fprintf(b, "  %s%s %s in heap block record %s of %s (tag %s)\n", tilde, comma(k.blocks(r)), blk, comma(uint64(i+1)), comma(uint64(n)), termtext.Clean(r.Tag))
		if k.name == "Live" {
			slop := uint64(0)
			if r.LiveBytes > r.LiveRequestedBytes {
				slop = r.LiveBytes - r.LiveRequestedBytes
			}
			fmt.Fprintf(b, "  %s%s bytes (%s%s requested / %s%s slop)\n", tilde, comma(r.LiveBytes), tilde, comma(r.LiveRequestedBytes), tilde, comma(slop))
		} else {
			fmt.Fprintf(b, "  %s%s bytes\n", tilde, comma(k.size(r)))
			if k.name == "Cumulative" && r.Reallocs > 0 {
				fmt.Fprintf(b, "  %s reallocs of sampled blocks, %s%s bytes copied\n", comma(r.Reallocs), tilde, comma(r.BytesCopied))
			}
		}
		fmt.Fprintf(b, "  %.2f%% of %s (%.2f%% cumulative)\n", pctf(k.size(r), total), k.of, pctf(run, total))
		b.WriteString("  Allocated at {\n")
		b.WriteString(texts.text(r.Frames, "    "))
		b.WriteString("  }\n}\n\n")
	}
}

// writeTagPeaks writes the records at their own tags' peaks, tag by tag
// (largest peak first): each tag's peak and when, then its records ranked
// by what they held then, numbered within the tag. A record's share is of
// its tag's peak.
func writeTagPeaks(b *bufio.Writer, st *Stacks, k recordKind, texts stackTexts) {
	byTag := map[string][]StackRecord{}
	for _, tp := range st.TagPeaks {
		byTag[tp.Tag] = nil
	}
	n := 0
	for _, r := range st.Records {
		if recs, ok := byTag[r.Tag]; ok && k.size(r) > 0 {
			byTag[r.Tag] = append(recs, r)
			n++
		}
	}
	tilde := st.tilde()
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n# %s records: %s\n", k.name, comma(uint64(n)))
	fmt.Fprintf(b, "# what each tag held at %s, tag by tag\n\n", st.peakName("its own peak", "the peak of its sampled blocks' estimate"))
	for _, tp := range st.TagPeaks {
		mine, ok := byTag[tp.Tag]
		if !ok {
			continue // a name listed twice (a corrupt report): its records once
		}
		delete(byTag, tp.Tag)
		recs, total, blocks := k.ranked(mine)
		blk := "blocks"
		if blocks == 1 {
			blk = "block"
		}
		fmt.Fprintf(b, "# tag %s: %s%s bytes at its peak, at %s; %s in %s%s %s\n\n", termtext.Clean(tp.Tag), tilde, comma(tp.LiveBytes), msString(tp.Ms),
			plural(len(recs), "record", "records"), tilde, comma(blocks), blk)
		writeRecords(b, st, k, recs, total, texts)
	}
}

// writeHistory prints what the event history keeps and its timeline: a
// row per time bucket, bytes allocated/freed by all, then by the records
// that allocated most in the span.
func writeHistory(b *bufio.Writer, h *History, tilde string) {
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n# History (limit %s)\n\n", humanize.IBytes(h.LimitBytes))
	fmt.Fprintf(b, "  %s events kept in %s (%s of memory), %s older events recycled (%s)\n",
		comma(h.Events), humanize.IBytes(h.RetainedBytes), humanize.IBytes(h.UsedBytes), comma(h.EventsRecycled), humanize.IBytes(h.BytesRecycled))
	if h.Events == 0 || len(h.Timeline) == 0 {
		b.WriteString("\n")
		return
	}
	fmt.Fprintf(b, "  events %s to %s, %s to %s into the run\n\n", comma(h.FirstSeq), comma(h.NextSeq-1),
		msString(h.StartMs), msString(h.EndMs))
	fmt.Fprintf(b, "  Timeline: %sbytes allocated / freed per %s\n", tilde, msString(h.BucketMs))
	for i, s := range h.Timeline {
		fmt.Fprintf(b, "    [%d] %s\n", i, termtext.Clean(s.Name)) // a record's tag and frame: the program's
	}
	fmt.Fprintf(b, "  %10s", "from")
	for i := range h.Timeline {
		fmt.Fprintf(b, " %21s", fmt.Sprintf("[%d]", i))
	}
	b.WriteString("\n")
	for k := range h.Timeline[0].AllocBytes {
		fmt.Fprintf(b, "  %10s", msString(h.StartMs+uint64(k)*h.BucketMs))
		for _, s := range h.Timeline {
			fmt.Fprintf(b, " %10s/%-10s", humanize.IBytes(s.AllocBytes[k]), humanize.IBytes(s.FreeBytes[k]))
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
}

// msString prints milliseconds as seconds (or ms below one).
func msString(ms uint64) string {
	if ms < 1000 {
		return fmt.Sprintf("%d ms", ms)
	}
	return fmt.Sprintf("%.2f s", float64(ms)/1000)
}

func pctf(a, total uint64) float64 {
	if total == 0 {
		return 0
	}
	return 100 * float64(a) / float64(total)
}

// String is a frame as DMD prints one: function (file:line) [module +offset].
func (f Frame) String() string { return string(f.appendTo(nil)) }

// appendTo appends String's text to b (without fmt: reports print
// hundreds of thousands of frames).
func (f Frame) appendTo(b []byte) []byte {
	if f.Function != "" {
		b = append(b, f.Function...)
	} else {
		b = append(b, "???"...)
	}
	if f.File != "" {
		b = append(append(append(b, " ("...), f.File...), ':')
		b = append(strconv.AppendInt(b, int64(f.Line), 10), ')')
	}
	if f.Module != "" {
		b = append(append(append(b, " ["...), f.Module...), " +0x"...)
		b = append(strconv.AppendUint(b, f.Offset, 16), ']')
	} else {
		b = append(strconv.AppendUint(append(b, " [0x"...), f.PC, 16), ']')
	}
	return b
}

// stackTexts renders frame lists as DMD's numbered lines, each list once
// (records of one stack share their frames' backing array).
type stackTexts map[*Frame]string

func (c stackTexts) text(fr []Frame, indent string) string {
	if len(fr) == 0 {
		return ""
	}
	if t, ok := c[&fr[0]]; ok {
		return t
	}
	var b []byte
	for k, f := range fr {
		b = append(b, indent...)
		b = append(b, '#')
		if k < 9 {
			b = append(b, '0')
		}
		b = strconv.AppendInt(b, int64(k+1), 10)
		b = f.appendTo(append(b, ": "...))
		b = append(b, '\n')
	}
	c[&fr[0]] = string(b)
	return c[&fr[0]]
}

// writeDMDTags writes each tag's exact live bytes and its requested bytes
// and slop, as DMD's records print them: exact (the books kept them), from
// every block's record (--stacks full), estimated from the live sampled
// blocks (~, with their number), or unknown and why.
func (p Process) writeDMDTags(b *bufio.Writer) {
	if len(p.Tags) == 0 {
		return
	}
	fmt.Fprintf(b, "#-----------------------------------------------------------------\n# Tags: live bytes (exact), requested / slop (exact, or ~ estimated from the live sampled blocks)\n\n")
	for i := range p.Tags {
		t := &p.Tags[i]
		name := termtext.Clean(t.Name)
		req, kind, n := p.requested(t)
		switch kind {
		case reqUnknown:
			why := "run with TAGALLOC_REQUESTED=1 for exact"
			if t.LiveRequestedSamples != nil {
				why = "none of its live blocks was sampled"
			}
			fmt.Fprintf(b, "  %s bytes (requested unknown: %s)  %s\n", comma(t.LiveBytes), why, name)
			continue
		case reqExact:
			fmt.Fprintf(b, "  %s bytes (%s requested / %s slop)  %s\n", comma(t.LiveBytes), comma(req), comma(t.LiveBytes-min(req, t.LiveBytes)), name)
			continue
		}
		tilde, basis := "~", "estimated from "+plural(int(min(n, math.MaxInt64)), "sample", "samples")
		if kind == reqRecorded {
			tilde, basis = "", "from "+plural(int(min(n, math.MaxInt64)), "recorded block", "recorded blocks")
		}
		fmt.Fprintf(b, "  %s bytes (%s%s requested / %s%s slop; %s)  %s\n", comma(t.LiveBytes), tilde, comma(req), tilde, comma(t.LiveBytes-min(req, t.LiveBytes)), basis, name)
	}
	b.WriteString("\n")
}
