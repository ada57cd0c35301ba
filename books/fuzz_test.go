package books

import (
	"bytes"
	"encoding/binary"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/tagalloc/tagalloc/cgo"
)

// FuzzParse: whatever the bytes, Parse returns a snapshot or an error that
// wraps ErrFormat; it never panics or loops. Seeded with a small region of
// every kind of record (and, as plain tests, with real regions: at about
// 500 KB they would slow fuzzing to a crawl, each new input minimized for
// a minute), plus the corpus in testdata/fuzz/FuzzParse.
func FuzzParse(f *testing.F) {
	f.Add(smallRegion())
	f.Add(smallRegionOf(5))
	f.Add(smallRegionOf(6))
	f.Add(smallRegionV4Budgets())
	if fz := flag.Lookup("test.fuzz"); fz == nil || fz.Value.String() == "" {
		if seed := realRegion(f); seed != nil {
			f.Add(seed)
			f.Add(seed[:len(seed)/3])
		}
		if seed := goRegion(f); seed != nil {
			f.Add(seed)
		}
	}
	f.Add([]byte("TAGALLOC"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && s == nil {
			t.Fatal("nil snapshot without an error")
		}
		if err != nil {
			return
		}
		for _, tg := range s.Tags { // what a report may hold
			if tg.Name == "" || len(tg.Name) > 63 || printable([]byte(tg.Name)) != tg.Name {
				t.Fatalf("tag name %q", tg.Name)
			}
			if tg.LiveBytes > tg.AllocBytes || tg.LiveBlocks > tg.AllocBlocks {
				t.Fatalf("tag %q: more live than allocated: %+v", tg.Name, tg)
			}
		}
	})
}

// realRegion runs a small tagged program and returns its region's bytes in
// use (nil if the library or compiler is missing).
func realRegion(f *testing.F) []byte {
	lib, err := cgo.Library()
	if err != nil {
		return nil
	}
	cc, err := cgo.Compiler()
	if err != nil {
		return nil
	}
	dir := f.TempDir()
	bin := filepath.Join(dir, "tagged")
	if exec.Command(cc, "-O1", "-fno-builtin", "-o", bin, filepath.Join("testdata", "tagged.c")).Run() != nil {
		return nil
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "TAGALLOC_DIR="+dir)
	_ = cmd.Run()
	files, _ := filepath.Glob(filepath.Join(dir, "*.tagalloc"))
	if len(files) != 1 {
		return nil
	}
	b, err := os.ReadFile(files[0])
	if err != nil || len(b) < 64 {
		return nil
	}
	used := le64(b[32:])
	if used > uint64(len(b)) {
		return nil
	}
	return b[:used]
}

// goRegion is the bytes of a region the Go writer made, with a few tags
// and two thread records.
func goRegion(f *testing.F) []byte {
	f.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	if err != nil {
		return nil
	}
	defer r.Close()
	for i, name := range []string{"a", "bb", "untagged"} {
		id, _, _ := r.Tag(name)
		for range 2 {
			th, _ := r.NewThread()
			c, _ := th.Counters(id)
			Add(&c.AllocBytes, uint64(64*(i+1)))
			Add(&c.AllocBlocks, 1)
		}
		if s, err := r.NewBudget(id, uint32(i+1), 100, BudgetCounts{Charged: uint64(128 * (i + 1))}); err == nil && i == 1 {
			s.Drop()
		}
	}
	used := atomic.LoadUint64(&r.hdr.Used)
	return append([]byte(nil), r.mem[:used]...)
}

// smallRegion is a valid native-style region of version 3 in about 1.4 KB:
// 4 tag slots (untagged, a, bb, overflow), 2 size classes, counter chunks
// of 2, one thread record with both chunks and two heaps, a report and
// reported bytes. TestSmallRegion checks what it parses to.
func smallRegion() []byte { return smallRegionOf(3) }

