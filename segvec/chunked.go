// Chunked, the bounded history (Firefox's ProfileChunkedBuffer):
// variable-length entries in a ring of fixed-size chunks, the oldest
// chunk recycled, with the entries that start in it, when the writer
// needs room.

package segvec

import (
	"encoding/binary"
	"fmt"
	"iter"
	"math/bits"
)

// Chunked is a byte-limited history of variable-length entries.
//
// Layout: one mapping of Cap bytes (MAP_NORESERVE: a page costs memory
// once written) cut into N = Limit/ChunkBytes chunks. Entries form one
// stream, each a uvarint length and then its bytes; stream byte b lives
// in chunk b/ChunkBytes, at ring offset b mod Cap, so an entry crossing
// chunk boundaries is contiguous in memory unless it crosses the end of
// the ring. The stream has a gap only where an entry would need more
// than N chunks from where it would start: it then starts at the next
// chunk boundary (the rest of the chunk is padding, recorded in the
// chunk's used count).
//
// Recycling is by whole chunks: entering chunk k when N chunks are live
// recycles chunk k-N, dropping every entry that starts in it (an entry
// that straddles into the next chunk goes entirely: never half of one).
// So the retained entries are exactly those that start in the newest N
// chunks, and their encoded bytes are at most Cap. The retained part is
// at least (N-1) chunks' worth once the buffer has wrapped, less any
// padding, so pick Limit >= 4*ChunkBytes for a smooth history.
//
// An entry whose encoded size exceeds Cap is refused (ErrTooLarge). An
// entry of Cap bytes is kept, alone.
//
// Sequence numbers: entries are numbered 0, 1, 2, ... in append order.
// Retained are Oldest() .. Next()-1, and Oldest() == the entries dropped.
//
// Not safe for concurrent use: one goroutine at a time (the caller's
// lock). Range's callback must not call Append, Reset or Close (they
// panic).
type Chunked struct {
	ring     []byte      // len cap; chunk k at ring[(k%n)*cb:][:cb]
	mapping  []byte      // the mapping behind ring, for munmap
	meta     []chunkMeta // one per slot: meta[k%n] describes live chunk k
	cb       uint64      // bytes per chunk
	n        uint64      // chunks
	capBytes uint64      // n * cb

	// The writer. Live chunks are [head, next): next-head <= n. The
	// current chunk is next-1 (if any is live), at stream position
	// curStart, ring offset curBase, slot curSlot.
	// curStart <= tail <= curEnd == curStart+cb; with no live chunk,
	// tail == curEnd == next*cb (the next byte enters a chunk).
	tail     uint64 // stream position of the next byte
	head     uint64
	next     uint64
	curStart uint64
	curEnd   uint64
	curBase  uint64
	curSlot  uint64
	// ready: the stream position up to which the current chunk's pages
	// are known to be in memory (populate); curStart <= ready <= curEnd,
	// and the fast path writes below it.
	ready uint64

	// Counts. seq - oldest == Len; oldest == entries dropped;
	// appendedBytes == droppedBytes + (payload bytes of live chunks).
	seq           uint64 // the next entry's sequence number
	oldest        uint64 // the oldest retained entry's
	droppedBytes  uint64 // payload bytes of dropped entries
	appendedBytes uint64 // payload bytes ever appended

	purgedAt uint64 // next at the last purge: slots touched since == min(n, next-purgedAt)
	scratch  []byte // Range's copy of an entry crossing the ring's end
	state    uint8  // stateClosed | stateRanging
}

// chunkMeta describes one live chunk (ProfileBufferChunk's header).
type chunkMeta struct {
	first    uint64 // stream position of the first entry starting here (if entries > 0)
	firstSeq uint64 // its sequence number
	used     uint64 // bytes written into the chunk: cb unless newest or padded
	entries  uint64 // entries that start here
	bytes    uint64 // their payload bytes
}

const (
	stateClosed = 1 << iota
	stateRanging
)

// scratchKeep is the largest scratch buffer kept between Ranges.
const scratchKeep = 1 << 20

