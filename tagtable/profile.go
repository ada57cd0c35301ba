// The live-block table and the per-stack books of a process's sampled
// allocations, built from its events (docs/ARCHITECTURE.md, D7), kept in segvec
// (off the Go heap: the GC neither scans nor moves them, D7/D8).

package tagtable

import (
	"math"
	"runtime"
	"slices"
	"sort"
	"unsafe"

	"github.com/tagalloc/tagalloc/segvec"
)

// LiveBlock is a sampled block not yet freed.
type LiveBlock struct {
	Usable, Requested uint64
	Tag, Stack        uint32
	Weight            float64 // blocks it stands for (1/probability it was sampled)
	// Memory reporters' marks (darkmatter.go), valid while MarkedIn is
	// the profile's current collection: how often the block was measured
	// and the stacks of the first two measurements.
	MarkedIn     uint64
	Reports      uint32
	ReportStacks [2]uint32
	site         uint32 // its site's index + 1 (no lookup by SiteKey on free)
	_            uint64 // to 64 bytes: a block is one cache line, not two
}

// SiteKey names a record: one stack, one tag.
type SiteKey struct {
	Stack, Tag uint32
}

// key is k as the profile's site table keys it.
func (k SiteKey) key() uint64 { return uint64(k.Stack)<<32 | uint64(k.Tag) }

// Site is what the blocks sampled at one (stack, tag) hold and have held.
// Est* figures are unbiased estimates of the whole (each sample weighed
// by the inverse of its probability); Samples counts samples.
type Site struct {
	SiteKey
	Samples, LiveSamples          uint64
	EstAllocBytes, EstAllocBlocks float64
	EstLiveBytes, EstLiveBlocks   float64
	EstLiveRequested              float64
	// PeakLiveBytes and PeakLiveBlocks are the site's live estimates at
	// the moment the profile's estimated live bytes were highest
	// (Profile.PeakLiveBytes): the heap's peak by stack, exact in mode
	// full. In copies (Site, SortedSites) they are always that; in the
	// table only while peakEpoch is the profile's (else the site has not
	// changed since the peak, and its live figures are its peak's).
	PeakLiveBytes, PeakLiveBlocks float64
	peakEpoch                     uint64
	// TagPeakLiveBytes and TagPeakLiveBlocks are the same at the moment
	// the site's own tag's estimated live bytes were highest
	// (Profile.TagPeaks): what the stack held of its tag's peak, kept
	// the same way against the tag's epoch.
	TagPeakLiveBytes, TagPeakLiveBlocks float64
	tagPeakEpoch                        uint64
	Reallocs, Moves                     uint64
	EstBytesCopied                      float64
	// Growth of the sampled blocks' requested sizes by realloc: how many
	// reallocs asked for more, and the sum of log(new/old) over them.
	GrowSteps    uint64
	SumLogGrowth float64
	// To 192 bytes, three whole cache lines (segments are page-aligned):
	// the key and the figures every event updates fill the first, the
	// peaks' figures and stamps every event reads the second (with the
	// realloc counts), what reallocs alone update the third. 152 bytes
	// would split the first line's fields across two lines in most sites.
	_ [5]uint64
}

