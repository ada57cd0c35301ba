package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/cgo"
	"github.com/tagalloc/tagalloc/reporter"
)

// cliIn runs the CLI with dir as its working directory.
func cliIn(t *testing.T, dir string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return so.String(), se.String(), ee.ExitCode()
	}
	require.NoError(t, err)
	return so.String(), se.String(), 0
}

// fixtureStacks: one record of 2 blocks allocated in /opt/prog/bin/prog,
// live bytes of them still live.
func fixtureStacks(live uint64) *reporter.Stacks {
	blocks := uint64(0)
	if live > 0 {
		blocks = 1
	}
	return &reporter.Stacks{Mode: "full", SampleRate: 1, Samples: 2,
		Records: []reporter.StackRecord{{Tag: "gpu", Library: "prog", Samples: 2, LiveBytes: live, LiveBlocks: blocks, AllocBytes: 4096, AllocBlocks: 2,
			Frames: []reporter.Frame{{PC: 0x401010, Module: "prog", Offset: 0x1010, Function: "make_texture", File: "/src/gpu/texture.c", Line: 7}}}},
		Libraries: []reporter.LibraryTotals{},
		Mappings:  []reporter.Mapping{{Path: "/opt/prog/bin/prog", Start: 0x400000, End: 0x402000, Offset: 0, BuildID: "abcdef01"}}}
}

// fixtureReport writes a report of three processes: 100 with 2048 bytes
// live, 101 that freed everything, 102 without stacks.
func fixtureReport(t *testing.T, dir string) string {
	t.Helper()
	tag := func(live uint64) []reporter.Tag {
		return []reporter.Tag{{Name: "gpu", LiveBytes: live, AllocBytes: 4096, AllocBlocks: 2}}
	}
	rep := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{
		{PID: 100, Command: []string{"prog"}, Ended: "exited", Tags: tag(2048), Stacks: fixtureStacks(2048)},
		{PID: 101, Command: []string{"prog", "child"}, Ended: "exited", Tags: tag(0), Stacks: fixtureStacks(0)},
		{PID: 102, Command: []string{"sh"}, Ended: "exited", Tags: tag(0)},
	}}
	p := filepath.Join(dir, "r.json")
	require.NoError(t, reporter.WriteFileAtomic(p, rep.WriteJSON))
	return p
}

// allFlags are every command's flags: each must appear in its usage.
var allFlags = map[string][]string{
	"run":      {"-o FILE", "--serve ADDRESS", "--stacks MODE", "--history-limit SIZE", "-q", "--check"},
	"report":   {"--format FORMAT", "-o FILE", "--pid PID", "--command NAME", "--web", "--addr ADDRESS"},
	"diff":     {"--format FORMAT", "-o FILE"},
	"snapshot": {"--format FORMAT", "-o FILE"},
	"top":      {"-n N", "--interval DURATION"},
	"serve":    {"--addr ADDRESS", "--interval DURATION"},
	"lib":      nil, "version": nil, "help": nil,
}

// help CMD, CMD -h and CMD --help print the command's usage to stdout
// and exit 0, with its arguments, flags and defaults.
func TestCommandHelp(t *testing.T) {
	require.Len(t, allFlags, len(commands), "a test entry for every command")
	for name, flags := range allFlags {
		c := lookup(name)
		require.NotNil(t, c, name)
		want, _, code := cli(t, "help", name)
		require.Equal(t, 0, code)
		require.True(t, strings.HasPrefix(want, "usage: tagalloc "+name), want)
		require.Contains(t, strings.SplitN(want, "\n", 2)[0], c.args, "the synopsis names the arguments")
		for _, f := range flags {
			require.Contains(t, want, "  "+f+" ", "%s's usage shows %s", name, f)
		}
		for _, h := range []string{"-h", "--help", "-help"} {
			so, se, code := cli(t, name, h)
			require.Equal(t, 0, code, se)
			require.Equal(t, want, so, "%s %s", name, h)
			require.Empty(t, se)
		}
	}
	run, _, _ := cli(t, "help", "run")
	require.Contains(t, run, "(default 64M)")
	require.Contains(t, run, "(default sampled)", "stacks are on by default")
}

