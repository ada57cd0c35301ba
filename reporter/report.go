// The JSON report: types, building it from snapshots, reading and writing.

package reporter

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/atomicfile"
	"github.com/tagalloc/tagalloc/tagtable"
)

// Schema names the report layout (docs/report-schema.md and
// docs/report.schema.json); fields may be added, never removed. v2 names
// the fields of stacks.growth in snake_case, as every other field; v1
// wrote them with Go's names (Name, GrowSteps, ...). Read takes both.
const Schema = "tagalloc.report/v2"

// SchemaV1 is the layout before v2, which Read still takes.
const SchemaV1 = "tagalloc.report/v1"

// ErrReport wraps every complaint about a report file.
var ErrReport = errors.New("not a tagalloc report")

// Report is the whole file.
type Report struct {
	Schema    string    `json:"schema"`
	Processes []Process `json:"processes"`
	// WithoutBooks: the programs tagalloc run saw run without books
	// (unseen.go); omitted when there were none, and from snapshots.
	WithoutBooks []WithoutBooks `json:"without_books,omitempty"`
}

// Process is one process's books.
type Process struct {
	PID     int      `json:"pid"`
	PPID    int      `json:"ppid,omitempty"`
	Command []string `json:"command"`
	// How it ended: ExitCode or Signal for the process tagalloc launched;
	// Ended ("exited", "running", "unknown") for every process.
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	Ended    string `json:"ended"`
	Tags     []Tag  `json:"tags"`
	// Budgets: the process's tag budgets (budgets.go), by tag; absent
	// when it set none, and from reports made before budgets.
	Budgets []Budget `json:"budgets,omitempty"`
	Heap    Heap     `json:"heap"`
	// Resident: its resident memory as Linux reported it (tagalloc run,
	// snapshot, the live view); nil in reports made before it was kept.
	Resident *Resident `json:"resident,omitempty"`
	Reports  []Item    `json:"reports"`
	// Collections counts the runs of the process's C memory reporters
	// (tagalloc_collect_reports); Reports holds what the last one said.
	Collections uint64 `json:"collections,omitempty"`
	// Torn: read from a running process while it changed; figures may be off.
	Torn bool `json:"torn,omitempty"`
	// Stacks: who allocated what, from sampled stacks (tagalloc run --stacks).
	Stacks *Stacks `json:"stacks,omitempty"`
}

// Tag is one tag's exact books; bytes are usable bytes.
type Tag struct {
	Name      string `json:"name"`
	LiveBytes uint64 `json:"live_bytes"`
	// LiveRequestedBytes is what the program asked for, of the live blocks;
	// null unless the process ran with TAGALLOC_REQUESTED=1 (keeping every
	// block's requested size costs time on every malloc and free).
	LiveRequestedBytes *uint64 `json:"live_requested_bytes"`
	// LiveRequestedBytesEstimate estimates LiveRequestedBytes from the
	// process's live sampled blocks (stacks on) when the books do not
	// keep it: LiveBytes times the share requested/usable of the tag's
	// live sampled blocks (requested.go). LiveRequestedSamples is how many
	// live sampled blocks it rests on; 0 with no estimate: none of the
	// tag's live blocks was sampled. Both absent when LiveRequestedBytes
	// is known, or without stacks.
	LiveRequestedBytesEstimate *uint64 `json:"live_requested_bytes_estimate,omitempty"`
	LiveRequestedSamples       *uint64 `json:"live_requested_samples,omitempty"`
	LiveBlocks                 uint64  `json:"live_blocks"`
	AllocBytes                 uint64  `json:"alloc_bytes"`
	AllocBlocks                uint64  `json:"alloc_blocks"`
	// PeakLiveBytes is the tag's peak of live bytes, PeakLiveBytesUpper
	// its upper bound: equal, the peak is exact (one thread at a time held
	// the tag); apart, the true peak lies between them; null, the books
	// gave no upper bound (package alloc's books, older reports) and
	// PeakLiveBytes is the highest live total seen, a lower bound.
	PeakLiveBytes      uint64  `json:"peak_live_bytes"`
	PeakLiveBytesUpper *uint64 `json:"peak_live_bytes_upper,omitempty"`
	// ReportedBytes are the tag's heap bytes that memory reporters
	// measured (tagalloc_report_block) in their last collection.
	ReportedBytes uint64 `json:"reported_bytes,omitempty"`
}