// Profile is a process's sampled heap, as its events tell it.
//
// Storage: the live blocks are slots of a segvec.Vec (a freed slot goes on
// a free list and is reused), found by address in a map of address to
// slot; the sites are elements of another Vec, found by SiteKey. Neither
// the Vecs nor the maps (integers only) hold Go pointers, so the GC never
// scans them, however many blocks are live. Invariants:
//
//	slotOf.Len() + len(freeSlots) == blocks.Len()
//	siteOf.Len() == sites.Len()
//
// Close unmaps the Vecs (a cleanup does it for a profile dropped without
// Close).
type Profile struct {
	PID        int
	Mode       string // sampled or full
	SampleRate uint64
	Modules    []Module
	Stacks     map[uint32][]uint64 // return addresses, innermost first
	// Dropped counts events the process could not write (a full ring),
	// DroppedBytes the usable bytes of the sampled blocks among them;
	// UnknownFrees the frees of blocks this profile never saw (sampled
	// before a fork, or in dropped events).
	Dropped, DroppedBytes, UnknownFrees uint64
	// Parent is set on a forked child's profile that could not start from
	// its parent's at the fork (the blocks it inherited are unknown).
	Parent int
	// Forks are copies of the profile where the process forked (FORK
	// events), by sequence number, until a child's profile takes its own:
	// the newest MaxForks (a child makes its ring at its first event, and
	// most never do: they exec or exit first). ForkSeen is the newest
	// sequence number seen: a child whose copy is not kept starts empty.
	Forks    map[uint64]*Profile
	ForkSeen uint64
	// Memory reporters (darkmatter.go): the collection under way (its
	// sequence number), how many began, and reports of blocks the profile
	// does not hold.
	Collection, Collections, UnknownReports uint64
	// PeakLiveBytes is the highest the estimated live bytes of all sites
	// together have been (exact in mode full, unless events were
	// dropped), PeakMs the drainer's clock when it was reached (SetClock).
	// A forked child's starts at the fork. Each site's share of it is its
	// PeakLiveBytes.
	PeakLiveBytes float64
	PeakMs        uint64
	liveBytes     float64 // the estimated live bytes of all sites now
	peakEpoch     uint64  // counts the peaks: a site stamped with it saved its figures at this one
	// Each tag's own peak (TagPeaks), kept as the profile's is: by tag id
	// below denseTags, in tagPeaksFar for ids the library never hands
	// out (a corrupt or hostile ring's; at most one per site).
	tagPeaks    []TagPeak
	tagPeaksFar map[uint32]*TagPeak

	store *profileStore
	// cleanup closes the store if the profile is dropped without Close;
	// Close stops it first (see Close).
	cleanup   runtime.Cleanup
	histLimit int    // the history's byte limit (0: none)
	clockMs   uint64 // stamped on the events drained (SetClock)
}

// profileStore is the off-heap part of a profile: no Go pointers into the
// Go heap are kept in what the Vecs hold.
type profileStore struct {
	blocks    *segvec.Vec[LiveBlock]
	slotOf    *intMap  // block address -> slot in blocks
	freeSlots []uint32 // slots of blocks freed, for reuse
	sites     *segvec.Vec[Site]
	siteOf    *intMap  // SiteKey.key() -> index in sites
	hist      *history // the event history (history.go); nil until the first event
}

func newProfileStore() *profileStore {
	return &profileStore{
		blocks: segvec.MustNew[LiveBlock](segvec.Name("tagalloc live blocks"), segvec.SegmentBytes(2<<20)),
		slotOf: newIntMap(),
		sites:  segvec.MustNew[Site](segvec.Name("tagalloc sites")),
		siteOf: newIntMap(),
	}
}

func (st *profileStore) close() {
	st.blocks.Close()
	st.sites.Close()
	if st.hist != nil {
		st.hist.buf.Close()
		st.hist = nil
	}
	st.slotOf.close()
	st.siteOf.close()
	st.slotOf, st.siteOf, st.freeSlots = nil, nil, nil
}

// NewProfile starts an empty profile for a ring's process.
func NewProfile(pid int, mode string, rate uint64) *Profile {
	p := &Profile{PID: pid, Mode: mode, SampleRate: max(rate, 1),
		Stacks: map[uint32][]uint64{}, Forks: map[uint64]*Profile{}, store: newProfileStore(), histLimit: DefaultHistoryLimit}
	p.cleanup = runtime.AddCleanup(p, (*profileStore).close, p.store)
	return p
}

// Close releases the profile's off-heap storage (and its fork copies');
// it must not be used afterwards. Closing twice does nothing.
//
// The cleanup is stopped first, while p is surely reachable: once Close
// has loaded p.store, p itself may be unreachable, and a garbage
// collection then could queue the cleanup to close the same store on
// another goroutine, under this close (the race detector caught it in
// CI). Stopped, it cannot run.
func (p *Profile) Close() {
	p.cleanup.Stop()
	for _, f := range p.Forks {
		f.Close()
	}
	p.Forks = nil
	p.store.close()
}

// Bytes is the memory the profile's off-heap storage holds: the Vecs'
// segments, the tables' entries and the history's chunks written.
func (p *Profile) Bytes() int {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	st := p.store
	n := st.blocks.Bytes() + st.sites.Bytes() + st.slotOf.Bytes() + st.siteOf.Bytes()
	if h := st.hist; h != nil {
		n += h.buf.Bytes()
	}
	return n
}

