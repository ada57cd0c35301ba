package reporter

import (
	"bytes"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// twoReports: the same program twice (its cache grew, a tag appeared, the
// Go runtime's heap shrank), a process gone and one new.
func twoReports() (*Report, *Report) {
	u := func(n uint64) *uint64 { return &n }
	goItem := func(path string, n uint64) Item {
		return Item{Path: path, Kind: "nonheap", Units: "bytes", Amount: n, Description: "Go: " + path}
	}
	a := &Report{Schema: Schema, Processes: []Process{
		{PID: 10, Command: []string{"/usr/bin/app", "-x"},
			Tags:    []Tag{{Name: "cache", LiveBytes: 1000, LiveBlocks: 10, AllocBytes: 5000, AllocBlocks: 50}, {Name: "untagged", LiveBytes: 64, LiveBlocks: 1, AllocBytes: 64, AllocBlocks: 1}},
			Heap:    Heap{MappedBytes: 1 << 20, FreeCachedBytes: 64 << 10, BookkeepingBytes: 4096},
			Reports: []Item{goItem("explicit/go/heap/objects", 3<<20), {Path: "go/gc-cycles", Kind: "other", Units: "count-cumulative", Amount: 4, Description: "GC cycles."}}},
		{PID: 11, Command: []string{"/usr/bin/gone"}, Tags: []Tag{{Name: "x", LiveBytes: 16, LiveBlocks: 1, AllocBytes: 16, AllocBlocks: 1}}},
	}}
	b := &Report{Schema: Schema, Processes: []Process{
		{PID: 20, Command: []string{"/usr/bin/app", "-x"},
			Tags:    []Tag{{Name: "cache", LiveBytes: 3000, LiveBlocks: 30, AllocBytes: 9000, AllocBlocks: 90}, {Name: "a/b", LiveBytes: 48, LiveRequestedBytes: u(40), LiveBlocks: 1, AllocBytes: 48, AllocBlocks: 1}, {Name: "untagged", LiveBytes: 64, LiveBlocks: 1, AllocBytes: 64, AllocBlocks: 1}},
			Heap:    Heap{MappedBytes: 2 << 20, FreeCachedBytes: 64 << 10, BookkeepingBytes: 8192},
			Reports: []Item{goItem("explicit/go/heap/objects", 1<<20), {Path: "go/gc-cycles", Kind: "other", Units: "count-cumulative", Amount: 9, Description: "GC cycles."}}},
		{PID: 21, Command: []string{"/usr/bin/new"}, Tags: []Tag{}},
	}}
	for _, r := range []*Report{a, b} {
		for i := range r.Processes {
			p := &r.Processes[i]
			for _, t := range p.Tags {
				p.Heap.LiveBytes += t.LiveBytes
				p.Heap.LiveBlocks += t.LiveBlocks
				p.Heap.AllocBytes += t.AllocBytes
				p.Heap.AllocBlocks += t.AllocBlocks
			}
			p.Reports = append(items(*p), p.Reports...)
		}
	}
	return a, b
}

func TestCompare(t *testing.T) {
	a, b := twoReports()
	d := Compare(a, b)
	require.Len(t, d.Processes, 3)
	app := d.Processes[0]
	require.Equal(t, "changed", app.Status)
	require.Equal(t, 10, app.PIDA)
	require.Equal(t, 20, app.PIDB)
	require.Equal(t, []TagDiff{{"cache", 2000, 20, 4000, 40}, {"a/b", 48, 1, 48, 1}}, app.Tags, "unchanged tags are left out")
	require.Equal(t, []ItemDiff{
		{"explicit/go/heap/objects", "nonheap", "bytes", -2 << 20, "Go: explicit/go/heap/objects"},
		{"heap-mapped", "other", "bytes", 1 << 20, heapItems(Heap{})[3].Description},
	}, app.Reports[:2], "largest change first")
	var paths []string
	for _, it := range app.Reports {
		paths = append(paths, it.Path)
	}
	require.Equal(t, []string{"explicit/go/heap/objects", "heap-mapped", "explicit/heap-overhead/bookkeeping", "go/gc-cycles"}, paths,
		"unchanged measurements (free-cached, span-free) are left out; the tags' own items are in Tags")
	require.Equal(t, int64(2000+48-(2<<20)+4096), app.ExplicitBytes, "tags + overhead + the reporters' explicit bytes")

	require.Equal(t, "added", d.Processes[1].Status)
	require.Equal(t, 21, d.Processes[1].PIDB)
	require.Equal(t, "removed", d.Processes[2].Status)
	require.Equal(t, []TagDiff{{"x", -16, -1, -16, -1}}, d.Processes[2].Tags)
	require.Equal(t, int64(-16), d.Processes[2].ExplicitBytes)

	// B - A and A - B are opposites.
	back := Compare(b, a)
	require.Equal(t, -app.ExplicitBytes, back.Processes[0].ExplicitBytes)
	require.Equal(t, int64(-2000), back.Processes[0].Tags[0].LiveBytes)

	// The same report twice: nothing changed.
	same := Compare(a, a)
	for _, p := range same.Processes {
		require.Equal(t, "unchanged", p.Status)
		require.Empty(t, p.Tags)
		require.Empty(t, p.Reports)
	}
	var txt bytes.Buffer
	require.NoError(t, same.WriteText(&txt))
	require.Contains(t, txt.String(), "/usr/bin/app -x -- pid 10 -> 10: no change\n")
}

func TestDiffGolden(t *testing.T) {
	a, b := twoReports()
	d := Compare(a, b)
	var txt bytes.Buffer
	require.NoError(t, d.WriteText(&txt))
	golden(t, "diff.golden", txt.Bytes())
	require.Contains(t, txt.String(), "/usr/bin/app -x -- pid 10 -> 20")
	require.Contains(t, txt.String(), "  +2.0 KiB ── heap/cache  [+20 blocks; +3.9 KiB allocated in all]")
	require.Contains(t, txt.String(), "/usr/bin/gone -- removed (pid 11)")

	var js bytes.Buffer
	require.NoError(t, d.WriteJSON(&js))
	golden(t, "diff.golden.json", js.Bytes())
	var back Diff
	require.NoError(t, json.Unmarshal(js.Bytes(), &back))
	require.Equal(t, *d, back)
}

// Processes of one program: a pid in both reports is matched to itself
// (two snapshots of a running process), the rest in pid order.
func TestCompareMatchesByProgramThenPID(t *testing.T) {
	proc := func(pid int, cmd string, live uint64) Process {
		return Process{PID: pid, Command: []string{cmd}, Tags: []Tag{{Name: "t", LiveBytes: live, AllocBytes: live}}}
	}
	a := &Report{Schema: Schema, Processes: []Process{proc(5, "/bin/app", 1), proc(7, "./app", 2), proc(8, "other", 3)}}
	b := &Report{Schema: Schema, Processes: []Process{proc(9, "app", 10), proc(7, "/opt/app", 20), proc(8, "third", 30)}}
	d := Compare(a, b)
	type pair struct {
		a, b   int
		status string
	}
	var got []pair
	for _, p := range d.Processes {
		got = append(got, pair{p.PIDA, p.PIDB, p.Status})
	}
	require.Equal(t, []pair{{5, 9, "changed"}, {7, 7, "changed"}, {0, 8, "added"}, {8, 0, "removed"}}, got,
		"B's order, then what only A has; a pid of the same program matches first; a pid of another program never")
}

// Figures beyond int64 clamp rather than wrap.
func TestDiffClamps(t *testing.T) {
	require.Equal(t, int64(math.MaxInt64), sub(math.MaxUint64, 0))
	require.Equal(t, int64(math.MinInt64), sub(0, math.MaxUint64))
	require.Equal(t, int64(-5), sub(5, 10))
	require.Equal(t, "-8.0 EiB", signed(math.MinInt64))
	require.Equal(t, uint64(1)<<63, absInt(math.MinInt64))
	a := &Report{Schema: Schema, Processes: []Process{{PID: 1, Tags: []Tag{{Name: "t", LiveBytes: math.MaxUint64, AllocBytes: math.MaxUint64}}}}}
	b := &Report{Schema: Schema, Processes: []Process{{PID: 1, Tags: []Tag{{Name: "t"}}}}}
	d := Compare(a, b)
	require.Equal(t, int64(math.MinInt64), d.Processes[0].Tags[0].LiveBytes)
	var txt bytes.Buffer
	require.NoError(t, d.WriteText(&txt))
}

// nestedPair: nestedProcess before, and after its textures grew, its
// buffers went, its own gfx tag shrank, and a new net level came.
func nestedPair() (*Report, *Report) {
	a := nestedProcess()
	b := nestedProcess()
	b.PID = 8
	var kept []Tag
	for _, t := range b.Tags {
		switch t.Name {
		case "gfx/webgl/textures":
			t.LiveBytes += 3 << 20
			t.LiveBlocks += 3
			t.AllocBytes += 3 << 20
		case "gfx/webgl/buffers":
			continue
		case "gfx":
			t.LiveBytes -= 256 << 10
			t.LiveBlocks--
		}
		kept = append(kept, t)
	}
	b.Tags = append(kept, Tag{Name: "net/dns/cache", LiveBytes: 4096, LiveBlocks: 2, AllocBytes: 8192, AllocBlocks: 4})
	b.Reports = items(b)
	return &Report{Schema: Schema, Processes: []Process{a}}, &Report{Schema: Schema, Processes: []Process{b}}
}

// The diff nests by path: every level's change is the exact sum of its
// tags' changes, in the JSON (levels) and the text (a line per level with
// its children under it).
func TestDiffPerLevel(t *testing.T) {
	a, b := nestedPair()
	d := Compare(a, b)
	require.Len(t, d.Processes, 1)
	p := d.Processes[0]
	levels := map[string]LevelDiff{}
	for _, l := range p.Levels {
		levels[l.Path] = l
	}
	require.Equal(t, LevelDiff{Path: "gfx", LiveBytes: 3<<20 - 2<<20 - 256<<10, LiveBlocks: 3 - 20 - 1, AllocBytes: 3<<20 - 2<<20, AllocBlocks: -40, Tags: 3}, levels["gfx"])
	require.Equal(t, LevelDiff{Path: "gfx/webgl", LiveBytes: 3<<20 - 2<<20, LiveBlocks: 3 - 20, AllocBytes: 3<<20 - 2<<20, AllocBlocks: -40, Tags: 2}, levels["gfx/webgl"])
	require.Equal(t, LevelDiff{Path: "net", LiveBytes: 4096, LiveBlocks: 2, AllocBytes: 8192, AllocBlocks: 4, Tags: 1}, levels["net"])
	require.Equal(t, LevelDiff{Path: "net/dns", LiveBytes: 4096, LiveBlocks: 2, AllocBytes: 8192, AllocBlocks: 4, Tags: 1}, levels["net/dns"])
	require.Len(t, levels, 4, "levels above changed tags only: %v", p.Levels)
	// each level is the sum of the tags under it, from the tags' own changes
	for _, l := range p.Levels {
		var live, blocks int64
		for _, tg := range p.Tags {
			if tg.Name == l.Path || strings.HasPrefix(tg.Name, l.Path+"/") {
				live += tg.LiveBytes
				blocks += tg.LiveBlocks
			}
		}
		require.Equal(t, live, l.LiveBytes, "%s", l.Path)
		require.Equal(t, blocks, l.LiveBlocks, "%s", l.Path)
	}

	var txt bytes.Buffer
	require.NoError(t, d.WriteText(&txt))
	out := txt.String()
	for _, want := range []string{
		"├──  +768 KiB -- heap/gfx  [-18 blocks; +1.0 MiB allocated in all]\n" +
			"│  ├──  +1.0 MiB -- webgl  [-17 blocks; +1.0 MiB allocated in all]\n" +
			"│  │  ├──  +3.0 MiB ── textures  [+3 blocks; +3.0 MiB allocated in all]\n" +
			"│  │  └──  -2.0 MiB ── buffers  [-20 blocks; -2.0 MiB allocated in all]\n" +
			"│  └──  -256 KiB ── (own)  [-1 blocks; 0 B allocated in all]\n",
		"──  +4.0 KiB ── heap/net/dns/cache  [+2 blocks; +8.0 KiB allocated in all]\n",
	} {
		require.Contains(t, out, want)
	}
	require.NotContains(t, out, "peak")
	var js bytes.Buffer
	require.NoError(t, d.WriteJSON(&js))
	require.Contains(t, js.String(), `"path": "gfx/webgl"`)
}

// Hostile names in the diff's text: control characters and bidi
// overrides print as '?' (commands, tags at every level, items).
func TestDiffTextHostileNames(t *testing.T) {
	mk := func(live uint64) *Report {
		p := Process{PID: 1, Command: []string{"\x1b]0;title\x07prog"}, Tags: []Tag{
			{Name: "\x1b[2J/\u202eevil", LiveBytes: live, AllocBytes: live},
			{Name: "\x1b[2J/x\ny", LiveBytes: live, AllocBytes: live},
			{Name: "bad//\xff", LiveBytes: live, AllocBytes: live},
		}}
		p.Reports = append(items(p), Item{Path: "explicit/\x1b[31m", Kind: "nonheap", Units: "bytes", Amount: live, Description: "d"},
			Item{Path: "other\u2066", Kind: "other", Units: "\x1b", Amount: live, Description: "d"})
		return &Report{Schema: Schema, Processes: []Process{p}}
	}
	var txt bytes.Buffer
	require.NoError(t, Compare(mk(1), mk(100)).WriteText(&txt))
	out := txt.String()
	for _, bad := range []string{"\x1b", "\x07", "\u202e", "\u2066", "\xff", "x\ny"} {
		require.NotContains(t, out, bad)
	}
	require.Contains(t, out, "?]0;title?prog -- pid 1 -> 1")
	require.Contains(t, out, "-- heap/?[2J  [")
	require.Contains(t, out, "── ?evil  [")
	require.Contains(t, out, "── x?y  [")
	require.Contains(t, out, "── heap/bad//?  [")
}
