package tagtable

import (
	"encoding/binary"
	"fmt"
	"os"
	"runtime/debug"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
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
}

// OpenEvents maps an events file read-write (the reader advances the
// tail, so the writer can reuse the space). Everything in the header is
// checked before use. The file is the process's: it must be a regular file
// (not a FIFO that would block, nor a link elsewhere), and reading its
// mapping after the process truncated it gives an error, not SIGBUS.
func OpenEvents(path string) (ev *Events, err error) {
	f, err := openOwnedFile(path, unix.O_RDWR)
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

// copyOut reads n bytes at ring position pos (wrapping).
func (e *Events) copyOut(dst []byte, pos uint64) {
	off := pos & e.mask
	k := copy(dst, e.ring[off:])
	copy(dst[k:], e.ring)
}

// Drain decodes every committed record into sink, frees their space for
// the writer, and returns how many it read. A malformed record stops the
// drain with an error (the rest of the ring is not trusted).
func (e *Events) Drain(sink EventSink) (n int, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer recoverFault(&err)
	h := e.hdr
	tail := atomic.LoadUint64(&h.Tail)
	head := atomic.LoadUint64(&h.Head)
	t, _ := sink.(toucher)
	var (
		wrapped [8 + 4096 + 64 + 48]byte // the one record of a batch that wraps
		recs    [drainBatch][]byte       // the batch's records, their headers included
		blocks  [2 * drainBatch]uint64   // the addresses they look up
		sites   [drainBatch]uint64       // the sites they charge (SiteKey.key)
	)
	for tail < head {
		// Read ahead: a batch of committed records, in place in the ring
		// but for one that wraps (the batch ends with it).
		k, pos := 0, tail
		for k < drainBatch && pos < head {
			off := pos & e.mask
			first := atomic.LoadUint64((*uint64)(unsafe.Pointer(&e.ring[off])))
			if first == 0 {
				break // reserved, not yet written
			}
			size, typ := first&0xffffffff, first>>32
			if size < 8 || size%8 != 0 || size > uint64(len(wrapped)) || size > head-pos {
				if k == 0 {
					return n, fail("event at %d: length %d (type %d)", pos, size, typ)
				}
				break // decode the records before it first
			}
			wraps := off+size > uint64(len(e.ring))
			if wraps {
				recs[k] = wrapped[:size]
				e.copyOut(recs[k], pos)
			} else {
				recs[k] = e.ring[off : off+size]
			}
			k++
			pos += size
			if wraps {
				break
			}
		}
		if k == 0 {
			break
		}
		if t != nil {
			nb, ns := 0, 0
			for _, r := range recs[:k] {
				nb, ns = lookups(binary.LittleEndian.Uint64(r)>>32, r[8:], blocks[:], nb, sites[:], ns)
			}
			t.touch(blocks[:nb], sites[:ns])
		}
		start := tail
		for _, r := range recs[:k] {
			size := uint64(len(r))
			if err := decode(binary.LittleEndian.Uint64(r)>>32, r[8:], sink); err != nil {
				e.release(start, tail)
				return n, fmt.Errorf("event at %d: %w", tail, err)
			}
			tail += size
			n++
		}
		e.release(start, tail)
	}
	return n, nil
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
