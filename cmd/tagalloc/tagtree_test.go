package main

// Tag trees (docs/tag-trees.md) in the commands: run's tree, report's
// about:memory export, top, the live page, /api/live and /metrics.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dustin/go-humanize"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// nestedReport: a process whose tags nest (gfx is a tag and a level), with
// hostile names at every level and a name that is not a path.
func nestedReport() *reporter.Report {
	u := func(n uint64) *uint64 { return &n }
	tag := func(name string, live, blocks uint64) reporter.Tag {
		return reporter.Tag{Name: name, LiveBytes: live, LiveBlocks: blocks, AllocBytes: 2 * live, AllocBlocks: 2 * blocks,
			PeakLiveBytes: live + 1024, PeakLiveBytesUpper: u(live + 1024)}
	}
	p := reporter.Process{PID: 42, Command: []string{"/bin/game"}, Ended: "running", Tags: []reporter.Tag{
		tag("gfx/webgl/textures", 40<<10, 10),
		tag("gfx", 1000, 1),
		tag("gfx/webgl/buffers", 2000, 2),
		tag("<b>/x\u202e\"y", 300, 3),
		tag("<b>/<img src=x onerror=alert(1)>", 400, 4),
		tag("a//b", 500, 5),
		tag("untagged", 600, 6),
	}, Heap: reporter.Heap{MappedBytes: 1 << 20}}
	for _, t := range p.Tags {
		p.Heap.LiveBytes += t.LiveBytes
		p.Heap.LiveBlocks += t.LiveBlocks
		p.Heap.AllocBytes += t.AllocBytes
		p.Heap.AllocBlocks += t.AllocBlocks
	}
	return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}
}

// top nests tags by path by default: a level's line (indented children
// under it) has the exact sums and "-" for the peak; --flat keeps a line
// per tag by its full name; names print with '?' for what a terminal
// would act on.
func TestTopNestsTags(t *testing.T) {
	p := nestedReport().Processes[0]
	var b bytes.Buffer
	writeTopTree(&b, p)
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")[2:]
	type row struct{ live, blocks, alloc, peak, name string }
	var rows []row
	re := regexp.MustCompile(`^\s*(\S+ \S+)\s+\S+%\s+(\S+)\s+(\S+ \S+)\s+(-|\S+ \S+)  (.*)$`)
	for _, l := range lines {
		m := re.FindStringSubmatch(l)
		require.NotNil(t, m, "line %q", l)
		rows = append(rows, row{m[1], m[2], m[3], m[4], m[5]})
	}
	require.Equal(t, []row{
		{humanize.IBytes(40<<10 + 2000 + 1000), "13", humanize.IBytes(2 * (40<<10 + 2000 + 1000)), "-", "gfx"},
		{humanize.IBytes(40<<10 + 2000), "12", humanize.IBytes(2 * (40<<10 + 2000)), "-", "  webgl"},
		{"40 KiB", "10", "80 KiB", "41 KiB", "    textures"},
		{"2.0 KiB", "2", "3.9 KiB", "3.0 KiB", "    buffers"},
		{"1000 B", "1", "2.0 KiB", "2.0 KiB", "  (own)"},
		{"700 B", "7", "1.4 KiB", "-", "<b>"},
		{"300 B", "3", "600 B", "1.3 KiB", "  x?\"y"},
		{"400 B", "4", "800 B", "1.4 KiB", "  <img src=x onerror=alert(1)>"},
		{"500 B", "5", "1000 B", "1.5 KiB", "a//b"},
		{"600 B", "6", "1.2 KiB", "1.6 KiB", "untagged"},
	}, rows, "%s", b.String())
	require.NotContains(t, b.String(), "\u202e")

	b.Reset()
	writeTop(&b, p)
	for _, tg := range p.Tags {
		require.Contains(t, b.String(), "  "+terminalText(tg.Name)+"\n", "the flat view: full names")
	}
	o, err := parseTop([]string{"--flat", "7"}, &b)
	require.NoError(t, err)
	require.True(t, o.flat)
	o, err = parseTop([]string{"7"}, &b)
	require.NoError(t, err)
	require.False(t, o.flat, "nested by default")
}

