// The region reader: validate the header, follow the records, sum the books.

package books

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"sync"
	"unicode/utf8"

	"github.com/tagalloc/tagalloc/internal/layout"
)

// Magic and Version identify the layouts this reader knows.
// Version 1 is the native library's first; version 2 adds a table of
// reports (memory reporters: Go's runtime figures, C reporters); version
// 3 adds, per tag, the heap bytes reporters measured (tagalloc_report_block)
// and the count of collections. Version 4 has no heap records (the native
// library keeps one heap per thread, whatever its tags, and every count
// in the thread records' per-tag counters: the heap fields are 0) and
// names its writer. Version 5 keeps each counter set's live bytes as a
// high-water mark less a headroom (the field that was its freed bytes is
// the headroom, its last word the mark) and adds, per tag, its holders and
// an upper bound of its peak: peaks are exact, or bounded (see
// TagTotals). Version 6 adds a table of tag budgets (Budget). The native
// library writes version 6, package alloc's writer (writer.go) version 4;
// this reader reads all six.
//
// A version-4 header has 280 bytes, or the 312 of version 6: then its
// BudgetsOff and BudgetsCount name a budgets table as version 6's (the
// Go writer's budgets, beside its version-4 counters), and the version-5
// fields between (HoldersOff, PeakUpperOff) are unused, read as 0. In
// every version a budget slot of policy 0 is unused (package alloc keeps
// a removed budget's slot so: writer.go) and is skipped.
const (
	Magic   = layout.BooksMagic
	Version = layout.BooksVersion
	// WriterVersion is the layout writer.go writes.
	WriterVersion = 4
)

// Writers of a version-4 region.
const (
	WriterNative = layout.WriterNative // the preloaded library (cgo/src/books.c)
	WriterGo     = layout.WriterGo     // package alloc (writer.go)
)

// ErrFormat wraps every complaint about a region's contents.
var ErrFormat = errors.New("not a valid tagalloc books region")

// header (header_gen.go) is _ta_books_t, generated with it from
// internal/layout; so are the sizes of the headers of each version
// (version 1 without the reports, version 2 without the reported bytes,
// version 3 without the writer, ...; version 6's is the whole of header).
const (
	headerV1 = layout.BooksHeaderV1
	headerV2 = layout.BooksHeaderV2
	headerV3 = layout.BooksHeaderV3
	headerV4 = layout.BooksHeaderV4
	headerV5 = layout.BooksHeaderV5
	headerV6 = layout.BooksHeaderV6 // and version 4's with a budgets table
)

// Budget is a limit on the live bytes of a tag and of every tag under it
// (tagalloc_set_budget, TAGALLOC_BUDGET; alloc.SetBudget): a budgets
// table entry (version 6, or a version-4 header of version 6's size).
type Budget struct {
	Tag    string // the tag or level it covers
	Limit  uint64 // bytes
	Policy string // "fail", "notify" or "observe"
	// Charged is what counts against the limit: the live bytes of the
	// tags under it, plus what each counter set holding them has reserved
	// above its own live bytes (at most 64 KiB a thread; the allocator
	// checks reservations, not each block; package alloc's budgets charge
	// the live bytes alone). Never past Limit under fail.
	Charged uint64
	// Crossings counts the times Charged went past Limit (each counted
	// once, until it came back under); Refused the allocations the fail
	// policy refused; Over says Charged is past Limit now.
	Crossings, Refused uint64
	Over               bool
}

// The budgets table: slots of budgetSize bytes (cgo/src/budget.c:
// u32 tag, u32 policy, u64 limit, i64 charged, u64 crossings, u64
// refused, u32 parent, u32 over, 16 bytes spare).
const (
	budgetSize = layout.BudgetSlotSize
	// MaxBudgets is how many budgets a process may set.
	MaxBudgets = layout.MaxBudgets
)

// budgetPolicies names the policies by their number in the table.
var budgetPolicies = map[uint32]string{1: "fail", 2: "notify", 3: "observe"}

// holdersMany in a version-5 holders table: the tag's blocks were counted
// by more than one counter set (else the entry is 0 or the address of the
// only set, whose high-water mark is the tag's exact peak).
const holdersMany = layout.HoldersMany

// Report is one measurement a process's reporter published (about:memory's
// model): a path, a kind (0 nonheap, 1 heap, 2 other), units (0 bytes,
// 1 count, 2 cumulative count, 3 percentage), an amount, a description.
type Report struct {
	Path, Description string
	Kind, Units       uint8
	Amount            uint64
}

// The reports table: slots of reportSize bytes.
const (
	reportSize    = layout.ReportSlot
	reportPathMax = layout.ReportPath - 1 // bytes, then a NUL
	reportDescMax = layout.ReportDesc - 1
	MaxReports    = layout.MaxReports
)

