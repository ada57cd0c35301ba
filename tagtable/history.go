// The bounded event history of a profile (docs/ARCHITECTURE.md, D8; Firefox's
// ProfileChunkedBuffer): every drained alloc, free and resize, stamped
// with the drain's clock, appended to a segvec.Chunked within a byte
// limit whose oldest chunks are recycled. The live table and the sites
// are kept apart and stay exact whatever the history forgets; the
// history answers "when": the timeline of the report.

package tagtable

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"sort"

	"github.com/tagalloc/tagalloc/segvec"
)

// DefaultHistoryLimit is the history's byte limit unless SetHistoryLimit
// says otherwise (tagalloc run --history-limit).
const DefaultHistoryLimit = segvec.DefaultLimit

// History entry kinds.
const (
	histAlloc  = 1
	histFree   = 2
	histResize = 3
)

// An entry is uvarints: kind | ms<<2 (ms: the clock when it was
// drained), site+1 (0: a block the profile never saw), the estimated
// bytes it moved (weight x usable; a resize's change, zigzag-encoded),
// then the address(es), usable and requested sizes:
//
//	alloc   kind|ms, site+1, est, addr, usable, requested
//	free    kind|ms, site+1, est, addr, usable, requested
//	resize  kind|ms, site+1, zigzag(est delta), old, new, usable, requested
//
// 10 to 40 bytes each, most about 20.
const maxHistEntry = 8 * binary.MaxVarintLen64

// HistorySlack is what a history's memory (HistoryStats.Bytes) may hold
// beyond its limit: the copy Range keeps of one entry that crosses the
// end of the ring (segvec.Chunked's scratch buffer).
const HistorySlack = 2 * maxHistEntry

// history is a profile's event log (profileStore.hist), made at the
// first event.
type history struct {
	buf    *segvec.Chunked
	limit  int
	lastMs uint64 // the clock of the newest entry
}

func newHistory(limit int) (*history, error) {
	// at least 16 chunks, so that recycling one forgets a sixteenth
	cb := min(segvec.DefaultChunkBytes, max(limit/16, segvec.MinChunkBytes))
	buf, err := segvec.NewChunked(segvec.Limit(limit), segvec.ChunkBytes(cb), segvec.Name("tagalloc history"))
	if err != nil {
		return nil, fmt.Errorf("history limit %d bytes: %w", limit, err)
	}
	return &history{buf: buf, limit: limit}, nil
}

// SetHistoryLimit sets the byte limit of the profile's history (at least
// 4 KiB is sensible; below segvec.MinChunkBytes it fails), dropping what
// it held. 0 keeps no history.
func (p *Profile) SetHistoryLimit(limit int) error {
	if h := p.store.hist; h != nil {
		h.buf.Close()
		p.store.hist = nil
	}
	p.histLimit = limit
	if limit == 0 {
		return nil
	}
	h, err := newHistory(limit)
	if err != nil {
		p.histLimit = 0
		return err
	}
	p.store.hist = h
	return nil
}

// SetClock sets the time stamped on the events drained from here on, in
// milliseconds since the run began (the drainer sets it at every pass).
func (p *Profile) SetClock(ms uint64) { p.clockMs = ms }

// record appends one event: est is the estimated bytes it allocated (an
// alloc, a resize) or freed (a free); freed, a resize's estimated bytes
// freed (its block's old weight out). The words are addr, usable and
// requested (alloc, free) or old addr, new addr, usable and requested (a
// resize, its new address kept as a varint difference from the old one:
// one byte in place, not seven; realloc_chain's history went from 28 MB
// to 21 MB, and each new megabyte costs the launcher 3-4 ms of first
// touches on the 2-core VM).
func (p *Profile) record(kind uint64, site uint32, est int64, freed uint64, w0, w1, w2, w3 uint64) {
	h := p.store.hist
	if h == nil {
		if p.histLimit == 0 {
			return
		}
		var err error
		if h, err = newHistory(p.histLimit); err != nil {
			p.histLimit = 0 // out of memory: no history, the books go on
			return
		}
		p.store.hist = h
	}
	var b [maxHistEntry]byte
	n := binary.PutUvarint(b[:], kind|p.clockMs<<2)
	n += binary.PutUvarint(b[n:], uint64(site))
	n += binary.PutUvarint(b[n:], uint64(max(est, 0)))
	if kind == histResize {
		n += binary.PutUvarint(b[n:], freed)
	}
	n += binary.PutUvarint(b[n:], w0)
	if kind == histResize { // the new address, as a difference
		n += binary.PutVarint(b[n:], int64(w1-w0))
	} else {
		n += binary.PutUvarint(b[n:], w1)
	}
	n += binary.PutUvarint(b[n:], w2)
	if kind == histResize {
		n += binary.PutUvarint(b[n:], w3)
	}
	_, _ = h.buf.Append(b[:n]) // never too large: at most 72 bytes against a limit of at least 16 chunks
	h.lastMs = p.clockMs
}