// /metrics keeps each tag's full path as its tag label: a level is no
// series of its own (Prometheus sums by label: sum by (tag) over a regex).
func TestMetricsNestedTagLabel(t *testing.T) {
	s := &server{snap: func() (*reporter.Report, error) { return nestedReport(), nil }}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	m := string(get(t, ts.URL+"/metrics"))
	for _, want := range []string{
		`tagalloc_tag_live_bytes{command="/bin/game",pid="42",tag="gfx/webgl/textures"} 40960`,
		`tagalloc_tag_live_bytes{command="/bin/game",pid="42",tag="gfx/webgl/buffers"} 2000`,
		`tagalloc_tag_live_bytes{command="/bin/game",pid="42",tag="gfx"} 1000`,
		`tagalloc_tag_live_bytes{command="/bin/game",pid="42",tag="<b>/x` + "\u202e" + `\"y"} 300`,
		`tagalloc_tag_live_bytes{command="/bin/game",pid="42",tag="a//b"} 500`,
		`tagalloc_tag_peak_live_bytes_lower_bound{command="/bin/game",pid="42",tag="gfx/webgl/textures"} 41984`,
	} {
		require.Contains(t, m, want+"\n")
	}
	require.NotContains(t, m, `tag="gfx/webgl"`, "a level is not a tag")
	require.NotContains(t, m, `tag="webgl`)
	require.NotContains(t, m, `tag="textures"`)
}

// /api/live's levels: the tags nested by path, largest first, each level
// with the exact sums of the tags under it and no peak, each tag with its
// own figures and peak.
func TestLiveViewLevels(t *testing.T) {
	rep := nestedReport()
	v := newLiveView(rep, time.Unix(0, 0))
	require.Len(t, v.Processes, 1)
	lv := v.Processes[0].Levels
	var names []string
	for _, l := range lv {
		names = append(names, l.Name)
	}
	require.Equal(t, []string{"gfx", "<b>", "untagged", "a//b"}, names, "largest first")
	gfx := lv[0]
	require.Equal(t, liveLevel{Name: "gfx", Path: "gfx", LiveBytes: 40<<10 + 3000, LiveBlocks: 13, AllocBytes: 2 * (40<<10 + 3000), Children: gfx.Children}, gfx)
	require.Len(t, gfx.Children, 2)
	require.Equal(t, "webgl", gfx.Children[0].Name)
	require.Equal(t, uint64(40<<10+2000), gfx.Children[0].LiveBytes)
	require.False(t, gfx.Children[0].Tag)
	require.Empty(t, gfx.Children[0].Peak, "a level has no peak")
	require.Equal(t, liveLevel{Name: "(own)", Path: "gfx", Tag: true, LiveBytes: 1000, LiveBlocks: 1, AllocBytes: 2000, Peak: "2.0 KiB"}, gfx.Children[1])
	tex := gfx.Children[0].Children[0]
	require.Equal(t, liveLevel{Name: "textures", Path: "gfx/webgl/textures", Tag: true, LiveBytes: 40 << 10, LiveBlocks: 10, AllocBytes: 80 << 10, Peak: "41 KiB"}, tex)
	js, err := json.Marshal(v)
	require.NoError(t, err)
	require.Contains(t, string(js), `"path":"\u003cb\u003e/x`+"\u202e"+`\"y"`, "names are JSON strings")
}

// jsHuman is the page's human() for bytes.
func jsHuman(n uint64) string {
	if n < 1024 {
		return strconv.FormatUint(n, 10) + " B"
	}
	v, units := float64(n), []string{"B", "KiB", "MiB", "GiB"}
	i := 0
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	prec := 1
	if v < 10 {
		prec = 2
	}
	return strconv.FormatFloat(v, 'f', prec, 64) + " " + units[i]
}