// Allocator is the allocator's own view of its memory, in bytes: the
// spans that hold blocks, free memory kept resident for reuse, the
// mappings of huge blocks (and freed ones cached), and its bookkeeping
// (page descriptors of the pages it touched, and the books region).
type Allocator struct {
	SpansInUse        uint64
	SpansFreeResident uint64
	ArenaTouched      uint64
	HugeLive          uint64
	HugeCached        uint64
	Bookkeeping       uint64
}

// TagTotals are one tag's books. Bytes are usable bytes.
type TagTotals struct {
	Name      string
	LiveBytes uint64
	// LiveRequestedBytes is what the program asked for, of the live
	// blocks; nil unless the process kept requested sizes
	// (TAGALLOC_REQUESTED=1).
	LiveRequestedBytes *uint64
	LiveBlocks         uint64
	AllocBytes         uint64
	AllocBlocks        uint64
	// PeakLiveBytes is the tag's peak of live bytes: exact if
	// PeakBounded and PeakUpperBytes equals it; between it and
	// PeakUpperBytes if PeakBounded; else (a layout before 5, or package
	// alloc's books) the highest live total seen at the points the books
	// were looked at, a lower bound.
	PeakLiveBytes  uint64
	PeakUpperBytes uint64
	PeakBounded    bool
	// ReportedBytes are the tag's heap bytes that memory reporters
	// measured (tagalloc_report_block) in their last collection; they
	// may exceed LiveBytes if a reporter measured a block twice or the
	// blocks were freed since.
	ReportedBytes uint64
}

// Snapshot is what a region says about its process.
type Snapshot struct {
	PID, PPID int
	Command   []string
	StartNS   uint64
	Exited    bool // the process ended through exit(); false while running or if killed
	Tags      []TagTotals
	// Torn is set if a counter went backwards between reads (a running
	// process); the figures are then off by what changed meanwhile.
	Torn      bool
	Allocator Allocator
	// Reports are what the process's memory reporters published, in
	// their last collection (Collections counts them; 0 for a region
	// without C reporters).
	Reports     []Report
	Collections uint64
	// TagNames are the registered tags by id (events name tags by id).
	TagNames map[uint32]string
	// Budgets are the process's tag budgets, by tag (version 6, and
	// package alloc's version 4).
	Budgets []Budget
	native  bool // written by the native library
}

func fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}

// reader reads a copy of the region's bytes (ReadFile and procbooks.Read copy
// them out, so nothing here races with the process).
type reader struct {
	b    []byte
	used uint64
}

func (r reader) u64(off uint64) uint64 { return binary.LittleEndian.Uint64(r.b[off:]) }

func (r reader) u32(off uint64) uint32 { return binary.LittleEndian.Uint32(r.b[off:]) }

// span checks that [off, off+n) lies inside the used bytes.
func (r reader) span(what string, off, n uint64) error {
	if off > r.used || n > r.used-off {
		return fail("%s at %d+%d lies outside the %d bytes in use", what, off, n, r.used)
	}
	return nil
}

// addr turns a record's address in the process into an offset, checked.
func (r reader) addr(what string, a, base, size uint64) (uint64, error) {
	if a < base {
		return 0, fail("%s address %#x is below the region (%#x)", what, a, base)
	}
	off := a - base
	if off%8 != 0 {
		return 0, fail("%s address %#x is misaligned", what, a)
	}
	return off, r.span(what, off, size)
}

// Parse validates a region's bytes and sums its books: the header, the
// bounds of every table it names, the counters (each tag's fallback set,
// then each thread's chunks and, before version 4, its heaps), the
// reports, the command line and the tags.
func Parse(b []byte) (*Snapshot, error) {
	h, err := parseHeader(b)
	if err != nil {
		return nil, err
	}
	p, err := checkBounds(b, h)
	if err != nil {
		return nil, err
	}
	p.sumFallback()
	defer p.release()
	if err := p.walkThreads(); err != nil {
		return nil, err
	}
	s := p.snapshot()
	if err := p.readReports(s); err != nil {
		return nil, err
	}
	p.readCommand(s)
	if err := p.buildTags(s); err != nil {
		return nil, err
	}
	if err := p.readBudgets(s); err != nil {
		return nil, err
	}
	sortTags(s.Tags)
	return s, nil
}

// parseHeader decodes the header of b and checks its magic, version and
// size; the fields past a version's header (those it lacks) read as 0.
func parseHeader(b []byte) (header, error) {
	var h header
	hs := uint64(binary.Size(h))
	if uint64(len(b)) < headerV1 {
		return h, fail("%d bytes: too short for a header (%d)", len(b), headerV1)
	}
	if string(b[:8]) != Magic {
		return h, fail("magic %q, want %q", b[:8], Magic)
	}
	version, size := binary.LittleEndian.Uint32(b[8:]), uint64(binary.LittleEndian.Uint32(b[12:]))
	switch {
	case version == 1 && size == headerV1,
		version == 2 && size == headerV2,
		version == 3 && size == headerV3,
		version == 4 && (size == headerV4 || size == headerV6), // without the budgets table, or with it
		version == 5 && size == headerV5,
		version == 6 && size == headerV6:
	case version < 1 || version > Version:
		return h, fail("layout version %d; this tagalloc reads versions 1 to %d (use the tagalloc that ran the program)", version, Version)
	default:
		return h, fail("header size %d does not fit version %d", size, version)
	}
	hb := make([]byte, hs) // what follows a shorter header is not its fields: they read as 0
	copy(hb, b[:min(uint64(len(b)), size)])
	if err := binary.Read(bytes.NewReader(hb), binary.LittleEndian, &h); err != nil {
		return h, fail("header: %v", err)
	}
	if h.Version == 4 {
		h.HoldersOff, h.PeakUpperOff = 0, 0 // no peak tables, whatever the header's size
	}
	return h, nil
}