// Fork keeps a copy of the profile as it is at the process's fork seq:
// the start of the child's (which inherits the heap, its sampled blocks,
// and the stack ids and modules; its history, its cumulative figures
// and its peaks begin at the fork, the events before it staying in the
// parent's: Site.inherited).
func (p *Profile) Fork(seq uint64) {
	p.Forks[seq] = p.clone(false)
	p.ForkSeen = max(p.ForkSeen, seq)
	if len(p.Forks) > MaxForks { // the oldest goes: its child has likely exec'd or exited
		oldest := seq
		for s := range p.Forks {
			oldest = min(oldest, s)
		}
		p.Forks[oldest].Close()
		delete(p.Forks, oldest)
	}
}

// MaxForks is how many fork copies a profile keeps for children that
// have not made their rings yet.
const MaxForks = 16

// Clone is a deep copy of the profile, its history included (without its
// fork copies).
func (p *Profile) Clone() *Profile { return p.clone(true) }

func (p *Profile) clone(withHistory bool) *Profile {
	c := NewProfile(p.PID, p.Mode, p.SampleRate)
	c.histLimit, c.clockMs = p.histLimit, p.clockMs
	if h := p.store.hist; withHistory && h != nil {
		ch, err := newHistory(h.limit)
		if err == nil { // else (out of memory) the copy starts without one
			h.buf.Range(func(_ uint64, e []byte) bool {
				_, _ = ch.buf.Append(e)
				return true
			})
			ch.lastMs = h.lastMs
			c.store.hist = ch
		}
	}
	c.Modules = append([]Module(nil), p.Modules...)
	for id, s := range p.Stacks {
		c.Stacks[id] = s // never modified once recorded
	}
	src, dst := p.store, c.store
	for _, seg := range src.blocks.Segments() {
		for _, b := range seg {
			dst.blocks.Append(b)
		}
	}
	dst.slotOf.close()
	dst.slotOf = src.slotOf.Clone()
	dst.freeSlots = slices.Clone(src.freeSlots)
	for _, seg := range src.sites.Segments() {
		for _, s := range seg {
			if !withHistory {
				s = s.inherited()
			}
			dst.sites.Append(s)
		}
	}
	dst.siteOf.close()
	dst.siteOf = src.siteOf.Clone()
	c.Dropped, c.DroppedBytes, c.UnknownFrees = p.Dropped, p.DroppedBytes, p.UnknownFrees
	c.liveBytes, c.PeakLiveBytes, c.PeakMs, c.peakEpoch = p.liveBytes, p.PeakLiveBytes, p.PeakMs, p.peakEpoch
	c.tagPeaks = slices.Clone(p.tagPeaks)
	for id, t := range p.tagPeaksFar {
		c.tagPeakOf(id)
		*c.tagPeaksFar[id] = *t
	}
	if !withHistory { // a fork's copy: the child's peaks start at the fork, with every site's figures as they are
		c.PeakLiveBytes, c.PeakMs, c.peakEpoch = p.liveBytes, p.clockMs, p.peakEpoch+1
		c.eachTagPeak(func(_ uint32, t *TagPeak) {
			t.PeakLiveBytes, t.PeakMs = t.LiveBytes, p.clockMs
			t.epoch++
		})
	}
	return c
}

// inherited is s as a forked child's profile starts it: the blocks it
// holds count as allocated at the child's birth (as the child's books
// count them: cgo/src/tags.c, _ta_books_rebase); the samples of blocks
// freed before the fork, the reallocs, copies and growth stay the
// parent's. A site left with no sample is the parent's alone: the
// child's report leaves it out.
func (s Site) inherited() Site {
	s.Samples = s.LiveSamples
	s.EstAllocBytes, s.EstAllocBlocks = s.EstLiveBytes, s.EstLiveBlocks
	s.Reallocs, s.Moves, s.EstBytesCopied = 0, 0, 0
	s.GrowSteps, s.SumLogGrowth = 0, 0
	return s
}