// The live page in headless Chromium nests the tags table by path: a
// level's row (with a fold button, its sums and "-" for the peak), its
// children's rows after it, indented; hostile names at every level are
// text.
func TestServePageNestedTagsInChromium(t *testing.T) {
	chromium := needChromium(t)
	rep := nestedReport()
	s := &server{snap: func() (*reporter.Report, error) { return rep, nil }}
	s.sample()
	s.sample()
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	body := pageBody(t, dumpDOM(t, chromium, ts.URL+"/"))
	i := strings.Index(body, `<table id="tags">`)
	require.GreaterOrEqual(t, i, 0)
	tbl := body[i : i+strings.Index(body[i:], "</table>")]

	rowRe := regexp.MustCompile(`<tr class="(tag|level)" data-depth="(\d+)" title="([^"]*)"><td class="name"( style="padding-left: (\d+)px;")?>(<button type="button" class="fold" aria-expanded="true" title="fold">▾</button>)?(<span class="swatch"[^>]*></span>)?([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td><td>([^<]*)</td></tr>`)
	type row struct{ kind, depth, title, name, live, blocks, peak, alloc string }
	var rows []row
	for _, m := range rowRe.FindAllStringSubmatch(tbl, -1) {
		if m[1] == "level" {
			require.NotEmpty(t, m[6], "a level has a fold button: %s", m[0])
		} else {
			require.Empty(t, m[6], "a tag has none: %s", m[0])
		}
		require.Equal(t, m[2] != "0", m[4] != "", "rows under a level are indented: %s", m[0])
		rows = append(rows, row{m[1], m[2], m[3], m[8], m[9], m[10], m[11], m[12]})
	}
	esc := textEscape
	attr := func(s string) string { return strings.ReplaceAll(esc(s), `"`, "&quot;") }
	require.Equal(t, []row{
		{"level", "0", "42/gfx", "42/gfx", jsHuman(40<<10 + 3000), "13", "-", jsHuman(2 * (40<<10 + 3000))},
		{"level", "1", "42/gfx/webgl", "webgl", jsHuman(40<<10 + 2000), "12", "-", jsHuman(2 * (40<<10 + 2000))},
		{"tag", "2", "42/gfx/webgl/textures", "textures", "40.0 KiB", "10", "41 KiB", "80.0 KiB"},
		{"tag", "2", "42/gfx/webgl/buffers", "buffers", "1.95 KiB", "2", "3.0 KiB", "3.91 KiB"},
		{"tag", "1", "42/gfx", "(own)", "1000 B", "1", "2.0 KiB", "1.95 KiB"},
		{"level", "0", attr("42/<b>"), esc("42/<b>"), "700 B", "7", "-", "1.37 KiB"},
		{"tag", "1", attr("42/<b>/<img src=x onerror=alert(1)>"), esc("<img src=x onerror=alert(1)>"), "400 B", "4", "1.4 KiB", "800 B"},
		{"tag", "1", attr("42/<b>/x\u202e\"y"), esc("x\u202e\"y"), "300 B", "3", "1.3 KiB", "600 B"},
		{"tag", "0", "42/untagged", "42/untagged", "600 B", "6", "1.6 KiB", "1.17 KiB"},
		{"tag", "0", "42/a//b", "42/a//b", "500 B", "5", "1.5 KiB", "1000 B"},
	}, rows, "the tags table:\n%s", tbl)
	require.Equal(t, len(rows), strings.Count(tbl, "<tr class="), "every row parsed:\n%s", tbl)
	require.NotContains(t, body, "<img")
	require.NotContains(t, body, "<b>")
	// a tag's row carries its series' colour, as the chart's legend
	require.Contains(t, tbl, `<span class="swatch" style="background: rgb(`)
}

// books reads nested_tags.c's "books NAME live blocks alloc allocblocks".
func nestedBooks(t *testing.T, out string) map[string][4]uint64 {
	t.Helper()
	m := map[string][4]uint64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 6 || f[0] != "books" {
			continue
		}
		var v [4]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+2], 10, 64)
			require.NoError(t, err)
			v[i] = n
		}
		m[f[1]] = v
	}
	return m
}

// levelSums are the books summed per level: every prefix of every name.
func levelSums(books map[string][4]uint64) map[string][4]uint64 {
	out := map[string][4]uint64{}
	for name, v := range books {
		parts := strings.Split(name, "/")
		for k := 1; k <= len(parts); k++ {
			p := strings.Join(parts[:k], "/")
			s := out[p]
			for i := range s {
				s[i] += v[i]
			}
			out[p] = s
		}
	}
	return out
}

