package tagtable

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// ringFile writes an events file with a 4 KiB ring holding recs (each a
// type and a body, padded to 8 bytes), committed.
func ringFile(t testing.TB, recs ...[]byte) string {
	b := ringImage(4096, 42, 1, 1024)
	pos := 0
	for _, r := range recs {
		copy(b[evHeaderSize+pos:], r)
		pos += len(r)
	}
	binary.LittleEndian.PutUint64(b[64:], uint64(pos)) // head
	p := filepath.Join(t.TempDir(), "1.events")
	require.NoError(t, os.WriteFile(p, b, 0o600))
	return p
}

// ringImage is an empty events file: header (pid, mode 1 sampled or 2
// full, sample rate) and a ring of ring bytes.
func ringImage(ring uint64, pid, mode uint32, rate uint64) []byte {
	b := make([]byte, evHeaderSize+ring)
	copy(b, EventsMagic)
	binary.LittleEndian.PutUint32(b[8:], EventsVersion)
	binary.LittleEndian.PutUint32(b[12:], evHeaderSize)
	binary.LittleEndian.PutUint64(b[16:], ring)
	binary.LittleEndian.PutUint32(b[24:], pid)
	binary.LittleEndian.PutUint32(b[28:], mode)
	binary.LittleEndian.PutUint64(b[32:], rate)
	return b
}

// emptyRing opens an empty events file of pid 1 in full mode with a ring
// of ring bytes, closed at the end of the test.
func emptyRing(t testing.TB, ring uint64) *Events {
	p := filepath.Join(t.TempDir(), "1.events")
	require.NoError(t, os.WriteFile(p, ringImage(ring, 1, 2, 1), 0o600))
	ev, err := OpenEvents(p)
	require.NoError(t, err)
	t.Cleanup(func() { ev.Close() })
	return ev
}

// rec builds a record: first word len | typ << 32, then the words.
func rec(typ uint32, words ...uint64) []byte {
	b := make([]byte, 8+8*len(words))
	binary.LittleEndian.PutUint64(b, uint64(len(b))|uint64(typ)<<32)
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8+8*i:], w)
	}
	return b
}

func TestEventsDrainIntoProfile(t *testing.T) {
	p := ringFile(t,
		rec(EvStack, 1|2<<32, 0x1000, 0x2000),
		rec(EvAlloc, 0xa0, 4096, 4000, 3|1<<32),
		rec(EvAlloc, 0xb0, 64, 60, 3|1<<32),
		rec(EvResize, 0xb0, 0xc0, 128, 100, 1),
		rec(EvFree, 0xa0),
		rec(EvFree, 0xdead), // never seen
	)
	ev, err := OpenEvents(p)
	require.NoError(t, err)
	defer ev.Close()
	require.Equal(t, 42, ev.PID())
	require.Equal(t, "sampled", ev.Mode())
	prof := NewProfile(ev.PID(), ev.Mode(), ev.SampleRate())
	n, err := ev.Drain(prof)
	require.NoError(t, err)
	require.Equal(t, 6, n)
	require.Equal(t, []uint64{0x1000, 0x2000}, prof.Stacks[1])
	require.Equal(t, 1, prof.LiveCount())
	b, ok := prof.LiveBlockAt(0xc0)
	require.True(t, ok)
	require.Equal(t, uint64(128), b.Usable)
	require.Equal(t, uint64(1), prof.UnknownFrees)
	s, ok := prof.Site(SiteKey{Stack: 1, Tag: 3})
	require.True(t, ok)
	require.Equal(t, uint64(3), s.Samples, "two allocs and a selected realloc")
	require.Equal(t, uint64(1), s.Moves)
	w := prof.Weight(100) // the realloc was selected: weighed by its new size
	require.InDelta(t, 128*w, s.EstLiveBytes, 1e-6)
	// drained records are zeroed and the tail advanced: a second drain reads nothing
	n, err = ev.Drain(prof)
	require.NoError(t, err)
	require.Zero(t, n)
}