// TagPeak is one tag's own peak: the highest the estimated live bytes of
// its sites together have been (exact in mode full, unless events were
// dropped), PeakMs the drainer's clock when it was reached; LiveBytes is
// their estimated live bytes now. A forked child's starts at the fork.
// Each site of the tag holds its share of it in TagPeakLiveBytes.
type TagPeak struct {
	LiveBytes     float64
	PeakLiveBytes float64
	PeakMs        uint64
	epoch         uint64 // counts the tag's peaks: a site of the tag stamped with it saved its figures at this one
}

// denseTags bounds the tag ids kept in a slice: those the library hands
// out (untagged, the named tags and overflow).
const denseTags = MaxTags + 2

// tagPeakOf returns tag's peak state, made if need be. The pointer is
// good until the next call (the slice may grow).
func (p *Profile) tagPeakOf(tag uint32) *TagPeak {
	if tag < denseTags {
		if int(tag) >= len(p.tagPeaks) {
			p.tagPeaks = append(p.tagPeaks, make([]TagPeak, int(tag)+1-len(p.tagPeaks))...)
		}
		return &p.tagPeaks[tag]
	}
	t := p.tagPeaksFar[tag]
	if t == nil {
		if p.tagPeaksFar == nil {
			p.tagPeaksFar = map[uint32]*TagPeak{}
		}
		t = &TagPeak{}
		p.tagPeaksFar[tag] = t
	}
	return t
}

// tagEpoch is tag's epoch (0 for a tag never charged).
func (p *Profile) tagEpoch(tag uint32) uint64 {
	if tag < denseTags {
		if int(tag) < len(p.tagPeaks) {
			return p.tagPeaks[tag].epoch
		}
		return 0
	}
	if t := p.tagPeaksFar[tag]; t != nil {
		return t.epoch
	}
	return 0
}

// eachTagPeak calls f with every tag's peak state.
func (p *Profile) eachTagPeak(f func(tag uint32, t *TagPeak)) {
	for i := range p.tagPeaks {
		f(uint32(i), &p.tagPeaks[i])
	}
	for id, t := range p.tagPeaksFar {
		f(id, t)
	}
}

// TagPeaks returns a copy of each tag's peak, by tag id, for the tags
// whose estimated live bytes ever rose above zero.
func (p *Profile) TagPeaks() map[uint32]TagPeak {
	out := map[uint32]TagPeak{}
	p.eachTagPeak(func(id uint32, t *TagPeak) {
		if t.PeakLiveBytes > 0 {
			v := *t
			v.epoch = 0
			out[id] = v
		}
	})
	return out
}

// siteChanging saves s's figures as they were at the profile's peak and
// at its tag's, if they have not been saved since: call it before
// changing s's live figures (the peaks' are then kept while the live
// ones move on), and pass what it returns, s's tag's peak state, to
// liveChanged.
func (p *Profile) siteChanging(s *Site) *TagPeak {
	if s.peakEpoch != p.peakEpoch {
		s.PeakLiveBytes, s.PeakLiveBlocks, s.peakEpoch = s.EstLiveBytes, s.EstLiveBlocks, p.peakEpoch
	}
	t := p.tagPeakOf(s.Tag)
	if s.tagPeakEpoch != t.epoch {
		s.TagPeakLiveBytes, s.TagPeakLiveBlocks, s.tagPeakEpoch = s.EstLiveBytes, s.EstLiveBlocks, t.epoch
	}
	return t
}

// liveChanged adds d to the live bytes of all sites and to those of the
// changed site's tag t; past a peak, now is the peak: a new epoch, in
// which no site (of the tag) has saved figures (each one's peak figures
// are its live ones until it changes).
func (p *Profile) liveChanged(t *TagPeak, d float64) {
	p.liveBytes += d
	t.LiveBytes += d
	p.notePeaks(t, p.liveBytes, t.LiveBytes)
}

// notePeaks makes a moment when all sites held live bytes and t's tag
// tagLive the peaks they are higher than.
func (p *Profile) notePeaks(t *TagPeak, live, tagLive float64) {
	if live > p.PeakLiveBytes {
		p.PeakLiveBytes, p.PeakMs = live, p.clockMs
		p.peakEpoch++
	}
	if tagLive > t.PeakLiveBytes {
		t.PeakLiveBytes, t.PeakMs = tagLive, p.clockMs
		t.epoch++
	}
}

