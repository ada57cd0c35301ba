package reporter

import (
	"bytes"
	"fmt"
	"math/rand"
	"regexp"
	"strings"
	"testing"

	"github.com/dustin/go-humanize"
	"github.com/stretchr/testify/require"
)

func TestTagPath(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string
	}{
		{"gfx", []string{"gfx"}},
		{"gfx/webgl/textures", []string{"gfx", "webgl", "textures"}},
		{"a.b/c..d/...", []string{"a.b", "c..d", "..."}},
		{"a//b", nil},
		{"/a", nil},
		{"a/", nil},
		{"/", nil},
		{"", nil},
		{"a/../b", nil},
		{"..", nil},
		{"a/./b", nil},
	} {
		got, ok := TagPath(tc.name)
		require.Equal(t, tc.want != nil, ok, "%q", tc.name)
		require.Equal(t, tc.want, got, "%q", tc.name)
	}
	require.Equal(t, 32, MaxTagDepth, "a 63-byte name has at most 32 components")
	deepest := strings.Repeat("a/", MaxTagDepth-1) + "a"
	require.Len(t, deepest, MaxTagLen)
	c, ok := TagPath(deepest)
	require.True(t, ok)
	require.Len(t, c, MaxTagDepth)
}

// nestedTags: a tag that is both a leaf and a level above others (gfx), a
// chain of single children (gfx/webgl/textures), a name given twice, the
// untagged bytes, and names that are not paths (flat).
func nestedTags() []Tag {
	u := func(n uint64) *uint64 { return &n }
	tag := func(name string, live, blocks, alloc uint64) Tag {
		return Tag{Name: name, LiveBytes: live, LiveBlocks: blocks, AllocBytes: alloc, AllocBlocks: blocks * 2,
			PeakLiveBytes: live + 7, PeakLiveBytesUpper: u(live + 7), LiveRequestedBytes: u(live - blocks)}
	}
	return []Tag{
		tag("gfx/webgl/textures", 4<<20, 40, 9<<20),
		tag("untagged", 1<<20, 100, 5<<20),
		tag("gfx", 1<<20, 10, 2<<20),
		tag("net/cache", 3<<20, 30, 3<<20),
		tag("gfx/webgl/buffers", 2<<20, 20, 2<<20),
		tag("gfx/layers", 512<<10, 5, 1<<20),
		tag("net/socket", 256<<10, 3, 300<<10),
		tag("a//b", 1000, 1, 1000),
		tag("/lead", 2000, 2, 2000),
		tag("trail/", 3000, 3, 3000),
		tag("x/../y", 4000, 4, 4000),
		tag("net/cache", 10, 1, 20), // a second tag of that name
	}
}

// levelsText is a tree as "depth name path tags", one level a line.
func levelsText(levels []*TagLevel) string {
	var b strings.Builder
	for _, top := range levels {
		top.Walk(func(l *TagLevel, d int) {
			fmt.Fprintf(&b, "%s%s [%s] %v\n", strings.Repeat("  ", d), l.Name, l.Path, l.Tags)
		})
	}
	return b.String()
}

func TestTagTreeShape(t *testing.T) {
	tags := nestedTags()
	names := tagNames(tags)
	require.Equal(t, `gfx [gfx] []
  webgl [gfx/webgl] []
    textures [gfx/webgl/textures] [0]
    buffers [gfx/webgl/buffers] [4]
  (own) [gfx] [2]
  layers [gfx/layers] [5]
untagged [untagged] [1]
net [net] []
  cache [net/cache] [3 11]
  socket [net/socket] [6]
a//b [a//b] [7]
/lead [/lead] [8]
trail/ [trail/] [9]
x/../y [x/../y] [10]
`, levelsText(buildTagTree(names, nil, false)), "every level, siblings in the order their first tag appears")

	// merged, as about:memory shows a level with one child
	require.Equal(t, "x [x] []\n  y/z [x/y/z] [0]\n  w [x/w] [1]\n", levelsText(TagTree([]string{"x/y/z", "x/w"})))
	require.Equal(t, "a/b/c [a/b/c] [0]\n", levelsText(TagTree([]string{"a/b/c"})))
	require.Equal(t, "a [a] []\n  (own) [a] [0]\n  b/c [a/b/c] [1]\n", levelsText(TagTree([]string{"a", "a/b/c"})))
	// a real component named like the own child
	require.Equal(t, "a [a] []\n  (own) [a/(own)] [0]\n  (own 2) [a] [1]\n", levelsText(TagTree([]string{"a/(own)", "a"})))
}

