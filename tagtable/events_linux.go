package tagtable

import (
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tagalloc/tagalloc/internal/ownedfile"
)

// Events is a process's mapped events file.
type Events struct {
	f    *os.File
	mem  []byte
	hdr  *evHeader
	ring []byte
	mask uint64
	// the header's identity, copied at open (the process may truncate
	// its file under the mapping later; these never change)
	pid, mode, forkPPID uint32
	rate, forkSeq       uint64
	scratch             *drainScratch // Drain's, made at its first call
	ready               uint64        // ring bytes (from its start) populated in our mapping
}

// drainScratch is Drain's room, kept between drains (a drain of a few
// records would otherwise clear 12 KiB of stack first).
type drainScratch struct {
	// The one record that wraps: [tail, head) is at most a ring long, so
	// it holds one at most.
	wrapped [8 + 4096 + 64 + 48]byte
	recs    [drainAhead][]byte // record i (from a drain's first) is recs[i%drainAhead]
	ahead   lookahead
}

// OpenEvents maps an events file read-write (the reader advances the
// tail, so the writer can reuse the space). Everything in the header is
// checked before use. The file is the process's: it must be a regular file
// (not a FIFO that would block, nor a link elsewhere), and reading its
// mapping after the process truncated it gives an error, not SIGBUS.
func OpenEvents(path string) (ev *Events, err error) {
	f, err := ownedfile.Open(path, unix.O_RDWR, ErrFormat)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Size() < evHeaderSize {
		f.Close()
		return nil, fmt.Errorf("%s: %w: %d bytes, too short for an events header", path, ErrFormat, st.Size())
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	e := &Events{f: f, mem: mem, hdr: (*evHeader)(unsafe.Pointer(&mem[0]))}
	if err := e.validate(uint64(st.Size())); err != nil {
		e.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return e, nil
}

func (e *Events) validate(size uint64) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	h := e.hdr
	if string(h.Magic[:]) != EventsMagic {
		return fail("events magic %q, want %q", h.Magic[:], EventsMagic)
	}
	if h.Version != EventsVersion {
		return fail("events layout version %d; this tagalloc reads version %d", h.Version, EventsVersion)
	}
	if h.HeaderSize != evHeaderSize || unsafe.Sizeof(evHeader{}) != evHeaderSize {
		return fail("events header size %d, want %d", h.HeaderSize, evHeaderSize)
	}
	if r := h.RingSize; r < 4096 || r&(r-1) != 0 || r > size-evHeaderSize {
		return fail("events ring of %d bytes in a file of %d", r, size)
	}
	e.ring = e.mem[evHeaderSize : evHeaderSize+h.RingSize]
	e.mask = h.RingSize - 1
	e.pid, e.mode, e.rate, e.forkPPID, e.forkSeq = h.PID, h.Mode, h.SampleRate, h.ForkPPID, h.ForkSeq
	return nil
}

// Close unmaps the file.
func (e *Events) Close() error {
	if e.mem != nil {
		unix.Munmap(e.mem)
		e.mem = nil
	}
	return e.f.Close()
}

// PID is the process that writes the ring.
func (e *Events) PID() int { return int(e.pid) }

// Mode is "sampled" or "full".
func (e *Events) Mode() string {
	if e.mode == 2 {
		return "full"
	}
	return "sampled"
}

// ForkedFrom names the FORK event in the parent's ring at which this
// process was forked without exec (ppid 0: it was not).
func (e *Events) ForkedFrom() (ppid int, seq uint64) { return int(e.forkPPID), e.forkSeq }

// SampleRate is the mean number of bytes between samples (1: every block).
func (e *Events) SampleRate() uint64 { return max(e.rate, 1) }

// Dropped is what the writer could not put in a full ring: events, and
// the usable bytes of the sampled blocks among them (0 if the file was
// truncated).
func (e *Events) Dropped() (events, bytes uint64) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var err error
	defer recoverFault(&err)
	return atomic.LoadUint64(&e.hdr.Dropped), atomic.LoadUint64(&e.hdr.DroppedBytes)
}

// Backlog is the share of the ring written and not yet drained (0 to 1;
// 0 if the file was truncated).
func (e *Events) Backlog() (b float64) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var err error
	defer recoverFault(&err)
	used := atomic.LoadUint64(&e.hdr.Head) - atomic.LoadUint64(&e.hdr.Tail)
	return min(float64(used)/float64(len(e.ring)), 1)
}

// Head is where the writer has reserved the ring up to: bytes since it
// began, only growing (0 if the file was truncated).
func (e *Events) Head() (h uint64) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	var err error
	defer recoverFault(&err)
	return atomic.LoadUint64(&e.hdr.Head)
}

// Size is the ring's length in bytes.
func (e *Events) Size() uint64 { return uint64(len(e.ring)) }

// copyOut reads n bytes at ring position pos (wrapping).
func (e *Events) copyOut(dst []byte, pos uint64) {
	off := pos & e.mask
	k := copy(dst, e.ring[off:])
	copy(dst[k:], e.ring)
}

