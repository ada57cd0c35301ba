package main

import (
	"bytes"
	"debug/elf"
	"fmt"
	"image/png"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// TestMain gives the runs a symbol cache of their own (symbolizer's disk
// cache), so what earlier runs on this machine named cannot stand in for
// what a test expects the symbolizer to find; the cache is still used
// from run to run within the tests.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "tagalloc-symbols")
	if err == nil && os.Getenv("TAGALLOC_SYMBOL_CACHE") == "" {
		os.Setenv("TAGALLOC_SYMBOL_CACHE", dir)
	}
	before, _ := filepath.Glob("tagalloc.*.json")
	code := m.Run()
	if dir != "" {
		os.RemoveAll(dir)
	}
	// tagalloc run saves a report in its working directory: the tests run
	// it in temporary ones, never in the repository
	if after, _ := filepath.Glob("tagalloc.*.json"); len(after) > len(before) && code == 0 {
		fmt.Fprintf(os.Stderr, "a test left reports in the package directory: %q\n", after)
		code = 1
	}
	os.Exit(code)
}

// The CLI is tested as a user runs it: the built binary, in child processes.
var tagallocBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tagalloc-cli")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tagalloc")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{string(out), err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

// cli runs the CLI in a temporary working directory (where tagalloc run
// saves its report unless -o says otherwise).
func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Dir = t.TempDir()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return so.String(), se.String(), code
}

func TestLibPrintsAbsolutePath(t *testing.T) {
	out, _, code := cli(t, "lib")
	require.Equal(t, 0, code)
	p := strings.TrimSpace(out)
	require.True(t, filepath.IsAbs(p), "lib printed %q", p)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.False(t, fi.IsDir())
}

func TestRunPreloadsAndKeepsExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"exit-0", []string{"sh", "-c", "grep -c libtagalloc /proc/self/maps >/dev/null && echo preloaded"}, 0, "preloaded\n"},
		{"exit-3", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"args-with-dashes", []string{"printf", "%s|", "-x", "--y"}, 0, "-x|--y|"},
		{"child-of-child", []string{"sh", "-c", "sh -c 'cat /proc/self/maps' | grep -c libtagalloc >/dev/null && echo yes"}, 0, "yes\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, code := cli(t, append([]string{"run", "--"}, tc.args...)...)
			require.Equal(t, tc.code, code)
			require.Equal(t, tc.out, out)
		})
	}
}