// The general usage: every command and the exit codes, on stdout for
// help, on stderr (exit 2) when no command is given.
func TestGeneralUsage(t *testing.T) {
	for _, args := range [][]string{{"help"}, {"--help"}, {"-h"}} {
		so, se, code := cli(t, args...)
		require.Equal(t, 0, code)
		require.Empty(t, se)
		for _, c := range commands {
			require.Contains(t, so, "\n  "+strings.TrimSpace(c.name+" "+c.args)+" ", "each command with its arguments")
		}
		for _, line := range []string{"0  done", "1  tagalloc failed", "2  usage error", "PROG's status"} {
			require.Contains(t, so, line)
		}
	}
	so, se, code := cli(t)
	require.Equal(t, 2, code)
	require.Empty(t, so)
	require.Contains(t, se, "exit status:")
}

func TestVersion(t *testing.T) {
	hash, err := cgo.HashFS(cgo.Sources, "", nil)
	require.NoError(t, err)
	for _, args := range [][]string{{"--version"}, {"-version"}, {"version"}} {
		so, se, code := cli(t, args...)
		require.Equal(t, 0, code, se)
		require.True(t, strings.HasPrefix(so, "tagalloc "), so)
		require.Contains(t, so, "(github.com/tagalloc/tagalloc)")
		require.Contains(t, so, "go "+runtime.Version())
		require.Contains(t, so, "library sources "+hash+"\n")
	}
	_, se, code := cli(t, "version", "extra")
	require.Equal(t, 2, code)
	require.Contains(t, se, `unexpected argument "extra"`)
}

// Every usage error exits 2 with one line naming what is wrong, and
// prints nothing on stdout.
func TestUsageErrors(t *testing.T) {
	r := fixtureReport(t, t.TempDir())
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"help", "frobnicate"}, `unknown command "frobnicate"`},
		{[]string{"report"}, "report: missing FILE.json"},
		{[]string{"report", r, r}, `report: unexpected argument`},
		{[]string{"report", r, "--nope"}, "report: flag provided but not defined: -nope"},
		{[]string{"report", r, "--format", "svg"}, `report: --format "svg": one of tree, json`},
		{[]string{"report", r, "--pid", "x"}, `invalid value "x" for flag -pid`},
		{[]string{"report", r, "--pid", "-3"}, "report: --pid -3 is not a process id"},
		{[]string{"report", r, "--pid", "999"}, "report: --pid 999: no such process in " + r + " (it has 100, 101, 102)"},
		{[]string{"report", r, "-o"}, "flag needs an argument: -o"},
		{[]string{"diff", r}, "diff: missing B.json"},
		{[]string{"snapshot", "1", "--format", "pprof"}, `snapshot: --format "pprof": one of json, tree, about-memory`},
		{[]string{"snapshot", "--format", "tree"}, "snapshot: missing PID"},
		{[]string{"snapshot", "abc"}, `snapshot: "abc" is not a process id`},
		{[]string{"top", "1", "-n", "-1"}, "top: -n -1: a count"},
		{[]string{"top", "1", "--interval", "0s"}, "top: --interval 0s: a duration above zero"},
		{[]string{"top", "1", "--interval", "soon"}, `invalid value "soon" for flag -interval`},
		{[]string{"top"}, "top: missing PID"},
		{[]string{"serve", "1", "--interval", "-1s"}, "serve: --interval -1s"},
		{[]string{"serve", "1", "2"}, `serve: unexpected argument "2"`},
		{[]string{"run", "--stacks", "all", "--", "true"}, `run: --stacks "all": off, sampled or full`},
		{[]string{"run", "--history-limit", "lots", "--", "true"}, `run: --history-limit lots: size "lots"`},
		{[]string{"run", "-q"}, "run: no program given"},
		{[]string{"lib", "x"}, `lib: unexpected argument "x"`},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			so, se, code := cli(t, tc.args...)
			require.Equal(t, 2, code, se)
			require.Empty(t, so)
			require.Contains(t, se, tc.msg)
			require.True(t, strings.HasPrefix(se, "tagalloc: "), se)
			require.Equal(t, 1, strings.Count(se, "\n"), "one line: %q", se)
		})
	}
}