// parser is a region whose header and bounds were checked, and the sums
// of its counters per tag while Parse reads them.
type parser struct {
	h         header
	r         reader
	slots     uint64
	v5        bool     // marks and peak tables (version 5)
	heaps     bool     // heap records, with per-class counts (before version 4)
	classSize []uint64 // bytes, by class

	alloc, allocN, free, freeN, allocR, freeR []uint64
	high                                      []uint64  // version 5: sums of the sets' marks (two's complement)
	sums                                      *[]uint64 // the storage of the sums above (sumsPool)
}

// checkBounds checks that the sizes h gives are plausible, that every
// table it names lies in the bytes in use and that every record field a
// reader follows lies inside its record; it returns the parser for b.
func checkBounds(b []byte, h header) (*parser, error) {
	used := h.Used
	if used > uint64(len(b)) || used > h.RegionSize {
		return nil, fail("%d bytes in use, but the region has %d (file %d)", used, h.RegionSize, len(b))
	}
	p := &parser{h: h, r: reader{b: b, used: used}, v5: h.Version >= 5, heaps: h.Version < 4}
	if h.TagSlots == 0 || h.TagSlots > 1<<20 || h.TagNameSize < 2 || h.TagNameSize > 4096 || h.NClasses == 0 || h.NClasses > 1024 ||
		h.CtrChunk == 0 || h.CtrChunk > 1<<16 || h.CtrSize < 48 || (p.v5 && h.CtrSize < 64) {
		return nil, fail("implausible sizes (tag slots %d, name size %d, classes %d, chunk %d, counter %d)",
			h.TagSlots, h.TagNameSize, h.NClasses, h.CtrChunk, h.CtrSize)
	}
	p.slots = uint64(h.TagSlots)
	if err := p.checkTables(); err != nil {
		return nil, err
	}
	if err := p.checkRecordFields(); err != nil {
		return nil, err
	}
	p.classSize = make([]uint64, h.NClasses)
	for c := range p.classSize {
		p.classSize[c] = uint64(p.r.u32(h.ClassSizesOff + uint64(c)*4))
	}
	return p, nil
}

// checkTables checks that each table the header names lies in the bytes
// in use.
func (p *parser) checkTables() error {
	h, slots := &p.h, p.slots
	reportedLen := uint64(0) // the reported bytes are optional
	if h.ReportedOff != 0 {
		reportedLen = slots * 8
	}
	peakTables := uint64(0)
	if p.v5 {
		peakTables = slots * 8
	}
	for _, c := range []struct {
		what   string
		off, n uint64
	}{
		{"command line", h.CmdlineOff, uint64(h.CmdlineLen)},
		{"tag names", h.NamesOff, slots * uint64(h.TagNameSize)},
		{"fallback counters", h.FallbackOff, slots * uint64(h.CtrSize)},
		{"tag peaks", h.PeaksOff, slots * 8},
		{"class sizes", h.ClassSizesOff, uint64(h.NClasses) * 4},
		{"reported bytes", h.ReportedOff, reportedLen},
		{"tag holders", h.HoldersOff, peakTables},
		{"peak upper bounds", h.PeakUpperOff, peakTables},
	} {
		if err := p.r.span(c.what, c.off, c.n); err != nil {
			return err
		}
	}
	return nil
}

// checkRecordFields checks that each field a reader follows lies inside
// its record, computed in 64 bits (in 32, offsets near 4 GiB wrapped
// around and passed).
func (p *parser) checkRecordFields() error {
	h := &p.h
	fits := func(off, stride, n, width, size uint32) bool {
		return uint64(off)+uint64(stride)*(uint64(n)-1)+uint64(width) <= uint64(size)
	}
	nch := uint32((uint64(h.TagSlots) + uint64(h.CtrChunk) - 1) / uint64(h.CtrChunk))
	if !fits(h.ThreadCtrOff, 8, nch, 8, h.ThreadSize) || !fits(h.ThreadNext, 0, 1, 8, h.ThreadSize) {
		return fail("record field offsets outside their records")
	}
	if p.heaps && (!fits(h.ThreadHeaps, 0, 1, 8, h.ThreadSize) || h.ClassStride < 8 || h.ReqStride < 16 ||
		!fits(h.HeapNalloc, h.ClassStride, h.NClasses, 8, h.HeapSize) || !fits(h.HeapNfree, h.ClassStride, h.NClasses, 8, h.HeapSize) ||
		!fits(h.HeapAreq, h.ReqStride, h.NClasses, 8, h.HeapSize) || !fits(h.HeapFreq, h.ReqStride, h.NClasses, 8, h.HeapSize) ||
		!fits(h.HeapTag, 0, 1, 4, h.HeapSize) || !fits(h.HeapTnext, 0, 1, 8, h.HeapSize)) {
		return fail("heap record field offsets outside their records")
	}
	return nil
}

