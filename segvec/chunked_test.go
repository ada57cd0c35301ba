package segvec

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// model is the Chunked contract, written independently of the ring: the
// entries form a stream of encoded sizes (uvarint + payload); an entry
// that would span more than n chunks from the stream's end starts at the
// next chunk boundary instead; after each append the retained entries
// are those that start in the newest n chunks, i.e. at or after
// chunk(last byte written)-n+1. Reset drops everything and moves the end
// to the next boundary. An encoded size over n*cb is refused.
type model struct {
	cb, n    uint64
	pos      uint64 // end of the stream
	next     uint64
	retained []modelEntry
	dropped  uint64
	dropB    uint64
}

type modelEntry struct{ seq, start, len uint64 }

func (m *model) append(l uint64) (uint64, bool) {
	e := uint64(len(binary.AppendUvarint(nil, l))) + l
	if e > m.n*m.cb {
		return 0, false
	}
	s := m.pos
	if (s+e-1)/m.cb-s/m.cb+1 > m.n {
		s = (s + m.cb - 1) / m.cb * m.cb
	}
	m.pos = s + e
	seq := m.next
	m.next++
	m.retained = append(m.retained, modelEntry{seq, s, l})
	if last := (m.pos - 1) / m.cb; last+1 > m.n {
		firstLive := (last + 1 - m.n) * m.cb
		k := 0
		for k < len(m.retained) && m.retained[k].start < firstLive {
			m.dropped++
			m.dropB += m.retained[k].len
			k++
		}
		m.retained = m.retained[k:]
	}
	return seq, true
}

func (m *model) reset() {
	for _, e := range m.retained {
		m.dropped++
		m.dropB += e.len
	}
	m.retained = nil
	m.pos = (m.pos + m.cb - 1) / m.cb * m.cb
}

// payload is entry seq's content: every byte depends on seq and offset.
func payload(seq, l uint64) []byte {
	p := make([]byte, l)
	for j := range p {
		p[j] = byte(seq*131 + uint64(j)*7 + l)
	}
	return p
}

// isPayload reports whether p == payload(seq, l), without allocating.
func isPayload(p []byte, seq, l uint64) bool {
	if uint64(len(p)) != l {
		return false
	}
	for j := range p {
		if p[j] != byte(seq*131+uint64(j)*7+l) {
			return false
		}
	}
	return true
}

// compare checks c against m: counters, invariants and every entry.
func compare(c *Chunked, m *model) error {
	if err := c.check(); err != nil {
		return err
	}
	oldest := m.next
	if len(m.retained) > 0 {
		oldest = m.retained[0].seq
	}
	de, db := c.Dropped()
	if c.Next() != m.next || c.Oldest() != oldest || c.Len() != len(m.retained) || de != m.dropped || db != m.dropB {
		return fmt.Errorf("next %d oldest %d len %d dropped %d/%d; model: %d %d %d %d/%d",
			c.Next(), c.Oldest(), c.Len(), de, db, m.next, oldest, len(m.retained), m.dropped, m.dropB)
	}
	i := 0
	var bad error
	c.Range(func(seq uint64, p []byte) bool {
		if i >= len(m.retained) {
			bad = fmt.Errorf("Range gave more than %d entries", len(m.retained))
			return false
		}
		want := m.retained[i]
		if seq != want.seq || !isPayload(p, want.seq, want.len) {
			bad = fmt.Errorf("entry %d: seq %d, %d bytes; want seq %d, %d bytes (or content differs)", i, seq, len(p), want.seq, want.len)
			return false
		}
		i++
		return true
	})
	if bad == nil && i != len(m.retained) {
		bad = fmt.Errorf("Range gave %d entries, want %d", i, len(m.retained))
	}
	return bad
}

// runOps drives a Chunked and the model with the same operations: a
// length appends an entry of that size, -1 resets.
func runOps(t testing.TB, chunk, limit int, ops []int) *Chunked {
	t.Helper()
	c, err := NewChunked(ChunkBytes(chunk), Limit(limit))
	if err != nil {
		t.Fatal(err)
	}
	m := &model{cb: uint64(c.ChunkBytes()), n: uint64(c.Cap() / c.ChunkBytes())}
	for k, op := range ops {
		if op < 0 {
			c.Reset()
			m.reset()
		} else {
			wantSeq, ok := m.append(uint64(op))
			seq, err := c.Append(payload(c.Next(), uint64(op)))
			switch {
			case ok && err != nil:
				t.Fatalf("op %d: Append(%d bytes): %v", k, op, err)
			case !ok && !errors.Is(err, ErrTooLarge):
				t.Fatalf("op %d: Append(%d bytes) with cap %d: err %v, want ErrTooLarge", k, op, c.Cap(), err)
			case ok && seq != wantSeq:
				t.Fatalf("op %d: seq %d, want %d", k, seq, wantSeq)
			}
		}
		if err := compare(c, m); err != nil {
			t.Fatalf("chunk %d limit %d, after op %d (%d) of %v: %v", chunk, limit, k, op, ops, err)
		}
	}
	return c
}

