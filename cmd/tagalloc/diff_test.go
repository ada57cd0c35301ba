package main

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// diffRun runs the CLI in this process, as main does: its output, and
// the exit status with "tagalloc: ERROR" on stderr.
func diffRun(args ...string) (stdout, stderr string, code int) {
	var so, se bytes.Buffer
	code, err := run(args, &so, &se)
	if err != nil {
		fmt.Fprintf(&se, "tagalloc: %v\n", err)
		if code == 0 {
			code = exitFailure
		}
	}
	return so.String(), se.String(), code
}

// diffReports writes two reports of one program: its cache grew by 1.5
// MiB, a tag went away; a helper process exists only in B.
func diffReports(t *testing.T) (a, b string) {
	t.Helper()
	proc := func(pid int, cmd string, tags ...reporter.Tag) reporter.Process {
		p := reporter.Process{PID: pid, Command: []string{cmd, "--serve"}, Ended: "exited", Tags: tags}
		for _, tg := range tags {
			p.Heap.LiveBytes += tg.LiveBytes
			p.Heap.LiveBlocks += tg.LiveBlocks
			p.Heap.AllocBytes += tg.AllocBytes
			p.Heap.AllocBlocks += tg.AllocBlocks
		}
		p.Heap.MappedBytes = p.Heap.LiveBytes + 1<<20
		return p
	}
	ra := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{
		proc(100, "/usr/bin/app",
			reporter.Tag{Name: "cache", LiveBytes: 1 << 20, LiveBlocks: 16, AllocBytes: 2 << 20, AllocBlocks: 32},
			reporter.Tag{Name: "parser", LiveBytes: 4096, LiveBlocks: 1, AllocBytes: 4096, AllocBlocks: 1},
			reporter.Tag{Name: "untagged", LiveBytes: 8192, LiveBlocks: 2, AllocBytes: 8192, AllocBlocks: 2}),
	}}
	rb := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{
		proc(200, "/usr/bin/app",
			reporter.Tag{Name: "cache", LiveBytes: 5 << 19, LiveBlocks: 40, AllocBytes: 6 << 20, AllocBlocks: 96},
			reporter.Tag{Name: "untagged", LiveBytes: 8192, LiveBlocks: 2, AllocBytes: 8192, AllocBlocks: 2}),
		proc(201, "/usr/bin/helper", reporter.Tag{Name: "untagged", LiveBytes: 64, LiveBlocks: 1, AllocBytes: 64, AllocBlocks: 1}),
	}}
	dir := t.TempDir()
	a, b = filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	require.NoError(t, reporter.WriteFileAtomic(a, ra.WriteJSON))
	require.NoError(t, reporter.WriteFileAtomic(b, rb.WriteJSON))
	return a, b
}

func TestDiffCommand(t *testing.T) {
	a, b := diffReports(t)
	txt, se, code := diffRun("diff", a, b)
	require.Equal(t, 0, code, se)
	require.Equal(t, `/usr/bin/app --serve -- pid 100 -> 200
Explicit Allocations
+1.5 MiB -- explicit
├──  +1.5 MiB ── heap/cache  [+24 blocks; +4.0 MiB allocated in all]
└──  -4.0 KiB ── heap/parser  [-1 blocks; -4.0 KiB allocated in all]
Other Measurements
  +1.5 MiB -- heap-mapped

/usr/bin/helper --serve -- added (pid 201)
Explicit Allocations
+64 B -- explicit
└──     +64 B ── heap-unclassified  [+1 blocks; +64 B allocated in all]
Other Measurements
  +1.0 MiB -- heap-mapped

`, txt)

	// JSON: the same diff, as reporter.Compare makes it; -o writes a file.
	js, se, code := diffRun("diff", "--format", "json", a, b)
	require.Equal(t, 0, code, se)
	var d reporter.Diff
	require.NoError(t, json.Unmarshal([]byte(js), &d))
	require.Equal(t, reporter.DiffSchema, d.Schema)
	require.Len(t, d.Processes, 2)
	require.Equal(t, []reporter.TagDiff{{Name: "cache", LiveBytes: 3 << 19, LiveBlocks: 24, AllocBytes: 4 << 20, AllocBlocks: 64},
		{Name: "parser", LiveBytes: -4096, LiveBlocks: -1, AllocBytes: -4096, AllocBlocks: -1}}, d.Processes[0].Tags)
	out := filepath.Join(t.TempDir(), "diff.json")
	_, se, code = diffRun("diff", a, b, "--format", "json", "-o", out)
	require.Equal(t, 0, code, se)
	written, err := os.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, js, string(written))

	// A - B: the opposite signs.
	back, _, code := diffRun("diff", b, a)
	require.Equal(t, 0, code)
	require.Contains(t, back, "├──  -1.5 MiB ── heap/cache  [-24 blocks; -4.0 MiB allocated in all]")
	require.Contains(t, back, "/usr/bin/helper --serve -- removed (pid 201)")
}