// sumsPool keeps the per-tag sums' storage between parses: 7 sums for
// each of a region's 4096 tag slots are 224 KiB, most of the work of
// reading a small process's books when it was made anew for each (a run
// reads one region per process: 1,000 regions took 112-135 ms, 70% of
// it allocating, clearing and collecting these).
var sumsPool sync.Pool // of *[]uint64

// sumFallback makes the per-tag sums and adds each tag's fallback
// counter set to them.
func (p *parser) sumFallback() {
	slots := p.slots
	p.sums, _ = sumsPool.Get().(*[]uint64)
	if p.sums == nil || uint64(cap(*p.sums)) < 7*slots {
		b := make([]uint64, 7*slots)
		p.sums = &b
	}
	all := (*p.sums)[:7*slots]
	clear(all)
	p.alloc, p.allocN, p.free, p.freeN = all[:slots:slots], all[slots:2*slots:2*slots], all[2*slots:3*slots:3*slots], all[3*slots:4*slots:4*slots]
	p.allocR, p.freeR, p.high = all[4*slots:5*slots:5*slots], all[5*slots:6*slots:6*slots], all[6*slots:]
	for t := uint64(0); t < slots; t++ {
		p.addCtr(t, p.h.FallbackOff+t*uint64(p.h.CtrSize))
	}
}

// release gives the sums' storage back (the parse is done with them).
func (p *parser) release() {
	if p.sums != nil {
		sumsPool.Put(p.sums)
		p.sums = nil
		p.alloc, p.allocN, p.free, p.freeN, p.allocR, p.freeR, p.high = nil, nil, nil, nil, nil, nil, nil
	}
}

// addCtr adds the counter set at off to tag's sums.
func (p *parser) addCtr(tag, off uint64) {
	n := uint64(48) // the set's bytes read (checkBounds: inside the bytes in use; CtrSize >= 64 from version 5)
	if p.v5 {
		n = 64
	}
	c := p.r.b[off : off+n] // one bounds check for the loads below
	le := binary.LittleEndian
	a, an, f, fn, ar, fr := le.Uint64(c[0:]), le.Uint64(c[8:]), le.Uint64(c[16:]), le.Uint64(c[24:]), le.Uint64(c[32:]), le.Uint64(c[40:48])
	if p.v5 { // f is the headroom: live = mark - headroom, freed = alloc - live
		hi := le.Uint64(c[56:64])
		p.high[tag] += hi
		f = a - (hi - f)
	}
	if a|an|f|fn|ar|fr == 0 { // most are (4096 tag slots, a few used)
		return
	}
	p.alloc[tag] += a
	p.allocN[tag] += an
	p.free[tag] += f
	p.freeN[tag] += fn
	p.allocR[tag] += ar
	p.freeR[tag] += fr
}

// walkThreads follows the thread records, newest first, adding each
// one's counter chunks and heaps to the sums.
func (p *parser) walkThreads() error {
	h := &p.h
	maxSteps := p.r.used/uint64(max(h.ThreadSize, 64)) + 1
	seenHeap, seenChunk := map[uint64]bool{}, map[uint64]bool{}
	for a, steps := h.ThreadsHead, uint64(0); a != 0; steps++ {
		if steps > maxSteps {
			return fail("the thread list does not end (a cycle?)")
		}
		toff, err := p.r.addr("thread record", a, h.Base, uint64(h.ThreadSize))
		if err != nil {
			return err
		}
		if err := p.sumChunks(toff, seenChunk); err != nil {
			return err
		}
		if p.heaps {
			if err := p.sumHeaps(p.r.u64(toff+uint64(h.ThreadHeaps)), maxSteps, seenHeap); err != nil {
				return err
			}
		}
		a = p.r.u64(toff + uint64(h.ThreadNext))
	}
	return nil
}

