package reporter

import (
	"bytes"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/symbolizer"
	"github.com/tagalloc/tagalloc/tagtable"
)

// A profile with two stacks through a program and a library, three tags.
func sampleProfile() (*tagtable.Profile, map[uint32]string) {
	p := tagtable.NewProfile(7, "full", 1)
	p.Module(tagtable.Module{Start: 0x1000, End: 0x2000, Offset: 0x1000, Path: "/usr/bin/prog", BuildID: "0a1b2c"})
	p.Module(tagtable.Module{Start: 0x5000, End: 0x6000, Offset: 0, Path: "/usr/lib/libGLESv2.so.2"})
	p.Module(tagtable.Module{Start: 0x9000, End: 0xa000, Offset: 0, Path: "/lib/x86_64-linux-gnu/libc.so.6"})
	p.Stack(1, []uint64{0x9010, 0x5010, 0x1010})
	p.Stack(2, []uint64{0x1020, 0x1030})
	for i := uint64(0); i < 10; i++ {
		p.Alloc(0x100000+i*64, 64, 60, 1, 1)
	}
	p.Alloc(0x200000, 4096, 4096, 2, 2)
	p.Alloc(0x300000, 128, 100, 2, 2)
	p.Free(0x300000)
	return p, map[uint32]string{1: "gpu", 2: "parser"}
}

// sampleSymbolize names sampleProfile's addresses in prog: one with an
// inlined call, one from the symbol table alone.
func sampleSymbolize(m *tagtable.Module, pc uint64) []symbolizer.Frame {
	switch pc {
	case 0x1010: // helper inlined into main
		return []symbolizer.Frame{{Function: "helper", File: "/src/util.h", Line: 3, Inlined: true, Origin: symbolizer.OriginDWARF},
			{Function: "main", File: "/src/main.c", Line: 12, Origin: symbolizer.OriginDWARF}}
	case 0x1020:
		return []symbolizer.Frame{{Function: "parse", Origin: symbolizer.OriginSymtab}}
	}
	return []symbolizer.Frame{{Function: "prog+0x30", Origin: symbolizer.OriginNone}}
}

func TestFromProfile(t *testing.T) {
	p, names := sampleProfile()
	st := FromProfile(p, names, sampleSymbolize)
	require.Equal(t, uint64(12), st.Samples)
	require.Len(t, st.Records, 2)
	require.Equal(t, "parser", st.Records[0].Tag, "most live bytes first")
	gpu := st.Records[1]
	require.Equal(t, "gpu", gpu.Tag)
	require.Equal(t, "libGLESv2.so.2", gpu.Library, "libc is skipped, the library named")
	require.Equal(t, uint64(640), gpu.LiveBytes)
	require.Equal(t, uint64(600), gpu.LiveRequestedBytes)
	require.Len(t, gpu.Frames, 4, "three addresses, one with an inlined call")
	require.Equal(t, Frame{PC: 0x1010, Module: "prog", Offset: 0x1010, Function: "helper", File: "/src/util.h", Line: 3, Inlined: true}, gpu.Frames[2])
	require.Equal(t, Frame{PC: 0x1010, Module: "prog", Offset: 0x1010, Function: "main", File: "/src/main.c", Line: 12}, gpu.Frames[3],
		"file offset: pc - start + offset")
	require.Empty(t, gpu.Frames[1].Function, "nothing names it: the module and offset stand")
	require.Equal(t, "prog", st.Records[0].Library)
	require.Equal(t, "parse", st.Records[0].Frames[0].Function, "a symbol without a line")
	require.Zero(t, st.Records[0].Frames[0].Line)
	require.Equal(t, uint64(4096+128), st.Records[0].AllocBytes)
	require.Equal(t, "prog", st.Libraries[0].Name)

	// pprof: the inlined call and its function are one location of two lines
	rep := &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Stacks: st}}}
	var b bytes.Buffer
	require.NoError(t, rep.WritePprof(&b, 0))
	prof, err := profile.Parse(&b)
	require.NoError(t, err)
	var lines []string
	for _, l := range prof.Location {
		if l.Address == 0x1010 {
			for _, ln := range l.Line {
				lines = append(lines, ln.Function.Name)
			}
		}
	}
	require.Equal(t, []string{"helper", "main"}, lines)
	for _, s := range prof.Sample {
		if s.Label["tag"][0] == "gpu" {
			require.Len(t, s.Location, 3, "one location per address")
		}
	}
}