// smallRegionOf is smallRegion in a layout version: from version 4 on, its
// heap records are not read (bb's counts, which are there, are not its
// books), and the header names the native writer; from version 6 on it
// has a budgets table.
func smallRegionOf(version uint32) []byte { return smallRegionWith(version, version >= 6) }

// smallRegionV4Budgets is smallRegionOf(4) as package alloc's writer lays
// it out: a header of version 6's size, with the budgets table, naming
// the Go writer; the version-5 fields between hold stray values, unused.
func smallRegionV4Budgets() []byte { return smallRegionWith(4, true) }

// smallRegionWith is smallRegionOf(version), with or without a budgets
// table: two budgets and, between them, an unused slot (policy 0).
func smallRegionWith(version uint32, budgets bool) []byte {
	const base = 0x7f0000000000
	var h header
	hs := uint64(binary.Size(h))
	b := make([]byte, 2048)
	off := (hs + 63) &^ 63
	put := func(n uint64) uint64 { o := off; off = (off + n + 63) &^ 63; return o }
	copy(h.Magic[:], Magic)
	h.Version, h.HeaderSize, h.Base = version, uint32(hs), base
	switch version {
	case 3:
		h.HeaderSize = headerV3
	case 4:
		h.HeaderSize, h.Writer = headerV4, WriterNative
		if budgets {
			h.HeaderSize, h.Writer = headerV6, WriterGo
			h.HoldersOff, h.PeakUpperOff = 8, 1<<40 // not version 5's tables: unused
		}
	case 5:
		h.HeaderSize, h.Writer = headerV5, WriterNative
	default:
		h.Writer = WriterNative
	}
	cs := uint64(48) // a counter set's bytes; version 5 adds the mark
	if version >= 5 {
		cs = 64
	}
	h.PID, h.PPID, h.State = 4242, 1, 1
	h.TagSlots, h.TagCount, h.TagOverflow, h.TagNameSize = 4, 3, 3, 16
	h.NClasses, h.CtrChunk, h.CtrSize = 2, 2, uint32(cs)
	h.ThreadSize, h.ThreadCtrOff, h.ThreadHeaps, h.ThreadNext, h.ThreadLive = 40, 0, 16, 24, 32
	h.ClassStride, h.ReqStride = 8, 16
	h.HeapNalloc, h.HeapNfree, h.HeapAreq, h.HeapFreq, h.HeapTag, h.HeapTnext, h.HeapSize = 0, 16, 32, 40, 72, 80, 88
	h.Requested = 1
	cmd := "prog\x00-x\x00"
	h.CmdlineOff, h.CmdlineLen = put(uint64(len(cmd))), uint32(len(cmd))
	copy(b[h.CmdlineOff:], cmd)
	h.NamesOff = put(4 * 16)
	for i, n := range []string{"untagged", "a", "bb", "overflow"} {
		copy(b[h.NamesOff+uint64(i)*16:], n)
	}
	le := binary.LittleEndian
	ctr := func(o uint64, v ...uint64) {
		for i, x := range v {
			le.PutUint64(b[o+8*uint64(i):], x)
		}
	}
	h.FallbackOff = put(4 * cs)
	ctr(h.FallbackOff, 100, 2, 50, 1, 90, 45) // untagged: 50 live bytes in 1 block
	if version >= 5 {
		ctr(h.FallbackOff, 100, 2, 30, 1, 90, 45, 0, 80) // live = mark 80 - headroom 30
	}
	h.PeaksOff = put(4 * 8)
	ctr(h.PeaksOff, 100, 64, 0, 0)
	h.ClassSizesOff = put(2 * 4)
	le.PutUint32(b[h.ClassSizesOff:], 16)
	le.PutUint32(b[h.ClassSizesOff+4:], 32)
	rep := put(256)
	h.ReportsOff, h.ReportsCount = uint32(rep), 1
	b[rep], b[rep+1] = 1, 0
	le.PutUint64(b[rep+8:], 4096)
	copy(b[rep+16:], "explicit/cache")
	copy(b[rep+16+112:], "The cache.")
	h.ReportedOff = put(4 * 8)
	ctr(h.ReportedOff, 0, 48, 0, 0)
	h.Collections = 1
	chunk0, chunk1 := put(2*cs), put(2*cs)
	ctr(chunk0+cs, 64, 1, 0, 0, 60, 0) // a: 64 bytes in 1 block, 60 asked for
	if version >= 5 {
		ctr(chunk0+cs+56, 64) // its mark: live = 64 - 0
		// untagged is held by many (the shared set), with a bound noted;
		// a by the one set in chunk 0
		h.HoldersOff = put(4 * 8)
		ctr(h.HoldersOff, holdersMany, base+chunk0+cs, 0, 0)
		h.PeakUpperOff = put(4 * 8)
		ctr(h.PeakUpperOff, 120, 0, 0, 0)
	}
	ctr(chunk1, 0, 0, 0, 0, 0, 0)
	if budgets { // "a" (fail, at its limit), unused, "bb" (observe, over)
		h.BudgetsOff, h.BudgetsCount = put(3*budgetSize), 3
		le.PutUint32(b[h.BudgetsOff:], 1)
		le.PutUint32(b[h.BudgetsOff+4:], 1)
		ctr(h.BudgetsOff+8, 64, 64, 1, 2)
		o := h.BudgetsOff + budgetSize
		le.PutUint32(b[o:], 3000) // a removed budget's slot: policy 0, whatever else it holds
		ctr(o+8, 1, 2, 3, 4)
		o += budgetSize
		le.PutUint32(b[o:], 2)
		le.PutUint32(b[o+4:], 3)
		ctr(o+8, 32, 48, 3, 0)
		le.PutUint32(b[o+44:], 1)
	}
	heap1, heap2 := put(88), put(88)
	ctr(heap1, 2, 1, 1, 0) // tag bb: 2x16 + 1x32 allocated, 1x16 freed
	ctr(heap1+32, 30, 0, 12, 0, 0, 0)
	le.PutUint32(b[heap1+72:], 2)
	le.PutUint64(b[heap1+80:], base+heap2)
	le.PutUint32(b[heap2+72:], 1) // tag a, nothing in it
	th := put(40)
	le.PutUint64(b[th:], base+chunk0)
	le.PutUint64(b[th+8:], base+chunk1)
	le.PutUint64(b[th+16:], base+heap1)
	h.ThreadsHead = base + th
	h.Used, h.RegionSize = off, off
	var hb bytes.Buffer
	_ = binary.Write(&hb, binary.LittleEndian, &h)
	copy(b, hb.Bytes())
	return b[:off]
}