// NewChunked returns an empty history. Options: ChunkBytes, Limit, Name.
// It maps the whole capacity at once (untouched pages cost nothing).
func NewChunked(opts ...Option) (*Chunked, error) {
	c, err := build(opts, optSegment, "Chunked")
	if err != nil {
		return nil, err
	}
	cb, limit := c.chunkBytes, c.limit
	if limit < cb {
		cb = limit
	}
	n := limit / cb
	if n > MaxChunks {
		return nil, fmt.Errorf("%w: Limit %d / ChunkBytes %d = %d chunks, more than %d: raise ChunkBytes", ErrOption, limit, cb, n, MaxChunks)
	}
	name := c.name
	if name == "" {
		name = "tagalloc history"
	}
	size := n * cb
	m, err := osMap(roundUp(size, pageSize), name, true, false)
	if err != nil {
		return nil, fmt.Errorf("%w: mapping a %d-byte history: %v", ErrOutOfMemory, size, err)
	}
	return &Chunked{
		ring: m[:size], mapping: m, meta: make([]chunkMeta, n),
		cb: uint64(cb), n: uint64(n), capBytes: uint64(size),
	}, nil
}

// Append adds an entry (a copy of p) and returns its sequence number. It
// recycles the oldest chunks as needed; it refuses an entry whose
// encoded size (uvarint length + len(p)) is more than Cap with an
// ErrTooLarge (no sequence number is used).
func (c *Chunked) Append(p []byte) (uint64, error) {
	if c.state != 0 {
		c.misuse("Append")
	}
	l := uint64(len(p))
	h := uvarintLen(l)
	e := h + l
	if c.tail+e > c.ready {
		if c.tail+e > c.curEnd {
			return c.appendSlow(p, l, h, e)
		}
		c.populate(c.tail + e)
	}
	// Fast path: the entry fits in the current chunk.
	ph := c.curBase + (c.tail - c.curStart)
	dst := c.ring[ph : ph+e]
	binary.PutUvarint(dst, l)
	copy(dst[h:], p)
	m := &c.meta[c.curSlot]
	if m.entries == 0 {
		m.first, m.firstSeq = c.tail, c.seq
	}
	m.entries++
	m.bytes += l
	c.tail += e
	m.used = c.tail - c.curStart
	c.appendedBytes += l
	s := c.seq
	c.seq++
	return s, nil
}

// appendSlow appends an entry that does not fit in the current chunk:
// it pads if the entry would need more than n chunks from here, enters
// new chunks (recycling the oldest) and writes piecewise.
func (c *Chunked) appendSlow(p []byte, l, h, e uint64) (uint64, error) {
	if e > c.capBytes {
		return 0, fmt.Errorf("%w: entry of %d bytes (%d encoded) > capacity %d bytes (%d chunks of %d): raise Limit", ErrTooLarge, l, e, c.capBytes, c.n, c.cb)
	}
	if c.tail < c.curEnd {
		off := c.tail - c.curStart
		if (off+e+c.cb-1)/c.cb > c.n {
			c.tail = c.curEnd // padding: the chunk's used count stays at off
		}
	}
	if c.tail == c.curEnd {
		c.enter()
	}
	m := &c.meta[c.curSlot]
	if m.entries == 0 {
		m.first, m.firstSeq = c.tail, c.seq
	}
	m.entries++
	m.bytes += l
	var hdr [binary.MaxVarintLen64]byte
	binary.PutUvarint(hdr[:], l)
	c.write(hdr[:h])
	c.write(p)
	c.appendedBytes += l
	s := c.seq
	c.seq++
	return s, nil
}

// write copies b at the tail, entering chunks as it goes. It never
// enters one for nothing: an entry ending on a boundary leaves tail ==
// curEnd for the next append.
func (c *Chunked) write(b []byte) {
	for len(b) > 0 {
		if c.tail == c.curEnd {
			c.enter()
		}
		if end := min(c.curEnd, c.tail+uint64(len(b))); end > c.ready {
			c.populate(end)
		}
		off := c.tail - c.curStart
		k := copy(c.ring[c.curBase+off:c.curBase+c.cb], b)
		b = b[k:]
		c.tail += uint64(k)
		c.meta[c.curSlot].used = c.tail - c.curStart
	}
}

