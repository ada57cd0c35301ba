// Who allocated it: the "stacks" section of a process's report
// (docs/ARCHITECTURE.md, D7), from the sampled profile of its events: one record per (stack,
// tag), innermost frame first, and totals per shared library.

package reporter

import (
	"fmt"
	"math"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"

	"github.com/tagalloc/tagalloc/growth"
	"github.com/tagalloc/tagalloc/symbolizer"
	"github.com/tagalloc/tagalloc/tagtable"
)

// Stacks is what the sampled stacks say. Bytes and blocks are estimates
// (each sample weighed by the inverse of its probability; exact with
// mode "full"), unlike the tags' figures, which are always exact.
type Stacks struct {
	Mode         string `json:"mode"`        // sampled or full
	SampleRate   uint64 `json:"sample_rate"` // mean bytes between samples (1: every block)
	Samples      uint64 `json:"samples"`
	Dropped      uint64 `json:"dropped_events,omitempty"` // lost to a full ring
	DroppedBytes uint64 `json:"dropped_bytes,omitempty"`
	// UnknownFrees are frees of blocks the profile never saw (sampled in
	// a parent before fork, or lost).
	UnknownFrees uint64          `json:"unknown_frees,omitempty"`
	Records      []StackRecord   `json:"records"`
	Libraries    []LibraryTotals `json:"libraries"`
	// Growth judges the realloc chains per call site (package growth).
	Growth []growth.Finding `json:"growth"`
	// History is the bounded event history (--history-limit) and the
	// timeline built from it; absent when none was kept.
	History *History `json:"history,omitempty"`
	// DarkMatter sorts the live sampled blocks by what memory reporters
	// said of them (tagalloc_report_block); nil if they never ran.
	DarkMatter *DarkMatter `json:"dark_matter,omitempty"`
	// Peak is the moment the records' live bytes together were highest,
	// and each record's PeakBytes is its share of it: who held the memory
	// at the heap's peak. Absent from reports made before it was kept.
	Peak *StacksPeak `json:"peak,omitempty"`
	// TagPeaks are each tag's own peak, the moment its records' live
	// bytes together were highest, largest first; each record's
	// TagPeakBytes is its share of its tag's. Absent from reports made
	// before they were kept.
	TagPeaks []StacksTagPeak `json:"tag_peaks,omitempty"`
	// Mappings are the executable mappings the frames' addresses fall in
	// (pprof's mappings: tagalloc report --format pprof); absent from
	// reports made before they were kept.
	Mappings []Mapping `json:"mappings,omitempty"`
}

// StacksPeak is the highest the sampled stacks' live bytes reached
// together: an estimate of the heap's peak when sampled (the moment the
// estimate was highest), exact in mode full unless events were dropped.
// Ms is when, in milliseconds since the run began (the drainer's pass
// that saw it: 2.5 to 100 ms resolution).
type StacksPeak struct {
	LiveBytes uint64 `json:"live_bytes"`
	Ms        uint64 `json:"ms"`
}

// StacksTagPeak is the highest one tag's sampled stacks' live bytes
// reached together, as StacksPeak is for all tags: an estimate when
// sampled, exact in mode full unless events were dropped.
type StacksTagPeak struct {
	Tag       string `json:"tag"`
	LiveBytes uint64 `json:"live_bytes"`
	Ms        uint64 `json:"ms"`
}

// Mapping is one mapped object file: addresses [start, end) hold the
// file's bytes from offset on.
type Mapping struct {
	Path    string `json:"path"`
	Start   uint64 `json:"start"`
	End     uint64 `json:"end"`
	Offset  uint64 `json:"offset"`
	BuildID string `json:"build_id,omitempty"` // hex
}

// History describes the profile's event history, a byte-limited chain of
// chunks whose oldest are recycled (docs/ARCHITECTURE.md, D8): what it keeps, what it
// forgot, the span it covers, and a timeline of estimated bytes allocated
// and freed per time bucket. Times are milliseconds since the run began
// (the drainer's clock at the pass that first found the event: 2.5 to
// 100 ms resolution).
type History struct {
	LimitBytes     uint64 `json:"limit_bytes"`
	UsedBytes      uint64 `json:"used_bytes"`     // memory it holds: chunks written (<= limit_bytes) and one entry's copy
	RetainedBytes  uint64 `json:"retained_bytes"` // encoded events kept
	Events         uint64 `json:"events"`         // kept
	EventsRecycled uint64 `json:"events_recycled"`
	BytesRecycled  uint64 `json:"bytes_recycled"`
	FirstSeq       uint64 `json:"first_seq"` // sequence numbers kept: [first_seq, next_seq)
	NextSeq        uint64 `json:"next_seq"`
	StartMs        uint64 `json:"start_ms"` // the oldest event kept
	EndMs          uint64 `json:"end_ms"`   // the newest
	BucketMs       uint64 `json:"bucket_ms"`
	// Timeline: the whole ("all", record -1), then the records that
	// allocated most within the span.
	Timeline []TimelineSeries `json:"timeline"`
}