// TestSmallRegion: the fuzzing seed parses to the books it was written with.
func TestSmallRegion(t *testing.T) {
	s, err := Parse(smallRegion())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][4]uint64{}
	for _, tg := range s.Tags {
		got[tg.Name] = [4]uint64{tg.LiveBytes, tg.LiveBlocks, tg.AllocBytes, tg.AllocBlocks}
	}
	want := map[string][4]uint64{"untagged": {50, 1, 100, 2}, "a": {64, 1, 64, 1}, "bb": {48, 2, 64, 3}}
	for name, w := range want {
		if got[name] != w {
			t.Errorf("tag %s: %v, want %v (all: %v)", name, got[name], w, got)
		}
	}
	if len(s.Reports) != 1 || s.Reports[0].Path != "explicit/cache" || s.PID != 4242 || len(s.Command) != 2 || !s.native {
		t.Errorf("snapshot %+v", s)
	}
}

// TestSmallRegionV4: version 4 reads the thread records' counters alone
// (heap records are gone: a heap list left in a record is not followed),
// and knows the native writer from the header.
func TestSmallRegionV4(t *testing.T) {
	s, err := Parse(smallRegionOf(4))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][4]uint64{}
	for _, tg := range s.Tags {
		got[tg.Name] = [4]uint64{tg.LiveBytes, tg.LiveBlocks, tg.AllocBytes, tg.AllocBlocks}
	}
	want := map[string][4]uint64{"untagged": {50, 1, 100, 2}, "a": {64, 1, 64, 1}}
	if len(got) != len(want) || got["untagged"] != want["untagged"] || got["a"] != want["a"] {
		t.Errorf("tags %v, want %v", got, want)
	}
	if !s.native {
		t.Error("a version-4 region of the native writer is not seen as native")
	}
	// A version-3 header size under version 4 is refused.
	b := smallRegionOf(4)
	binary.LittleEndian.PutUint32(b[12:], headerV3)
	if _, err := Parse(b); err == nil {
		t.Error("a version-4 region with a version-3 header size parsed")
	}
}