// Every level's figures are the exact sums of the tags at and under it,
// on random trees; a level of one tag is that tag.
func TestTagTreeSumsExact(t *testing.T) {
	rnd := rand.New(rand.NewSource(1))
	comps := []string{"a", "b", "c", "(own)", "a b"}
	for round := 0; round < 200; round++ {
		var tags []Tag
		for i := rnd.Intn(30); i >= 0; i-- {
			var parts []string
			for d := rnd.Intn(5); d >= 0; d-- {
				parts = append(parts, comps[rnd.Intn(len(comps))])
			}
			name := strings.Join(parts, "/")
			if rnd.Intn(10) == 0 {
				name += "/" // not a path: flat
			}
			live := uint64(rnd.Intn(1 << 20))
			tags = append(tags, Tag{Name: name, LiveBytes: live, LiveBlocks: uint64(rnd.Intn(100)), AllocBytes: live + uint64(rnd.Intn(1<<20)), AllocBlocks: uint64(rnd.Intn(1000))})
		}
		for _, merge := range []bool{false, true} {
			levels := buildTagTree(tagNames(tags), nil, merge)
			seen := map[int]int{}
			for _, top := range levels {
				top.Walk(func(l *TagLevel, _ int) {
					for _, i := range l.Tags {
						seen[i]++
					}
					// the level's sums, from the tags whose names it covers
					var want TagTotals
					for _, tg := range tags {
						under := tg.Name == l.Path // a leaf: the tags of its name
						if !l.Leaf() {             // a level: every path at or under its own
							_, ok := TagPath(tg.Name)
							under = ok && (tg.Name == l.Path || strings.HasPrefix(tg.Name, l.Path+"/"))
						}
						if under {
							want.Tags++
							want.LiveBytes += tg.LiveBytes
							want.LiveBlocks += tg.LiveBlocks
							want.AllocBytes += tg.AllocBytes
							want.AllocBlocks += tg.AllocBlocks
						}
					}
					got := l.Totals(tags)
					require.Equal(t, want.Tags, got.Tags, "tags under %q", l.Path)
					require.Equal(t, want.LiveBytes, got.LiveBytes, "live bytes of %q", l.Path)
					require.Equal(t, want.LiveBlocks, got.LiveBlocks, "live blocks of %q", l.Path)
					require.Equal(t, want.AllocBytes, got.AllocBytes, "allocated bytes of %q", l.Path)
					require.Equal(t, want.AllocBlocks, got.AllocBlocks, "allocated blocks of %q", l.Path)
					// and the children's sums add up to the level's
					if !l.Leaf() {
						var sum uint64
						for _, c := range l.Children {
							sum += c.Totals(tags).LiveBytes
						}
						require.Equal(t, got.LiveBytes, sum, "children of %q", l.Path)
						require.Empty(t, l.Tags, "a level above tags holds none itself")
					}
				})
			}
			for i := range tags {
				require.Equal(t, 1, seen[i], "tag %d (%q) is in the tree once", i, tags[i].Name)
			}
		}
	}
}