// TimelineSeries is estimated bytes allocated (grown by realloc
// included) and freed (shrunk included) per bucket of BucketMs from
// StartMs.
type TimelineSeries struct {
	Name       string   `json:"name"`
	Record     int      `json:"record"` // index in records; -1 for all
	AllocBytes []uint64 `json:"alloc_bytes"`
	FreeBytes  []uint64 `json:"free_bytes"`
}

// Timeline shape: buckets over the history's span, and how many records
// get a series of their own.
const (
	timelineBuckets = 16
	timelineTop     = 5
)

// StackRecord is what blocks allocated from one stack, under one tag,
// hold and have held.
type StackRecord struct {
	Tag                string  `json:"tag"`
	Library            string  `json:"library"` // the first frame outside libc and the allocator (symbolizer.Library)
	Frames             []Frame `json:"frames"`  // innermost first
	Samples            uint64  `json:"samples"`
	LiveBytes          uint64  `json:"live_bytes"`
	LiveRequestedBytes uint64  `json:"live_requested_bytes"`
	LiveBlocks         uint64  `json:"live_blocks"`
	AllocBytes         uint64  `json:"alloc_bytes"`
	AllocBlocks        uint64  `json:"alloc_blocks"`
	// PeakBytes and PeakBlocks are what the record held at the peak
	// (Stacks.Peak).
	PeakBytes  uint64 `json:"peak_bytes,omitempty"`
	PeakBlocks uint64 `json:"peak_blocks,omitempty"`
	// TagPeakBytes and TagPeakBlocks are what the record held at its own
	// tag's peak (Stacks.TagPeaks).
	TagPeakBytes  uint64 `json:"tag_peak_bytes,omitempty"`
	TagPeakBlocks uint64 `json:"tag_peak_blocks,omitempty"`
	Reallocs      uint64 `json:"reallocs,omitempty"` // of the sampled blocks
	BytesCopied   uint64 `json:"bytes_copied,omitempty"`
	// GrowSteps are the reallocs that asked for more; GrowthRatio their
	// geometric mean new/old (requested sizes): ~1 is just-enough growth.
	GrowSteps   uint64  `json:"grow_steps,omitempty"`
	GrowthRatio float64 `json:"growth_ratio,omitempty"`
}

// Frame is one return address: its module and offset in it, and what it
// symbolizes to (empty when nothing is known). Where calls were inlined,
// one address gives several frames with the same PC, innermost first:
// each inlined call with Inlined set, then the function the code belongs
// to.
type Frame struct {
	PC       uint64 `json:"pc"`
	Module   string `json:"module,omitempty"`
	Offset   uint64 `json:"offset"` // in the module's file
	Function string `json:"function,omitempty"`
	File     string `json:"file,omitempty"` // the source file's path as the debug information names it
	Line     int    `json:"line,omitempty"`
	Inlined  bool   `json:"inlined,omitempty"` // inlined into the next frame
}

// LibraryTotals roll the records up by library.
type LibraryTotals struct {
	Name        string `json:"name"`
	LiveBytes   uint64 `json:"live_bytes"`
	LiveBlocks  uint64 `json:"live_blocks"`
	AllocBytes  uint64 `json:"alloc_bytes"`
	AllocBlocks uint64 `json:"alloc_blocks"`
}

// Symbolize names the code at a return address pc of module m: its
// frames, innermost first (several where calls were inlined), as package
// symbolizer returns them. Frames of OriginNone name nothing.
type Symbolize func(m *tagtable.Module, pc uint64) []symbolizer.Frame

// SymbolizeWith symbolizes with s (ELF symbols and DWARF, by build-id).
func SymbolizeWith(s *symbolizer.Symbolizer) Symbolize {
	return func(m *tagtable.Module, pc uint64) []symbolizer.Frame {
		sm := symbolizer.Module(*m)
		fr, _ := s.Frames(&sm, pc) // an unusable file gives the module+offset frame
		return fr
	}
}