// enter makes chunk next the current one, recycling the oldest live
// chunk first if n are live.
func (c *Chunked) enter() {
	if c.next-c.head == c.n {
		c.recycle()
	}
	slot := c.next % c.n
	c.meta[slot] = chunkMeta{}
	c.curStart = c.next * c.cb
	c.curEnd = c.curStart + c.cb
	c.curSlot = slot
	c.curBase = slot * c.cb
	c.tail = c.curStart
	c.next++
	c.ready = c.curEnd // written before (and not purged since): in memory
	if c.next-c.purgedAt <= c.n {
		c.ready = c.curStart // the first lap since the mapping was purged
	}
	if c.curStart >= hugeFrom && c.curStart-c.cb < hugeFrom { // the first chunk from there (chunks are entered in order)
		osHuge(c.mapping)
	}
}

// populate brings the current chunk's pages into memory up to stream
// position end, populateBytes at a time, in one call each: the history
// is written in order, and a page faulted in by a write cost 14 us on
// the 2-core VM, populated 1.2-2.8 us (a throwaway test over 512 pages).
// Where the kernel cannot, the pages fault in as before.
func (c *Chunked) populate(end uint64) {
	to := min(c.curEnd, roundUp64(end, populateBytes))
	base := c.curBase - c.curStart // ring offset = stream position + base
	osPopulate(c.ring[c.ready+base : to+base])
	c.ready = to
}

// populateBytes is how much of a chunk populate brings in at a time.
const populateBytes = 64 << 10

func roundUp64(v, to uint64) uint64 { return (v + to - 1) / to * to }

// hugeFrom is how much a history writes before it asks for huge pages:
// the writer's stream through cold memory (64 MiB by default, recycled)
// then misses the TLB once in 2 MiB, not once a page (BenchmarkDrainLive
// drained a tenth faster), while the histories of a forking server's
// short-lived children stay in small pages (a huge page would hold 2 MiB
// of each, written or not).
const hugeFrom = 4 << 20

// recycle drops the oldest live chunk and the entries that start in it.
func (c *Chunked) recycle() {
	m := &c.meta[c.head%c.n]
	c.oldest += m.entries
	c.droppedBytes += m.bytes
	c.head++
}

// Range calls fn for each retained entry, oldest to newest, until fn
// returns false. p aliases the buffer's memory, or for an entry crossing
// the end of the ring a scratch buffer reused by the next entry: either
// way it is valid only during the call; copy what you keep. fn must not
// modify c.
func (c *Chunked) Range(fn func(seq uint64, p []byte) bool) {
	if c.state&stateClosed != 0 {
		c.misuse("Range")
	}
	if c.oldest == c.seq {
		return
	}
	c.state |= stateRanging
	defer func() {
		c.state &^= stateRanging
		if cap(c.scratch) > scratchKeep {
			c.scratch = nil
		}
	}()
	// The first live chunk in which an entry starts (older live chunks
	// hold the rest of an entry whose start was recycled).
	k, slot := c.head, c.head%c.n
	for c.meta[slot].entries == 0 {
		k++
		if slot++; slot == c.n {
			slot = 0
		}
	}
	m := &c.meta[slot]
	start := k * c.cb
	cur := cursor{pos: m.first, ph: slot*c.cb + (m.first - start), end: start + c.cb, usedEnd: start + m.used, slot: slot}
	for seq := c.oldest; seq < c.seq; seq++ {
		if cur.pos == cur.usedEnd {
			// The chunk's data ends here (full, or padded) and an entry
			// follows: it starts at the next chunk.
			cur.pos = cur.end
			c.nextChunk(&cur)
			cur.ph = cur.slot * c.cb
		}
		l, h := c.uvarintAt(cur.ph)
		c.skip(&cur, h)
		var p []byte
		if cur.ph+l <= c.capBytes {
			p = c.ring[cur.ph : cur.ph+l : cur.ph+l]
		} else {
			c.scratch = append(append(c.scratch[:0], c.ring[cur.ph:]...), c.ring[:l-(c.capBytes-cur.ph)]...)
			p = c.scratch
		}
		c.skip(&cur, l)
		if !fn(seq, p) {
			return
		}
	}
}

// All is Range as an iterator.
func (c *Chunked) All() iter.Seq2[uint64, []byte] {
	return func(yield func(uint64, []byte) bool) { c.Range(yield) }
}