// HistoryStats is what the history holds and has forgotten.
type HistoryStats struct {
	LimitBytes    uint64 // the byte limit
	Bytes         uint64 // memory the history holds: chunks written (<= the limit), and Range's copy of one entry (< HistorySlack)
	RetainedBytes uint64 // payload bytes of the events kept
	Events        uint64 // events kept
	Recycled      uint64 // events forgotten with their chunks
	RecycledBytes uint64
	FirstSeq      uint64 // sequence numbers of the events kept: [FirstSeq, NextSeq)
	NextSeq       uint64
	FirstMs       uint64 // the clock of the oldest and newest events kept
	LastMs        uint64
}

// HistoryStats reports on the history (all zero without one).
func (p *Profile) HistoryStats() HistoryStats {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	h := p.store.hist
	if h == nil {
		return HistoryStats{LimitBytes: uint64(p.histLimit)}
	}
	rec, recBytes := h.buf.Dropped()
	st := HistoryStats{LimitBytes: uint64(h.limit), Bytes: uint64(h.buf.Bytes()), RetainedBytes: h.buf.RetainedBytes(),
		Events: uint64(h.buf.Len()), Recycled: rec, RecycledBytes: recBytes, FirstSeq: h.buf.Oldest(), NextSeq: h.buf.Next()}
	h.buf.Range(func(_ uint64, e []byte) bool { // the oldest entry only
		v, _ := binary.Uvarint(e)
		st.FirstMs, st.LastMs = v>>2, h.lastMs
		return false
	})
	return st
}

// HistoryEvent is one decoded history entry.
type HistoryEvent struct {
	Seq   uint64
	Kind  string // alloc, free or resize
	Ms    uint64
	Site  SiteKey
	Known bool  // the block was one the profile held (Site is set)
	Est   int64 // estimated bytes allocated (alloc, resize) or freed (free)
	// EstFreed: a resize's estimated bytes freed (the block as it was
	// counted before, out; Est is it as counted after, in).
	EstFreed int64
	Addr     uint64
	NewAddr  uint64 // resize
	Usable   uint64
	Req      uint64
}

// EachHistory calls f with the events kept, oldest first, until f returns
// false. A malformed entry (which Append never writes) stops it.
func (p *Profile) EachHistory(f func(e HistoryEvent) bool) {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	h := p.store.hist
	if h == nil {
		return
	}
	h.buf.Range(func(seq uint64, b []byte) bool {
		e, ok := p.decodeHistory(seq, b)
		return ok && f(e)
	})
}

// histHead reads an entry's head, n bytes: its kind, clock, site+1 (0:
// a block the profile never saw), estimated bytes and (a resize)
// estimated bytes freed.
func histHead(b []byte) (kind, ms, site, est, freed uint64, n int, ok bool) {
	var v [4]uint64
	k := 0
	for ; k < 4 && n < len(b); k++ {
		x, m := binary.Uvarint(b[n:])
		if m <= 0 {
			return 0, 0, 0, 0, 0, 0, false
		}
		v[k], n = x, n+m
		if k == 2 && v[0]&3 != histResize {
			k++
			break
		}
	}
	kind = v[0] & 3
	if kind == 0 || k < 3 || kind == histResize && k < 4 {
		return 0, 0, 0, 0, 0, 0, false
	}
	return kind, v[0] >> 2, v[1], v[2], v[3], n, true
}