func TestRunKeepsUserPreloads(t *testing.T) {
	env := preloadEnv([]string{"A=1", "LD_PRELOAD=/x/other.so"}, "/lib/tagalloc.so")
	require.Equal(t, []string{"A=1", "LD_PRELOAD=/lib/tagalloc.so:/x/other.so"}, env)
	env = preloadEnv([]string{"LD_PRELOAD="}, "/lib/tagalloc.so")
	require.Equal(t, []string{"LD_PRELOAD=/lib/tagalloc.so"}, env)
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no-command", nil, 2, "no command given"},
		{"unknown", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"run-nothing", []string{"run"}, 2, "no program given"},
		{"run-bad-flag", []string{"run", "--nope", "--", "true"}, 2, "flag provided but not defined"},
		{"run-missing-prog", []string{"run", "--", "/nonexistent/prog"}, 127, "no such file"},
		{"lib-extra-arg", []string{"lib", "x"}, 2, `lib: unexpected argument "x"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, se, code := cli(t, tc.args...)
			require.Equal(t, tc.code, code, se)
			require.Contains(t, se, tc.msg)
			require.Contains(t, se, "tagalloc: ")
		})
	}
}

// readyPID is the PID a waiting program printed ("ready PID").
func readyPID(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "ready" {
			return f[1]
		}
	}
	return ""
}

// startWaiting starts a tagged program in "wait" mode and returns what it
// printed up to "ready"; it ends (its stdin closed) when the test does.
func startWaiting(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	acc, buf := "", make([]byte, 4096)
	for !strings.Contains(acc, "ready") {
		n, err := stdout.Read(buf)
		require.NoError(t, err)
		acc += string(buf[:n])
	}
	return acc
}

func sumLive(p reporter.Process) uint64 {
	var s uint64
	for _, t := range p.Tags {
		s += t.LiveBytes
	}
	return s
}

// buildTagged compiles testdata/tagged.c.
func buildTagged(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "tagged")
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-o", out, filepath.Join("testdata", "tagged.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// parseBooks reads the "name live_bytes live_blocks alloc_bytes alloc_blocks" lines.
func parseBooks(t *testing.T, out string) map[string][4]uint64 {
	m := map[string][4]uint64{}
	for _, l := range strings.Split(out, "\n") {
		f := strings.Fields(l)
		if len(f) != 5 {
			continue
		}
		var v [4]uint64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			require.NoError(t, err)
			v[i] = n
		}
		m[f[0]] = v
	}
	return m
}

func TestRunWritesExactReport(t *testing.T) {
	prog := buildTagged(t)
	for _, tc := range []struct {
		mode   string
		code   int
		ending string
	}{{"exit", 7, `"exit_code": 7`}, {"kill", 128 + 9, `"signal": "SIGKILL"`}} {
		t.Run(tc.mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			so, se, code := cli(t, "run", "-o", out, "--", prog, tc.mode)
			require.Equal(t, tc.code, code, se)
			want := parseBooks(t, so)
			require.Len(t, want, 2)
			raw, err := os.ReadFile(out)
			require.NoError(t, err)
			require.Contains(t, string(raw), tc.ending)
			rep, err := reporter.ReadFile(out)
			require.NoError(t, err)
			require.NotEmpty(t, rep.Processes)
			p := rep.Processes[0]
			got := map[string]reporter.Tag{}
			for _, tg := range p.Tags {
				got[tg.Name] = tg
			}
			for name, w := range want {
				g := got[name]
				require.Equal(t, w, [4]uint64{g.LiveBytes, g.LiveBlocks, g.AllocBytes, g.AllocBlocks}, "tag %s", name)
			}
			// nothing lost: the heap holds at least what the tags say is live
			require.GreaterOrEqual(t, p.Heap.MappedBytes, p.Heap.LiveBytes)
			require.Equal(t, p.Heap.LiveBytes, sumLive(p))
			require.Contains(t, se, "heap/webgl-contexts")
			require.Contains(t, se, "heap/decoder")
			// report re-renders the saved file.
			tree, _, code := cli(t, "report", out)
			require.Equal(t, 0, code)
			require.Contains(t, tree, "heap/webgl-contexts")
			js, _, code := cli(t, "report", out, "--format", "json")
			require.Equal(t, 0, code)
			require.JSONEq(t, string(raw), js)
		})
	}
}

// With TAGALLOC_REQUESTED=1 the report carries live_requested_bytes, equal
// to the program's own figure; without it, null.
func TestRunReportsRequestedBytes(t *testing.T) {
	prog := buildTagged(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	for _, on := range []bool{true, false} {
		out := filepath.Join(t.TempDir(), "r.json")
		cmd := exec.Command(bin, "run", "-q", "-o", out, "--", prog, "exit")
		cmd.Env = os.Environ()
		if on {
			cmd.Env = append(cmd.Env, "TAGALLOC_REQUESTED=1")
		}
		so, _ := cmd.Output()
		want := map[string]uint64{}
		for _, l := range strings.Split(string(so), "\n") {
			if f := strings.Fields(l); len(f) == 3 && f[0] == "requested" {
				n, err := strconv.ParseUint(f[2], 10, 64)
				require.NoError(t, err)
				want[f[1]] = n
			}
		}
		rep, err := reporter.ReadFile(out)
		require.NoError(t, err)
		for _, tg := range rep.Processes[0].Tags {
			if !on {
				require.Nil(t, tg.LiveRequestedBytes, tg.Name)
				continue
			}
			require.NotNil(t, tg.LiveRequestedBytes, tg.Name)
			require.LessOrEqual(t, *tg.LiveRequestedBytes, tg.LiveBytes)
			if w, ok := want[tg.Name]; ok {
				require.Equal(t, w, *tg.LiveRequestedBytes, tg.Name)
			}
		}
		if on {
			require.Len(t, want, 2)
		}
	}
}

func TestSnapshotAndTopOfARunningProcess(t *testing.T) {
	prog := buildTagged(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	acc := startWaiting(t, exec.Command(bin, "run", "-q", "--stacks", "off", "-o", filepath.Join(t.TempDir(), "r.json"), "--", prog, "wait"))
	want := parseBooks(t, acc)
	pid := readyPID(acc)
	require.NotEmpty(t, pid)

	out := filepath.Join(t.TempDir(), "snap.json")
	_, se, code := cli(t, "snapshot", pid, "-o", out)
	require.Equal(t, 0, code, se)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Equal(t, "running", rep.Processes[0].Ended)
	for _, tg := range rep.Processes[0].Tags {
		if w, ok := want[tg.Name]; ok {
			require.Equal(t, w, [4]uint64{tg.LiveBytes, tg.LiveBlocks, tg.AllocBytes, tg.AllocBlocks}, tg.Name)
		}
	}
	top, se, code := cli(t, "top", "-n", "2", "-interval", "10ms", pid)
	require.Equal(t, 0, code, se)
	require.Equal(t, 2, strings.Count(top, "webgl-contexts"), top)
	top, se, code = cli(t, "top", pid, "-n", "1", "--interval", "10ms")
	require.Equal(t, 0, code, se)
	require.Equal(t, 1, strings.Count(top, "webgl-contexts"), "flags after PID count: one refresh\n%s", top)
	tree, se, code := cli(t, "snapshot", "--format", "tree", pid)
	require.Equal(t, 0, code, se)
	require.Contains(t, tree, "webgl-contexts")

	_, se, code = cli(t, "snapshot", strconv.Itoa(os.Getpid()))
	require.Equal(t, 1, code)
	require.Contains(t, se, "no tagalloc books")
}

// A process preloaded by hand keeps its books private; snapshot reads them
// through /proc/PID/mem.
func TestSnapshotOfAPlainPreload(t *testing.T) {
	prog := buildTagged(t)
	lib, _, code := cli(t, "lib")
	require.Equal(t, 0, code)
	cmd := exec.Command(prog, "wait")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+strings.TrimSpace(lib))
	acc := startWaiting(t, cmd)
	want := parseBooks(t, acc)
	js, se, code := cli(t, "snapshot", strconv.Itoa(cmd.Process.Pid))
	if code != 0 && strings.Contains(se, "reading its memory") {
		t.Skipf("no ptrace rights here: %s", se)
	}
	require.Equal(t, 0, code, se)
	rep, err := reporter.Read(strings.NewReader(js))
	require.NoError(t, err)
	got := map[string]reporter.Tag{}
	for _, tg := range rep.Processes[0].Tags {
		got[tg.Name] = tg
	}
	for name, w := range want {
		g := got[name]
		require.Equal(t, w, [4]uint64{g.LiveBytes, g.LiveBlocks, g.AllocBytes, g.AllocBlocks}, name)
	}
}

func TestReportRejectsBadFiles(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"garbage.json": "{{{ not json",
		"schema.json":  `{"schema": "other/v9", "processes": []}`,
		"tag.json":     `{"schema": "tagalloc.report/v1", "processes": [{"pid": 1, "tags": [{"name": ""}]}]}`,
		"live.json":    `{"schema": "tagalloc.report/v1", "processes": [{"pid": 1, "tags": [{"name": "a", "live_blocks": 5, "alloc_blocks": 1}]}]}`,
	} {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, se, code := cli(t, "report", p)
		require.Equal(t, 1, code, name)
		require.Contains(t, se, "not a tagalloc report", name)
	}
	_, se, code := cli(t, "report", filepath.Join(dir, "missing.json"))
	require.Equal(t, 1, code)
	require.Contains(t, se, "no such file")
	_, se, code = cli(t, "run", "--stacks", "most", "--", "true")
	require.Equal(t, 2, code)
	require.Contains(t, se, "off, sampled or full")
}

// buildGoProg builds testdata/goprog (cgo, package alloc, tagcgo).
func buildGoProg(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "goprog")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/goprog")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=1")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// requireTags checks the report's figures for the tags the program printed.
func requireTags(t *testing.T, p reporter.Process, want map[string][4]uint64) {
	t.Helper()
	got := map[string]reporter.Tag{}
	for _, tg := range p.Tags {
		got[tg.Name] = tg
	}
	for name, w := range want {
		g, ok := got[name]
		require.True(t, ok, "tag %s missing from the report", name)
		require.Equal(t, w, [4]uint64{g.LiveBytes, g.LiveBlocks, g.AllocBytes, g.AllocBlocks}, "tag %s", name)
	}
}

// A cgo program's Go-side (package alloc) and C-side (tagcgo) tags appear
// in one process of the report, exactly as the program sees them.
func TestRunGoAndCTagsInOneReport(t *testing.T) {
	prog := buildGoProg(t)
	out := filepath.Join(t.TempDir(), "report.json")
	so, se, code := cli(t, "run", "-o", out, "--", prog)
	require.Equal(t, 0, code, se)
	want := parseBooks(t, so)
	require.Len(t, want, 3, "the program's own figures:\n%s", so)
	require.Equal(t, [4]uint64{4096 * 9, 9, 4096 * 10, 10}, want["go-cache"])
	require.Equal(t, [4]uint64{4096*3 + 65536*2, 5, 4096*4 + 65536*2, 6}, want["c-side"])
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 1, "one process, its two regions merged")
	requireTags(t, rep.Processes[0], want)
	require.Contains(t, se, "go-cache")
	require.Contains(t, se, "c-side")
	// the Go runtime's own memory, in the same picture
	paths := map[string]uint64{}
	for _, it := range rep.Processes[0].Reports {
		paths[it.Path] = it.Amount
	}
	require.Contains(t, paths, "explicit/go/heap/objects")
	require.NotZero(t, paths["go/total"])
	require.Contains(t, se, "── go/stacks")
	// and the program's own reporter
	require.Equal(t, uint64(9*4096), paths["explicit/go-cache/entries"])
	require.Equal(t, uint64(9), paths["go-cache-entries"])
	require.Contains(t, se, "── go-cache/entries")
	// package alloc's budget, from its region (merged with the native library's)
	require.Equal(t, []reporter.Budget{{Tag: "go-cache", LimitBytes: 16 << 10, Policy: "observe", ChargedBytes: 4096 * 9,
		Crossings: 1, Over: true}}, rep.Processes[0].Budgets)
	require.Contains(t, se, "budget go-cache: 36 KiB of 16 KiB (observe), 0 refused, 1 crossing, OVER")
}

// snapshot and top read a Go program's books from its memfd, without
// tagalloc run.
func TestSnapshotOfAGoProgram(t *testing.T) {
	prog := buildGoProg(t)
	acc := startWaiting(t, exec.Command(prog, "wait"))
	want := parseBooks(t, acc)
	delete(want, "c-side") // not preloaded: the C side is untracked
	pid := readyPID(acc)
	require.NotEmpty(t, pid)
	out := filepath.Join(t.TempDir(), "snap.json")
	_, se, code := cli(t, "snapshot", pid, "-o", out)
	require.Equal(t, 0, code, se)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	requireTags(t, rep.Processes[0], want)
	top, se, code := cli(t, "top", "-n", "1", pid)
	require.Equal(t, 0, code, se)
	require.Contains(t, top, "go-cache")
	require.Contains(t, top, "budget go-cache: 36 KiB of 16 KiB (observe)", "package alloc's budget")
	require.Len(t, rep.Processes[0].Budgets, 1)
}

// buildStacksProg compiles testdata/stacks.c (-g, no frame pointers).
func buildStacksProg(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "stacksprog")
	b, err := exec.Command("cc", "-O1", "-g", "-fomit-frame-pointer", "-fno-builtin", "-o", out,
		filepath.Join("testdata", "stacks.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// funcAt names the function of ELF file path holding file offset off.
func funcAt(t *testing.T, path string, off uint64) string {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	addr := off
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 && off >= p.Off && off < p.Off+p.Filesz {
			addr = off - p.Off + p.Vaddr
		}
	}
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) == elf.STT_FUNC && addr >= s.Value && addr < s.Value+s.Size {
			return s.Name
		}
	}
	return ""
}

// runStacks runs testdata/stacks.c under --stacks mode and returns the
// program's own books and its process in the report.
func runStacks(t *testing.T, mode string, env ...string) (string, map[string][4]uint64, reporter.Process) {
	t.Helper()
	prog := buildStacksProg(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, "run", "-q", "--stacks", mode, "-o", out, "--", prog)
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 1)
	p := rep.Processes[0]
	require.NotNil(t, p.Stacks, "no stacks section")
	return prog, parseBooks(t, so.String()), p
}

// With every block recorded, the stacks' live figures per tag are exact,
// and the frames name the functions that allocated.
func TestRunStacksFull(t *testing.T) {
	prog, want, p := runStacks(t, "full", "TAGALLOC_UNWIND=2") // every stack checked against libgcc's
	st := p.Stacks
	require.Equal(t, "full", st.Mode)
	require.Zero(t, st.Dropped)
	live := map[string][2]uint64{}
	sites := map[string]bool{}
	for _, r := range st.Records {
		v := live[r.Tag]
		live[r.Tag] = [2]uint64{v[0] + r.LiveBytes, v[1] + r.LiveBlocks}
		var names []string
		for _, f := range r.Frames {
			if f.Module == filepath.Base(prog) {
				name := funcAt(t, prog, f.Offset)
				names = append(names, name)
				if name != "_start" { // the symbolizer agrees, with the source line
					require.Equal(t, name, f.Function, "%+v", f)
					wd, err := os.Getwd()
					require.NoError(t, err)
					// the name the debug information gives, joined with its
					// compilation directory (cc ran in this package's)
					require.Equal(t, filepath.Join(wd, "testdata", "stacks.c"), f.File, "%+v", f)
					require.NotZero(t, f.Line, "%+v", f)
				}
			}
		}
		require.NotEmpty(t, names, "record of tag %s has no frame in the program: %+v", r.Tag, r.Frames)
		sites[r.Tag+":"+strings.Join(names, "<")] = true
		require.Equal(t, filepath.Base(prog), r.Library, "%+v", r)
	}
	for _, tag := range []string{"gpu", "config", "grow"} {
		require.Equal(t, [2]uint64{want[tag][0], want[tag][1]}, live[tag], "tag %s: stacks vs books", tag)
	}
	require.True(t, sites["gpu:make_texture<make_textures<main<_start"], "sites: %v", sites)
	require.True(t, sites["config:parse_config<main<_start"], "sites: %v", sites)
	require.True(t, sites["grow:grow_buffer<main<_start"], "sites: %v", sites)
	require.True(t, sites["grow:grow_doubling<main<_start"], "sites: %v", sites)
	// the growth diagnosis flags the just-enough loop by name, not the doubling one
	var flagged, judged []string
	for _, f := range st.Growth {
		judged = append(judged, f.Name+":"+f.Verdict)
		if f.Flagged {
			flagged = append(flagged, f.Name)
		}
	}
	require.Equal(t, []string{"grow_buffer"}, flagged, "%v", judged)
	require.Contains(t, judged, "grow_doubling:exponential")
	for _, r := range st.Records {
		if r.Tag == "grow" && r.Frames[0].Function == "grow_buffer" {
			require.Greater(t, r.Reallocs, uint64(10000), "the realloc chain is one sampled block")
		}
	}
	require.Equal(t, filepath.Base(prog), st.Libraries[0].Name)
}

// The saved report renders as DMD records and as a pprof profile.
func TestReportDMDAndPprof(t *testing.T) {
	prog := buildStacksProg(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "report.json")
	_, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", out, "--", prog)
	require.Equal(t, 0, code, se)
	dmd, se, code := cli(t, "report", out, "--format", "dmd")
	require.Equal(t, 0, code, se)
	require.Contains(t, dmd, "2,000 blocks in heap block record 1 of")
	require.Contains(t, dmd, "8,192,000 bytes")
	pb := filepath.Join(dir, "heap.pb.gz")
	_, se, code = cli(t, "report", out, "--format", "pprof", "-o", pb)
	require.Equal(t, 0, code, se)
	f, err := os.Open(pb)
	require.NoError(t, err)
	defer f.Close()
	prof, err := profile.Parse(f)
	require.NoError(t, err)
	var gpu int64
	for _, s := range prof.Sample {
		if s.Label["tag"][0] == "gpu" {
			gpu += s.Value[3]
		}
	}
	require.Equal(t, int64(2000*4096), gpu)
	_, se, code = cli(t, "report", out, "--format", "nope")
	require.Equal(t, 2, code)
	require.Contains(t, se, `--format "nope"`)
}

// A child forked without exec starts from its parent's profile at the
// fork: with every block recorded, each process's stacks equal its books,
// live and allocated (the child's counted from its birth).
func TestRunStacksFork(t *testing.T) {
	prog := buildStacksProg(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, "run", "-q", "--stacks", "full", "-o", out, "--", prog, "fork")
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	// the program prints "parent PID" / "child PID", each followed by its books
	want := map[int]map[string][4]uint64{}
	var cur int
	for _, l := range strings.Split(so.String(), "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && (f[0] == "parent" || f[0] == "child") {
			cur, _ = strconv.Atoi(f[1])
			want[cur] = map[string][4]uint64{}
			continue
		}
		if len(f) == 5 && cur != 0 {
			want[cur][f[0]] = parseBooks(t, l)[f[0]]
		}
	}
	require.Len(t, want, 2, "%s", so.String())
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 2)
	for _, p := range rep.Processes {
		require.NotNil(t, p.Stacks, "pid %d", p.PID)
		live, alloc := map[string]uint64{}, map[string]uint64{}
		for _, r := range p.Stacks.Records {
			live[r.Tag] += r.LiveBytes
			alloc[r.Tag] += r.AllocBytes
		}
		for tag, w := range want[p.PID] {
			require.Equal(t, w[0], live[tag], "pid %d tag %s: stacks vs books", p.PID, tag)
			// the child's cumulative figures begin at the fork in both
			require.Equal(t, w[2], alloc[tag], "pid %d tag %s: allocated, stacks vs books", p.PID, tag)
		}
	}
}

// The books and the ring of a process that has ended are read (the ring
// drained a last time) and their files removed while the run goes on (a
// memory filesystem holds them until then); what they held stays: the
// report has each child, its stacks equal to its books.
func TestRunReleasesEndedProcesses(t *testing.T) {
	prog := buildStacksProg(t)
	out := filepath.Join(t.TempDir(), "report.json")
	script := `for i in 1 2; do "$0"; done
"$0" & c=$!; wait $c
for i in $(seq 200); do [ -e "$TAGALLOC_DIR/$c.events" ] || [ -e "$TAGALLOC_DIR/$c.tagalloc" ] || break; sleep 0.1; done
for f in events tagalloc; do if [ -e "$TAGALLOC_DIR/$c.$f" ]; then echo kept $f; else echo released $f; fi; done
[ -e "$TAGALLOC_DIR/$$.events" ] && [ -e "$TAGALLOC_DIR/$$.tagalloc" ] && echo mine`
	so, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", out, "--", "sh", "-c", script, prog)
	require.Equal(t, 0, code, se)
	require.Contains(t, so, "\nreleased events\nreleased tagalloc\n", "the ended child's ring and books are removed while the run goes on")
	require.Contains(t, so, "\nmine", "the shell's own, still running, are kept")
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	books := parseBooks(t, so) // the three children printed the same books
	n := 0
	for _, p := range rep.Processes {
		if filepath.Base(p.Command[0]) != "stacksprog" {
			continue
		}
		n++
		require.NotNil(t, p.Stacks, "pid %d: its profile outlived its ring", p.PID)
		live := map[string]uint64{}
		for _, r := range p.Stacks.Records {
			live[r.Tag] += r.LiveBytes
		}
		for _, tag := range []string{"gpu", "config", "grow"} {
			require.Equal(t, books[tag][0], live[tag], "pid %d tag %s: stacks vs books", p.PID, tag)
		}
	}
	require.Equal(t, 3, n, "%+v", rep.Processes)
}

// Sampled by bytes, the estimates are unbiased: within 20% of the exact
// books at a rate giving a few hundred samples.
func TestRunStacksSampled(t *testing.T) {
	_, want, p := runStacks(t, "sampled", "TAGALLOC_SAMPLE_RATE=16K")
	st := p.Stacks
	require.Equal(t, "sampled", st.Mode)
	require.Equal(t, uint64(16384), st.SampleRate)
	var gpu float64
	var gpuSamples uint64
	for _, r := range st.Records {
		if r.Tag == "gpu" {
			gpu += float64(r.LiveBytes)
			gpuSamples += r.Samples
		}
	}
	exact := float64(want["gpu"][0])
	require.InDelta(t, exact, gpu, 0.2*exact, "estimate %.0f, exact %.0f (%d samples)", gpu, exact, gpuSamples)
	require.Less(t, gpuSamples, uint64(1500), "sampled, not every one of the 2,000 blocks")
	// the realloc chains (grow_buffer's 16-byte steps to 256 KiB, each
	// realloc sampled as an allocation of its new size) are estimated
	// without bias too: the grow tag's live bytes within 20%
	var grow float64
	for _, r := range st.Records {
		if r.Tag == "grow" {
			grow += float64(r.LiveBytes)
		}
	}
	exactGrow := float64(want["grow"][0])
	require.InDelta(t, exactGrow, grow, 0.2*exactGrow, "grow: estimate %.0f, exact %.0f", grow, exactGrow)
}

// diff compares two saved reports; report --format firefox writes
// about:memory's JSON.
func TestDiffAndFirefox(t *testing.T) {
	prog := buildStacksProg(t)
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a.json"), filepath.Join(dir, "b.json")
	_, se, code := cli(t, "run", "-q", "-o", a, "--", prog)
	require.Equal(t, 0, code, se)
	_, se, code = cli(t, "run", "-q", "-o", b, "--", prog, "fork")
	require.Equal(t, 0, code, se)
	txt, se, code := cli(t, "diff", a, b)
	require.Equal(t, 0, code, se)
	require.Contains(t, txt, " -> ", "the program matched by its command line")
	require.Contains(t, txt, "added (pid", "the forked child only in B")
	js, _, code := cli(t, "diff", a, b, "--format", "json")
	require.Equal(t, 0, code)
	require.Contains(t, js, `"schema": "tagalloc.diff/v1"`)
	_, se, code = cli(t, "diff", a)
	require.Equal(t, 2, code)
	require.Contains(t, se, "missing B.json")
	_, se, code = cli(t, "diff", a, filepath.Join(dir, "missing.json"))
	require.Equal(t, 1, code)
	require.Contains(t, se, "no such file")

	gz := filepath.Join(dir, "memory-report.json.gz")
	_, se, code = cli(t, "report", a, "--format", "firefox", "-o", gz)
	require.Equal(t, 0, code, se)
	raw, err := os.ReadFile(gz)
	require.NoError(t, err)
	require.Equal(t, []byte{0x1f, 0x8b}, raw[:2], "gzipped")
}

// get fetches url and returns its body, which must come with 200 OK.
func get(t *testing.T, url string) []byte {
	t.Helper()
	resp, b := fetch(t, url)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", url, b)
	return []byte(b)
}

// startServing starts cmd (tagalloc run --serve 127.0.0.1:0 ... on a
// program that waits for its stdin to close), stops it when the test
// ends, and returns the base URL it says it serves on.
func startServing(t *testing.T, cmd *exec.Cmd) string {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { stdin.Close(); _ = cmd.Wait() })
	acc, buf := "", make([]byte, 4096)
	for {
		n, err := stderr.Read(buf)
		require.NoError(t, err, acc)
		acc += string(buf[:n])
		if i := strings.Index(acc, "serving on http://"); i >= 0 && strings.Contains(acc[i:], "/\n") {
			return strings.TrimSuffix(strings.Fields(acc[i:])[2], "/")
		}
	}
}

// run --serve: metrics, the report, a pprof profile and the page, live.
func TestRunServe(t *testing.T) {
	prog := buildTagged(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, "run", "-q", "--stacks", "sampled", "--serve", "127.0.0.1:0", "--", prog, "wait")
	cmd.Dir = t.TempDir() // where it saves its report
	cmd.Env = append(os.Environ(), "TAGALLOC_SAMPLE_RATE=4K")
	addr := startServing(t, cmd)
	var metrics string
	for i := 0; i < 100 && !strings.Contains(metrics, `tag="webgl-contexts"`); i++ {
		time.Sleep(50 * time.Millisecond) // until the program has tagged its blocks
		metrics = string(get(t, addr+"/metrics"))
	}
	require.Contains(t, metrics, "tagalloc_tag_live_bytes{")
	require.Contains(t, metrics, `tag="webgl-contexts"`)
	rep, err := reporter.Read(bytes.NewReader(get(t, addr+"/api/report")))
	require.NoError(t, err)
	require.NotEmpty(t, rep.Processes)
	prof, err := profile.Parse(bytes.NewReader(get(t, addr+"/debug/pprof/heap")))
	require.NoError(t, err)
	require.NotEmpty(t, prof.Sample)
	require.NotEmpty(t, prof.Sample[0].NumLabel["pid"])
	allocs, err := profile.Parse(bytes.NewReader(get(t, addr+"/debug/pprof/allocs")))
	require.NoError(t, err)
	require.Equal(t, reporter.AllocSpace, allocs.DefaultSampleType)
	index := string(get(t, addr+"/debug/pprof/"))
	require.Contains(t, index, `<a href="heap">heap</a>`)
	require.Contains(t, index, `<a href="allocs">allocs</a>`)
	require.Contains(t, string(get(t, addr+"/")), "<svg")
	var hist string
	for i := 0; i < 100 && !strings.Contains(hist, "webgl-contexts"); i++ {
		time.Sleep(50 * time.Millisecond) // sampled every second
		hist = string(get(t, addr+"/api/history"))
	}
	require.Contains(t, hist, "webgl-contexts")
}

// serve PID: a running Go program's tags, with bad arguments refused.
func TestServePID(t *testing.T) {
	prog := buildGoProg(t)
	acc := startWaiting(t, exec.Command(prog, "wait"))
	pid := readyPID(acc)
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, "serve", "-addr", "127.0.0.1:0", pid)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	line := make([]byte, 512)
	n, err := stdout.Read(line)
	require.NoError(t, err)
	f := strings.Fields(string(line[:n]))
	require.GreaterOrEqual(t, len(f), 6, "%q", line[:n])
	addr := strings.TrimSuffix(f[5], "/")
	require.Contains(t, string(get(t, addr+"/metrics")), `tag="go-cache"`)
	_, se, code := cli(t, "serve", "not-a-pid")
	require.Equal(t, 2, code)
	require.Contains(t, se, "not a process id")
}

// The live page, rendered by headless Chromium: its chart and table are
// drawn (by the page's script, from /api/history) in the tags' colours.
func TestServePageInChromium(t *testing.T) {
	chromium, err := exec.LookPath("chromium")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("chromium is not installed (.ci/run installs it)")
		}
		t.Skip("no chromium")
	}
	prog := buildGoProg(t)
	acc := startWaiting(t, exec.Command(prog, "wait"))
	pid := readyPID(acc)
	bin, err := tagallocBin()
	require.NoError(t, err)
	srv := exec.Command(bin, "serve", "-addr", "127.0.0.1:0", "-interval", "100ms", pid)
	stdout, err := srv.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, srv.Start())
	t.Cleanup(func() { _ = srv.Process.Signal(syscall.SIGTERM); _ = srv.Wait() })
	line := make([]byte, 512)
	n, err := stdout.Read(line)
	require.NoError(t, err)
	addr := strings.Fields(string(line[:n]))[5]
	time.Sleep(300 * time.Millisecond) // a few history points
	shot := filepath.Join(t.TempDir(), "page.png")
	out, err := exec.Command(chromium, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1000,700",
		"--virtual-time-budget=4000", "--screenshot="+shot, addr).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := os.Open(shot)
	require.NoError(t, err)
	defer f.Close()
	img, err := png.Decode(f)
	require.NoError(t, err)
	// pixels in the first two series colours (#1f77b4, #ff7f0e)
	count := func(r0, g0, b0 int) int {
		n := 0
		b := img.Bounds()
		for y := b.Min.Y; y < b.Max.Y; y++ {
			for x := b.Min.X; x < b.Max.X; x++ {
				r, g, bl, _ := img.At(x, y).RGBA()
				if abs(int(r>>8)-r0) < 40 && abs(int(g>>8)-g0) < 40 && abs(int(bl>>8)-b0) < 40 {
					n++
				}
			}
		}
		return n
	}
	require.Greater(t, count(0x1f, 0x77, 0xb4), 300, "the first series' line and label are drawn")
	require.Greater(t, count(0xff, 0x7f, 0x0e), 300, "the second series' line and label are drawn")
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

// A process that takes no sample makes no ring (it makes one at its first
// sample): the launcher follows nothing for it, its report has no stacks,
// and run says so.
func TestRunStacksNoSample(t *testing.T) {
	t.Setenv("TAGALLOC_SAMPLE_RATE", "1G")
	out := filepath.Join(t.TempDir(), "r.json")
	so, se, code := cli(t, "run", "--stacks", "sampled", "-o", out, "--", "sh", "-c", `ls "$TAGALLOC_DIR"`)
	require.Equal(t, 0, code, se)
	require.Contains(t, so, ".tagalloc", "the books are there")
	require.NotContains(t, so, ".events", "no ring made")
	require.Contains(t, se, "Who allocated it (--stacks sampled): no block was sampled")
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Nil(t, rep.Processes[0].Stacks)
}

// A parent that has taken no sample has no ring when it forks: its child
// makes its own at its first sample and is followed from there.
// A child forked from a process with a ring makes its own at its first
// event, not at the fork: of three children, the one that execs and the
// one that exits at once have no stacks in the report (no events file);
// the one that frees the textures it inherited has, starting from the
// parent's profile at the fork, with the textures freed.
func TestRunStacksChildrenMakeRingsLazily(t *testing.T) {
	prog := buildStacksProg(t)
	out := filepath.Join(t.TempDir(), "r.json")
	so, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", out, "--", prog, "children")
	require.Equal(t, 0, code, se)
	var parent, freer int
	for _, l := range strings.Split(so, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "freer" {
			freer, _ = strconv.Atoi(f[1])
		}
		if len(f) == 2 && f[0] == "parent" {
			parent, _ = strconv.Atoi(f[1])
		}
	}
	require.NotZero(t, freer, "%s", so)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 4, "the parent and three children")
	for _, p := range rep.Processes {
		switch p.PID {
		case parent:
			require.NotNil(t, p.Stacks)
			require.Equal(t, uint64(2000), gpuLive(p.Stacks)[1], "the parent's textures")
		case freer:
			require.NotNil(t, p.Stacks, "the child that freed inherited blocks made a ring")
			require.Zero(t, p.Stacks.UnknownFrees, "its profile started from the parent's")
			require.Equal(t, uint64(0), gpuLive(p.Stacks)[1], "it freed every texture")
		default:
			require.Nil(t, p.Stacks, "pid %d (%v) made a ring without an event", p.PID, p.Command)
		}
	}
}

// A child that makes its ring after its parent forked MaxForks more
// times finds its copy of the parent's profile gone: it starts empty (its
// frees of the textures it inherited are of blocks it never saw), and is
// drained as it runs, not left until the end.
func TestRunStacksLateChildStartsEmpty(t *testing.T) {
	prog := buildStacksProg(t)
	out := filepath.Join(t.TempDir(), "r.json")
	so, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", out, "--", prog, "late-claim")
	require.Equal(t, 0, code, se)
	var freer int
	for _, l := range strings.Split(so, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "freer" {
			freer, _ = strconv.Atoi(f[1])
		}
	}
	require.NotZero(t, freer, "%s", so)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 22)
	for _, p := range rep.Processes {
		if p.PID == freer {
			require.NotNil(t, p.Stacks)
			require.Equal(t, uint64(2000), p.Stacks.UnknownFrees, "the textures it inherited, unknown to its profile")
			return
		}
	}
	t.Fatalf("no process %d in the report", freer)
}

// gpuLive is the live bytes and blocks of tag gpu in st's records.
func gpuLive(st *reporter.Stacks) [2]uint64 {
	var v [2]uint64
	for _, r := range st.Records {
		if r.Tag == "gpu" {
			v[0] += r.LiveBytes
			v[1] += r.LiveBlocks
		}
	}
	return v
}

func TestRunStacksChildOfRinglessParent(t *testing.T) {
	t.Setenv("TAGALLOC_SAMPLE_RATE", "256K")
	prog := buildStacksProg(t)
	out := filepath.Join(t.TempDir(), "r.json")
	so, se, code := cli(t, "run", "-q", "--stacks", "sampled", "-o", out, "--", prog, "late")
	require.Equal(t, 0, code, se)
	var child int
	var exact uint64
	for _, l := range strings.Split(so, "\n") {
		f := strings.Fields(l)
		if len(f) == 2 && f[0] == "child" {
			child, _ = strconv.Atoi(f[1])
		}
		if len(f) == 5 && f[0] == "gpu" {
			exact = parseBooks(t, l)["gpu"][0]
		}
	}
	require.NotZero(t, child, "%s", so)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	var est float64
	found := false
	for _, p := range rep.Processes {
		if p.PID != child {
			continue
		}
		found = true
		require.NotNil(t, p.Stacks, "the child's stacks")
		for _, r := range p.Stacks.Records {
			if r.Tag == "gpu" {
				est += float64(r.LiveBytes)
			}
		}
	}
	require.True(t, found, "child %d in the report", child)
	// about 32 samples: a loose bound, many standard deviations wide
	require.InDelta(t, float64(exact), est, 0.7*float64(exact), "estimate of the child's 8 MB")
}

// The live page shows a tag name the program chose as text, never as
// markup: a program that names a tag with HTML must not put elements (or
// script) into the viewer's page.
func TestServePageHostileTagName(t *testing.T) {
	chromium := needChromium(t)
	dir := t.TempDir()
	src, prog := filepath.Join(dir, "hostile.c"), filepath.Join(dir, "hostile")
	require.NoError(t, os.WriteFile(src, []byte(`#include <stdio.h>
#include <stdlib.h>
#include <string.h>
extern void SetHeapBlockTagForThread(const char *) __attribute__((weak));
int main(void) {
  if (SetHeapBlockTagForThread) SetHeapBlockTagForThread("<b id=\"pwn\">x</b>");
  char *p = malloc(1 << 20);
  memset(p, 1, 1 << 20);
  while (getchar() != EOF) {}
  return p[5] == 1 ? 0 : 1;
}
`), 0o644))
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-o", prog, src).CombinedOutput()
	require.NoError(t, err, "%s", b)
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, "run", "-q", "--serve", "127.0.0.1:0", "--", prog)
	cmd.Dir = t.TempDir() // where it saves its report
	addr := startServing(t, cmd)
	var hist string
	for i := 0; i < 100 && !strings.Contains(hist, "pwn"); i++ {
		time.Sleep(50 * time.Millisecond) // sampled every second
		hist = string(get(t, addr+"/api/history"))
	}
	require.Contains(t, hist, "pwn")
	dom := dumpDOM(t, chromium, addr+"/")
	require.Contains(t, dom, `&lt;b id="pwn"&gt;x&lt;/b&gt;`, "the tag's name is in the table, as text")
	require.NotContains(t, dom, `<b id="pwn">`, "the tag's name became markup")
}