// atPeak returns a copy of s with its peak figures resolved.
func (p *Profile) atPeak(s Site) Site {
	if s.peakEpoch != p.peakEpoch {
		s.PeakLiveBytes, s.PeakLiveBlocks = s.EstLiveBytes, s.EstLiveBlocks
	}
	if s.tagPeakEpoch != p.tagEpoch(s.Tag) {
		s.TagPeakLiveBytes, s.TagPeakLiveBlocks = s.EstLiveBytes, s.EstLiveBlocks
	}
	s.peakEpoch, s.tagPeakEpoch = 0, 0
	return s
}

// Inherit fills in what a forked child's profile refers to but never saw:
// its parent's stacks and modules (the child keeps the parent's ids).
func (p *Profile) Inherit(parent *Profile) {
	for id, s := range parent.Stacks {
		if _, ok := p.Stacks[id]; !ok {
			p.Stacks[id] = s
		}
	}
	p.Modules = append(p.Modules, parent.Modules...)
}

// Weight is the number of blocks of requested size req that one sample
// stands for: sampling by bytes with mean rate R takes a block of size s
// with probability 1 - exp(-s/R) (tcmalloc's and heapprofd's estimator).
func (p *Profile) Weight(req uint64) float64 {
	if p.SampleRate <= 1 {
		return 1
	}
	q := -math.Expm1(-float64(max(req, 1)) / float64(p.SampleRate))
	if q <= 0 {
		return 1
	}
	return 1 / q
}

// site returns the record of k (made if need be) and its index+1 (the
// history's name for it).
func (p *Profile) site(k SiteKey) (*Site, uint32) {
	st := p.store
	if i, ok := st.siteOf.Get(k.key()); ok {
		return st.sites.At(int(i)), i + 1
	}
	s, i := st.sites.AppendZero()
	s.SiteKey = k
	st.siteOf.Put(k.key(), uint32(i))
	return s, uint32(i) + 1
}

// siteOfBlock returns a live block's site and its index + 1.
func (p *Profile) siteOfBlock(b *LiveBlock) (*Site, uint32) {
	if b.site == 0 {
		return p.site(SiteKey{b.Stack, b.Tag})
	}
	return p.store.sites.At(int(b.site - 1)), b.site
}

// block returns the live block at addr, or nil.
func (p *Profile) block(addr uint64) *LiveBlock {
	st := p.store
	if i, ok := st.slotOf.Get(addr); ok {
		return st.blocks.At(int(i))
	}
	return nil
}

// prefetchFrom is the address table's size (entries of 16 bytes) from
// which prefetching pays: below it (1 MiB, a core's L2 cache) the lookups
// hit the caches anyway, and BenchmarkDrain's 60 blocks drained a fifth
// slower with it.
const prefetchFrom = 1 << 16

// prefetcher is a sink that can be told what the coming events will look
// up (Drain reads records ahead of decoding them): the addresses of the
// blocks they find or replace and the keys of the sites they charge. A
// million live blocks at scattered addresses miss the caches at each step
// of an event (the address's table entry, its block, the block's site),
// one after another; prefetched step by step a batch apart, the misses
// overlap each other and the decoding of the batches before.
type prefetcher interface {
	// prefetching says whether the tables are large enough to pay.
	prefetching() bool
	// ahead appends to dst the addresses that looking these blocks and
	// sites up will read at a step (prefetchSteps of them), each step's
	// from what the step before brought into the caches a batch earlier.
	// Events decoded in between may change what is found: a stale answer
	// only costs a useless fetch.
	ahead(step int, blocks, sites []uint64, dst []uintptr) []uintptr
}

// The steps of a lookup, from the first: the table lines; the blocks and
// sites they lead to; the sites of the blocks.
const prefetchSteps = 3

func (p *Profile) prefetching() bool { return len(p.store.slotOf.ents) >= prefetchFrom }

