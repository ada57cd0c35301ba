package main

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// manyReport writes a report of a make that ran 40 cc, 20 sh and one
// program whose name would drive a terminal.
func manyReport(t *testing.T) (string, *reporter.Report) {
	t.Helper()
	proc := func(pid int, argv0 string, live uint64) reporter.Process {
		return reporter.Process{PID: pid, Command: []string{argv0, "-c", "x"}, Ended: "exited",
			Tags: []reporter.Tag{{Name: reporter.DefaultTag, LiveBytes: live, LiveBlocks: 1, AllocBytes: live, AllocBlocks: 1}},
			Heap: reporter.Heap{LiveBytes: live, LiveBlocks: 1, AllocBytes: live, AllocBlocks: 1}, Reports: []reporter.Item{}}
	}
	rep := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{proc(100, "/usr/bin/make", 1000)}}
	for i := 0; i < 40; i++ {
		rep.Processes = append(rep.Processes, proc(200+i, "/usr/bin/cc", uint64(4096+i)))
	}
	for i := 0; i < 20; i++ {
		rep.Processes = append(rep.Processes, proc(300+i, "/bin/sh", 512))
	}
	rep.Processes = append(rep.Processes, proc(400, "/tmp/\x1b[2Jevil", 1))
	p := filepath.Join(t.TempDir(), "many.json")
	require.NoError(t, reporter.WriteFileAtomic(p, rep.WriteJSON))
	return p, rep
}

// report's tree: the first process's tree, then a line per command;
// --command NAME every tree of one command, --pid one process's; the
// filters keep those processes in the other formats too.
func TestReportGroupsAndFilters(t *testing.T) {
	file, _ := manyReport(t)
	tree, se, code := cli(t, "report", file)
	require.Equal(t, 0, code, se)
	require.Equal(t, 1, strings.Count(tree, "Explicit Allocations"), "one tree:\n%s", tree)
	require.Contains(t, tree, "61 other processes, 3 commands")
	require.Regexp(t, `\n\s+40\s+161 KiB\s+40\s+161 KiB  cc \(pid 239 4.0 KiB, pid 238 4.0 KiB, pid 237 4.0 KiB, \.\.\.\)\n`, tree)
	require.Regexp(t, `\n\s+20\s+10 KiB\s+20\s+10 KiB  sh \(pid 300 512 B, pid 301 512 B, pid 302 512 B, \.\.\.\)\n`, tree)
	require.Contains(t, tree, "?[2Jevil (pid 400)")
	require.NotContains(t, tree, "\x1b")
	require.Less(t, strings.Count(tree, "\n"), 30, "no line per process")

	for _, name := range []string{"sh", "/bin/sh"} {
		sh, se, code := cli(t, "report", file, "--command", name)
		require.Equal(t, 0, code, se)
		require.Equal(t, 20, strings.Count(sh, "Explicit Allocations"), "every sh's tree")
		require.Equal(t, 20, strings.Count(sh, "/bin/sh -c x (pid 3"))
		require.NotContains(t, sh, "/usr/bin/cc")
	}
	js, se, code := cli(t, "report", file, "--command", "cc", "--format", "json")
	require.Equal(t, 0, code, se)
	var got reporter.Report
	require.NoError(t, json.Unmarshal([]byte(js), &got))
	require.Len(t, got.Processes, 40)
	for _, p := range got.Processes {
		require.Equal(t, "cc", p.CommandName())
	}
	one, se, code := cli(t, "report", file, "--pid", "205")
	require.Equal(t, 0, code, se)
	require.Equal(t, 1, strings.Count(one, "Explicit Allocations"))
	require.Contains(t, one, "(pid 205)")
	mem, se, code := cli(t, "report", file, "--command", "sh", "--format", "about-memory")
	require.Equal(t, 0, code, se)
	require.Contains(t, mem, `"sh (pid 300)"`)
	require.NotContains(t, mem, `"cc (pid`)
}

// Bad --pid and --command values: a usage error (exit 2) on one line,
// naming what the report has, but never a thousand of them.
func TestReportFilterErrors(t *testing.T) {
	file, _ := manyReport(t)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--pid", "x"}, `invalid value "x" for flag -pid`},
		{[]string{"--pid", "0x"}, `invalid value "0x" for flag -pid`},
		{[]string{"--pid", "-1"}, "--pid -1 is not a process id"},
		{[]string{"--pid", "999"}, "report: --pid 999: no such process in " + file + " (it has 62 processes: 100, 200, 201, 202, 203, 204, 205, 206, 207, 208, ...)"},
		{[]string{"--command", "python3"}, `report: --command "python3": no process of that command in ` + file + ` (it has "cc", "sh", "make", "\x1b[2Jevil")`},
		{[]string{"--command", "\x1b[31mred"}, `report: --command "\x1b[31mred": no process of that command`},
		{[]string{"--command", "sh", "--pid", "300"}, "report: --pid and --command each choose what to show: give one"},
		{[]string{"--command"}, "flag needs an argument: -command"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			so, se, code := cli(t, append([]string{"report", file}, tc.args...)...)
			require.Equal(t, 2, code, se)
			require.Empty(t, so)
			require.Contains(t, se, tc.msg)
			require.Equal(t, 1, strings.Count(se, "\n"), "one line: %q", se)
			require.NotContains(t, se, "\x1b", "escaped")
		})
	}
}

// tagalloc run of a shell running 30 rounds of three programs: the tree
// lists the other processes by command, a line each, not a line per
// process.
func TestRunGroupsProcesses(t *testing.T) {
	if _, err := exec.LookPath("sort"); err != nil {
		t.Skip("no sort")
	}
	out := filepath.Join(t.TempDir(), "r.json")
	_, se, code := cli(t, "run", "--stacks", "off", "-o", out, "--", "sh", "-c",
		"for i in $(seq 30); do sort /etc/passwd | head -c 0; ls / | tail -c 0; done")
	require.Equal(t, 0, code, se)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	counts := map[string]int{}
	for _, p := range rep.Processes[1:] {
		counts[p.CommandName()]++
	}
	require.Equal(t, 30, counts["sort"], "%v", counts)
	require.Equal(t, 30, counts["ls"], "%v", counts)
	_, groups, ok := strings.Cut(se, fmt.Sprintf("\n%d other processes, %d commands", len(rep.Processes)-1, len(counts)))
	require.True(t, ok, se)
	require.Regexp(t, `\n\s+30 .* sort \(pid \d+ `, groups)
	require.Regexp(t, `\n\s+30 .* ls \(pid \d+ `, groups)
	require.Less(t, strings.Count(groups, "\n"), len(counts)+6, "a line per command:\n%s", groups)
}