// Peak is how the tag's peak reads in text: "16.0 MiB" when exact,
// "16.0 MiB (+96 KiB)" when the true peak may be up to that much more,
// "≥ 16.0 MiB" when only a lower bound is known.
func (t Tag) Peak() string {
	switch {
	case t.PeakLiveBytesUpper == nil:
		return "≥ " + humanize.IBytes(t.PeakLiveBytes)
	case *t.PeakLiveBytesUpper <= t.PeakLiveBytes:
		return humanize.IBytes(t.PeakLiveBytes)
	default:
		return fmt.Sprintf("%s (+%s)", humanize.IBytes(t.PeakLiveBytes), humanize.IBytes(*t.PeakLiveBytesUpper-t.PeakLiveBytes))
	}
}

// Heap totals. Live and alloc figures are the sum over tags (the allocator
// checks that identity against a walk of its heap); the rest is the
// allocator's own memory: mapped = the spans holding blocks + free memory
// still resident + huge mappings (live and cached); free_cached is memory
// kept for reuse; span_free_bytes is the room in spans in use that holds
// no live block: free blocks, and space never carved, which costs address
// space but no RAM (so it is not part of the explicit total); bookkeeping
// is page descriptors and the books themselves.
type Heap struct {
	LiveBytes        uint64 `json:"live_bytes"`
	LiveBlocks       uint64 `json:"live_blocks"`
	AllocBytes       uint64 `json:"alloc_bytes"`
	AllocBlocks      uint64 `json:"alloc_blocks"`
	MappedBytes      uint64 `json:"mapped_bytes"`
	FreeCachedBytes  uint64 `json:"free_cached_bytes"`
	SpanFreeBytes    uint64 `json:"span_free_bytes"`
	BookkeepingBytes uint64 `json:"bookkeeping_bytes"`
	// PeakLiveBytes and PeakLiveBytesUpper bound the heap's own peak of
	// live bytes (all tags at once): at least the largest tag's peak and
	// the live bytes now, at most the sum of the tags' upper bounds. Equal
	// when one tag held the heap and its peak is exact (an untagged
	// program on one thread); no upper bound when a tag has none.
	PeakLiveBytes      uint64  `json:"peak_live_bytes,omitempty"`
	PeakLiveBytesUpper *uint64 `json:"peak_live_bytes_upper,omitempty"`
}

// notePeaks sets the heap's peak bounds from its tags' (FromSnapshot).
func (h *Heap) notePeaks(tags []Tag) {
	lower, upper, bounded := h.LiveBytes, uint64(0), true
	for _, t := range tags {
		if t.AllocBlocks == 0 && t.PeakLiveBytes == 0 {
			continue
		}
		lower = max(lower, t.PeakLiveBytes)
		if t.PeakLiveBytesUpper == nil {
			bounded = false
			continue
		}
		upper += *t.PeakLiveBytesUpper
	}
	h.PeakLiveBytes = lower
	if bounded {
		upper = max(upper, lower)
		h.PeakLiveBytesUpper = &upper
	}
}