// Drain decodes every committed record into sink, frees their space for
// the writer, and returns how many it read. A malformed record stops the
// drain with an error (the rest of the ring is not trusted). One goroutine
// drains an Events at a time.
//
// Records are read ahead of decoding, in place in the ring (but for the
// one that wraps around its end, copied). For a sink that is a prefetcher
// (a Profile with a large live set), while batch i is decoded what the
// lookups of batches i+1, i+2 and i+3 will read is on its way into the
// caches, a step of the lookup for each batch (prefetcher).
func (e *Events) Drain(sink EventSink) (n int, err error) { return e.DrainTo(sink, math.MaxUint64) }

// DrainTo is Drain of the records before ring position limit (a Head
// read earlier: a record boundary), so that a reader can stamp records
// with the time it saw the writer reach a position.
func (e *Events) DrainTo(sink EventSink, limit uint64) (n int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	h := e.hdr
	tail := atomic.LoadUint64(&h.Tail)
	head := min(atomic.LoadUint64(&h.Head), limit)
	e.populate(head)
	pf, _ := sink.(prefetcher)
	if e.scratch == nil {
		e.scratch = new(drainScratch)
	}
	wrapped, recs, ahead := e.scratch.wrapped[:], &e.scratch.recs, &e.scratch.ahead
	var (
		read  int                // records read from the ring
		steps [prefetchSteps]int // records prefetched to each step
		pos   = tail
		stop  error // why reading stopped short of head
	)
	for {
		for read-n < drainAhead && pos < head && stop == nil {
			off := pos & e.mask
			first := atomic.LoadUint64((*uint64)(unsafe.Pointer(&e.ring[off])))
			if first == 0 {
				break // reserved, not yet written
			}
			size, typ := first&0xffffffff, first>>32
			if size < 8 || size%8 != 0 || size > uint64(len(wrapped)) || size > head-pos {
				stop = fail("event at %d: length %d (type %d)", pos, size, typ)
				break // decode the records before it first
			}
			r := &recs[read%drainAhead]
			if off+size > uint64(len(e.ring)) {
				*r = wrapped[:size]
				e.copyOut(*r, pos)
			} else {
				*r = e.ring[off : off+size]
			}
			read++
			pos += size
		}
		if n == read {
			return n, stop
		}
		if pf != nil && pf.prefetching() {
			for k := range steps { // step k a batch ahead of step k+1
				steps[k] = ahead.prefetch(pf, k, recs, max(steps[k], n), min(read, n+(prefetchSteps-k)*drainBatch))
			}
		}
		start := tail
		for end := min(read, n+drainBatch); n < end; n++ {
			r := recs[n%drainAhead]
			if err := decode(binary.LittleEndian.Uint64(r)>>32, r[8:], sink); err != nil {
				e.release(start, tail)
				return n, fmt.Errorf("event at %d: %w", tail, err)
			}
			tail += uint64(len(r))
		}
		e.release(start, tail)
	}
}

// populate maps the pages of the ring up to position end (in its first
// lap) into our mapping in one call, before the drain reads and zeroes
// them. Faulted in one at a time, each page cost a read fault and a write
// fault: 19 us a page on ext4 on the 2-core VM, 3-4 us populated (a
// throwaway test over 1,024 pages); larson's drains took 150 of them.
// Where the kernel cannot (before Linux 5.14) pages fault in as before.
func (e *Events) populate(end uint64) {
	size := uint64(len(e.ring))
	if e.ready >= size || end <= e.ready {
		return
	}
	end = min(size, end)
	page := uint64(os.Getpagesize())
	from := (evHeaderSize + e.ready) &^ (page - 1)
	to := min(uint64(len(e.mem)), (evHeaderSize+end+page-1)&^(page-1))
	if unix.Madvise(e.mem[from:to], unix.MADV_POPULATE_WRITE) != nil {
		end = size // unsupported, or the file was truncated: fault them in
	}
	e.ready = end
}

// lookahead is the room prefetch needs.
type lookahead struct {
	blocks [2 * drainAhead]uint64
	sites  [drainAhead]uint64
	lines  [6 * drainAhead]uintptr
}

// prefetch prefetches what pf finds at step for records [from, to), and
// returns to.
func (a *lookahead) prefetch(pf prefetcher, step int, recs *[drainAhead][]byte, from, to int) int {
	nb, ns := 0, 0
	for i := from; i < to; i++ {
		r := recs[i%drainAhead]
		nb, ns = lookups(binary.LittleEndian.Uint64(r)>>32, r[8:], a.blocks[:], nb, a.sites[:], ns)
	}
	prefetch(pf.ahead(step, a.blocks[:nb], a.sites[:ns], a.lines[:0]))
	return to
}

// release zeroes the ring from start to end, so the writer's next lap
// finds uncommitted words, and hands the space back.
func (e *Events) release(start, end uint64) {
	if end == start {
		return
	}
	off := start & e.mask
	stop := min(off+(end-start), uint64(len(e.ring)))
	clear(e.ring[off:stop])
	clear(e.ring[:end-start-(stop-off)])
	atomic.StoreUint64(&e.hdr.Tail, end)
}