func retained(c *Chunked) []uint64 {
	var s []uint64
	c.Range(func(seq uint64, p []byte) bool { s = append(s, seq); return true })
	return s
}

// TestChunkedEdges: each edge with the outcome worked out by hand (the
// model must agree too).
func TestChunkedEdges(t *testing.T) {
	tests := []struct {
		name         string
		chunk, limit int
		ops          []int
		want         []uint64 // retained seqs after the last op
		dropped      uint64
		dropB        uint64
	}{
		// 63 bytes + 1-byte prefix fill chunk 0 exactly; the next one
		// fills chunk 1; the third enters chunk 2 and recycles chunk 0.
		{"exactly-fills-a-chunk", 64, 128, []int{63, 63}, []uint64{0, 1}, 0, 0},
		{"exactly-fills-then-recycles", 64, 128, []int{63, 63, 1}, []uint64{1, 2}, 1, 63},
		// 150 bytes + 2 at stream 11..163: chunks 0, 1, 2.
		{"spans-3-chunks", 64, 256, []int{10, 150}, []uint64{0, 1}, 0, 0},
		// The next entry (163..264) enters chunk 4, recycling chunk 0 and
		// both entries starting there, including the one straddling into
		// chunks 1 and 2: chunk 1 starts no entry, Range begins at 163.
		{"recycle-drops-straddler-entirely", 64, 256, []int{10, 150, 100}, []uint64{2}, 2, 160},
		// From offset 11, 121 bytes would need 3 chunks of the 2: pad to 64.
		{"padding", 64, 128, []int{10, 120}, []uint64{1}, 1, 10},
		{"padding-then-fill", 64, 128, []int{10, 120, 5, 5}, []uint64{2, 3}, 2, 130},
		// An entry of exactly the capacity (127 + 1) is kept alone.
		{"entry-of-cap", 64, 128, []int{5, 127}, []uint64{1}, 1, 5},
		{"entry-of-cap-then-small", 64, 128, []int{5, 127, 1}, []uint64{2}, 2, 132},
		// 128 bytes + 2 > 128: refused, nothing changes.
		{"larger-than-limit", 64, 128, []int{3, 128}, []uint64{0}, 0, 0},
		// Limit below a chunk: one chunk of 100 bytes.
		{"limit-below-chunk", 1 << 20, 100, []int{50, 40}, []uint64{0, 1}, 0, 0},
		{"limit-below-chunk-recycles-all", 1 << 20, 100, []int{50, 40, 10}, []uint64{2}, 2, 90},
		// A 2-byte prefix at stream 63..64 straddles chunks 0 and 1.
		{"prefix-straddles", 64, 256, []int{62, 130}, []uint64{0, 1}, 0, 0},
		// seq 3 (123..164) crosses chunk 1 (slot 1) into chunk 2 (slot 0):
		// the end of the ring, so Range hands out a copy.
		{"crosses-ring-end", 64, 128, []int{40, 40, 40, 40}, []uint64{2, 3}, 2, 80},
		{"empty-entries", 16, 32, []int{0, 0, 0, 15, 0}, []uint64{0, 1, 2, 3, 4}, 0, 0},
		// seq 3 (3..19) starts in chunk 0: recycled with it.
		{"empty-entries-recycled", 16, 32, []int{0, 0, 0, 15, 0, 14}, []uint64{4, 5}, 4, 15},
		{"reset", 64, 128, []int{10, 20, -1}, nil, 2, 30},
		{"reset-then-append", 64, 128, []int{10, 20, -1, 5}, []uint64{2}, 2, 30},
		// A limit that is not a multiple of the chunk: 300/64 = 4 chunks.
		{"limit-rounds-down", 64, 300, []int{200, 5}, []uint64{0, 1}, 0, 0},
		{"limit-rounds-down-recycles", 64, 300, []int{250, 5}, []uint64{1}, 1, 250},
		{"limit-rounds-down-refuses", 64, 300, []int{257}, nil, 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := runOps(t, tc.chunk, tc.limit, tc.ops)
			defer c.Close()
			if got := retained(c); !slices.Equal(got, tc.want) {
				t.Errorf("retained %v, want %v", got, tc.want)
			}
			if e, b := c.Dropped(); e != tc.dropped || b != tc.dropB {
				t.Errorf("Dropped() = %d, %d; want %d, %d", e, b, tc.dropped, tc.dropB)
			}
		})
	}
}