// PeakFromStacks makes the heap's peak exact where the stacks recorded
// every block (mode full, no event lost, no free of a block unseen): the
// peak of their live bytes is then the heap's, to the byte. It is taken
// only if it agrees with what the books know: the stacks' live bytes now
// are the heap's, and their peak lies within the books' bounds.
func (p *Process) PeakFromStacks() {
	st := p.Stacks
	if st == nil || st.Peak == nil || st.Mode != "full" || st.Dropped != 0 || st.UnknownFrees != 0 {
		return
	}
	var live uint64
	for _, r := range st.Records {
		live += r.LiveBytes
	}
	h := &p.Heap
	pk := st.Peak.LiveBytes
	if live != h.LiveBytes || pk < h.PeakLiveBytes || h.PeakLiveBytesUpper != nil && pk > *h.PeakLiveBytesUpper {
		return
	}
	h.PeakLiveBytes = pk
	h.PeakLiveBytesUpper = &pk
}

// Peak is how the heap's peak reads in text, as Tag.Peak does a tag's;
// "" for a report without it.
func (h Heap) Peak() string {
	if h.PeakLiveBytes == 0 && h.PeakLiveBytesUpper == nil {
		return ""
	}
	return Tag{PeakLiveBytes: h.PeakLiveBytes, PeakLiveBytesUpper: h.PeakLiveBytesUpper}.Peak()
}

// Item is one about:memory measurement.
type Item struct {
	Path        string `json:"path"`
	Kind        string `json:"kind"`  // heap, nonheap, other
	Units       string `json:"units"` // bytes, count, percentage
	Amount      uint64 `json:"amount"`
	Description string `json:"description"`
}

// DefaultTag is the name untagged memory has unless TAGALLOC_TAG renames it.
const DefaultTag = "untagged"

// FromSnapshot makes a process's report from its books.
func FromSnapshot(s *tagtable.Snapshot) Process {
	p := Process{PID: s.PID, PPID: s.PPID, Command: s.Command, Ended: "unknown", Torn: s.Torn, Collections: s.Collections}
	if p.Command == nil {
		p.Command = []string{}
	}
	if s.Exited {
		p.Ended = "exited"
	}
	for _, t := range s.Tags {
		tg := Tag{Name: t.Name, LiveBytes: t.LiveBytes, LiveRequestedBytes: t.LiveRequestedBytes, LiveBlocks: t.LiveBlocks,
			AllocBytes: t.AllocBytes, AllocBlocks: t.AllocBlocks, PeakLiveBytes: t.PeakLiveBytes, ReportedBytes: t.ReportedBytes}
		if t.PeakBounded {
			up := t.PeakUpperBytes
			tg.PeakLiveBytesUpper = &up
		}
		p.Tags = append(p.Tags, tg)
		p.Heap.LiveBytes += t.LiveBytes
		p.Heap.LiveBlocks += t.LiveBlocks
		p.Heap.AllocBytes += t.AllocBytes
		p.Heap.AllocBlocks += t.AllocBlocks
	}
	if p.Tags == nil {
		p.Tags = []Tag{}
	}
	p.Heap.notePeaks(p.Tags)
	p.Budgets = budgets(s)
	a := s.Allocator
	p.Heap.FreeCachedBytes = a.SpansFreeResident + a.HugeCached
	p.Heap.MappedBytes = a.SpansInUse + p.Heap.FreeCachedBytes + a.HugeLive
	if inBlocks := a.SpansInUse + a.HugeLive; inBlocks > p.Heap.LiveBytes {
		p.Heap.SpanFreeBytes = inBlocks - p.Heap.LiveBytes
	}
	p.Heap.BookkeepingBytes = a.Bookkeeping
	p.Reports = reported(s.Reports) // first: the tags' items take out what reporters claim
	p.Reports = append(items(p), p.Reports...)
	return p
}

// The memory-report names of a report's kind and units.
var (
	kindNames  = []string{"nonheap", "heap", "other"}
	unitsNames = []string{"bytes", "count", "count-cumulative", "percentage"}
)

// reported turns what the process's memory reporters published (Go's
// runtime figures, for one) into items.
func reported(reps []tagtable.Report) []Item {
	var out []Item
	for _, r := range reps {
		if int(r.Kind) >= len(kindNames) || int(r.Units) >= len(unitsNames) {
			continue // the reader checked; never here
		}
		out = append(out, Item{Path: r.Path, Kind: kindNames[r.Kind], Units: unitsNames[r.Units], Amount: r.Amount, Description: r.Description})
	}
	return out
}