// Flags may come before or after the positional arguments, up to --.
func TestFlagsAnywhere(t *testing.T) {
	dir := t.TempDir()
	r := fixtureReport(t, dir)
	want, se, code := cli(t, "report", r, "--format", "json")
	require.Equal(t, 0, code, se)
	require.Contains(t, want, `"pid": 101`)
	for _, args := range [][]string{
		{"report", "--format", "json", r},
		{"report", "--format=json", r},
		{"report", "-format", "json", "--", r},
	} {
		so, se, code := cli(t, args...)
		require.Equal(t, 0, code, "%v: %s", args, se)
		require.Equal(t, want, so, "%v", args)
	}
	dashed := filepath.Join(dir, "-r.json") // after --, a name that starts with a dash is a file
	require.NoError(t, os.Rename(r, dashed))
	so, se, code := cliIn(t, dir, "report", "--format", "json", "--", "-r.json")
	require.Equal(t, 0, code, se)
	require.Equal(t, want, so)
}

// -o - is standard output: no file named "-" appears.
func TestOutputDashIsStdout(t *testing.T) {
	dir := t.TempDir()
	r := fixtureReport(t, dir)
	want, _, _ := cli(t, "report", r, "--format", "json")
	so, se, code := cliIn(t, dir, "report", r, "--format", "json", "-o", "-")
	require.Equal(t, 0, code, se)
	require.Equal(t, want, so)
	so, se, code = cliIn(t, dir, "diff", r, r, "-o", "-")
	require.Equal(t, 0, code, se)
	require.NotEmpty(t, so)
	so, se, code = cliIn(t, dir, "run", "-q", "-o", "-", "--", "sh", "-c", "exit 0")
	require.Equal(t, 0, code, se)
	rep, err := reporter.Read(strings.NewReader(so))
	require.NoError(t, err, "run -o - writes the report to stdout")
	require.NotEmpty(t, rep.Processes)
	_, err = os.Lstat(filepath.Join(dir, "-"))
	require.ErrorIs(t, err, os.ErrNotExist)
}

// -o through a symlink writes the file it names (the link stays); into
// a FIFO it streams to the reader; a failed write leaves the file as it was.
func TestOutputPaths(t *testing.T) {
	dir := t.TempDir()
	r := fixtureReport(t, dir)
	want, _, _ := cli(t, "report", r)
	target, link := filepath.Join(dir, "target.txt"), filepath.Join(dir, "link.txt")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o600))
	require.NoError(t, os.Symlink(target, link))
	_, se, code := cli(t, "report", r, "-o", link)
	require.Equal(t, 0, code, se)
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeSymlink, "the link is still a link")
	got, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, want, string(got))

	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	read := make(chan []byte)
	go func() {
		b, _ := os.ReadFile(fifo)
		read <- b
	}()
	_, se, code = cli(t, "report", r, "-o", fifo)
	require.Equal(t, 0, code, se)
	require.Equal(t, want, string(<-read))
	fi, err = os.Lstat(fifo)
	require.NoError(t, err)
	require.NotZero(t, fi.Mode()&os.ModeNamedPipe, "the FIFO is still a FIFO")

	kept := filepath.Join(dir, "kept.pb.gz")
	require.NoError(t, os.WriteFile(kept, []byte("keep me"), 0o600))
	_, se, code = cli(t, "report", r, "--pid", "102", "--format", "pprof", "-o", kept)
	require.Equal(t, 1, code, se)
	require.Contains(t, se, "process 102 has no stacks")
	got, err = os.ReadFile(kept)
	require.NoError(t, err)
	require.Equal(t, "keep me", string(got), "a failed write replaces nothing")
}