// A real C program tags from four threads under nested names, and the main
// thread frees part of every thread's blocks: the report's tags are the
// library's books, and every level, in the tree tagalloc run prints, in
// the about:memory export and in top, is the exact sum of the books of
// the tags under it.
func TestRunNestedTags(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "nested_tags")
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-pthread", "-o", prog, filepath.Join("testdata", "nested_tags.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	out := filepath.Join(dir, "r.json")
	so, se, code := cli(t, "run", "--stacks", "off", "-o", out, "--", prog)
	require.Equal(t, 0, code, se)
	books := nestedBooks(t, so)
	require.Len(t, books, 6, so)
	sums := levelSums(books)
	require.Equal(t, sums["gfx/webgl/textures"][0]+sums["gfx/webgl/buffers"][0], sums["gfx/webgl"][0])

	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	p := rep.Processes[0]
	got := map[string][4]uint64{}
	for _, tg := range p.Tags {
		got[tg.Name] = [4]uint64{tg.LiveBytes, tg.LiveBlocks, tg.AllocBytes, tg.AllocBlocks}
	}
	for name, v := range books {
		require.Equal(t, v, got[name], "the report's tag %s: flat, by its full name, as the books", name)
	}

	// the tree run printed: a line per level with the sums
	lvl := func(prefix, name, sep string, v [4]uint64) string {
		return fmt.Sprintf("(?m)^%s[├└]──%s \\(\\d+\\.\\d\\d%%\\) %s %s  \\[%s blocks; %s allocated in all", regexp.QuoteMeta(prefix), regexp.QuoteMeta(humanize.IBytes(v[0])), sep,
			regexp.QuoteMeta(name), humanize.Comma(int64(v[1])), regexp.QuoteMeta(humanize.IBytes(v[2])))
	}
	for _, want := range []string{
		lvl("", "heap/gfx", "--", sums["gfx"]) + `\]`,
		lvl("", "heap/net", "--", sums["net"]) + `\]`,
		lvl("│  ", "webgl", "--", sums["gfx/webgl"]) + `\]`,
		lvl("│  ", "(own)", "──", books["gfx"]) + `, peak `,
		lvl("│     ", "textures", "──", books["gfx/webgl/textures"]) + `, peak `,
	} {
		require.Regexp(t, want, se)
	}

	// about:memory: explicit/heap/gfx/webgl/... and every node's sum exact
	mem := filepath.Join(dir, "m.json")
	_, se2, code := cli(t, "report", out, "--format", "about-memory", "-o", mem)
	require.Equal(t, 0, code, se2)
	raw, err := os.ReadFile(mem)
	require.NoError(t, err)
	require.NoError(t, reporter.CheckMemoryReport(raw))
	f, err := reporter.ReadMemoryReport(raw)
	require.NoError(t, err)
	node := map[string]int64{}
	for _, r := range f.Reports {
		for i := range r.Path {
			if r.Path[i] == '/' {
				node[r.Path[:i]] += r.Amount
			}
		}
		node[r.Path] += r.Amount
	}
	for _, l := range []string{"gfx", "gfx/webgl", "net", "gfx/webgl/textures", "net/cache"} {
		require.Equal(t, int64(sums[l][0]), node["explicit/heap/"+l], "explicit/heap/%s", l)
		require.Equal(t, int64(sums[l][1]), node["tagalloc-live-blocks/"+l], "tagalloc-live-blocks/%s", l)
		require.Equal(t, int64(sums[l][2]), node["tagalloc-alloc-bytes/"+l], "tagalloc-alloc-bytes/%s", l)
		require.Equal(t, int64(sums[l][3]), node["tagalloc-alloc-blocks/"+l], "tagalloc-alloc-blocks/%s", l)
	}
	require.Equal(t, int64(books["gfx"][0]), node["explicit/heap/gfx/(own)"])
}