// items are the report's own measurements: one per tag, then the heap's.
// Kinds follow nsIMemoryReporter: "heap" is counted in the live heap (the
// sum over tags), so the allocator's overhead is "nonheap".
func items(p Process) []Item {
	out := []Item{}
	claims := p.heapClaims()
	for _, t := range p.Tags {
		path, desc := "explicit/heap/"+t.Name, fmt.Sprintf("Heap blocks tagged %q.", t.Name)
		if t.Name == DefaultTag {
			path, desc = "explicit/heap-unclassified", "Heap blocks allocated while no tag was set."
		}
		if claims[t.Name] > 0 {
			desc += " Less what memory reporters measured of them."
		}
		out = append(out, Item{Path: path, Kind: "heap", Units: "bytes", Amount: t.LiveBytes - claims[t.Name], Description: desc})
	}
	return append(append(out, heapItems(p.Heap)...),
		Item{Path: "heap-live-blocks", Kind: "other", Units: "count", Amount: p.Heap.LiveBlocks,
			Description: "Heap blocks live, over all tags."})
}

// heapItems are the allocator's own figures, besides the tags'.
func heapItems(h Heap) []Item {
	return []Item{
		{Path: "explicit/heap-overhead/free-cached", Kind: "nonheap", Units: "bytes", Amount: h.FreeCachedBytes,
			Description: "Free heap memory the allocator keeps resident for reuse."},
		{Path: "heap-span-free", Kind: "other", Units: "bytes", Amount: h.SpanFreeBytes,
			Description: "Room in spans in use holding no live block: free blocks and never-touched space (no RAM)."},
		{Path: "explicit/heap-overhead/bookkeeping", Kind: "nonheap", Units: "bytes", Amount: h.BookkeepingBytes,
			Description: "The allocator's page descriptors and books."},
		{Path: "heap-mapped", Kind: "other", Units: "bytes", Amount: h.MappedBytes,
			Description: "Memory the allocator has from the OS for the heap (spans in use, free resident, huge)."},
	}
}

// heapClaims returns, per tag, the live bytes the process's memory
// reporters claim as their own heap items, which come out of the tag's
// line (as about:memory takes reported heap out of heap-unclassified):
// what tagalloc_report_block measured of the tag's blocks, and, from the
// untagged heap, the heap items' bytes that were not measured block by
// block. Claims never exceed a tag's live bytes. Nil without heap items.
func (p Process) heapClaims() map[string]uint64 {
	var heapItems, measured uint64
	for _, it := range p.Reports {
		own := strings.HasPrefix(it.Path, "explicit/heap/") || it.Path == "explicit/heap-unclassified"
		if !own && it.Kind == "heap" && it.Units == "bytes" && strings.HasPrefix(it.Path, "explicit/") {
			heapItems += it.Amount
		}
	}
	if heapItems == 0 {
		return nil
	}
	claims := map[string]uint64{}
	for _, t := range p.Tags {
		claims[t.Name] = min(t.ReportedBytes, t.LiveBytes)
		measured += t.ReportedBytes
	}
	if heapItems > measured {
		for _, t := range p.Tags {
			if t.Name == DefaultTag {
				claims[t.Name] = min(t.LiveBytes, claims[t.Name]+heapItems-measured)
			}
		}
	}
	return claims
}

// reporterItems are the measurements the process's own memory reporters
// published (Go's runtime, for one): its items that are not the books'.
func (p Process) reporterItems() []Item {
	own := map[string]bool{}
	for _, it := range items(p) {
		own[it.Path] = true
	}
	var out []Item
	for _, it := range p.Reports {
		if !own[it.Path] {
			out = append(out, it)
		}
	}
	return out
}