func TestEventsRejectBadFiles(t *testing.T) {
	good := ringFile(t)
	b, err := os.ReadFile(good)
	require.NoError(t, err)
	for name, mut := range map[string]func([]byte) []byte{
		"short":     func(b []byte) []byte { return b[:100] },
		"magic":     func(b []byte) []byte { b[0] = 'X'; return b },
		"version":   func(b []byte) []byte { b[8] = 9; return b },
		"ring size": func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 3000); return b },
		"too big":   func(b []byte) []byte { binary.LittleEndian.PutUint64(b[16:], 1<<20); return b },
	} {
		c := append([]byte(nil), b...)
		p := filepath.Join(t.TempDir(), "x.events")
		require.NoError(t, os.WriteFile(p, mut(c), 0o600))
		_, err := OpenEvents(p)
		require.ErrorIs(t, err, ErrFormat, name)
	}
	// a record whose length runs past head stops the drain with an error
	p := ringFile(t, rec(EvFree, 1))
	c, _ := os.ReadFile(p)
	binary.LittleEndian.PutUint64(c[evHeaderSize:], 4000|uint64(EvFree)<<32)
	require.NoError(t, os.WriteFile(p, c, 0o600))
	ev, err := OpenEvents(p)
	require.NoError(t, err)
	defer ev.Close()
	_, err = ev.Drain(NewProfile(1, "full", 1))
	require.ErrorIs(t, err, ErrFormat)
}

// FuzzDrain: whatever the ring holds, Drain decodes or stops with an
// error; it never panics or loops. The ring is built in memory (a file,
// a mapping and a profile per input made it crawl: 37 inputs a second).
func FuzzDrain(f *testing.F) {
	f.Add(rec(EvAlloc, 1, 2, 3, 4), uint64(40))
	f.Add(append(rec(EvStack, 1|64<<32), make([]byte, 512)...), uint64(528))
	f.Add(rec(EvModule, 1, 2, 3, 4, 20|10<<32, 0, 0, 0), uint64(72))
	f.Add(append(append(rec(EvStack, 1|2<<32, 0x1000, 0x2000), rec(EvAlloc, 0x7000, 64, 60, 1|1<<32)...),
		append(rec(EvResize, 0x7000, 0x8000, 128, 100, 1), rec(EvFree, 0x8000)...)...), uint64(136))
	// One profile serves 256 inputs (making one maps its off-heap store):
	// what earlier inputs left in it is more state for the next to meet.
	var prof *Profile
	uses := 0
	f.Fuzz(func(t *testing.T, body []byte, head uint64) {
		if len(body) > 4096 {
			body = body[:4096]
		}
		const ring = 4096
		words := make([]uint64, (evHeaderSize+ring)/8) // 8-aligned, as a mapping is
		mem := unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), evHeaderSize+ring)
		copy(mem, EventsMagic)
		binary.LittleEndian.PutUint32(mem[8:], EventsVersion)
		binary.LittleEndian.PutUint32(mem[12:], evHeaderSize)
		binary.LittleEndian.PutUint64(mem[16:], ring)
		binary.LittleEndian.PutUint32(mem[24:], 42)
		binary.LittleEndian.PutUint32(mem[28:], 1)
		binary.LittleEndian.PutUint64(mem[32:], 1024)
		copy(mem[evHeaderSize:], body)
		binary.LittleEndian.PutUint64(mem[64:], head)
		ev := &Events{mem: mem, hdr: (*evHeader)(unsafe.Pointer(&mem[0]))}
		if err := ev.validate(uint64(len(mem))); err != nil {
			t.Fatal(err)
		}
		if prof == nil || uses%256 == 0 {
			if prof != nil {
				prof.Close()
			}
			prof = NewProfile(1, "sampled", 1024)
		}
		uses++
		_, _ = ev.Drain(prof)
	})
}