func nestedProcess() Process {
	p := Process{PID: 7, Command: []string{"game"}, Ended: "exited", Tags: nestedTags(),
		Heap: Heap{FreeCachedBytes: 1 << 20, BookkeepingBytes: 256 << 10, MappedBytes: 64 << 20}}
	for _, t := range p.Tags {
		p.Heap.LiveBytes += t.LiveBytes
		p.Heap.LiveBlocks += t.LiveBlocks
		p.Heap.AllocBytes += t.AllocBytes
		p.Heap.AllocBlocks += t.AllocBlocks
	}
	p.Reports = items(p)
	return p
}

// The tree nests tags by path under heap/: each level's line has the
// exact sums of the tags under it and no peak; a tag alone has its peak;
// a tag that is also a level shows its own bytes as "(own)"; names that
// are not paths stay flat.
func TestTreeNestsTags(t *testing.T) {
	p := nestedProcess()
	var b bytes.Buffer
	require.NoError(t, p.WriteTree(&b))
	tree := b.String()
	golden(t, "tree-nested.golden", b.Bytes())

	line := func(re string) string {
		t.Helper()
		m := regexp.MustCompile(`(?m)^` + re + `$`).FindString(tree)
		require.NotEmpty(t, m, "no line matches %s in\n%s", re, tree)
		return m
	}
	gfx := uint64(4<<20 + 1<<20 + 2<<20 + 512<<10)
	line(`├──` + regexp.QuoteMeta(humanize.IBytes(gfx)) + ` \(\d+\.\d\d%\) -- heap/gfx  \[75 blocks, [^;]+ requested; 14 MiB allocated in all\]`)
	line(`│  ├──6\.0 MiB \(\d+\.\d\d%\) -- webgl  \[60 blocks, .*; 11 MiB allocated in all\]`)
	line(`│  │  ├──4\.0 MiB \(\d+\.\d\d%\) ── textures  \[40 blocks, .*; 9\.0 MiB allocated in all, peak 4\.0 MiB\]`)
	line(`│  │  └──2\.0 MiB \(\d+\.\d\d%\) ── buffers  \[.*peak 2\.0 MiB\]`)
	line(`│  ├──1\.0 MiB \(\d+\.\d\d%\) ── \(own\)  \[10 blocks.*peak 1\.0 MiB\]`)
	line(`│  └──512 KiB \(\d+\.\d\d%\) ── layers  \[5 blocks.*peak 512 KiB\]`)
	line(`├──1\.0 MiB \(\d+\.\d\d%\) ── heap-unclassified  \[100 blocks.*peak 1\.0 MiB\]`)
	line(`├──3\.3 MiB \(\d+\.\d\d%\) -- heap/net  \[34 blocks.*\]`)
	line(`│  ├──3\.0 MiB \(\d+\.\d\d%\) ── cache  \[31 blocks.*2 tags of this name: no peak\]`)
	line(`├──1000 B \(\d+\.\d\d%\) ── heap/a//b  \[1 blocks.*peak 1007 B\]`)
	line(`├──2.0 KiB \(\d+\.\d\d%\) ── heap//lead  \[.*\]`)
	line(`├──2.9 KiB \(\d+\.\d\d%\) ── heap/trail/  \[.*\]`)
	line(`├──3.9 KiB \(\d+\.\d\d%\) ── heap/x/../y  \[.*\]`)
	for _, l := range strings.Split(tree, "\n") {
		if strings.Contains(l, " -- heap/") || strings.Contains(l, " -- webgl") {
			require.NotContains(t, l, "peak", "a level's line shows no peak: %s", l)
		}
	}
	// the explicit total is unchanged by the nesting
	require.Contains(t, tree, humanize.IBytes(p.Heap.LiveBytes+p.Heap.FreeCachedBytes+p.Heap.BookkeepingBytes)+" (100.00%) -- explicit")
}