func TestChunkedGeometry(t *testing.T) {
	tests := []struct {
		opts             []Option
		chunk, cap_      int
		err              error
		errHas           string
		name             string
		wantChunkOverCap bool
	}{
		{name: "defaults", chunk: DefaultChunkBytes, cap_: DefaultLimit},
		{name: "limit-below-chunk", opts: []Option{Limit(1000)}, chunk: 1000, cap_: 1000},
		{name: "rounds-down", opts: []Option{ChunkBytes(4096), Limit(10000)}, chunk: 4096, cap_: 8192},
		{name: "tiny-chunk", opts: []Option{ChunkBytes(8)}, err: ErrOption, errHas: "ChunkBytes(8)"},
		{name: "tiny-limit", opts: []Option{Limit(0)}, err: ErrOption, errHas: "Limit(0)"},
		{name: "too-many-chunks", opts: []Option{ChunkBytes(16), Limit(1 << 30)}, err: ErrOption, errHas: "raise ChunkBytes"},
		{name: "segment-option", opts: []Option{SegmentBytes(1 << 20)}, err: ErrOption, errHas: "SegmentBytes does not apply to Chunked"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := NewChunked(tc.opts...)
			if tc.err != nil {
				if !errors.Is(err, tc.err) || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err %v, want %v containing %q", err, tc.err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if c.ChunkBytes() != tc.chunk || c.Cap() != tc.cap_ {
				t.Errorf("chunk %d cap %d, want %d %d", c.ChunkBytes(), c.Cap(), tc.chunk, tc.cap_)
			}
			if c.Bytes() != 0 {
				t.Errorf("Bytes() = %d before any append", c.Bytes())
			}
		})
	}
}

// TestChunkedModel: seeded random operations against the model, over
// chunk sizes and limits where entries often straddle, pad and wrap.
func TestChunkedModel(t *testing.T) {
	rounds := 300
	if testing.Short() {
		rounds = 60
	}
	for seed := range uint64(rounds) {
		r := rand.New(rand.NewPCG(seed, 42))
		chunk := MinChunkBytes + r.IntN(200)
		limit := MinChunkBytes + r.IntN(6*chunk)
		ops := make([]int, 50+r.IntN(150))
		for i := range ops {
			switch k := r.IntN(100); {
			case k < 2:
				ops[i] = -1
			case k < 10:
				ops[i] = r.IntN(limit + 20) // near or past the capacity
			case k < 15:
				ops[i] = 0
			default:
				ops[i] = r.IntN(chunk + chunk/2)
			}
		}
		c := runOps(t, chunk, limit, ops)
		c.Close()
	}
}

// FuzzChunked: the fuzzer picks the geometry and the operations; the
// Chunked must agree with the model (and its own invariants) after every
// one. data[0] picks the chunk (16..271 bytes), data[1:3] the limit
// (16..2063); each further byte is an operation: 0xff resets, < 0x80
// appends that many bytes, else (b&0x7f)*24 bytes (up to 3048: past the
// capacity too). At most maxFuzzOps operations are used: every one
// checks every retained entry, and an input must run well under the
// fuzzer's 10 s limit on a loaded machine.
func FuzzChunked(f *testing.F) {
	f.Add([]byte{48, 112, 0, 63, 63, 1})
	f.Add([]byte{48, 240, 0, 10, 0x86, 100, 0xff, 5})
	f.Add([]byte{0, 48, 0, 0, 0, 0, 15, 0, 14})
	f.Add([]byte{255, 255, 255, 0x90, 0x90, 0x90, 0x90, 0xa0})
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) < 3 {
			return
		}
		chunk := MinChunkBytes + int(data[0])
		limit := MinChunkBytes + int(binary.LittleEndian.Uint16(data[1:3]))%2048
		var ops []int
		const maxFuzzOps = 300
		for _, b := range data[3:min(len(data), 3+maxFuzzOps)] {
			switch {
			case b == 0xff:
				ops = append(ops, -1)
			case b < 0x80:
				ops = append(ops, int(b))
			default:
				ops = append(ops, int(b&0x7f)*24)
			}
		}
		c := runOps(t, chunk, limit, ops)
		if err := c.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

