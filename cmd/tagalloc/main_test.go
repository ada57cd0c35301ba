package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

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

func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
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
		{"lib-extra-arg", []string{"lib", "x"}, 2, "lib takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, se, code := cli(t, tc.args...)
			require.Equal(t, tc.code, code, se)
			require.Contains(t, se, tc.msg)
			require.Contains(t, se, "tagalloc: ")
		})
	}
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
	acc := startWaiting(t, exec.Command(bin, "run", "-q", "--", prog, "wait"))
	lines := strings.Split(acc, "\n")
	want := parseBooks(t, strings.Join(lines, "\n"))
	var pid string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "ready" {
			pid = f[1]
		}
	}
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
	_, se, code = cli(t, "run", "--stacks", "full", "--", "true")
	require.Equal(t, 2, code)
	require.Contains(t, se, "only off works")
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
}

// snapshot and top read a Go program's books from its memfd, without
// tagalloc run.
func TestSnapshotOfAGoProgram(t *testing.T) {
	prog := buildGoProg(t)
	acc := startWaiting(t, exec.Command(prog, "wait"))
	want := parseBooks(t, acc)
	delete(want, "c-side") // not preloaded: the C side is untracked
	var pid string
	for _, l := range strings.Split(acc, "\n") {
		if f := strings.Fields(l); len(f) == 2 && f[0] == "ready" {
			pid = f[1]
		}
	}
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
}