// sumChunks adds the counter chunks of the thread record at toff.
func (p *parser) sumChunks(toff uint64, seenChunk map[uint64]bool) error {
	h := &p.h
	nchunks := (p.slots + uint64(h.CtrChunk) - 1) / uint64(h.CtrChunk)
	chunkBytes := uint64(h.CtrChunk) * uint64(h.CtrSize)
	for i := uint64(0); i < nchunks; i++ {
		ca := p.r.u64(toff + uint64(h.ThreadCtrOff) + 8*i)
		if ca == 0 {
			continue
		}
		coff, err := p.r.addr("counter chunk", ca, h.Base, chunkBytes)
		if err != nil {
			return err
		}
		// Every chunk belongs to one record: one shared between records
		// (or listed twice) would count twice, and would let a hostile
		// region make this loop quadratic.
		if seenChunk[coff] {
			return fail("counter chunk at %#x is listed twice", ca)
		}
		seenChunk[coff] = true
		for k := uint64(0); k < uint64(h.CtrChunk) && i*uint64(h.CtrChunk)+k < p.slots; k++ {
			p.addCtr(i*uint64(h.CtrChunk)+k, coff+k*uint64(h.CtrSize))
		}
	}
	return nil
}

// sumHeaps follows a thread's heap list from ha (before version 4),
// adding each heap's per-class counts to its tag's sums.
func (p *parser) sumHeaps(ha, maxSteps uint64, seenHeap map[uint64]bool) error {
	h, r := &p.h, p.r
	for hsteps := uint64(0); ha != 0; hsteps++ {
		if hsteps > maxSteps {
			return fail("a heap list does not end (a cycle?)")
		}
		hoff, err := r.addr("heap", ha, h.Base, uint64(h.HeapSize))
		if err != nil {
			return err
		}
		if seenHeap[hoff] {
			return fail("heap at %#x is listed twice", ha)
		}
		seenHeap[hoff] = true
		tag := uint64(r.u32(hoff + uint64(h.HeapTag)))
		if tag >= p.slots {
			return fail("heap at %#x has tag %d of %d", ha, tag, p.slots)
		}
		for c := uint64(0); c < uint64(h.NClasses); c++ {
			na := r.u64(hoff + uint64(h.HeapNalloc) + uint64(h.ClassStride)*c)
			nf := r.u64(hoff + uint64(h.HeapNfree) + uint64(h.ClassStride)*c)
			p.allocN[tag] += na
			p.alloc[tag] += na * p.classSize[c]
			p.freeN[tag] += nf
			p.free[tag] += nf * p.classSize[c]
			p.allocR[tag] += r.u64(hoff + uint64(h.HeapAreq) + uint64(h.ReqStride)*c)
			p.freeR[tag] += r.u64(hoff + uint64(h.HeapFreq) + uint64(h.ReqStride)*c)
		}
		ha = r.u64(hoff + uint64(h.HeapTnext))
	}
	return nil
}

// snapshot is the region's process, its writer and its allocator's own
// figures.
func (p *parser) snapshot() *Snapshot {
	h := &p.h
	native := h.HeapTag != 0 // before version 4: only the native library's heaps had a tag field
	if !p.heaps {
		native = h.Writer == WriterNative
	}
	s := &Snapshot{PID: int(h.PID), PPID: int(h.PPID), StartNS: h.StartNS, Exited: h.State == 1, native: native,
		Collections: h.Collections}
	s.Allocator = Allocator{SpansInUse: h.SpansInUse, SpansFreeResident: h.SpansFreeResident, ArenaTouched: h.ArenaTouched,
		HugeLive: h.HugeLive, HugeCached: h.HugeCached, Bookkeeping: h.Descriptors + p.r.used}
	return s
}

// readReports reads the reports table into s.
func (p *parser) readReports(s *Snapshot) error {
	h := &p.h
	if h.ReportsCount == 0 {
		return nil
	}
	if h.ReportsCount > MaxReports {
		return fail("%d reports, at most %d", h.ReportsCount, MaxReports)
	}
	if err := p.r.span("reports", uint64(h.ReportsOff), uint64(h.ReportsCount)*reportSize); err != nil {
		return err
	}
	for i := uint64(0); i < uint64(h.ReportsCount); i++ {
		rep, err := parseReport(p.r.b[uint64(h.ReportsOff)+i*reportSize:][:reportSize])
		if err != nil {
			return fail("report %d: %v", i, err)
		}
		s.Reports = append(s.Reports, rep)
	}
	return nil
}

// readBudgets reads the budgets table into s (after the tags: a budget
// names its tag by id).
func (p *parser) readBudgets(s *Snapshot) error {
	h := &p.h
	if h.BudgetsCount == 0 {
		return nil
	}
	if h.BudgetsCount > MaxBudgets {
		return fail("%d budgets, at most %d", h.BudgetsCount, MaxBudgets)
	}
	if err := p.r.span("budgets", h.BudgetsOff, uint64(h.BudgetsCount)*budgetSize); err != nil {
		return err
	}
	for i := uint64(0); i < uint64(h.BudgetsCount); i++ {
		off := h.BudgetsOff + i*budgetSize
		tag, pol := p.r.u32(off), p.r.u32(off+4)
		if pol == 0 {
			continue // unused: a removed budget's slot
		}
		name, ok := s.TagNames[tag]
		if !ok {
			name, ok = p.tagName(uint64(tag))
		}
		policy, okp := budgetPolicies[pol]
		if !ok || !okp {
			return fail("budget %d: tag %d, policy %d", i, tag, pol)
		}
		charged := int64(p.r.u64(off + 16))
		s.Budgets = append(s.Budgets, Budget{Tag: name, Limit: p.r.u64(off + 8), Policy: policy,
			Charged: uint64(max(charged, 0)), Crossings: p.r.u64(off + 24), Refused: p.r.u64(off + 32),
			Over: p.r.u32(off+44) != 0})
	}
	sort.Slice(s.Budgets, func(i, j int) bool { return s.Budgets[i].Tag < s.Budgets[j].Tag })
	return nil
}