// frames turns one return address into the report's frames.
func frames(p *tagtable.Profile, pc uint64, sym Symbolize) []Frame {
	m, ok := p.ModuleOf(pc)
	if !ok {
		return []Frame{{PC: pc}}
	}
	f := Frame{PC: pc, Module: filepath.Base(m.Path), Offset: pc - m.Start + m.Offset}
	if sym == nil {
		return []Frame{f}
	}
	var out []Frame
	for _, sf := range sym(m, pc) {
		g := f
		if sf.Origin != symbolizer.OriginNone {
			g.Function = sf.Function
		}
		if sf.File != "" {
			g.File, g.Line = sf.File, sf.Line
		}
		g.Inlined = sf.Inlined
		out = append(out, g)
	}
	if len(out) == 0 {
		out = append(out, f)
	}
	return out
}

// symbolizeAll names every return address of p's stacks once, on all
// CPUs (reading object files' DWARF is most of a report's time, and the
// process is gone by then): the frames of each address.
func symbolizeAll(p *tagtable.Profile, sym Symbolize) map[uint64][]Frame {
	seen := map[uint64]bool{}
	var pcs []uint64
	for _, st := range p.Stacks {
		for _, pc := range st {
			if !seen[pc] {
				seen[pc] = true
				pcs = append(pcs, pc)
			}
		}
	}
	out := make([][]Frame, len(pcs))
	parallelFor(len(pcs), 64, func(i int) { out[i] = frames(p, pcs[i], sym) })
	m := make(map[uint64][]Frame, len(pcs))
	for i, pc := range pcs {
		m[pc] = out[i]
	}
	return m
}

// parallelFor calls f(i) for every i in [0, n), on all CPUs (each worker
// taking at least minEach, interleaved), and returns when all are done.
func parallelFor(n, minEach int, f func(i int)) {
	var wg sync.WaitGroup
	workers := min(runtime.GOMAXPROCS(0), n/minEach+1)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				f(i)
			}
		})
	}
	wg.Wait()
}

// framesByStack lays out the frames of every stack the sites name, by
// stack id, in one array filled on all CPUs: a --stacks full run of
// python has 17k stacks of 80 frames on average once inlined calls are
// counted, 110 MB of frames, and a slice of its own for each cost a third
// more in allocation than the copying.
func framesByStack(p *tagtable.Profile, sites []*tagtable.Site, byPC map[uint64][]Frame) map[uint32][]Frame {
	seen := map[uint32]bool{}
	var ids []uint32
	for _, s := range sites {
		if !seen[s.Stack] {
			seen[s.Stack] = true
			ids = append(ids, s.Stack)
		}
	}
	off := make([]int, len(ids)+1) // stack i's frames are all[off[i]:off[i+1]]
	for i, id := range ids {
		off[i+1] = off[i] + frameCount(p.Stacks[id], byPC)
	}
	all := make([]Frame, off[len(ids)])
	parallelFor(len(ids), 256, func(i int) {
		appendStack(all[off[i]:off[i]], p.Stacks[ids[i]], byPC) // within its room: counted above
	})
	m := make(map[uint32][]Frame, len(ids))
	for i, id := range ids {
		m[id] = all[off[i]:off[i+1]:off[i+1]] // full: an append copies, never overwrites the next
	}
	return m
}

// stackOf is the frames of a stack's return addresses, each named by
// symbolizeAll.
func stackOf(pcs []uint64, byPC map[uint64][]Frame) []Frame {
	return appendStack(make([]Frame, 0, frameCount(pcs, byPC)), pcs, byPC)
}

// frameCount is how many frames a stack's return addresses name (more
// than one for an address with calls inlined there).
func frameCount(pcs []uint64, byPC map[uint64][]Frame) int {
	n := 0
	for _, pc := range pcs {
		n += len(byPC[pc])
	}
	return n
}

// appendStack appends the frames of a stack's return addresses to dst.
func appendStack(dst []Frame, pcs []uint64, byPC map[uint64][]Frame) []Frame {
	for _, pc := range pcs {
		dst = append(dst, byPC[pc]...)
	}
	return dst
}

// library names the library a record is charged to: the first module of
// its frames outside the C and C++ runtimes, the loader and the allocator
// (symbolizer.Library), or "unknown" when no frame has a module.
func library(fr []Frame) string {
	mods := make([]string, len(fr))
	for i, f := range fr {
		mods[i] = f.Module
	}
	if lib := symbolizer.Library(mods); lib != "" {
		return lib
	}
	return "unknown"
}