// Hostile names in the tree: control characters and bidi overrides print
// as '?', at every level.
func TestTreeHostileNestedNames(t *testing.T) {
	p := Process{PID: 1, Command: []string{"x"}, Tags: []Tag{
		{Name: "\x1b[2J/\u202eevil/x", LiveBytes: 10, AllocBytes: 10},
		{Name: "\x1b[2J/b\x07", LiveBytes: 20, AllocBytes: 20},
		{Name: "bad\xff//\n", LiveBytes: 30, AllocBytes: 30},
	}}
	var b bytes.Buffer
	require.NoError(t, p.WriteTree(&b))
	out := b.String()
	for _, bad := range []string{"\x1b", "\u202e", "\x07", "\xff", "\n\n"} {
		require.NotContains(t, out, bad)
	}
	require.Contains(t, out, "-- heap/?[2J  [")
	require.Contains(t, out, "── ?evil/x  [")
	require.Contains(t, out, "── b?  [")
	require.Contains(t, out, "── heap/bad?//?  [")
}

// memTree sums a memory-report's reports per node, as aboutMemory.js
// builds its trees from the paths: path -> amount, for every node (each
// prefix of a report's path).
func memTree(f *MemReportFile, proc string) map[string]int64 {
	sums := map[string]int64{}
	for _, r := range f.Reports {
		if r.Process != proc {
			continue
		}
		for i := range r.Path {
			if r.Path[i] == '/' {
				sums[r.Path[:i]] += r.Amount
			}
		}
		sums[r.Path] += r.Amount
	}
	return sums
}