func (p *Profile) decodeHistory(seq uint64, b []byte) (HistoryEvent, bool) {
	e := HistoryEvent{Seq: seq}
	var w [8]uint64
	kind, ms, site, est, freed, n, ok := histHead(b)
	if !ok {
		return e, false
	}
	b = b[n:]
	e.Ms, e.Est, e.EstFreed = ms, int64(est), int64(freed)
	k := 0
	for len(b) > 0 && k < len(w) {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			return e, false
		}
		w[k], b, k = v, b[n:], k+1
	}
	switch kind {
	case histAlloc, histFree:
		if k != 3 {
			return e, false
		}
		e.Kind = "alloc"
		if kind == histFree {
			e.Kind = "free"
		}
		e.Addr, e.Usable, e.Req = w[0], w[1], w[2]
	case histResize:
		if k != 4 {
			return e, false
		}
		e.Kind = "resize"
		e.Addr, e.NewAddr, e.Usable, e.Req = w[0], w[0]+uint64(unzigzag(w[1])), w[2], w[3]
	default:
		return e, false
	}
	if site > 0 && site <= uint64(p.store.sites.Len()) {
		e.Site, e.Known = p.store.sites.At(int(site-1)).SiteKey, true
	}
	return e, true
}

// Timeline is the history cut into time buckets: estimated bytes
// allocated and freed in each, for all the events kept and for the sites
// that allocated most in the span.
type Timeline struct {
	StartMs, BucketMs uint64
	Total             TimelineSeries
	Sites             []TimelineSeries
}

// TimelineSeries is one series of a Timeline (Site is zero for the
// total).
type TimelineSeries struct {
	Site       SiteKey
	AllocBytes []uint64 // per bucket: estimated bytes allocated (and grown by realloc)
	FreeBytes  []uint64 // per bucket: estimated bytes freed (and shrunk by realloc)
}

// Timeline cuts the history's span into buckets (at least 1) and sums
// each bucket's events, for the total and the top sites by estimated
// bytes allocated within the span.
func (p *Profile) Timeline(buckets, top int) Timeline {
	defer runtime.KeepAlive(p) // the store is read after p's last use (see Close)
	st := p.HistoryStats()
	buckets = max(buckets, 1)
	span := st.LastMs - st.FirstMs + 1
	bms := max((span+uint64(buckets)-1)/uint64(buckets), 1)
	tl := Timeline{StartMs: st.FirstMs, BucketMs: bms}
	if st.Events == 0 {
		return tl
	}
	nb := int((span + bms - 1) / bms)
	newSeries := func(k SiteKey) *TimelineSeries {
		return &TimelineSeries{Site: k, AllocBytes: make([]uint64, nb), FreeBytes: make([]uint64, nb)}
	}
	total := newSeries(SiteKey{})
	// by site index: a report's timeline reads millions of entries (64
	// MiB of them by default), after the program has exited, so each is
	// read only as far as its head, into slices rather than maps
	nsites := uint64(p.store.sites.Len())
	bySite := make([]*TimelineSeries, nsites)
	allocBy := make([]uint64, nsites)
	p.store.hist.buf.Range(func(_ uint64, b []byte) bool {
		kind, ms, site, est, freed, _, ok := histHead(b)
		if !ok {
			return false
		}
		i := min(int((ms-st.FirstMs)/bms), nb-1)
		var a, f uint64
		switch kind {
		case histAlloc:
			a = est
		case histFree:
			f = est
		default:
			a, f = est, freed
		}
		total.AllocBytes[i] += a
		total.FreeBytes[i] += f
		if site == 0 || site > nsites {
			return true
		}
		s := bySite[site-1]
		if s == nil {
			s = newSeries(p.store.sites.At(int(site - 1)).SiteKey)
			bySite[site-1] = s
		}
		s.AllocBytes[i] += a
		s.FreeBytes[i] += f
		allocBy[site-1] += a
		return true
	})
	tl.Total = *total
	var keys []int // site indexes
	for k, s := range bySite {
		if s != nil {
			keys = append(keys, k)
		}
	}
	sort.Slice(keys, func(i, j int) bool {
		x, y := keys[i], keys[j]
		if allocBy[x] != allocBy[y] {
			return allocBy[x] > allocBy[y]
		}
		a, b := bySite[x].Site, bySite[y].Site
		return a.Stack < b.Stack || a.Stack == b.Stack && a.Tag < b.Tag
	})
	for _, k := range keys[:min(top, len(keys))] {
		tl.Sites = append(tl.Sites, *bySite[k])
	}
	return tl
}

func estBytes(w float64, usable uint64) int64 { return int64(math.Round(w * float64(usable))) }

// unzigzag is binary.Varint's value of a word written by binary.PutVarint
// and read back as a uvarint (0, 1, 2, 3 ... to 0, -1, 1, -2 ...).
func unzigzag(u uint64) int64 { return int64(u>>1) ^ -int64(u&1) }