// Sort orders processes: first the one launched (first, if any), then by pid.
func (r *Report) Sort(first int) {
	sort.SliceStable(r.Processes, func(i, j int) bool {
		a, b := r.Processes[i], r.Processes[j]
		if (a.PID == first) != (b.PID == first) {
			return a.PID == first
		}
		return a.PID < b.PID
	})
}

// Read parses and checks a report.
func Read(rd io.Reader) (*Report, error) {
	var r Report
	br := bufio.NewReader(rd)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		return nil, fmt.Errorf("%w: gzipped (a memory-report.json.gz for about:memory?); give the JSON report tagalloc run -o wrote", ErrReport)
	}
	dec := json.NewDecoder(br)
	if err := dec.Decode(&r); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrReport, err)
	}
	if r.Schema != Schema && r.Schema != SchemaV1 {
		return nil, fmt.Errorf("%w: schema %q, want %q (or %q)", ErrReport, r.Schema, Schema, SchemaV1)
	}
	r.Schema = Schema // what was read is held, and written again, as the current layout
	for i, p := range r.Processes {
		if p.PID <= 0 {
			return nil, fmt.Errorf("%w: process %d has pid %d", ErrReport, i, p.PID)
		}
		if r := p.Resident; r != nil && r.Measured != ResidentRunning && r.Measured != ResidentLastPoll && r.Measured != ResidentNever {
			return nil, fmt.Errorf("%w: process %d: resident measured %q (running, last-poll or never)", ErrReport, p.PID, r.Measured)
		}
		for _, t := range p.Tags {
			if t.Name == "" || len(t.Name) > MaxTagLen {
				return nil, fmt.Errorf("%w: process %d has a tag named %q", ErrReport, p.PID, t.Name)
			}
			if t.LiveBlocks > t.AllocBlocks || t.LiveBytes > t.AllocBytes || (t.LiveRequestedBytes != nil && *t.LiveRequestedBytes > t.LiveBytes) ||
				(t.LiveRequestedBytesEstimate != nil && *t.LiveRequestedBytesEstimate > t.LiveBytes) {
				return nil, fmt.Errorf("%w: tag %q of process %d has more live than allocated", ErrReport, t.Name, p.PID)
			}
		}
		for _, b := range p.Budgets { // a budget names a tag or level: a tag's name
			if b.Tag == "" || len(b.Tag) > MaxTagLen {
				return nil, fmt.Errorf("%w: process %d has a budget of a tag named %q", ErrReport, p.PID, b.Tag)
			}
		}
	}
	for i, p := range r.WithoutBooks {
		if p.PID <= 0 || p.Why == "" {
			return nil, fmt.Errorf("%w: program %d without books has pid %d and reason %q", ErrReport, i, p.PID, p.Why)
		}
	}
	return &r, nil
}

// ReadFile reads a report file.
func ReadFile(path string) (*Report, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r, err := Read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return r, nil
}

// IndentLimit is the size up to which WriteJSON indents a report. Bigger
// ones (the stacks of a --stacks run: tens of MB) are written compact:
// indenting cost more than the rest of the report (13 s of a 19 s Python
// run when its records carried their frames; 0.6 s of 5.3 s after), and
// no one reads them by eye (jq . indents them).
const IndentLimit = 1 << 20

// WriteJSON writes the report, indented if it is under IndentLimit bytes,
// with a newline at the end.
func (r *Report) WriteJSON(w io.Writer) error {
	b, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if len(b) <= IndentLimit {
		var out bytes.Buffer
		out.Grow(len(b) * 2)
		if err := json.Indent(&out, b, "", "  "); err != nil {
			return err
		}
		b = out.Bytes()
	}
	if _, err := w.Write(b); err != nil {
		return err
	}
	_, err = w.Write([]byte{'\n'}) // not appended: that could copy the whole report
	return err
}

// WriteFileAtomic writes data to path through a temporary file and a
// rename, so a reader never sees half a report. The file is the owner's
// only (0600).
func WriteFileAtomic(path string, write func(io.Writer) error) error {
	return atomicfile.Write(path, write)
}