// tagName is the registered name of tag t, if it has one.
func (p *parser) tagName(t uint64) (string, bool) {
	h := &p.h
	if t >= p.slots || t >= uint64(h.TagCount) && t != uint64(h.TagOverflow) {
		return "", false
	}
	slot := p.r.b[h.NamesOff+t*uint64(h.TagNameSize) : h.NamesOff+(t+1)*uint64(h.TagNameSize)]
	n := bytes.IndexByte(slot, 0)
	if n <= 0 {
		return "", false
	}
	return printable(slot[:n]), true
}

// readCommand reads the process's command line into s.
func (p *parser) readCommand(s *Snapshot) {
	h := &p.h
	if h.CmdlineLen == 0 {
		return
	}
	cmd := p.r.b[h.CmdlineOff : h.CmdlineOff+uint64(h.CmdlineLen)]
	for _, a := range bytes.Split(bytes.TrimRight(cmd, "\x00"), []byte{0}) {
		s.Command = append(s.Command, printable(a))
	}
}

// buildTags turns the sums into s's tags (unsorted): each registered tag
// with blocks, and tag 0 always.
func (p *parser) buildTags(s *Snapshot) error {
	h := &p.h
	count := uint64(h.TagCount)
	if count > p.slots {
		return fail("tag count %d > %d slots", count, p.slots)
	}
	for t := uint64(0); t < p.slots; t++ {
		if t >= count && t != uint64(h.TagOverflow) {
			if p.allocN[t] != 0 {
				return fail("blocks charged to unregistered tag %d", t)
			}
			continue
		}
		if p.allocN[t] == 0 && t != 0 {
			continue
		}
		name, ok := p.tagName(t)
		if !ok {
			return fail("tag %d has no name", t)
		}
		if s.TagNames == nil {
			s.TagNames = map[uint32]string{}
		}
		s.TagNames[uint32(t)] = name
		s.Tags = append(s.Tags, p.tagTotals(t, name, &s.Torn))
	}
	return nil
}

// tagTotals is tag t's books from the sums; it sets *torn if a counter
// went backwards between reads (the live figures are then left 0).
func (p *parser) tagTotals(t uint64, name string, torn *bool) TagTotals {
	h, r := &p.h, p.r
	tt := TagTotals{Name: name, AllocBytes: p.alloc[t], AllocBlocks: p.allocN[t]}
	if p.free[t] > p.alloc[t] || p.freeN[t] > p.allocN[t] || p.freeR[t] > p.allocR[t] {
		*torn = true
	} else {
		tt.LiveBytes, tt.LiveBlocks = p.alloc[t]-p.free[t], p.allocN[t]-p.freeN[t]
		if h.Requested == 1 {
			req := p.allocR[t] - p.freeR[t]
			tt.LiveRequestedBytes = &req
		}
	}
	tt.PeakLiveBytes = max(r.u64(h.PeaksOff+8*t), tt.LiveBytes)
	if p.v5 {
		tt.PeakLiveBytes, tt.PeakUpperBytes = peakBounds(tt.PeakLiveBytes, p.high[t], r.u64(h.HoldersOff+8*t), r.u64(h.PeakUpperOff+8*t))
		tt.PeakBounded = true
	}
	if h.ReportedOff != 0 {
		tt.ReportedBytes = r.u64(h.ReportedOff + 8*t)
	}
	return tt
}

// peakBounds is a version-5 tag's peak of live bytes, between lower and
// upper (as _ta_tag_peak_of in cgo/src/tags.c): lo is the highest live
// total noted (or live now), marks the sum of its counter sets' marks
// (signed), holders its holders entry, noted the highest sum of marks
// noted. Held by one set, that set's mark is the exact peak.
func peakBounds(lo, marks, holders, noted uint64) (lower, upper uint64) {
	hi := marks
	if int64(hi) < int64(lo) {
		hi = lo
	}
	if holders != holdersMany {
		return hi, hi
	}
	return lo, max(noted, hi)
}