// BenchmarkDrain: events decoded into a profile per second (alloc and
// free pairs, a ring refilled between drains as the writer would).
func BenchmarkDrain(b *testing.B) {
	var recs [][]byte
	recs = append(recs, rec(EvStack, 1|3<<32, 1, 2, 3))
	for i := uint64(0); i < 60; i++ {
		recs = append(recs, rec(EvAlloc, 0x1000+i*64, 64, 60, 1|1<<32), rec(EvFree, 0x1000+i*64))
	}
	p := ringFile(b, recs...)
	raw, err := os.ReadFile(p)
	require.NoError(b, err)
	ev, err := OpenEvents(p)
	require.NoError(b, err)
	defer ev.Close()
	prof := NewProfile(1, "sampled", 1<<19)
	n := 0
	b.ResetTimer()
	for n < b.N {
		copy(ev.mem, raw) // the writer's next lap: same records, head and tail reset
		k, err := ev.Drain(prof)
		if err != nil {
			b.Fatal(err)
		}
		n += k
	}
	b.ReportMetric(float64(n)/b.Elapsed().Seconds(), "events/s")
}

// BenchmarkDrainLive: events/s with a live set like a --stacks full run of
// Python's (a million live blocks at scattered addresses, 20k stacks, the
// history on), where each event misses the caches, unlike BenchmarkDrain's
// 60 blocks. Each lap refills a 4 MiB ring with alloc/free pairs that keep
// the live set steady, as the writer would, and drains it.
func BenchmarkDrainLive(b *testing.B) {
	const (
		live   = 1 << 20
		stacks = 20000
		ring   = 4 << 20
	)
	rng := rand.New(rand.NewPCG(1, 2))
	prof := NewProfile(1, "full", 1)
	for s := uint32(1); s <= stacks; s++ {
		prof.Stack(s, []uint64{uint64(s) * 64, 0x1000, 0x2000})
	}
	addrs := make([]uint64, live)
	next := uint64(0x10000000)
	newAddr := func() uint64 { next += 16 * uint64(1+rng.IntN(64)); return next }
	for i := range addrs {
		addrs[i] = newAddr()
		prof.Alloc(addrs[i], 64, 60, 1, uint32(1+rng.IntN(stacks)))
	}
	ev := emptyRing(b, ring)
	fill := func() int { // one lap of pairs: free a random live block, allocate another
		body := ev.mem[evHeaderSize:]
		pos, n := 0, 0
		for pos+48+16 <= ring {
			i := rng.IntN(live)
			binary.LittleEndian.PutUint64(body[pos:], 16|uint64(EvFree)<<32)
			binary.LittleEndian.PutUint64(body[pos+8:], addrs[i])
			pos += 16
			addrs[i] = newAddr()
			copy(body[pos:], rec(EvAlloc, addrs[i], 64, 60, 1|uint64(1+rng.IntN(stacks))<<32))
			pos += 40
			n += 2
		}
		binary.LittleEndian.PutUint64(ev.mem[64:], uint64(pos)) // head
		binary.LittleEndian.PutUint64(ev.mem[128:], 0)          // tail
		return n
	}
	events := 0
	b.ResetTimer()
	for events < b.N {
		b.StopTimer()
		want := fill()
		b.StartTimer()
		k, err := ev.Drain(prof)
		if err != nil || k != want {
			b.Fatalf("drained %d of %d: %v", k, want, err)
		}
		events += k
	}
	b.ReportMetric(float64(events)/b.Elapsed().Seconds(), "events/s")
}

// Drain over many laps of a small ring, as the writer fills it: records
// that wrap around its end, batches longer and shorter than drainBatch.
// The profile ends as a model of the same events says, and each drain
// leaves the ring zeroed and the tail at the head. Over a profile with a
// large live set too, where Drain prefetches what each batch will look up
// from batches before it that change the tables.
func TestDrainLapsAndWraps(t *testing.T) {
	t.Run("small", func(t *testing.T) { testDrainLaps(t, 0) })
	t.Run("prefetching", func(t *testing.T) { testDrainLaps(t, prefetchFrom/2) })
}