// cursor is Range's position: stream position pos at ring offset ph, in
// the live chunk at slot whose data ends at usedEnd and which ends at
// end (stream positions).
type cursor struct {
	pos, ph, end, usedEnd, slot uint64
}

// skip advances the cursor by n bytes of one entry (no padding inside).
func (c *Chunked) skip(cur *cursor, n uint64) {
	cur.pos += n
	if cur.ph += n; cur.ph >= c.capBytes {
		cur.ph -= c.capBytes
	}
	for cur.pos > cur.end {
		c.nextChunk(cur)
	}
}

// nextChunk moves the cursor's chunk bookkeeping to the next chunk.
func (c *Chunked) nextChunk(cur *cursor) {
	if cur.slot++; cur.slot == c.n {
		cur.slot = 0
	}
	cur.usedEnd = cur.end + c.meta[cur.slot].used
	cur.end += c.cb
}

// uvarintAt decodes the length prefix at ring offset ph, which may cross
// the end of the ring.
func (c *Chunked) uvarintAt(ph uint64) (v, n uint64) {
	x, k := binary.Uvarint(c.ring[ph:min(ph+binary.MaxVarintLen64, c.capBytes)])
	if k <= 0 {
		var tmp [binary.MaxVarintLen64]byte
		j := copy(tmp[:], c.ring[ph:])
		copy(tmp[j:], c.ring)
		x, k = binary.Uvarint(tmp[:])
		if k <= 0 {
			panic(fmt.Sprintf("segvec: Chunked corrupt: bad length prefix at ring offset %d", ph))
		}
	}
	return x, uint64(k)
}

// Len returns the number of retained entries.
func (c *Chunked) Len() int { return int(c.seq - c.oldest) }

// Oldest returns the sequence number of the oldest retained entry (equal
// to Next when empty, and to the number of entries dropped).
func (c *Chunked) Oldest() uint64 { return c.oldest }

// Next returns the sequence number the next Append will return.
func (c *Chunked) Next() uint64 { return c.seq }

// Dropped returns the entries recycled (or removed by Reset and Close)
// so far and their payload bytes (without the length prefixes).
func (c *Chunked) Dropped() (entries, bytes uint64) { return c.oldest, c.droppedBytes }

// RetainedBytes returns the payload bytes of the retained entries.
func (c *Chunked) RetainedBytes() uint64 { return c.appendedBytes - c.droppedBytes }

// Bytes returns the memory held: the chunks written since the last
// Reset (each is resident once written), plus Range's scratch buffer.
func (c *Chunked) Bytes() int {
	return int(min(c.n, c.next-c.purgedAt)*c.cb) + cap(c.scratch)
}

// Cap returns the capacity: the chunk count times ChunkBytes, at most
// Limit. It is also the largest encoded entry accepted.
func (c *Chunked) Cap() int { return int(c.capBytes) }

// ChunkBytes returns the chunk size in use (the option, or the Limit if
// that was smaller).
func (c *Chunked) ChunkBytes() int { return int(c.cb) }

// Reset drops every entry (counted in Dropped; sequence numbers go on)
// and gives the memory back to the OS (MADV_DONTNEED); the mapping stays
// for reuse.
func (c *Chunked) Reset() {
	if c.state != 0 {
		c.misuse("Reset")
	}
	c.dropAll()
	osPurge(c.mapping)
	c.purgedAt = c.next
	c.scratch = nil
}

func (c *Chunked) dropAll() {
	c.oldest = c.seq
	c.droppedBytes = c.appendedBytes
	c.head = c.next
	c.tail = c.next * c.cb
	c.curEnd = c.tail
}

// Close drops every entry (as Reset) and unmaps the buffer. Afterwards
// Append, Range and Reset panic; Close again does nothing.
func (c *Chunked) Close() error {
	if c.state&stateClosed != 0 {
		return nil
	}
	if c.state != 0 {
		c.misuse("Close")
	}
	c.dropAll()
	c.purgedAt = c.next
	err := osUnmap(c.mapping)
	c.ring, c.mapping, c.meta, c.scratch = nil, nil, nil, nil
	c.state = stateClosed
	return err
}