func TestDiffCommandBadInput(t *testing.T) {
	a, _ := diffReports(t)
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		return p
	}
	var gz bytes.Buffer
	z := gzip.NewWriter(&gz)
	_, _ = z.Write([]byte(`{"version": 1}`))
	require.NoError(t, z.Close())
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"one file", []string{a}, 2, "diff: missing B.json"},
		{"three files", []string{a, a, a}, 2, "diff: unexpected argument"},
		{"no files", nil, 2, "diff: missing A.json B.json"},
		{"bad format", []string{a, a, "--format", "pprof"}, 2, `diff: --format "pprof": one of tree, json`},
		{"bad flag", []string{a, a, "--nope"}, 2, "flag provided but not defined"},
		{"missing file", []string{a, filepath.Join(dir, "missing.json")}, 1, "missing.json: no such file"},
		{"corrupt JSON", []string{write("corrupt.json", `{"schema": "tagalloc.report/v1", "processes": [`), a}, 1, "corrupt.json: not a tagalloc report"},
		{"wrong schema", []string{a, write("other.json", `{"schema": "other/v9", "processes": []}`)}, 1, `schema "other/v9"`},
		{"a memory report", []string{a, write("memory-report.json.gz", gz.String())}, 1, "gzipped"},
		{"unwritable output", []string{a, a, "-o", filepath.Join(dir, "no", "such", "dir")}, 1, "diff: writing"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			so, se, code := diffRun(append([]string{"diff"}, tc.args...)...)
			require.Equal(t, tc.code, code, se)
			require.Contains(t, se, tc.msg)
			require.Contains(t, se, "tagalloc: ")
			require.Empty(t, so, "nothing on stdout")
		})
	}
}

// report --format about-memory: the memory-report JSON, gzipped when the
// output's name ends in .gz (as about:memory decides), plain otherwise;
// "firefox" is the same format.
func TestReportAboutMemory(t *testing.T) {
	_, b := diffReports(t)
	dir := t.TempDir()
	gzOut, plainOut := filepath.Join(dir, "memory-report.json.gz"), filepath.Join(dir, "memory-report.json")
	_, se, code := diffRun("report", b, "--format", "about-memory", "-o", gzOut)
	require.Equal(t, 0, code, se)
	_, se, code = diffRun("report", b, "--format", "firefox", "-o", plainOut)
	require.Equal(t, 0, code, se)
	stdout, se, code := diffRun("report", b, "--format", "about-memory")
	require.Equal(t, 0, code, se)

	raw, err := os.ReadFile(gzOut)
	require.NoError(t, err)
	require.Equal(t, []byte{0x1f, 0x8b}, raw[:2], "gzipped")
	z, err := gzip.NewReader(bytes.NewReader(raw))
	require.NoError(t, err)
	unz, err := io.ReadAll(z)
	require.NoError(t, err)
	plain, err := os.ReadFile(plainOut)
	require.NoError(t, err)
	require.Equal(t, string(plain), string(unz))
	require.Equal(t, stdout, string(plain))
	require.NoError(t, reporter.CheckMemoryReport(raw))

	f, err := reporter.ReadMemoryReport(plain)
	require.NoError(t, err)
	got := map[string]int64{}
	for _, r := range f.Reports {
		got[r.Process+" "+r.Path] = r.Amount
	}
	require.Equal(t, int64(5<<19), got["app (pid 200) explicit/heap/cache"])
	require.Equal(t, int64(5<<19+8192), got["app (pid 200) heap-allocated"], "about:memory shows the untagged 8 KiB as heap-unclassified")
	require.Equal(t, int64(40), got["app (pid 200) tagalloc-live-blocks/cache"])
	require.Equal(t, int64(64), got["helper (pid 201) heap-allocated"])
}

// A real cgo program (Go and C tags, the Go runtime's reporters) run
// twice: its memory-report passes about:memory's checks, and the diff
// matches the two runs.
func TestAboutMemoryAndDiffOfRealRuns(t *testing.T) {
	dir := t.TempDir()
	prog := filepath.Join(dir, "goprog")
	build := exec.Command("go", "build", "-o", prog, "./testdata/goprog")
	build.Env = append(os.Environ(), "CGO_ENABLED=1")
	b, err := build.CombinedOutput()
	require.NoError(t, err, "%s", b)
	var reports [2]string
	for i := range reports {
		reports[i] = filepath.Join(dir, fmt.Sprintf("run%d.json", i))
		_, se, code := diffRun("run", "-q", "-o", reports[i], "--", prog)
		require.Equal(t, 0, code, se)
	}
	gz := filepath.Join(dir, "memory-report.json.gz")
	_, se, code := diffRun("report", reports[0], "--format", "about-memory", "-o", gz)
	require.Equal(t, 0, code, se)
	raw, err := os.ReadFile(gz)
	require.NoError(t, err)
	require.NoError(t, reporter.CheckMemoryReport(raw))
	f, err := reporter.ReadMemoryReport(raw)
	require.NoError(t, err)
	paths := map[string]bool{}
	for _, r := range f.Reports {
		paths[r.Path] = true
	}
	for _, p := range []string{"explicit/heap/go-cache", "explicit/heap/c-side", "heap-allocated", "explicit/go/heap/objects", "go/total"} {
		require.True(t, paths[p], "%s in %v", p, paths)
	}

	txt, se, code := diffRun("diff", reports[0], reports[1])
	require.Equal(t, 0, code, se)
	first := strings.SplitN(txt, "\n", 2)[0]
	require.Regexp(t, `^\S*goprog -- pid \d+ -> \d+(: no change)?$`, first, "the two runs matched by program:\n%s", txt)
	require.NotContains(t, txt, "heap/go-cache", "the exact books of the same program agree:\n%s", txt)
}