// report --format pprof: every process with stacks, merged and labelled
// by pid, with the report's mappings and full source paths; --pid keeps
// one, whose default sample type is alloc_space when nothing is live.
func TestReportPprofProcesses(t *testing.T) {
	r := fixtureReport(t, t.TempDir())
	parse := func(args ...string) *profile.Profile {
		so, se, code := cli(t, append([]string{"report", r, "--format", "pprof", "-o", "-"}, args...)...)
		require.Equal(t, 0, code, se)
		prof, err := profile.Parse(strings.NewReader(so))
		require.NoError(t, err)
		return prof
	}
	prof := parse()
	live := map[int64]int64{}
	for _, s := range prof.Sample {
		live[s.NumLabel["pid"][0]] += s.Value[3]
		require.Equal(t, []string{"gpu"}, s.Label["tag"])
	}
	require.Equal(t, map[int64]int64{100: 2048, 101: 0}, live)
	require.Equal(t, reporter.InuseSpace, prof.DefaultSampleType)
	require.Len(t, prof.Mapping, 1)
	m := prof.Mapping[0]
	require.Equal(t, []any{"/opt/prog/bin/prog", uint64(0x400000), uint64(0x402000), "abcdef01"}, []any{m.File, m.Start, m.Limit, m.BuildID})
	require.Equal(t, "/src/gpu/texture.c", prof.Function[0].Filename)

	one := parse("--pid", "101")
	require.Len(t, one.Sample, 1)
	require.Equal(t, []int64{101}, one.Sample[0].NumLabel["pid"])
	require.Equal(t, reporter.AllocSpace, one.DefaultSampleType, "nothing live: alloc_space first")
}

// report --web serves pprof's web UI on the report until interrupted.
func TestReportWeb(t *testing.T) {
	r := fixtureReport(t, t.TempDir())
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, "report", r, "--web", "--addr", "127.0.0.1:0", "--pid", "100")
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, buf := "", make([]byte, 512)
	for !strings.Contains(line, "\n") {
		n, err := stderr.Read(buf)
		require.NoError(t, err, line)
		line += string(buf[:n])
	}
	require.True(t, strings.HasPrefix(line, "Serving web UI on http://127.0.0.1:"), line)
	url := strings.TrimSpace(strings.TrimPrefix(line, "Serving web UI on "))
	flame := string(get(t, url+"/flamegraph"))
	require.Contains(t, flame, "make_texture")
	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	require.NoError(t, cmd.Wait(), "interrupted, it exits 0")

	_, se, code := cli(t, "report", r, "--web", "-o", "x")
	require.Equal(t, 2, code)
	require.Contains(t, se, "--web serves the profile")
	_, se, code = cli(t, "report", r, "--web", "--pid", "102")
	require.Equal(t, 1, code)
	require.Contains(t, se, "process 102 has no stacks")
}

// What a measured program names cannot drive the terminal through top.
func TestTerminalText(t *testing.T) {
	require.Equal(t, "gpu-textures ünïcode", terminalText("gpu-textures ünïcode"))
	require.Equal(t, "?[2J?]0;title?evil?txt.exe", terminalText("\x1b[2J\x1b]0;title\x07evil\u202etxt.exe"))
	require.Equal(t, "a?b?c", terminalText("a\u0085b\xffc"))
	var b bytes.Buffer
	writeTop(&b, reporter.Process{PID: 1, Command: []string{"prog\x1b[31m"}, Tags: []reporter.Tag{{Name: "t\x1b]52;c;cGFzdGU=\x07"}}})
	require.NotContains(t, b.String(), "\x1b")
	require.NotContains(t, b.String(), "\x07")
}

// An error is one line without control characters, whatever the name it
// quotes.
func TestErrorsAreOneCleanLine(t *testing.T) {
	so, se, code := cli(t, "report", "a\x1b[31mb\nc.json")
	require.Equal(t, 1, code)
	require.Empty(t, so)
	require.Equal(t, "tagalloc: report: open a?[31mb?c.json: no such file or directory\n", se)
}

// PROG not found is 127 and PROG there but not executable 126, as a
// shell says them.
func TestRunCannotStartStatus(t *testing.T) {
	dir := t.TempDir()
	notes := filepath.Join(dir, "notes.txt")
	require.NoError(t, os.WriteFile(notes, []byte("not a program\n"), 0o644))
	_, se, code := cliIn(t, dir, "run", "-q", "--stacks", "off", "--", "./notes.txt")
	require.Equal(t, 126, code, se)
	require.Contains(t, se, "permission denied")
	_, se, code = cliIn(t, dir, "run", "-q", "--stacks", "off", "--", "./no-such-program")
	require.Equal(t, 127, code, se)
}