// testDrainLaps runs TestDrainLapsAndWraps over a profile holding others
// live blocks before the first lap.
func testDrainLaps(t *testing.T, others int) {
	const ring = 4096
	ev := emptyRing(t, ring)
	prof := NewProfile(1, "full", 1)
	defer prof.Close()
	for i := range others {
		prof.Alloc(1<<40+uint64(i)*64, 64, 60, 1, 1)
	}
	require.Equal(t, others > 0, prof.prefetching())
	rng := rand.New(rand.NewPCG(5, 6))
	live := map[uint64]uint64{} // addr -> usable, the model
	var addrs []uint64
	next := uint64(0x10000)
	head, wraps := uint64(0), 0
	put := func(r []byte) {
		off := head % ring
		if off+uint64(len(r)) > ring {
			wraps++
		}
		k := copy(ev.ring[off:], r)
		copy(ev.ring, r[k:])
		head += uint64(len(r))
	}
	put(rec(EvStack, 1|1<<32, 0x1000))
	for lap := 0; lap < 400; lap++ {
		want := 0
		for n := rng.IntN(80); n > 0 && head-atomicTail(ev)+48 <= ring; n-- {
			switch k := rng.IntN(3); {
			case k == 0 && len(addrs) > 0: // free
				i := rng.IntN(len(addrs))
				put(rec(EvFree, addrs[i]))
				delete(live, addrs[i])
				addrs[i] = addrs[len(addrs)-1]
				addrs = addrs[:len(addrs)-1]
			case k == 1 && len(addrs) > 0: // moving resize
				i := rng.IntN(len(addrs))
				next += 64
				put(rec(EvResize, addrs[i], next, 128, 100, 1))
				delete(live, addrs[i])
				live[next] = 128
				addrs[i] = next
			default:
				next += 64
				put(rec(EvAlloc, next, 64, 60, 1|1<<32))
				live[next] = 64
				addrs = append(addrs, next)
			}
			want++
		}
		binary.LittleEndian.PutUint64(ev.mem[64:], head)
		n, err := ev.Drain(prof)
		require.NoError(t, err)
		if lap > 0 {
			require.Equal(t, want, n, "lap %d", lap)
		}
		require.Equal(t, head, atomicTail(ev))
		require.Equal(t, make([]byte, ring), ev.ring, "lap %d: the ring is zeroed", lap)
	}
	require.Greater(t, wraps, 20, "records wrapped around the ring's end")
	require.Equal(t, len(live)+others, prof.LiveCount())
	for a, usable := range live {
		b, ok := prof.LiveBlockAt(a)
		require.True(t, ok, "%#x", a)
		require.Equal(t, usable, b.Usable)
	}
	require.Zero(t, prof.UnknownFrees)
}

// A drain whose allocations grow the address table past prefetchFrom
// starts prefetching midway, from the records it is at (a stage that
// started from the drain's first record read far more records than it
// holds).
func TestDrainStartsPrefetchingMidway(t *testing.T) {
	const ring = 4 << 20
	ev := emptyRing(t, ring)
	prof := NewProfile(1, "full", 1)
	defer prof.Close()
	pos := 0
	put := func(r []byte) { pos += copy(ev.ring[pos:], r) }
	put(rec(EvStack, 1|1<<32, 0x1000))
	live := map[uint64]bool{}
	want := 1
	for i := uint64(0); i < prefetchFrom; i++ {
		a := 0x10000 + 64*i
		put(rec(EvAlloc, a, 64, 60, 1|1<<32))
		live[a] = true
		want++
		if i%3 == 2 { // free one from a while ago
			f := 0x10000 + 64*(i-i/2)
			if live[f] {
				put(rec(EvFree, f))
				delete(live, f)
				want++
			}
		}
	}
	binary.LittleEndian.PutUint64(ev.mem[64:], uint64(pos))
	require.False(t, prof.prefetching())
	n, err := ev.Drain(prof)
	require.NoError(t, err)
	require.Equal(t, want, n)
	require.True(t, prof.prefetching())
	require.Equal(t, len(live), prof.LiveCount())
	for a := range live {
		_, ok := prof.LiveBlockAt(a)
		require.True(t, ok, "%#x", a)
	}
	require.Zero(t, prof.UnknownFrees)
}