// printable is b as text that is safe to print and to write as JSON: valid
// UTF-8 without control characters (C0, DEL, C1) as it is; else each
// offending byte or character becomes '?', so the text is never longer
// than b. Tag names and the command line come from the process: a name
// of stray bytes must neither drive the terminal that shows it (escape
// sequences) nor grow past the 63 bytes a report allows (invalid UTF-8
// becomes three bytes of U+FFFD in JSON).
func printable(b []byte) string {
	clean := utf8.Valid(b)
	for _, r := range string(b) {
		if r < 0x20 || (r >= 0x7f && r < 0xa0) {
			clean = false
			break
		}
	}
	if clean {
		return string(b)
	}
	out := make([]byte, 0, len(b))
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError || r < 0x20 || (r >= 0x7f && r < 0xa0) {
			out = append(out, '?')
		} else {
			out = append(out, b[:n]...)
		}
		b = b[n:]
	}
	return string(out)
}

// sortTags orders tags by live bytes, most first, then by name.
func sortTags(tags []TagTotals) {
	sort.Slice(tags, func(i, j int) bool {
		if tags[i].LiveBytes != tags[j].LiveBytes {
			return tags[i].LiveBytes > tags[j].LiveBytes
		}
		return tags[i].Name < tags[j].Name
	})
}

// Merge sums the regions of one process into one snapshot: tags of the
// same name add up (live, cumulative; the peak of the sum is at least
// either region's and the live sum, and at most the sum of their upper
// bounds), as do the
// allocators' figures. The identity comes from the first region (the
// native library's, if there is one).
func Merge(snaps ...*Snapshot) *Snapshot {
	if len(snaps) == 1 {
		return snaps[0]
	}
	sort.SliceStable(snaps, func(i, j int) bool { return snaps[i].native && !snaps[j].native })
	out := *snaps[0]
	out.Tags = nil
	idx := map[string]int{}
	for _, s := range snaps {
		if s != snaps[0] {
			out.Reports = append(append([]Report(nil), out.Reports...), s.Reports...)
			out.Budgets = append(append([]Budget(nil), out.Budgets...), s.Budgets...)
			out.Torn = out.Torn || s.Torn
			a := &out.Allocator
			a.SpansInUse += s.Allocator.SpansInUse
			a.SpansFreeResident += s.Allocator.SpansFreeResident
			a.ArenaTouched += s.Allocator.ArenaTouched
			a.HugeLive += s.Allocator.HugeLive
			a.HugeCached += s.Allocator.HugeCached
			a.Bookkeeping += s.Allocator.Bookkeeping
			out.Collections += s.Collections
		}
		for _, t := range s.Tags {
			i, ok := idx[t.Name]
			if !ok {
				idx[t.Name] = len(out.Tags)
				if t.LiveRequestedBytes != nil {
					v := *t.LiveRequestedBytes
					t.LiveRequestedBytes = &v
				}
				out.Tags = append(out.Tags, t)
				continue
			}
			m := &out.Tags[i]
			m.LiveBytes += t.LiveBytes
			m.LiveBlocks += t.LiveBlocks
			m.AllocBytes += t.AllocBytes
			m.AllocBlocks += t.AllocBlocks
			m.PeakLiveBytes = max(m.PeakLiveBytes, t.PeakLiveBytes, m.LiveBytes)
			m.PeakUpperBytes += t.PeakUpperBytes
			m.PeakBounded = m.PeakBounded && t.PeakBounded
			m.ReportedBytes += t.ReportedBytes
			if m.LiveRequestedBytes != nil && t.LiveRequestedBytes != nil {
				*m.LiveRequestedBytes += *t.LiveRequestedBytes
			} else {
				m.LiveRequestedBytes = nil // one side did not keep them
			}
		}
	}
	sortTags(out.Tags)
	// every region's budgets, by tag (a tag may have two: the native
	// library's and package alloc's are two budgets)
	sort.SliceStable(out.Budgets, func(i, j int) bool { return out.Budgets[i].Tag < out.Budgets[j].Tag })
	return &out
}

// ReadDir reads every region file in dir (tagalloc run's books
// directory), one snapshot per process: a process's several regions are
// merged. It returns what it could read, and the errors of the rest.
func ReadDir(dir string) ([]*Snapshot, error) {
	snaps, errs := readDir(dir)
	return mergeByPID(snaps), errors.Join(errs...)
}

// readDir reads every region file in dir: the regions read, and an error
// for each of the others.
func readDir(dir string) ([]*Snapshot, []error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.tagalloc"))
	if err != nil {
		return nil, []error{err}
	}
	var snaps []*Snapshot
	var errs []error
	var scratch []byte // one copy buffer for all (Parse keeps nothing of it)
	for _, f := range files {
		s, err := readFile(f, &scratch)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		snaps = append(snaps, s)
	}
	return snaps, errs
}

// mergeByPID merges the regions of each process (the native library's
// and package alloc's), in the order their pids first come.
func mergeByPID(snaps []*Snapshot) []*Snapshot {
	byPID := map[int][]*Snapshot{}
	var pids []int
	for _, s := range snaps {
		if byPID[s.PID] == nil {
			pids = append(pids, s.PID)
		}
		byPID[s.PID] = append(byPID[s.PID], s)
	}
	out := make([]*Snapshot, 0, len(pids))
	for _, pid := range pids {
		out = append(out, Merge(byPID[pid]...))
	}
	return out
}