func round(f float64) uint64 {
	if f <= 0 {
		return 0
	}
	return uint64(math.Round(f))
}

// FromProfile builds the stacks section of a process from its profile;
// tag ids are named by names (a snapshot's TagNames), sym (may be nil)
// symbolizes frames.
func FromProfile(p *tagtable.Profile, names map[uint32]string, sym Symbolize) *Stacks {
	st := &Stacks{Mode: p.Mode, SampleRate: p.SampleRate, Dropped: p.Dropped, DroppedBytes: p.DroppedBytes,
		UnknownFrees: p.UnknownFrees, Records: []StackRecord{}, Libraries: []LibraryTotals{},
		Peak: &StacksPeak{LiveBytes: round(p.PeakLiveBytes), Ms: p.PeakMs}}
	// The timeline reads only the history: it is built meanwhile.
	var tl tagtable.Timeline
	tlDone := make(chan struct{})
	go func() {
		defer close(tlDone)
		if p.HistoryStats().LimitBytes != 0 {
			tl = p.Timeline(timelineBuckets, timelineTop)
		}
	}()
	byPC := symbolizeAll(p, sym) // stacks share most of their return addresses
	sites := p.SortedSites()
	byStack := framesByStack(p, sites, byPC)
	stackFrames := func(id uint32) []Frame {
		fr, ok := byStack[id]
		if !ok { // a stack no site names (a memory reporter's)
			fr = stackOf(p.Stacks[id], byPC)
			byStack[id] = fr
		}
		return fr
	}
	libs := map[string]*LibraryTotals{}
	index := map[tagtable.SiteKey]int{} // site -> record
	for _, s := range sites {
		if s.Samples == 0 { // a forked child's copy of a site whose blocks its parent freed before the fork
			continue
		}
		index[s.SiteKey] = len(st.Records)
		st.Samples += s.Samples
		fr := stackFrames(s.Stack)
		lib := library(fr)
		tag, ok := names[s.Tag]
		if !ok {
			tag = "untagged"
		}
		r := StackRecord{Tag: tag, Library: lib, Frames: fr, Samples: s.Samples,
			LiveBytes: round(s.EstLiveBytes), LiveRequestedBytes: round(s.EstLiveRequested), LiveBlocks: round(s.EstLiveBlocks),
			AllocBytes: round(s.EstAllocBytes), AllocBlocks: round(s.EstAllocBlocks),
			PeakBytes: round(s.PeakLiveBytes), PeakBlocks: round(s.PeakLiveBlocks),
			TagPeakBytes: round(s.TagPeakLiveBytes), TagPeakBlocks: round(s.TagPeakLiveBlocks),
			Reallocs: s.Reallocs, BytesCopied: round(s.EstBytesCopied), GrowSteps: s.GrowSteps}
		if s.GrowSteps > 0 {
			r.GrowthRatio = math.Exp(s.SumLogGrowth / float64(s.GrowSteps))
		}
		st.Records = append(st.Records, r)
		l := libs[lib]
		if l == nil {
			l = &LibraryTotals{Name: lib}
			libs[lib] = l
		}
		l.LiveBytes += r.LiveBytes
		l.LiveBlocks += r.LiveBlocks
		l.AllocBytes += r.AllocBytes
		l.AllocBlocks += r.AllocBlocks
	}
	for _, l := range libs {
		st.Libraries = append(st.Libraries, *l)
	}
	st.TagPeaks = tagPeaks(p, names)
	st.Growth = diagnoseGrowth(st.Records)
	<-tlDone
	st.History = history(p, tl, index, st.Records)
	st.DarkMatter = darkMatter(p, names, stackFrames)
	st.Mappings = mappingsOf(p, byPC)
	sort.Slice(st.Libraries, func(i, j int) bool {
		a, b := st.Libraries[i], st.Libraries[j]
		if a.LiveBytes != b.LiveBytes {
			return a.LiveBytes > b.LiveBytes
		}
		if a.AllocBytes != b.AllocBytes {
			return a.AllocBytes > b.AllocBytes
		}
		return a.Name < b.Name
	})
	return st
}