// TestSmallRegionV5: live bytes from marks and headrooms, and peaks exact
// for a tag with one counter set, bounded for one held by many.
func TestSmallRegionV5(t *testing.T) {
	s, err := Parse(smallRegionOf(5))
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]TagTotals{}
	for _, tg := range s.Tags {
		got[tg.Name] = tg
	}
	u, a := got["untagged"], got["a"]
	if u.LiveBytes != 50 || u.AllocBytes != 100 || a.LiveBytes != 64 || a.LiveBlocks != 1 {
		t.Errorf("live untagged %d/%d, a %d in %d blocks", u.LiveBytes, u.AllocBytes, a.LiveBytes, a.LiveBlocks)
	}
	if !u.PeakBounded || u.PeakLiveBytes != 100 || u.PeakUpperBytes != 120 {
		t.Errorf("untagged peak %d..%d (bounded %v), want 100..120", u.PeakLiveBytes, u.PeakUpperBytes, u.PeakBounded)
	}
	if !a.PeakBounded || a.PeakLiveBytes != 64 || a.PeakUpperBytes != 64 {
		t.Errorf("a's peak %d..%d (bounded %v), want exactly 64", a.PeakLiveBytes, a.PeakUpperBytes, a.PeakBounded)
	}
	// A version-4 header size under version 5 is refused.
	b := smallRegionOf(5)
	binary.LittleEndian.PutUint32(b[12:], headerV4)
	if _, err := Parse(b); err == nil {
		t.Error("a version-5 region with a version-4 header size parsed")
	}
}

// smallBudgets are the budgets smallRegionOf(6) and smallRegionV4Budgets
// write, as the reader gives them.
var smallBudgets = []Budget{
	{Tag: "a", Limit: 64, Policy: "fail", Charged: 64, Crossings: 1, Refused: 2},
	{Tag: "bb", Limit: 32, Policy: "observe", Charged: 48, Crossings: 3, Over: true},
}

// TestSmallRegionV6: the budgets table, by tag; a budget naming no tag,
// an unknown policy or more slots than the table has is refused.
func TestSmallRegionV6(t *testing.T) {
	s, err := Parse(smallRegionOf(6))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Budgets, smallBudgets) {
		t.Errorf("budgets %+v, want %+v", s.Budgets, smallBudgets)
	}
	var h header
	f, _ := reflect.TypeOf(h).FieldByName("BudgetsOff")
	for name, spoil := range map[string]func(b []byte){
		"no such tag": func(b []byte) {
			off := binary.LittleEndian.Uint64(b[f.Offset:])
			binary.LittleEndian.PutUint32(b[off:], 3000)
		},
		"policy 9": func(b []byte) {
			off := binary.LittleEndian.Uint64(b[f.Offset:])
			binary.LittleEndian.PutUint32(b[off+4:], 9)
		},
		"too many":     func(b []byte) { binary.LittleEndian.PutUint32(b[f.Offset+8:], MaxBudgets+1) },
		"past the end": func(b []byte) { binary.LittleEndian.PutUint32(b[f.Offset+8:], MaxBudgets) },
	} {
		b := smallRegionOf(6)
		spoil(b)
		if _, err := Parse(b); err == nil {
			t.Errorf("%s: parsed", name)
		}
	}
	// A version-5 header size under version 6 is refused.
	b := smallRegionOf(6)
	binary.LittleEndian.PutUint32(b[12:], headerV5)
	if _, err := Parse(b); err == nil {
		t.Error("a version-6 region with a version-5 header size parsed")
	}
}