func (p *Profile) ahead(step int, blocks, sites []uint64, dst []uintptr) []uintptr {
	st := p.store
	switch step {
	case 0:
		for _, a := range blocks {
			dst = st.slotOf.lines(a, dst)
		}
		for _, k := range sites {
			dst = st.siteOf.lines(k, dst)
		}
	case 1:
		for _, a := range blocks {
			if b := p.block(a); b != nil {
				dst = append(dst, uintptr(unsafe.Pointer(b)))
			}
		}
		for _, k := range sites {
			if i, ok := st.siteOf.Get(k); ok {
				dst = append(dst, uintptr(unsafe.Pointer(st.sites.At(int(i)))))
			}
		}
	case 2:
		for _, a := range blocks {
			if b := p.block(a); b != nil && b.site != 0 {
				dst = append(dst, uintptr(unsafe.Pointer(st.sites.At(int(b.site-1)))))
			}
		}
	}
	return dst
}

// newBlock stores b at addr (in a free slot if there is one).
func (p *Profile) newBlock(addr uint64, b LiveBlock) {
	st := p.store
	if n := len(st.freeSlots); n > 0 {
		i := st.freeSlots[n-1]
		st.freeSlots = st.freeSlots[:n-1]
		*st.blocks.At(int(i)) = b
		st.slotOf.Put(addr, i)
		return
	}
	st.slotOf.Put(addr, uint32(st.blocks.Append(b)))
}

// dropBlock forgets the block at addr and frees its slot.
func (p *Profile) dropBlock(addr uint64) {
	st := p.store
	if i, ok := st.slotOf.Delete(addr); ok {
		st.freeSlots = append(st.freeSlots, i)
	}
}

// Module records a module.
func (p *Profile) Module(m Module) { p.Modules = append(p.Modules, m) }

// Stack records a stack.
func (p *Profile) Stack(id uint32, pcs []uint64) { p.Stacks[id] = pcs }

// Alloc records a sampled block.
func (p *Profile) Alloc(addr, usable, req uint64, tag, stack uint32) {
	if old := p.block(addr); old != nil { // its free was lost: end it
		p.Free(addr)
	}
	w := p.Weight(req)
	s, si := p.site(SiteKey{stack, tag})
	p.newBlock(addr, LiveBlock{Usable: usable, Requested: req, Tag: tag, Stack: stack, Weight: w, site: si})
	p.record(histAlloc, si, estBytes(w, usable), 0, addr, usable, req, 0)
	t := p.siteChanging(s)
	s.Samples++
	s.LiveSamples++
	s.EstAllocBlocks += w
	s.EstAllocBytes += w * float64(usable)
	s.EstLiveBlocks += w
	s.EstLiveBytes += w * float64(usable)
	s.EstLiveRequested += w * float64(req)
	p.liveChanged(t, w*float64(usable))
}

// Free ends a sampled block.
func (p *Profile) Free(addr uint64) {
	b := p.block(addr)
	if b == nil {
		p.UnknownFrees++
		p.record(histFree, 0, 0, 0, addr, 0, 0, 0)
		return
	}
	s, si := p.siteOfBlock(b)
	p.record(histFree, si, estBytes(b.Weight, b.Usable), 0, addr, b.Usable, b.Requested, 0)
	p.liveChanged(p.siteChanging(s), -b.Weight*float64(b.Usable))
	if b.Weight > 0 { // a chain's block not counted since its last realloc weighs 0
		s.LiveSamples--
	}
	s.EstLiveBlocks -= b.Weight
	s.EstLiveBytes -= b.Weight * float64(b.Usable)
	s.EstLiveRequested -= b.Weight * float64(b.Requested)
	p.dropBlock(addr) // b's slot may be reused from here on
}