// ReadFile reads a region file and parses it. It reads (a copy of) the
// bytes in use rather than mapping the file, so a process that truncates or
// rewrites its file meanwhile cannot fault the reader; a counter changing
// during the copy is caught as Torn.
func ReadFile(path string) (*Snapshot, error) { return readFile(path, nil) }

// ReadRegionAt reads the region at the start of f (another process's
// memory, as package procbooks reads it): a copy of its bytes in use,
// parsed.
func ReadRegionAt(f io.ReaderAt) (*Snapshot, error) { return readRegion(f, nil) }

// Native says whether the native library wrote s's region (else package
// alloc's writer).
func (s *Snapshot) Native() bool { return s.native }

// readFile is ReadFile copying through *scratch if not nil (kept for the
// next file: a region in a new buffer each, the launcher's end of a run
// of 200 processes spent half its time clearing buffers and collecting
// them).
func readFile(path string, scratch *[]byte) (*Snapshot, error) {
	f, err := openRegionFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	s, err := readRegion(f, scratch)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// readRegion copies the header, then the bytes in use (through *scratch,
// if not nil), and parses them.
func readRegion(f io.ReaderAt, scratch *[]byte) (*Snapshot, error) {
	head := make([]byte, 4096)
	n, err := f.ReadAt(head, 0)
	if err != nil && !errors.Is(err, io.EOF) && n < 64 {
		return nil, err
	}
	if n < 64 {
		return nil, fmt.Errorf("%w: %d bytes", ErrFormat, n)
	}
	used := binary.LittleEndian.Uint64(head[32:])
	if used == 0 { // a region in use holds its header at least
		return nil, fmt.Errorf("%w: no bytes in use (a header never written, or wiped)", ErrFormat)
	}
	if used > maxRegionBytes {
		return nil, fmt.Errorf("%w: %d bytes in use, more than a region holds (%d)", ErrFormat, used, maxRegionBytes)
	}
	var buf []byte
	if scratch != nil {
		buf = (*scratch)[:0]
	}
	buf, err = readUsed(f, used, buf)
	if err != nil {
		return nil, err
	}
	if scratch != nil {
		*scratch = buf
	}
	return Parse(buf)
}

// readUsed copies the first used bytes of f, or as many as it has,
// appending them to buf[:0] (its room reused).
func readUsed(f io.ReaderAt, used uint64, buf []byte) ([]byte, error) {
	// Copy in chunks, so that what this costs is bounded by the bytes that
	// are there (a file shorter than used, a mapping that ends), not by
	// what the header claims. Holes in a file are zeros, not read.
	const chunk = 1 << 20
	buf = slices.Grow(buf[:0], int(min(used, chunk)))
	for uint64(len(buf)) < used {
		n := int(min(used-uint64(len(buf)), chunk))
		buf = slices.Grow(buf, n)
		off := int64(len(buf))
		if start, end, ok := nextData(f, off); ok && start > off {
			z := int(min(start-off, int64(n)))
			buf = buf[:len(buf)+z]
			clear(buf[off:])
			continue
		} else if ok && end > off {
			n = int(min(end-off, int64(n)))
		}
		m, err := f.ReadAt(buf[len(buf):len(buf)+n], off)
		buf = buf[:len(buf)+m]
		if err != nil {
			if len(buf) == 0 && !errors.Is(err, io.EOF) {
				return nil, err
			}
			break // short: Parse says what is missing
		}
	}
	return buf, nil
}

// maxRegionBytes bounds the bytes in use a reader copies: the native
// library reserves 256 MiB (TA_BOOKS_SIZE), the Go writer 64 MiB.
const maxRegionBytes = 256 << 20

// parseReport reads one slot of the reports table: u8 kind, u8 units, six
// bytes of padding, u64 amount, the path (NUL-terminated, 112 bytes), the
// description (NUL-terminated, 128 bytes).
func parseReport(b []byte) (Report, error) {
	str := func(f []byte, what string) (string, error) {
		n := bytes.IndexByte(f, 0)
		if n < 0 {
			return "", fmt.Errorf("%s is not terminated", what)
		}
		for _, c := range f[:n] {
			if c < 0x20 || c == 0x7f {
				return "", fmt.Errorf("%s holds a control byte", what)
			}
		}
		return string(f[:n]), nil
	}
	rep := Report{Kind: b[0], Units: b[1], Amount: binary.LittleEndian.Uint64(b[8:])}
	if rep.Kind > 2 || rep.Units > 3 {
		return rep, fmt.Errorf("kind %d, units %d", rep.Kind, rep.Units)
	}
	var err error
	if rep.Path, err = str(b[16:16+reportPathMax+1], "path"); err != nil {
		return rep, err
	}
	if rep.Path == "" {
		return rep, errors.New("empty path")
	}
	rep.Description, err = str(b[16+reportPathMax+1:], "description")
	return rep, err
}