// TestChunkedRangeStopsAndScratch: Range stops when asked, p for an
// entry crossing the ring's end is a copy, for others it aliases the
// ring.
func TestChunkedRangeStopsAndScratch(t *testing.T) {
	c := runOps(t, 64, 128, []int{40, 40, 40, 40}) // seq 3 crosses the ring's end
	defer c.Close()
	n := 0
	c.Range(func(seq uint64, p []byte) bool { n++; return false })
	if n != 1 {
		t.Errorf("Range went on after false: %d calls", n)
	}
	c.Range(func(seq uint64, p []byte) bool {
		a, lo := uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(unsafe.Pointer(unsafe.SliceData(c.ring)))
		inRing := a >= lo && a < lo+uintptr(len(c.ring))
		if wantCopy := seq == 3; inRing == wantCopy {
			t.Errorf("seq %d: in ring %v, want copy %v", seq, inRing, wantCopy)
		}
		return true
	})
	var seqs []uint64
	for seq, p := range c.All() {
		if !bytes.Equal(p, payload(seq, 40)) {
			t.Errorf("All: seq %d content differs", seq)
		}
		seqs = append(seqs, seq)
	}
	if !slices.Equal(seqs, []uint64{2, 3}) {
		t.Errorf("All gave %v", seqs)
	}
}

func TestChunkedMisusePanics(t *testing.T) {
	mustPanic := func(t *testing.T, want string, fn func()) {
		t.Helper()
		defer func() {
			r := recover()
			if s, _ := r.(string); !strings.Contains(s, want) {
				t.Errorf("panic %v, want one containing %q", r, want)
			}
		}()
		fn()
	}
	c, err := NewChunked(ChunkBytes(64), Limit(256))
	if err != nil {
		t.Fatal(err)
	}
	c.Append([]byte("a"))
	mustPanic(t, "Append inside Range", func() {
		c.Range(func(uint64, []byte) bool { c.Append(nil); return true })
	})
	// The panic left Range: the buffer works again.
	if _, err := c.Append([]byte("b")); err != nil || c.Len() != 2 {
		t.Fatalf("after the recovered panic: %v, len %d", err, c.Len())
	}
	mustPanic(t, "Reset inside Range", func() {
		c.Range(func(uint64, []byte) bool { c.Reset(); return true })
	})
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if c.Len() != 0 || c.Bytes() != 0 {
		t.Errorf("after Close: len %d, bytes %d", c.Len(), c.Bytes())
	}
	if e, b := c.Dropped(); e != 2 || b != 2 {
		t.Errorf("after Close: dropped %d, %d; want 2, 2", e, b)
	}
	mustPanic(t, "Chunked.Append after Close", func() { c.Append(nil) })
	mustPanic(t, "Chunked.Range after Close", func() { c.Range(func(uint64, []byte) bool { return true }) })
	mustPanic(t, "Chunked.Reset after Close", func() { c.Reset() })
	if err := c.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

// TestChunkedBytesBounded: a long run keeps the memory held at the
// limit while the counters account for every entry; Reset gives it back.
func TestChunkedBytesBounded(t *testing.T) {
	c, err := NewChunked(ChunkBytes(64<<10), Limit(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var total uint64
	buf := make([]byte, 300)
	for i := range 100_000 {
		p := buf[:i%300]
		c.Append(p)
		total += uint64(len(p))
	}
	if err := c.check(); err != nil {
		t.Fatal(err)
	}
	if c.Bytes()-cap(c.scratch) != 1<<20 {
		t.Errorf("Bytes() = %d (scratch %d), want the limit %d", c.Bytes(), cap(c.scratch), 1<<20)
	}
	e, b := c.Dropped()
	if e+uint64(c.Len()) != 100_000 || b+c.RetainedBytes() != total {
		t.Errorf("dropped %d + retained %d entries, %d + %d bytes; want %d, %d", e, c.Len(), b, c.RetainedBytes(), 100_000, total)
	}
	if min := uint64(1<<20 - 64<<10 - 300); c.RetainedBytes() < min*9/10 {
		t.Errorf("retained %d payload bytes, want about %d (n-1 chunks)", c.RetainedBytes(), min)
	}
	c.Reset()
	if c.Bytes() != 0 || c.Len() != 0 || c.Oldest() != 100_000 || c.Next() != 100_000 {
		t.Errorf("after Reset: bytes %d len %d oldest %d next %d", c.Bytes(), c.Len(), c.Oldest(), c.Next())
	}
}