// TestSmallRegionV4Budgets: a version-4 header of version 6's size (the
// Go writer's) has the budgets table, read as version 6's (an unused
// slot skipped), with version 4's counters and peaks: the version-5
// fields between are not read. A 280-byte version-4 header has no
// budgets, whatever follows it; other sizes are refused.
func TestSmallRegionV4Budgets(t *testing.T) {
	s, err := Parse(smallRegionV4Budgets())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s.Budgets, smallBudgets) {
		t.Errorf("budgets %+v, want %+v", s.Budgets, smallBudgets)
	}
	got := map[string]TagTotals{}
	for _, tg := range s.Tags {
		got[tg.Name] = tg
	}
	if u, a := got["untagged"], got["a"]; len(got) != 2 || u.LiveBytes != 50 || u.AllocBytes != 100 || a.LiveBytes != 64 ||
		u.PeakBounded || a.PeakBounded || u.PeakLiveBytes != 100 || a.PeakLiveBytes != 64 {
		t.Errorf("tags %+v: want version 4's counters and peaks", got)
	}
	if s.native {
		t.Error("the Go writer's region is seen as native")
	}
	var h header
	off := func(name string) uintptr { f, _ := reflect.TypeOf(h).FieldByName(name); return f.Offset }
	// The same budgets table under a 280-byte header: not there.
	b := smallRegionV4Budgets()
	binary.LittleEndian.PutUint32(b[12:], headerV4)
	if s, err := Parse(b); err != nil || s.Budgets != nil {
		t.Errorf("a 280-byte version-4 header: budgets %+v, %v", s.Budgets, err)
	}
	// A stray count past a 280-byte header is not its field.
	b = smallRegionOf(4)
	binary.LittleEndian.PutUint64(b[off("BudgetsOff"):], 8)
	binary.LittleEndian.PutUint32(b[off("BudgetsCount"):], 3)
	if s, err := Parse(b); err != nil || s.Budgets != nil {
		t.Errorf("a 280-byte version-4 header with bytes after it: budgets %+v, %v", s.Budgets, err)
	}
	for _, size := range []uint32{headerV3, headerV5, headerV6 + 8} {
		b := smallRegionV4Budgets()
		binary.LittleEndian.PutUint32(b[12:], size)
		if _, err := Parse(b); err == nil {
			t.Errorf("a version-4 region with a header of %d bytes parsed", size)
		}
	}
	// The table is checked as version 6's.
	b = smallRegionV4Budgets()
	binary.LittleEndian.PutUint32(b[off("BudgetsCount"):], MaxBudgets)
	if _, err := Parse(b); err == nil {
		t.Error("a version-4 budgets table past the end parsed")
	}
}

// TestHeapsFieldUnread: from version 4 a thread record's heap-list field
// is neither checked nor read, so a wild offset in it is harmless (Parse
// once read it anyway, and panicked past the region's end).
func TestHeapsFieldUnread(t *testing.T) {
	for _, v := range []uint32{4, 5, 6} {
		b := smallRegionOf(v)
		f, _ := reflect.TypeOf(header{}).FieldByName("ThreadHeaps")
		binary.LittleEndian.PutUint32(b[f.Offset:], 0xfffffff0)
		if _, err := Parse(b); err != nil {
			t.Errorf("version %d: %v", v, err)
		}
	}
}

// Tag names and command lines of stray bytes come out printable, valid
// UTF-8, and no longer than they went in.
func TestPrintable(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"webgl", "webgl"},
		{"caché-ü", "caché-ü"},
		{"a\tb", "a?b"},
		{"\x1b[2J\x1b]0;x\x07", "?[2J?]0;x?"},
		{"\xff\xfeok", "??ok"},
		{"c1\u009bx", "c1?x"},
		{"del\x7f", "del?"},
	} {
		got := printable([]byte(tc.in))
		if got != tc.want || len(got) > len(tc.in) {
			t.Errorf("printable(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