// Resize records a realloc of a sampled block, moved (new != old) or in
// place; the block stays charged to the stack and tag it was sampled at,
// and its chain goes on (for the growth diagnosis). For the estimates a
// realloc is an allocation of req bytes, sampled or not on its own
// (how.Selected: the countdown crossed zero in it), as tcmalloc and
// heapprofd count it: the block counts from now on with the weight of its
// new size if selected, else not at all (weight 0, its chain still
// followed). A block grown without a copy (how.Grown) counted its growth
// only, and stays counted if it was: either way every live block is
// counted with the probability of a fresh draw of its size, and the live
// estimates stay unbiased. A small block resized in its size class
// (how.Kept) counted nothing and keeps its weight, that of the size it
// was drawn with: the chance it is counted is that draw's. A selected
// move adds its new size (and a block) to the cumulative estimates, as
// the books count a move; otherwise what the live estimate gains is
// counted as allocated (the books count an in-place resize's growth). A record that stands for a
// run of in-place reallocs the library left out (how.Run) counts them all
// in the realloc and growth figures; the estimates, which follow sizes,
// telescope over it.
func (p *Profile) Resize(old, new, usable, req uint64, how Realloc) {
	b := p.block(old)
	run, ok := resizeRun(b, how.Run)
	if !ok {
		return
	}
	if b == nil {
		p.UnknownFrees++
		p.record(histResize, 0, 0, 0, old, new, usable, req)
		return
	}
	s, si := p.siteOfBlock(b)
	w := p.resizeWeight(b, req, how)
	countRealloc(s, b, req, run)
	moved := new != old
	if moved {
		p.moveBlock(s, b, old, new, usable, w)
	}
	// out with the old weight, in with the new: a moved block selected is
	// a fresh allocation (and block); otherwise what the live estimate
	// gains counts as allocated, what it loses as freed
	liveInc := w*float64(usable) - b.Weight*float64(b.Usable)
	allocInc := max(liveInc, 0)
	if how.Selected && moved && !how.Grown {
		allocInc = w * float64(usable)
		s.EstAllocBlocks += w
	}
	p.record(histResize, si, int64(math.Round(allocInc)), uint64(math.Round(allocInc-liveInc)), old, new, usable, req)
	t := p.siteChanging(s)
	if moved && w > 0 {
		t = p.bothLive(s, t, w, usable)
	}
	s.EstAllocBytes += allocInc
	reweigh(s, b, w, usable, req, how)
	p.liveChanged(t, liveInc)
}

// resizeRun returns the run of left-out reallocs that a resize of b (the
// block held at the old address, nil if none) stands for, and false if
// the record says nothing: a catch-up record of a run whose block is no
// longer held there. A run's record whose block is not held there with
// the run's prior size is of the block that is, but the run is not: the
// run returned is then empty.
func resizeRun(b *LiveBlock, run Run) (Run, bool) {
	if run.Thinned && (b == nil || b.Requested != run.Prior) {
		if run.CatchUp { // of a block no longer held at old: nothing to say
			return run, false
		}
		run = Run{} // this realloc is of the block at old; the run is not
	}
	return run, true
}

// resizeWeight is the weight b has after a realloc to req (Resize's
// comment says why): its new size's if a draw selected it (or it grew in
// place and was weighed), its old one if it was kept in its size class,
// else 0 (not counted, its chain still followed).
func (p *Profile) resizeWeight(b *LiveBlock, req uint64, how Realloc) float64 {
	w := 0.0
	switch {
	case how.Selected || how.Grown && b.Weight > 0:
		w = p.Weight(req)
	case how.Kept: // the draw it was weighed by still holds
		w = b.Weight
	}
	return w
}

// countRealloc adds a realloc of b to req, and the reallocs of run left
// out before it, to s's realloc and growth figures (the growth
// diagnosis).
func countRealloc(s *Site, b *LiveBlock, req uint64, run Run) {
	// the reallocs left out grew the block step by step to req (none
	// smaller than the one before), so their log growth adds up to this
	s.Reallocs += 1 + uint64(run.LeftOut)
	if req > b.Requested && b.Requested > 0 {
		s.GrowSteps += max(uint64(run.Grew), 1)
		s.SumLogGrowth += math.Log(float64(req) / float64(b.Requested))
	}
}

// moveBlock moves b, of site s, from old to new (usable bytes there, of
// weight w from now on): it counts the move and the bytes copied, ends a
// block the profile still holds at new (its free was lost), and moves b's
// slot to new.
func (p *Profile) moveBlock(s *Site, b *LiveBlock, old, new, usable uint64, w float64) {
	s.Moves++
	s.EstBytesCopied += w * float64(min(b.Usable, usable))
	if other := p.block(new); other != nil { // its free was lost: end it
		p.Free(new)
	}
	st := p.store
	if i, ok := st.slotOf.Delete(old); ok {
		st.slotOf.Put(new, i)
	}
}

