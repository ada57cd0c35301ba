package reporter

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// proc is a process of command cmd with live bytes in one untagged block
// and, if peak is not 0, a resident peak read before it ended.
func proc(pid int, cmd string, live uint64, peak uint64) Process {
	p := Process{PID: pid, Command: []string{cmd, "-x"}, Ended: "exited",
		Tags: []Tag{{Name: DefaultTag, LiveBytes: live, LiveBlocks: 1, AllocBytes: 2 * live, AllocBlocks: 2}},
		Heap: Heap{LiveBytes: live, LiveBlocks: 1, AllocBytes: 2 * live, AllocBlocks: 2}}
	if peak != 0 {
		p.Resident = &Resident{Measured: ResidentLastPoll, RSSBytes: ptr(peak), PeakRSSBytes: ptr(peak)}
	}
	return p
}

func TestCommandName(t *testing.T) {
	for _, tc := range []struct {
		cmd  []string
		want string
	}{
		{[]string{"/usr/bin/python3", "-c", "x"}, "python3"},
		{[]string{"python3"}, "python3"},
		{[]string{"-bash"}, "-bash"},
		{[]string{"./a/b/"}, "b"},
		{[]string{""}, "?"},
		{nil, "?"},
		{[]string{"/"}, "/"},
	} {
		require.Equal(t, tc.want, Process{Command: tc.cmd}.CommandName(), "%q", tc.cmd)
	}
}

// Groups: by the program's base name, with sums; the group holding most
// first; within a group, the process holding most first; the highest
// resident peak known, and whether it is a bound.
func TestGroupByCommand(t *testing.T) {
	gs := GroupByCommand([]Process{
		proc(10, "/bin/sh", 100, 0),
		proc(11, "/usr/bin/python3", 5000, 3<<20),
		proc(12, "python3", 7000, 9<<20),
		proc(13, "sh", 300, 0),
		proc(14, "true", 0, 0),
		proc(15, "cat", 0, 0),
	})
	var names []string
	for _, g := range gs {
		names = append(names, g.Command)
	}
	require.Equal(t, []string{"python3", "sh", "cat", "true"}, names, "most live first, then by name")
	py := gs[0]
	require.Len(t, py.Processes, 2)
	require.Equal(t, []int{12, 11}, []int{py.Processes[0].PID, py.Processes[1].PID}, "the largest first")
	require.Equal(t, uint64(12000), py.LiveBytes)
	require.Equal(t, uint64(2), py.LiveBlocks)
	require.Equal(t, uint64(24000), py.AllocBytes)
	require.Equal(t, ptr(uint64(9<<20)), py.PeakRSSBytes)
	require.True(t, py.PeakRSSBound, "read before the process ended: a lower bound")
	require.Equal(t, 12, py.PeakRSSPID)
	require.Nil(t, gs[1].PeakRSSBytes, "none known: nil, not 0")
	require.Equal(t, []int{13, 10}, []int{gs[1].Processes[0].PID, gs[1].Processes[1].PID})
}

// A run of 1,237 processes: the summary is the first process's tree and
// a line per command, at most groupsShown of them and one for the rest,
// whatever the number of processes.
func TestSummaryOfManyProcesses(t *testing.T) {
	ps := []Process{proc(1, "make", 10, 1<<20)}
	for i := 0; i < 1236; i++ {
		cmd := "python3"
		switch {
		case i%10 == 0:
			cmd = "sh"
		case i >= 1200:
			cmd = fmt.Sprintf("tool%d", i) // 32 commands of one process each (the rest are sh)
		}
		ps = append(ps, proc(100+i, "/usr/bin/"+cmd, uint64(1000+i), 0))
	}
	r := &Report{Schema: Schema, Processes: ps}
	for name, write := range map[string]func(*Report, *bytes.Buffer) error{
		"summary":  func(r *Report, b *bytes.Buffer) error { return r.WriteSummary(b) },
		"overview": func(r *Report, b *bytes.Buffer) error { return r.WriteOverview(b) },
	} {
		var b bytes.Buffer
		require.NoError(t, write(r, &b), name)
		out := b.String()
		_, groups, ok := strings.Cut(out, "\n1,236 other processes, 34 commands (tagalloc report FILE.json --command NAME")
		require.True(t, ok, "%s:\n%s", name, out)
		lines := strings.Split(strings.TrimSpace(groups), "\n")
		require.Len(t, lines, 1+1+groupsShown+1, "the hint, the heading, %d commands and the rest:\n%s", groupsShown, groups)
		require.Contains(t, lines[2], "python3 (pid 1299 2.1 KiB, pid 1298 2.1 KiB, pid 1297 2.1 KiB, ...)")
		require.Regexp(t, `^\s+1,080 `, lines[2], "python3's count")
		require.Contains(t, lines[len(lines)-1], "(19 more commands)")
		require.Equal(t, 1, strings.Count(out, "Explicit Allocations"), "one tree")
	}
}