// The roll-up: the first module outside libc, libstdc++, libgcc, the
// loader and the allocator; a stack wholly inside them is charged to its
// outermost module; frames without a module name nothing.
func TestLibraryRollup(t *testing.T) {
	fr := func(mods ...string) []Frame {
		var out []Frame
		for _, m := range mods {
			out = append(out, Frame{Module: m})
		}
		return out
	}
	for _, c := range []struct {
		frames []Frame
		want   string
	}{
		{fr("libtagalloc.so", "libc.so.6", "libstdc++.so.6", "libfoo.so.1", "prog"), "libfoo.so.1"},
		{fr("libgcc_s.so.1", "ld-linux-x86-64.so.2", "libm.so.6", "python3.12"), "python3.12"},
		{fr("", "libc.so.6", "", "prog"), "prog"},
		{fr("libc.so.6", "ld-linux-x86-64.so.2"), "ld-linux-x86-64.so.2"},
		{fr("", ""), "unknown"},
		{nil, "unknown"},
	} {
		require.Equal(t, c.want, library(c.frames), "%v", c.frames)
	}
}

func TestDMDAndPprof(t *testing.T) {
	p, names := sampleProfile()
	rep := &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Stacks: FromProfile(p, names, nil)}}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteDMD(&b))
	out := b.String()
	require.Contains(t, out, "1 block in heap block record 1 of 2 (tag parser)")
	require.Contains(t, out, "10 blocks in heap block record 2 of 2 (tag gpu)")
	require.Contains(t, out, "640 bytes (600 requested / 40 slop)")
	require.Contains(t, out, "13.51% of the heap (100.00% cumulative)")
	require.Contains(t, out, "[libGLESv2.so.2 +0x10]")
	require.NotContains(t, out, "~", "full mode: exact, no estimates marked")

	b.Reset()
	require.NoError(t, rep.WritePprof(&b, 0))
	prof, err := profile.Parse(&b)
	require.NoError(t, err)
	require.Len(t, prof.Sample, 2)
	var inuse int64
	tags := map[string]bool{}
	for _, s := range prof.Sample {
		inuse += s.Value[3]
		tags[s.Label["tag"][0]] = true
	}
	require.Equal(t, int64(640+4096), inuse)
	require.Equal(t, map[string]bool{"gpu": true, "parser": true}, tags)
	require.Error(t, (&Report{Processes: []Process{{PID: 1}}}).WritePprof(&b, 0), "no stacks: an error, not an empty profile")
}

// The stacks section reports the event history (what it keeps and
// recycled, the span) and a timeline built from it; DMD prints both.
func TestStacksHistory(t *testing.T) {
	p, names := sampleProfile() // 13 events at clock 0
	require.NoError(t, p.SetHistoryLimit(4096))
	p.Module(tagtable.Module{Start: 0x7000, End: 0x8000, Offset: 0, Path: "/usr/lib/libz.so.1"})
	p.Stack(3, []uint64{0x7010})
	for i := uint64(0); i < 1000; i++ { // 1000 ms of 64 KiB blocks allocated and freed by libz
		p.SetClock(i)
		p.Alloc(0x400000, 65536, 65536, 1, 3)
		p.Free(0x400000)
	}
	st := FromProfile(p, names, nil)
	h := st.History
	require.NotNil(t, h)
	require.Equal(t, uint64(4096), h.LimitBytes)
	require.LessOrEqual(t, h.UsedBytes, uint64(4096+tagtable.HistorySlack))
	require.Positive(t, h.EventsRecycled)
	require.Equal(t, uint64(2000), h.Events+h.EventsRecycled, "a new limit drops what was kept: 2000 events since")
	require.Equal(t, h.EventsRecycled, h.FirstSeq)
	require.Equal(t, uint64(2000), h.NextSeq)
	require.Equal(t, uint64(999), h.EndMs)
	require.Positive(t, h.StartMs)
	require.Len(t, h.Timeline, 2, "all, and the one record in the span")
	require.Equal(t, "all", h.Timeline[0].Name)
	require.Equal(t, -1, h.Timeline[0].Record)
	z := h.Timeline[1]
	require.Equal(t, "record 2, gpu: libz.so.1+0x10", z.Name)
	require.Equal(t, "libz.so.1", st.Records[z.Record].Library)
	var a, f uint64
	for i := range z.AllocBytes {
		a += z.AllocBytes[i]
		f += z.FreeBytes[i]
	}
	require.Equal(t, 65536*h.Events/2, a, "full mode: exact bytes of the events kept")
	require.Equal(t, a, f)
	require.Equal(t, uint64(1000*65536+640), st.Records[z.Record].AllocBytes+st.Records[1].AllocBytes,
		"the record's cumulative figures stay exact: %+v", st.Records)

	rep := &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Stacks: st}}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&b))
	require.Contains(t, b.String(), `"events_recycled"`)
	require.Contains(t, b.String(), `"timeline"`)
	b.Reset()
	require.NoError(t, rep.WriteDMD(&b))
	out := b.String()
	require.Contains(t, out, "# History (limit 4.0 KiB)")
	require.Contains(t, out, "older events recycled")
	require.Contains(t, out, "[1] record 2, gpu: libz.so.1+0x10")
	require.Contains(t, out, "into the run")

	none, _ := sampleProfile()
	require.NoError(t, none.SetHistoryLimit(0))
	require.Nil(t, FromProfile(none, names, nil).History)
}