// top on a running program that tags by path: levels with the books' sums.
func TestTopOfNestedTags(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "nested_tags")
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-pthread", "-o", prog, filepath.Join("testdata", "nested_tags.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	bin, err := tagallocBin()
	require.NoError(t, err)
	acc := startWaiting(t, exec.Command(bin, "run", "-q", "--stacks", "off", "-o", filepath.Join(dir, "r.json"), "--", prog, "wait"))
	sums := levelSums(nestedBooks(t, acc))
	pid := readyPID(acc)
	require.NotEmpty(t, pid)
	top, se, code := cli(t, "top", "-n", "1", pid)
	require.Equal(t, 0, code, se)
	line := func(v [4]uint64, peak, name string) string {
		return `(?m)^\s*` + regexp.QuoteMeta(humanize.IBytes(v[0])) + `\s+\S+%\s+` + regexp.QuoteMeta(humanize.Comma(int64(v[1]))) + `\s+` +
			regexp.QuoteMeta(humanize.IBytes(v[2])) + `\s+` + peak + `  ` + regexp.QuoteMeta(name) + `$`
	}
	require.Regexp(t, line(sums["gfx"], "-", "gfx"), top)
	require.Regexp(t, line(sums["gfx/webgl"], "-", "  webgl"), top)
	require.Regexp(t, line(sums["net"], "-", "net"), top)
	require.Regexp(t, line(sums["gfx/webgl/textures"], `\S.*\S`, "    textures"), top)
	require.Regexp(t, line(sums["gfx"], "-", "gfx"), top)
	flat, se, code := cli(t, "top", "-n", "1", "--flat", pid)
	require.Equal(t, 0, code, se)
	require.Regexp(t, line(sums["gfx/webgl/textures"], `\S.*\S`, "gfx/webgl/textures"), flat)
	require.NotRegexp(t, `(?m)\s-  gfx$`, flat, "no levels in the flat view")
}

// tagalloc diff and report on saved reports whose tags nest: per-level
// changes (text and JSON), the tree re-rendered with its levels.
func TestDiffAndReportNestedTags(t *testing.T) {
	dir := t.TempDir()
	a, b := nestedReport(), nestedReport()
	for i, tg := range b.Processes[0].Tags {
		switch tg.Name {
		case "gfx/webgl/textures":
			tg.LiveBytes += 8 << 10
			tg.LiveBlocks += 2
			tg.AllocBytes += 8 << 10
		case "<b>/x\u202e\"y":
			tg.LiveBytes -= 100
			tg.LiveBlocks--
		}
		b.Processes[0].Tags[i] = tg
	}
	write := func(name string, r *reporter.Report) string {
		path := filepath.Join(dir, name)
		var buf bytes.Buffer
		require.NoError(t, r.WriteJSON(&buf))
		require.NoError(t, os.WriteFile(path, buf.Bytes(), 0o644))
		return path
	}
	fa, fb := write("a.json", a), write("b.json", b)
	txt, se, code := cli(t, "diff", fa, fb)
	require.Equal(t, 0, code, se)
	require.Contains(t, txt, "├──  +8.0 KiB ── heap/gfx/webgl/textures  [+2 blocks; +8.0 KiB allocated in all]\n",
		"one changed tag under gfx: its levels merged into its line, as about:memory merges a chain")
	require.Contains(t, txt, "└──    -100 B ── heap/<b>/x?\"y  [-1 blocks; 0 B allocated in all]\n")
	require.NotContains(t, txt, "\u202e")
	js, se, code := cli(t, "diff", "--format", "json", fa, fb)
	require.Equal(t, 0, code, se)
	var d reporter.Diff
	require.NoError(t, json.Unmarshal([]byte(js), &d))
	require.Equal(t, []reporter.LevelDiff{
		{Path: "gfx", LiveBytes: 8 << 10, LiveBlocks: 2, AllocBytes: 8 << 10, Tags: 1},
		{Path: "gfx/webgl", LiveBytes: 8 << 10, LiveBlocks: 2, AllocBytes: 8 << 10, Tags: 1},
		{Path: "<b>", LiveBytes: -100, LiveBlocks: -1, Tags: 1},
	}, d.Processes[0].Levels)

	tree, se, code := cli(t, "report", fa)
	require.Equal(t, 0, code, se)
	require.Contains(t, tree, "-- heap/gfx  [13 blocks; 86 KiB allocated in all]\n│  ├──")
	require.Contains(t, tree, "── heap/a//b  [5 blocks; 1000 B allocated in all, peak 1.5 KiB]\n")
	require.NotContains(t, tree, "\u202e")
}