// bothLive notes the moment of a weighed move (weight w, usable bytes at
// the new address) when both blocks are live: realloc takes the new block
// before it frees the old one, and that moment may be a peak (the books
// count it), with s's figures then saved as its peak's. s's live figures
// are as before on return; t is s's tag's peak state, and bothLive
// returns it anew (siteChanging's, after the moment).
func (p *Profile) bothLive(s *Site, t *TagPeak, w float64, usable uint64) *TagPeak {
	x := w * float64(usable)
	lb, lk := s.EstLiveBytes, s.EstLiveBlocks
	s.EstLiveBytes, s.EstLiveBlocks = lb+x, lk+w
	p.notePeaks(t, p.liveBytes+x, t.LiveBytes+x)
	t = p.siteChanging(s)
	s.EstLiveBytes, s.EstLiveBlocks = lb, lk
	return t
}

// reweigh takes b out of s's live figures with its old size and weight
// and puts it back in with its new ones (w, usable, req; not at all if w
// is 0), counting a sample if a draw decided its weight, and sets b's new
// size and weight.
func reweigh(s *Site, b *LiveBlock, w float64, usable, req uint64, how Realloc) {
	if b.Weight > 0 {
		s.LiveSamples--
	}
	s.EstLiveBlocks -= b.Weight
	s.EstLiveBytes -= b.Weight * float64(b.Usable)
	s.EstLiveRequested -= b.Weight * float64(b.Requested)
	if how.Selected && !(how.Grown && b.Weight > 0) { // a draw decided the weight
		s.Samples++
	}
	if w > 0 {
		s.LiveSamples++
		s.EstLiveBlocks += w
		s.EstLiveBytes += w * float64(usable)
		s.EstLiveRequested += w * float64(req)
	}
	b.Usable, b.Requested, b.Weight = usable, req, w
}

// LiveBlockAt returns the sampled block that starts at addr, if it is
// live.
func (p *Profile) LiveBlockAt(addr uint64) (LiveBlock, bool) {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	b := p.block(addr)
	if b == nil {
		return LiveBlock{}, false
	}
	v := *b
	v.site = 0 // the table's own
	return v, true
}

// EachLive calls f for every live sampled block, in no set order, until f
// returns false. f must not allocate, free or resize blocks of p; b is
// valid only during the call.
func (p *Profile) EachLive(f func(addr uint64, b *LiveBlock) bool) {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	st := p.store
	st.slotOf.Range(func(a uint64, i uint32) bool { return f(a, st.blocks.At(int(i))) })
}

// LiveCount is the number of live sampled blocks.
func (p *Profile) LiveCount() int { return p.store.slotOf.Len() }

// Site returns the record of one (stack, tag), if any block was sampled
// there.
func (p *Profile) Site(k SiteKey) (Site, bool) {
	st := p.store
	if i, ok := st.siteOf.Get(k.key()); ok {
		return p.atPeak(*st.sites.At(int(i))), true
	}
	return Site{}, false
}

// SiteCount is the number of (stack, tag) records.
func (p *Profile) SiteCount() int { return p.store.siteOf.Len() }

// SortedSites returns copies of the sites (on the Go heap: they outlive
// changes to the profile), most live bytes first (then most allocated).
func (p *Profile) SortedSites() []*Site {
	all := make([]Site, 0, p.store.sites.Len())
	for _, seg := range p.store.sites.Segments() {
		for _, s := range seg {
			all = append(all, p.atPeak(s))
		}
	}
	out := make([]*Site, len(all))
	for i := range all {
		out[i] = &all[i]
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.EstLiveBytes != b.EstLiveBytes {
			return a.EstLiveBytes > b.EstLiveBytes
		}
		if a.EstAllocBytes != b.EstAllocBytes {
			return a.EstAllocBytes > b.EstAllocBytes
		}
		return a.SiteKey.Stack < b.SiteKey.Stack || a.SiteKey.Stack == b.SiteKey.Stack && a.Tag < b.Tag
	})
	return out
}

// ModuleOf finds the module holding address pc.
func (p *Profile) ModuleOf(pc uint64) (*Module, bool) {
	for i := range p.Modules {
		if m := &p.Modules[i]; pc >= m.Start && pc < m.End {
			return m, true
		}
	}
	return nil, false
}