// about:memory's export nests tags by path (explicit/heap/gfx/webgl/...),
// a tag that is also a level reports its own bytes as (own), names that
// are not paths stay one node with '\' for '/', and every node's amount,
// summed as about:memory sums it, is the level's exact total.
func TestMemoryReportNestsTags(t *testing.T) {
	p := nestedProcess()
	r := &Report{Schema: Schema, Processes: []Process{p}}
	f, err := r.MemoryReport()
	require.NoError(t, err)
	var buf bytes.Buffer
	require.NoError(t, r.WriteMemoryReport(&buf))
	require.NoError(t, CheckMemoryReport(buf.Bytes()), "about:memory loads it")

	paths := map[string]bool{}
	for _, rep := range f.Reports {
		paths[rep.Path] = true
	}
	for _, want := range []string{
		"explicit/heap/gfx/webgl/textures", "explicit/heap/gfx/webgl/buffers", "explicit/heap/gfx/(own)", "explicit/heap/gfx/layers",
		"explicit/heap/net/cache", "explicit/heap/net/socket",
		`explicit/heap/a\\b`, `explicit/heap/\lead`, `explicit/heap/trail\`, `explicit/heap/x\..\y`,
		"tagalloc-live-blocks/gfx/(own)", "tagalloc-alloc-bytes/gfx/webgl/textures", "tagalloc-live-blocks/untagged",
		"tagalloc-requested-bytes/net/cache", "tagalloc-alloc-blocks/x\\..\\y",
	} {
		require.True(t, paths[want], "no report at %s", want)
	}
	require.False(t, paths["explicit/heap/gfx"], "gfx is a node, its own bytes a child")
	require.False(t, paths["explicit/heap/untagged"], "about:memory works out heap-unclassified")

	sums := memTree(f, memProcess(p))
	levels := buildTagTree(tagNames(p.Tags), nil, false)
	for _, top := range levels {
		top.Walk(func(l *TagLevel, _ int) {
			if _, ok := TagPath(l.Path); !ok {
				return // a flat name: its node is the escaped name (above)
			}
			tot := l.Totals(p.Tags)
			node := l.Path
			if l.Name == OwnLevel {
				node += "/" + OwnLevel
			}
			require.Equal(t, int64(tot.LiveBlocks), sums["tagalloc-live-blocks/"+node], "live blocks of %s", node)
			require.Equal(t, int64(tot.AllocBlocks), sums["tagalloc-alloc-blocks/"+node], "allocated blocks of %s", node)
			require.Equal(t, int64(tot.AllocBytes), sums["tagalloc-alloc-bytes/"+node], "allocated bytes of %s", node)
			require.Equal(t, int64(*tot.LiveRequestedBytes), sums["tagalloc-requested-bytes/"+node], "requested bytes of %s", node)
			if l.Path != DefaultTag {
				require.Equal(t, int64(tot.LiveBytes), sums["explicit/heap/"+node], "live bytes of %s", node)
			}
		})
	}
	require.Equal(t, int64(4<<20+2<<20+1<<20+512<<10), sums["explicit/heap/gfx"])
	require.Equal(t, int64(p.Heap.LiveBytes-1<<20), sums["explicit/heap"], "every tag but the untagged")
}

// Names about:memory would misread or that would collide once written
// (a flat "a/" is a\ as a tag "a\" is) are told apart; a real component
// named (own) beside an own child too; hostile names stay data; the file
// always passes about:memory's rules.
func TestMemoryReportHostileNestedNames(t *testing.T) {
	tags := []Tag{
		{Name: "a/", LiveBytes: 1, AllocBytes: 1},
		{Name: `a\`, LiveBytes: 2, AllocBytes: 2},
		{Name: `a\/x`, LiveBytes: 3, AllocBytes: 3},
		{Name: "b/(own)", LiveBytes: 4, AllocBytes: 4},
		{Name: "b", LiveBytes: 5, AllocBytes: 5},
		{Name: "<script>/\u202e\"q\"", LiveBytes: 6, AllocBytes: 6},
		{Name: "untagged/x", LiveBytes: 7, AllocBytes: 7},
		{Name: "untagged", LiveBytes: 8, AllocBytes: 8},
		{Name: "..", LiveBytes: 9, AllocBytes: 9},
		{Name: "c//d", LiveBytes: 10, AllocBytes: 10},
		{Name: "c", LiveBytes: 11, AllocBytes: 11},
	}
	p := Process{PID: 3, Command: []string{"h"}, Tags: tags}
	for _, t := range tags {
		p.Heap.LiveBytes += t.LiveBytes
		p.Heap.AllocBytes += t.AllocBytes
	}
	p.Reports = items(p)
	r := &Report{Schema: Schema, Processes: []Process{p}}
	var buf bytes.Buffer
	require.NoError(t, r.WriteMemoryReport(&buf))
	require.NoError(t, CheckMemoryReport(buf.Bytes()))
	f, err := ReadMemoryReport(buf.Bytes())
	require.NoError(t, err)
	got := map[string]string{} // path -> description
	for _, rep := range f.Reports {
		if strings.HasPrefix(rep.Path, "explicit/heap/") {
			got[rep.Path] = rep.Description
		}
	}
	require.Equal(t, map[string]string{
		`explicit/heap/a\`:                   "Live heap blocks tagged \"a/\" (usable bytes).",
		`explicit/heap/a\ (2)/(own)`:         "Live heap blocks tagged \"a\\\\\" (usable bytes).",
		`explicit/heap/a\ (2)/x`:             "Live heap blocks tagged \"a\\\\/x\" (usable bytes).",
		"explicit/heap/b/(own)":              "Live heap blocks tagged \"b/(own)\" (usable bytes).",
		"explicit/heap/b/(own 2)":            "Live heap blocks tagged \"b\" (usable bytes).",
		"explicit/heap/<script>/\u202e\"q\"": "Live heap blocks tagged \"<script>/\\u202e\\\"q\\\"\" (usable bytes).",
		"explicit/heap/untagged/x":           "Live heap blocks tagged \"untagged/x\" (usable bytes).",
		"explicit/heap/..":                   "Live heap blocks tagged \"..\" (usable bytes).",
		`explicit/heap/c\\d`:                 "Live heap blocks tagged \"c//d\" (usable bytes).",
		"explicit/heap/c":                    "Live heap blocks tagged \"c\" (usable bytes).",
	}, got)
	require.Contains(t, buf.String(), `"tagalloc-live-blocks/untagged/(own)"`, "untagged, beside untagged/x, in the trees of every tag")
	require.Contains(t, buf.String(), `\u003cscript\u003e`, "JSON escapes markup")
}

// FuzzTagTree: any tag names (split at NUL) nest into a tree that holds
// every tag once, whose levels sum exactly, that the text tree prints
// with no control character, and that about:memory loads.
func FuzzTagTree(f *testing.F) {
	f.Add([]byte("gfx\x00gfx/webgl/textures\x00gfx/webgl\x00a//b\x00/x\x00x/\x00untagged\x00untagged/y\x00a\\\x00a/"))
	f.Add([]byte("b/(own)\x00b\x00b/(own 2)\x00..\x00.\x00a/./b"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var tags []Tag
		for i, name := range strings.Split(string(data), "\x00") {
			if name == "" || len(name) > MaxTagLen || len(tags) == 64 {
				continue // Read refuses them
			}
			tags = append(tags, Tag{Name: name, LiveBytes: uint64(i + 1), LiveBlocks: 1, AllocBytes: uint64(i + 1), AllocBlocks: 1})
		}
		p := Process{PID: 1, Command: []string{"f"}, Tags: tags}
		for _, t := range tags {
			p.Heap.LiveBytes += t.LiveBytes
			p.Heap.LiveBlocks += t.LiveBlocks
			p.Heap.AllocBytes += t.AllocBytes
			p.Heap.AllocBlocks += t.AllocBlocks
		}
		p.Reports = items(p)
		seen := map[int]bool{}
		var total uint64
		for _, top := range TagTree(tagNames(tags)) {
			total += top.Totals(tags).LiveBytes
			top.Walk(func(l *TagLevel, _ int) {
				for _, i := range l.Tags {
					require.False(t, seen[i])
					seen[i] = true
				}
				if !l.Leaf() {
					var sum uint64
					for _, c := range l.Children {
						sum += c.Totals(tags).LiveBytes
					}
					require.Equal(t, l.Totals(tags).LiveBytes, sum)
				}
			})
		}
		require.Len(t, seen, len(tags))
		require.Equal(t, p.Heap.LiveBytes, total)
		var b bytes.Buffer
		require.NoError(t, p.WriteTree(&b))
		for _, r := range b.String() {
			require.False(t, r < 0x20 && r != '\n', "a control character in the tree")
		}
		rep := &Report{Schema: Schema, Processes: []Process{p}}
		b.Reset()
		require.NoError(t, rep.WriteMemoryReport(&b))
		require.NoError(t, CheckMemoryReport(b.Bytes()))
	})
}

// The untagged bytes stay heap-unclassified, apart from the tree, where
// the books have them; a tag named untagged/x nests under heap/untagged.
func TestTreeUntaggedApart(t *testing.T) {
	p := Process{PID: 1, Command: []string{"x"}, Tags: []Tag{
		{Name: "a/b", LiveBytes: 1, AllocBytes: 1},
		{Name: DefaultTag, LiveBytes: 2, AllocBytes: 2},
		{Name: DefaultTag + "/x", LiveBytes: 3, AllocBytes: 3},
		{Name: "c", LiveBytes: 4, AllocBytes: 4},
		{Name: DefaultTag, LiveBytes: 5, AllocBytes: 5}, // a report that repeats it
	}, Heap: Heap{LiveBytes: 15}}
	var b bytes.Buffer
	require.NoError(t, p.WriteTree(&b))
	var got []string
	for _, l := range strings.Split(b.String(), "\n") {
		if strings.Contains(l, "heap") && !strings.Contains(l, "heap-overhead") && !strings.Contains(l, "heap-") || strings.Contains(l, "heap-unclassified") {
			got = append(got, l[:strings.Index(l, "  [")])
		}
	}
	require.Equal(t, []string{
		"├──1 B (6.67%) ── heap/a/b",
		"├──2 B (13.33%) ── heap-unclassified",
		"├──3 B (20.00%) ── heap/untagged/x",
		"├──4 B (26.67%) ── heap/c",
		"├──5 B (33.33%) ── heap-unclassified",
	}, got, b.String())
}