func atomicTail(ev *Events) uint64 { return binary.LittleEndian.Uint64(ev.mem[128:]) }

// A malformed record in the middle of a batch: the records before it are
// decoded and released, the drain stops there with an error, and the
// tail stays at it.
func TestDrainStopsAtABadRecordInABatch(t *testing.T) {
	var recs [][]byte
	recs = append(recs, rec(EvStack, 1|1<<32, 0x1000))
	for i := uint64(0); i < 40; i++ {
		recs = append(recs, rec(EvAlloc, 0x1000+64*i, 64, 60, 1|1<<32))
	}
	bad := rec(EvFree, 0x5000)
	binary.LittleEndian.PutUint64(bad, 16|99<<32) // an unknown type
	recs = append(recs, bad, rec(EvFree, 0x1000))
	p := ringFile(t, recs...)
	ev, err := OpenEvents(p)
	require.NoError(t, err)
	defer ev.Close()
	prof := NewProfile(1, "full", 1)
	defer prof.Close()
	n, err := ev.Drain(prof)
	require.ErrorIs(t, err, ErrFormat)
	require.Equal(t, 41, n)
	require.Equal(t, 40, prof.LiveCount())
	require.Equal(t, uint64(24+40*40), atomicTail(ev))
}

// Backlog is the share of the ring written and not drained yet: what the
// launcher's drainer reads to come back sooner to a ring filling up.
func TestEventsBacklog(t *testing.T) {
	ev := emptyRing(t, 4096)
	require.Zero(t, ev.Backlog())
	prof := NewProfile(1, "full", 1)
	defer prof.Close()
	pos := uint64(0)
	for i := range 32 { // 32 records of 40 bytes
		r := rec(EvAlloc, 0x10000+uint64(i)*64, 64, 60, 1)
		copy(ev.ring[pos:], r)
		pos += uint64(len(r))
	}
	binary.LittleEndian.PutUint64(ev.mem[64:], pos) // head
	require.InDelta(t, 1280.0/4096, ev.Backlog(), 1e-12)
	n, err := ev.Drain(prof)
	require.NoError(t, err)
	require.Equal(t, 32, n)
	require.Zero(t, ev.Backlog())
	binary.LittleEndian.PutUint64(ev.mem[64:], pos+2*4096) // a head past a full lap: reads as full
	require.Equal(t, 1.0, ev.Backlog())
}

// DrainTo stops at a position the writer had reached (Head): the records
// before it are drained, those after stay for the next drain; Head and
// Size say where the writer is and how long the ring is.
func TestEventsDrainTo(t *testing.T) {
	ev := emptyRing(t, 4096)
	require.Equal(t, uint64(4096), ev.Size())
	prof := NewProfile(1, "full", 1)
	defer prof.Close()
	put := func(pos uint64, k int) uint64 { // k allocs from pos, head moved past them
		first := pos / 40
		for i := range k {
			r := rec(EvAlloc, 0x10000+(first+uint64(i))*64, 64, 60, 1)
			copy(ev.ring[pos:], r)
			pos += uint64(len(r))
		}
		binary.LittleEndian.PutUint64(ev.mem[64:], pos)
		return pos
	}
	mid := put(0, 10)
	require.Equal(t, uint64(400), ev.Head())
	end := put(mid, 5)
	n, err := ev.DrainTo(prof, mid)
	require.NoError(t, err)
	require.Equal(t, 10, n)
	require.Equal(t, mid, atomicTail(ev))
	require.Equal(t, 10, prof.LiveCount())
	n, err = ev.DrainTo(prof, mid)
	require.NoError(t, err)
	require.Zero(t, n, "nothing before mid is left")
	n, err = ev.Drain(prof)
	require.NoError(t, err)
	require.Equal(t, 5, n)
	require.Equal(t, end, atomicTail(ev))
	require.Equal(t, 15, prof.LiveCount())
}