// The group table's figures, column by column, and the resident column
// only when some process has resident figures.
func TestGroupsTable(t *testing.T) {
	r := &Report{Schema: Schema, Processes: []Process{
		proc(1, "make", 10, 0),
		proc(2, "cc", 4096, 5<<20),
		proc(3, "cc", 1024, 7<<20),
		proc(4, "ld", 2048, 0),
	}}
	r.Processes[3].Resident = &Resident{Measured: ResidentRunning, PeakRSSBytes: ptr(uint64(3 << 20))}
	var b bytes.Buffer
	require.NoError(t, r.WriteOverview(&b))
	_, table, _ := strings.Cut(b.String(), "3 other processes, 2 commands")
	require.Equal(t, ` (tagalloc report FILE.json --command NAME shows one command's processes, --pid PID one process):
  PROCESSES       LIVE       BLOCKS  ALLOCATED    PEAK RSS  COMMAND (largest by live bytes)
          2    5.0 KiB            2     10 KiB   ≥ 7.0 MiB  cc (pid 2 4.0 KiB, pid 3 1.0 KiB)
          1    2.0 KiB            1    4.0 KiB     3.0 MiB  ld (pid 4)
`, table)

	for i := range r.Processes {
		r.Processes[i].Resident = nil
	}
	b.Reset()
	require.NoError(t, r.WriteOverview(&b))
	require.NotContains(t, b.String(), "PEAK RSS", "a report made before resident was kept has no such column")
}

// A child with its parent's command line (forked without exec) holds the
// blocks its parent held at the fork, counted as allocated at its birth:
// the table says so. A child that exec'd another program, or whose
// parent is not in the report, is not counted.
func TestGroupsNameForkedCopies(t *testing.T) {
	r := &Report{Schema: Schema, Processes: []Process{
		proc(1, "bash", 10, 0),
		proc(2, "bash", 10, 0), // forked by 1
		proc(3, "bash", 10, 0), // forked by 2
		proc(4, "tr", 10, 0),   // forked by 1, then exec'd tr
		proc(5, "bash", 10, 0), // its parent not in the report
	}}
	for i, pp := range []int{0, 1, 2, 1, 77} {
		r.Processes[i].PPID = pp
	}
	var b bytes.Buffer
	require.NoError(t, r.WriteSummary(&b))
	require.Contains(t, b.String(), "\n  (2 processes have the command line of a parent here: forked without exec, each holds, and counts as allocated, the blocks its parent held at the fork)\n")
	r.Processes[2].PPID = 0
	b.Reset()
	require.NoError(t, r.WriteOverview(&b))
	require.Contains(t, b.String(), "(1 process has the command line of a parent here")
	r.Processes[1].PPID, r.Processes[2].PPID = 4, 4
	b.Reset()
	require.NoError(t, r.WriteOverview(&b))
	require.NotContains(t, b.String(), "command line of a parent")
}

// Command names and command lines come from the measured program: what
// would drive the terminal is printed as '?', and a long name is cut.
func TestGroupsEscapeHostileNames(t *testing.T) {
	evil := "/tmp/\x1b]0;owned\x07\x1b[2J" + strings.Repeat("A", 200) + "\u202e"
	r := &Report{Schema: Schema, Processes: []Process{proc(1, evil, 10, 0), proc(2, evil, 20, 0), proc(3, "ok\nfake line", 5, 0)}}
	r.Processes[0].Tags[0].Name = "t\x1b[31m"
	for _, write := range []func(*bytes.Buffer) error{
		func(b *bytes.Buffer) error { return r.WriteOverview(b) },
		func(b *bytes.Buffer) error { return r.WriteSummary(b) },
		func(b *bytes.Buffer) error { return r.WriteTree(b) },
	} {
		var b bytes.Buffer
		require.NoError(t, write(&b))
		for _, c := range b.String() {
			require.False(t, c < 0x20 && c != '\n' || c == 0x7f || c == '\u202e', "control character %q in:\n%s", c, b.String())
		}
		require.NotContains(t, b.String(), "\nfake line")
		for _, l := range strings.Split(b.String(), "\n") {
			require.Less(t, len([]rune(l)), 260, "a long name is cut: %q", l)
		}
	}
}