// tagPeaks lists the tags' own peaks of p by name (names by id, as
// FromProfile names the records' tags), largest first. Where ids share a
// name (tags no name was read for are all "untagged"), the name's is the
// highest of theirs.
func tagPeaks(p *tagtable.Profile, names map[uint32]string) []StacksTagPeak {
	byName := map[string]StacksTagPeak{}
	for id, tp := range p.TagPeaks() {
		tag, ok := names[id]
		if !ok {
			tag = "untagged"
		}
		v := StacksTagPeak{Tag: tag, LiveBytes: round(tp.PeakLiveBytes), Ms: tp.PeakMs}
		if old, ok := byName[tag]; !ok || v.LiveBytes > old.LiveBytes {
			byName[tag] = v
		}
	}
	out := make([]StacksTagPeak, 0, len(byName))
	for _, v := range byName {
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].LiveBytes != out[j].LiveBytes {
			return out[i].LiveBytes > out[j].LiveBytes
		}
		return out[i].Tag < out[j].Tag
	})
	return out
}

// mappingsOf lists the modules of p that hold an address of byPC, in
// address order.
func mappingsOf(p *tagtable.Profile, byPC map[uint64][]Frame) []Mapping {
	used := map[int]bool{}
	for pc := range byPC {
		for i, m := range p.Modules {
			if pc >= m.Start && pc < m.End {
				used[i] = true
				break
			}
		}
	}
	var out []Mapping
	for i, m := range p.Modules {
		if used[i] {
			out = append(out, Mapping{Path: m.Path, Start: m.Start, End: m.End, Offset: m.Offset, BuildID: m.BuildID})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start < out[j].Start })
	return out
}

// history reports the profile's event history and its timeline.
func history(p *tagtable.Profile, tl tagtable.Timeline, index map[tagtable.SiteKey]int, recs []StackRecord) *History {
	hs := p.HistoryStats()
	if hs.LimitBytes == 0 {
		return nil
	}
	h := &History{LimitBytes: hs.LimitBytes, UsedBytes: hs.Bytes, RetainedBytes: hs.RetainedBytes, Events: hs.Events,
		EventsRecycled: hs.Recycled, BytesRecycled: hs.RecycledBytes, FirstSeq: hs.FirstSeq, NextSeq: hs.NextSeq,
		StartMs: hs.FirstMs, EndMs: hs.LastMs, BucketMs: tl.BucketMs, Timeline: []TimelineSeries{}}
	if hs.Events == 0 {
		return h
	}
	h.Timeline = append(h.Timeline, TimelineSeries{Name: "all", Record: -1, AllocBytes: tl.Total.AllocBytes, FreeBytes: tl.Total.FreeBytes})
	for _, s := range tl.Sites {
		i, ok := index[s.Site]
		if !ok {
			continue
		}
		h.Timeline = append(h.Timeline, TimelineSeries{Name: seriesName(recs[i], i), Record: i,
			AllocBytes: s.AllocBytes, FreeBytes: s.FreeBytes})
	}
	return h
}

// seriesName names a record in the timeline: its index, tag and up to
// three frames from the first in its library (a library's allocation
// wrapper alone would name many records alike).
func seriesName(r StackRecord, i int) string {
	var names []string
	for _, f := range r.Frames {
		if len(names) == 0 && (f.Module == "" || f.Module != r.Library) {
			continue
		}
		name := f.Function
		if name == "" {
			name = fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
		}
		if names = append(names, name); len(names) == 3 {
			break
		}
	}
	if len(names) == 0 {
		names = append(names, "unknown")
	}
	return fmt.Sprintf("record %d, %s: %s", i, r.Tag, strings.Join(names, " < "))
}

// siteName names a record by its first frame in the library it is
// charged to: the function, else module+offset.
func siteName(r StackRecord) string {
	for _, f := range r.Frames {
		if f.Module != "" && f.Module == r.Library {
			if f.Function != "" {
				return f.Function
			}
			return fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
		}
	}
	return "unknown"
}

// diagnoseGrowth judges each record's realloc chains; a record's site is
// its first frame in the library it is charged to (the code that called
// realloc, innermost inlined call first), named by function if known.
func diagnoseGrowth(recs []StackRecord) []growth.Finding {
	var sites []growth.Site
	for _, r := range recs {
		if r.GrowSteps == 0 {
			continue
		}
		sites = append(sites, growth.Site{Name: siteName(r), Library: r.Library, Reallocs: r.Reallocs, GrowSteps: r.GrowSteps,
			MeanRatio: r.GrowthRatio, BytesCopied: r.BytesCopied, FinalBytes: r.LiveBytes})
	}
	return growth.Diagnose(sites)
}