// A timeline series is named by record, tag and three frames from the
// library's first: a library's malloc wrapper alone names nothing apart.
func TestSeriesName(t *testing.T) {
	r := StackRecord{Tag: "untagged", Library: "libsqlite3.so.0", Frames: []Frame{
		{Module: "libc.so.6", Function: "malloc"}, {Module: "libsqlite3.so.0", Offset: 0xa7504},
		{Module: "libsqlite3.so.0", Function: "sqlite3_exec"}, {Module: "sqlite3", Function: "main"}, {Module: "sqlite3", Function: "_start"}}}
	require.Equal(t, "record 4, untagged: libsqlite3.so.0+0xa7504 < sqlite3_exec < main", seriesName(r, 4))
	require.Equal(t, "record 0, x: unknown", seriesName(StackRecord{Tag: "x", Library: "unknown"}, 0))
}

// The run's summary names who holds most and who allocated most, with
// their stacks' first frames, in that order.
func TestStacksSummary(t *testing.T) {
	p, names := sampleProfile()
	st := FromProfile(p, names, func(m *tagtable.Module, pc uint64) []symbolizer.Frame {
		if pc == 0x1020 {
			return []symbolizer.Frame{{Function: "parse", Origin: symbolizer.OriginSymtab}}
		}
		return nil
	})
	// what each record allocated in all is more than it held at any peak
	// (its blocks came and went): the summary's "in all" is the former
	for i := range st.Records {
		st.Records[i].AllocBytes += 1 << 20
	}
	rep := &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Tags: []Tag{}, Stacks: st}}}
	var b bytes.Buffer
	require.NoError(t, rep.WriteSummary(&b))
	out := b.String()
	require.Contains(t, out, "Who allocated it (--stacks full, every block)\n")
	require.Contains(t, out, "  4.6 KiB live in 11 blocks, 2.0 MiB allocated in all; 12 samples\n")
	require.Contains(t, out, "  Libraries holding most: prog 4.0 KiB, libGLESv2.so.2 640 B\n")
	live := strings.Index(out, "  Holding most (live):\n    4.0 KiB (86.49%) in 1 blocks, tag parser, prog\n      parse [prog +0x1020]\n")
	all := strings.Index(out, "  Allocating most (in all):\n    1.0 MiB (50.09%) in 2 blocks, tag parser, prog\n")
	require.True(t, live > 0 && all > live, "%s", out)
	require.Contains(t, out, "    640 B (13.51%) in 10 blocks, tag gpu, libGLESv2.so.2\n      ??? [libc.so.6 +0x10]\n")

	// sampled: estimates are marked
	st.Mode, st.SampleRate = "sampled", 512<<10
	b.Reset()
	require.NoError(t, rep.WriteSummary(&b))
	require.Contains(t, b.String(), "one block per ~512 KiB allocated; ~ marks estimates)\n  ~4.6 KiB live in ~11 blocks")
}