func (c *Chunked) misuse(op string) {
	if c.state&stateClosed != 0 {
		panic("segvec: Chunked." + op + " after Close")
	}
	panic("segvec: Chunked." + op + " inside Range (the callback must not modify the buffer)")
}

// check verifies the invariants, walking every retained entry (tests
// call it after every step).
func (c *Chunked) check() error {
	if c.state&stateClosed != 0 {
		if c.seq != c.oldest {
			return fmt.Errorf("segvec: closed with %d entries", c.seq-c.oldest)
		}
		return nil
	}
	live := c.next - c.head
	switch {
	case c.capBytes != c.n*c.cb || uint64(len(c.ring)) != c.capBytes || uint64(len(c.meta)) != c.n:
		return fmt.Errorf("segvec: geometry: cap %d, %d chunks of %d, ring %d, meta %d", c.capBytes, c.n, c.cb, len(c.ring), len(c.meta))
	case c.head > c.next || live > c.n:
		return fmt.Errorf("segvec: live chunks [%d, %d) with %d slots", c.head, c.next, c.n)
	case live == 0 && (c.tail != c.next*c.cb || c.curEnd != c.tail):
		return fmt.Errorf("segvec: no live chunk but tail %d, curEnd %d, next %d", c.tail, c.curEnd, c.next)
	case live > 0 && (c.curStart != (c.next-1)*c.cb || c.curEnd != c.curStart+c.cb || c.tail < c.curStart || c.tail > c.curEnd ||
		c.curSlot != (c.next-1)%c.n || c.curBase != c.curSlot*c.cb):
		return fmt.Errorf("segvec: current chunk: start %d end %d slot %d base %d, tail %d, next %d", c.curStart, c.curEnd, c.curSlot, c.curBase, c.tail, c.next)
	case live > 0 && c.meta[c.curSlot].used != c.tail-c.curStart:
		return fmt.Errorf("segvec: current chunk used %d, tail at %d", c.meta[c.curSlot].used, c.tail-c.curStart)
	case c.oldest > c.seq || c.droppedBytes > c.appendedBytes:
		return fmt.Errorf("segvec: oldest %d > next %d, or dropped %d > appended %d bytes", c.oldest, c.seq, c.droppedBytes, c.appendedBytes)
	}
	var entries, bytes uint64
	seq := c.oldest
	for k := c.head; k < c.next; k++ {
		m := c.meta[k%c.n]
		if m.used > c.cb || m.entries > 0 && (m.first < k*c.cb || m.first >= k*c.cb+m.used || m.firstSeq != seq+entries) {
			return fmt.Errorf("segvec: chunk %d: %+v (first seq want %d)", k, m, seq+entries)
		}
		if k < c.next-1 && m.used < c.cb && c.meta[(k+1)%c.n].entries == 0 {
			return fmt.Errorf("segvec: chunk %d padded but chunk %d starts no entry", k, k+1)
		}
		entries += m.entries
		bytes += m.bytes
	}
	if entries != c.seq-c.oldest || bytes != c.appendedBytes-c.droppedBytes {
		return fmt.Errorf("segvec: live chunks hold %d entries, %d bytes; counters say %d, %d", entries, bytes, c.seq-c.oldest, c.appendedBytes-c.droppedBytes)
	}
	var walked, walkedBytes, encoded uint64
	var bad error
	c.Range(func(s uint64, p []byte) bool {
		if s != seq+walked {
			bad = fmt.Errorf("segvec: Range gave seq %d, want %d", s, seq+walked)
			return false
		}
		walked++
		walkedBytes += uint64(len(p))
		encoded += uvarintLen(uint64(len(p))) + uint64(len(p))
		return true
	})
	if bad != nil {
		return bad
	}
	if walked != entries || walkedBytes != bytes || encoded > c.capBytes {
		return fmt.Errorf("segvec: Range walked %d entries, %d bytes (%d encoded, cap %d); want %d, %d", walked, walkedBytes, encoded, c.capBytes, entries, bytes)
	}
	return nil
}

// uvarintLen is the encoded size of x as a uvarint: 1 + (bits-1)/7.
func uvarintLen(x uint64) uint64 { return uint64(bits.Len64(x|1)+6) / 7 }
