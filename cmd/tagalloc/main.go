package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"

	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

func main() {
	stopProfile := cpuProfile(os.Getenv("TAGALLOC_CPUPROFILE"))
	code, err := run(os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	if err != nil {
		// one line, whatever a file or process put in the message
		fmt.Fprintf(os.Stderr, "tagalloc: %s\n", terminalText(err.Error()))
		if code == 0 {
			code = exitFailure
		}
	}
	os.Exit(code)
}

// cpuProfile profiles tagalloc itself into file (TAGALLOC_CPUPROFILE, for
// tagalloc's developers: go tool pprof FILE); "" does nothing.
func cpuProfile(file string) (stop func()) {
	if file == "" {
		return func() {}
	}
	f, err := os.Create(file)
	if err == nil {
		err = pprof.StartCPUProfile(f)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "tagalloc: TAGALLOC_CPUPROFILE: %v\n", err)
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}

// run runs the command args name (its usage for help flags, its version
// for --version) and returns the exit code.
func run(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		generalUsage(stderr)
		return exitUsage, errors.New("no command given")
	}
	switch args[0] {
	case "-h", "-help", "--help":
		generalUsage(stdout)
		return 0, nil
	case "-version", "--version":
		return versionCmd(args[1:], stdout, stderr)
	}
	c := lookup(args[0])
	if c == nil {
		return exitUsage, fmt.Errorf("unknown command %q (commands: %s; tagalloc help)", args[0], commandNames())
	}
	return c.run(args[1:], stdout, stderr)
}

// collect reads every process's books (a run's: kept.ReadAll) into a
// report, with the stacks of the processes that have a profile and their
// resident memory (res; nil: none); the launched process gets its exit
// status.
func collect(kept *tagtable.Kept, ps *os.ProcessState, profiles map[int]*tagtable.Profile, res residentOf) (*reporter.Report, error) {
	snaps, err := kept.ReadAll()
	return report(snaps, err, ps, profiles, res)
}

// report makes the report of the regions read (err: what could not be
// read; the others are reported all the same), as collect says.
func report(snaps []*tagtable.Snapshot, err error, ps *os.ProcessState, profiles map[int]*tagtable.Profile, res residentOf) (*reporter.Report, error) {
	return reportWith(snaps, err, ps, profiles, newSymbolizer(), res)
}

// reportWith is report, naming frames with sym.
func reportWith(snaps []*tagtable.Snapshot, err error, ps *os.ProcessState, profiles map[int]*tagtable.Profile, sym reporter.Symbolize, res residentOf) (*reporter.Report, error) {
	rep := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{}}
	for _, s := range snaps {
		p := reporter.FromSnapshot(s)
		if prof := profiles[s.PID]; prof != nil {
			p.Stacks = reporter.FromProfile(prof, s.TagNames, sym)
			p.EstimateRequested(prof, s.TagNames) // the tags whose books keep no requested sizes
			p.PeakFromStacks()                    // exact under --stacks full
		}
		if res != nil {
			p.Resident = res(s.PID, s.StartNS)
		}
		if ps != nil && s.PID == ps.Pid() {
			if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				p.Signal = unix.SignalName(ws.Signal())
				p.Ended = "killed"
			} else {
				c := ps.ExitCode()
				p.ExitCode = &c
				p.Ended = "exited"
			}
		}
		rep.Processes = append(rep.Processes, p)
	}
	first := 0
	if ps != nil {
		first = ps.Pid()
	}
	rep.Sort(first)
	return rep, err
}

// formats are the report's renderings, by --format name.
var formats = map[string]func(rep *reporter.Report, out string, pid int) func(io.Writer) error{
	"tree":        func(rep *reporter.Report, _ string, _ int) func(io.Writer) error { return rep.WriteTree },
	"json":        func(rep *reporter.Report, _ string, _ int) func(io.Writer) error { return rep.WriteJSON },
	"dmd":         func(rep *reporter.Report, _ string, _ int) func(io.Writer) error { return rep.WriteDMD },
	"dark-matter": func(rep *reporter.Report, _ string, _ int) func(io.Writer) error { return rep.WriteDarkMatter },
	"pprof": func(rep *reporter.Report, _ string, pid int) func(io.Writer) error {
		return func(w io.Writer) error { return rep.WritePprof(w, pid) }
	},
	"about-memory": func(rep *reporter.Report, out string, _ int) func(io.Writer) error {
		if strings.HasSuffix(out, ".gz") { // as about:memory decides
			return rep.WriteMemoryReportGzip
		}
		return rep.WriteMemoryReport
	},
}

// formatAliases are other names of formats.
var formatAliases = map[string]string{"darkmatter": "dark-matter", "firefox": "about-memory"}

// checkFormat returns the format's name, or a usage error listing allowed.
func checkFormat(cmd, format string, allowed []string) (string, error) {
	if f, ok := formatAliases[format]; ok {
		format = f
	}
	for _, a := range allowed {
		if a == format {
			return format, nil
		}
	}
	return "", usagef(cmd, "--format %q: one of %s", format, strings.Join(allowed, ", "))
}

var reportFormats = []string{"tree", "json", "dmd", "dark-matter", "pprof", "about-memory"}

// reportOptions are report's flags and FILE.
type reportOptions struct {
	format, out, addr, file string
	pid                     int
	command                 string
	web                     bool
}

func parseReport(args []string, stdout io.Writer) (reportOptions, error) {
	var o reportOptions
	fs := newFlags("report")
	fs.StringVar(&o.format, "format", "tree", "output `FORMAT`: tree, json, dmd (stack records, with --stacks), dark-matter (blocks by what memory reporters said, with --stacks), pprof (with --stacks) or about-memory (Firefox's; also firefox)")
	fs.StringVar(&o.out, "o", "", "write to `FILE` instead of standard output (- for standard output)")
	fs.IntVar(&o.pid, "pid", 0, "only process `PID` (default: every process; pprof merges them, each sample labelled pid)")
	fs.StringVar(&o.command, "command", "", "only the processes of command `NAME` (the base name of their program, as the tree lists them); the tree shows each one's")
	fs.BoolVar(&o.web, "web", false, "serve pprof's web UI (flame graph, top, source) on the stacks instead, until interrupted")
	fs.StringVar(&o.addr, "addr", "127.0.0.1:0", "with --web: listen on `ADDRESS` (port 0: any free port)")
	pos, err := parse(fs, args, stdout)
	switch {
	case err != nil:
	case len(pos) != 1:
		err = wantArgs("report", pos, 1)
	case o.pid < 0:
		err = usagef("report", "--pid %d is not a process id", o.pid)
	case o.pid != 0 && o.command != "":
		err = usagef("report", "--pid and --command each choose what to show: give one")
	case o.web && o.out != "":
		err = usagef("report", "--web serves the profile; it writes no -o FILE")
	default:
		o.file = pos[0]
		o.format, err = checkFormat("report", o.format, reportFormats)
	}
	return o, err
}

func reportCmd(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseReport(args, stdout)
	if err != nil {
		return usageExit(err)
	}
	rep, err := reporter.ReadFile(o.file)
	if err != nil {
		return exitFailure, fmt.Errorf("report: %w", err)
	}
	switch {
	case o.pid != 0:
		if rep, err = onlyProcess(rep, o.pid, o.file); err != nil {
			return exitUsage, err
		}
	case o.command != "":
		if rep, err = onlyCommand(rep, o.command, o.file); err != nil {
			return exitUsage, err
		}
	case o.format == "tree" && !o.web:
		// every process: the first's tree and the others by command
		if err := writeOut(o.out, stdout, rep.WriteOverview); err != nil {
			return exitFailure, err
		}
		return 0, nil
	}
	if o.web {
		prof, err := rep.Profile(o.pid)
		if err != nil {
			return exitFailure, fmt.Errorf("report: --web: %w", err)
		}
		return webReport(prof, o.addr, stderr)
	}
	return render(rep, o.format, o.out, o.pid, stdout)
}

// onlyProcess keeps the process pid of the report read from file.
func onlyProcess(rep *reporter.Report, pid int, file string) (*reporter.Report, error) {
	var pids []string
	for _, p := range rep.Processes {
		if p.PID == pid {
			return &reporter.Report{Schema: rep.Schema, Processes: []reporter.Process{p}}, nil
		}
		pids = append(pids, strconv.Itoa(p.PID))
	}
	return nil, usagef("report", "--pid %d: no such process in %s (it has %s)", pid, file, someOf(pids, "processes"))
}

// onlyCommand keeps the processes of command name (the base name of
// their program, or their argv[0] as it is) of the report read from
// file.
func onlyCommand(rep *reporter.Report, name, file string) (*reporter.Report, error) {
	out := &reporter.Report{Schema: rep.Schema, Processes: []reporter.Process{}}
	for _, p := range rep.Processes {
		if p.CommandName() == name || len(p.Command) > 0 && p.Command[0] == name {
			out.Processes = append(out.Processes, p)
		}
	}
	if len(out.Processes) > 0 {
		return out, nil
	}
	var names []string
	for _, g := range reporter.GroupByCommand(rep.Processes) {
		names = append(names, strconv.Quote(g.Command))
	}
	return nil, usagef("report", "--command %q: no process of that command in %s (it has %s)", name, file, someOf(names, "commands"))
}

// someOf lists the first of names for a message: a report of a thousand
// processes must not make a line of a thousand pids.
func someOf(names []string, what string) string {
	const shown = 10
	if len(names) <= shown {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%d %s: %s, ...", len(names), what, strings.Join(names[:shown], ", "))
}

// render writes rep in format (a name of formats) to out (see writeOut).
func render(rep *reporter.Report, format, out string, pid int, stdout io.Writer) (int, error) {
	if err := writeOut(out, stdout, formats[format](rep, out, pid)); err != nil {
		return exitFailure, err
	}
	return 0, nil
}

func snapshot(pid int, cmd string) (*reporter.Report, error) {
	s, err := readOwnProcess(pid, cmd)
	if err != nil {
		return nil, err
	}
	p := reporter.FromSnapshot(s)
	if !s.Exited {
		p.Ended = "running"
	}
	p.Resident = residentNow(pid, s.StartNS)
	return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}, nil
}

// snapshotFormats: a snapshot has no stacks.
var snapshotFormats = []string{"json", "tree", "about-memory"}

func snapshotCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("snapshot")
	out := fs.String("o", "", "write to `FILE` (default: standard output; - for standard output)")
	format := fs.String("format", "json", "output `FORMAT`: json, tree or about-memory")
	pos, err := parseN(fs, args, stdout, 1)
	if err == nil {
		*format, err = checkFormat("snapshot", *format, snapshotFormats)
	}
	var pid int
	if err == nil {
		pid, err = pidArgument("snapshot", pos[0])
	}
	if err != nil {
		return usageExit(err)
	}
	rep, err := snapshot(pid, "snapshot")
	if err != nil {
		return exitFailure, fmt.Errorf("snapshot: %w", err)
	}
	return render(rep, *format, *out, 0, stdout)
}

// topOptions are top's flags and PID.
type topOptions struct {
	n        int
	interval time.Duration
	pid      int
	flat     bool
}

func parseTop(args []string, stdout io.Writer) (topOptions, error) {
	var o topOptions
	fs := newFlags("top")
	fs.IntVar(&o.n, "n", 0, "refresh `N` times, then stop (default 0: until interrupted)")
	fs.DurationVar(&o.interval, "interval", time.Second, "`DURATION` between refreshes (e.g. 500ms, 2s)")
	fs.BoolVar(&o.flat, "flat", false, "one line per tag, by its full name, instead of tags nested by path with a total per level")
	pos, err := parseN(fs, args, stdout, 1)
	switch {
	case err != nil:
		return o, err
	case o.n < 0:
		return o, usagef("top", "-n %d: a count, 0 or more", o.n)
	case o.interval <= 0:
		return o, usagef("top", "--interval %v: a duration above zero", o.interval)
	}
	o.pid, err = pidArgument("top", pos[0])
	return o, err
}

func topCmd(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseTop(args, stdout)
	if err != nil {
		return usageExit(err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for i := 0; o.n == 0 || i < o.n; i++ {
		if i > 0 {
			select {
			case <-sigs:
				return 0, nil
			case <-time.After(o.interval):
			}
		}
		rep, err := snapshot(o.pid, "top")
		if err != nil {
			return exitFailure, fmt.Errorf("top: %w", err)
		}
		if o.n == 0 {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // clear the screen between refreshes
		}
		if o.flat {
			writeTop(stdout, rep.Processes[0])
		} else {
			writeTopTree(stdout, rep.Processes[0])
		}
	}
	return 0, nil
}

// writeTop writes top's flat view: a line per tag, by its full name.
func writeTop(w io.Writer, p reporter.Process) {
	writeTopHeading(w, p)
	for _, t := range p.Tags {
		writeTopLine(w, p, t.LiveBytes, t.LiveBlocks, t.AllocBytes, t.Peak(), terminalText(t.Name))
	}
	writeTopBudgets(w, p)
}

// writeTopTree writes top's default view: tags nested by path
// (docs/tag-trees.md), a level's line above its children's, indented by
// depth, with the exact sums of the tags under it and no peak ("-": the
// peak of a sum is not the sum of the peaks); a tag alone has its own.
func writeTopTree(w io.Writer, p reporter.Process) {
	writeTopHeading(w, p)
	for _, top := range reporter.TagTree(topTagNames(p)) {
		top.Walk(func(l *reporter.TagLevel, depth int) {
			name := strings.Repeat("  ", depth) + terminalText(l.Name)
			if i, ok := l.Tag(); ok {
				t := p.Tags[i]
				writeTopLine(w, p, t.LiveBytes, t.LiveBlocks, t.AllocBytes, t.Peak(), name)
				return
			}
			sum := l.Totals(p.Tags)
			writeTopLine(w, p, sum.LiveBytes, sum.LiveBlocks, sum.AllocBytes, "-", name)
		})
	}
	writeTopBudgets(w, p)
}

// writeTopBudgets writes, below the table, a line per tag budget of the
// process as the tree prints it (reporter.Budget.Text: the tag's name made
// safe for the terminal): what is charged of the limit, the policy,
// refusals and crossings, OVER past the limit. Nothing without budgets.
func writeTopBudgets(w io.Writer, p reporter.Process) {
	if len(p.Budgets) == 0 {
		return
	}
	fmt.Fprintln(w)
	for _, b := range p.Budgets {
		fmt.Fprintln(w, b.Text())
	}
}

func topTagNames(p reporter.Process) []string {
	names := make([]string, len(p.Tags))
	for i, t := range p.Tags {
		names[i] = t.Name
	}
	return names
}

func writeTopHeading(w io.Writer, p reporter.Process) {
	fmt.Fprintf(w, "pid %d  %s  live %s in %s blocks%s  (%s)\n", p.PID, terminalText(strings.Join(p.Command, " ")),
		humanize.IBytes(p.Heap.LiveBytes), humanize.Comma(int64(p.Heap.LiveBlocks)), topResident(p.Resident), time.Now().Format("15:04:05"))
	fmt.Fprintf(w, "%12s %7s %12s %12s %20s  %s\n", "LIVE", "%", "BLOCKS", "ALLOCATED", "PEAK", "TAG")
}

func writeTopLine(w io.Writer, p reporter.Process, live, blocks, alloc uint64, peak, name string) {
	share := 0.0
	if p.Heap.LiveBytes > 0 {
		share = 100 * float64(live) / float64(p.Heap.LiveBytes)
	}
	fmt.Fprintf(w, "%12s %6.2f%% %12s %12s %20s  %s\n", humanize.IBytes(live), share, humanize.Comma(int64(min(blocks, math.MaxInt64))),
		humanize.IBytes(alloc), peak, name)
}

// topResident is top's word on the process's resident memory: "" if not
// recorded, "unknown" for a figure that could not be read.
func topResident(r *reporter.Resident) string {
	if r == nil {
		return ""
	}
	fig := func(v *uint64) string {
		if v == nil {
			return "unknown"
		}
		return humanize.IBytes(*v)
	}
	return fmt.Sprintf(", resident %s (peak %s)", fig(r.RSSBytes), fig(r.PeakRSSBytes))
}

// exitStatus maps the child's end to ours: its exit code, or 128+signal as
// a shell reports it.
func exitStatus(ps *os.ProcessState, err error) (int, error) {
	if ps == nil {
		return 1, err
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ps.ExitCode(), nil
}

// preloadEnv returns env with lib put first in LD_PRELOAD (keeping what the
// user already preloads).
func preloadEnv(env []string, lib string) []string {
	out := make([]string, 0, len(env)+1)
	pre := lib
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "LD_PRELOAD="); ok {
			if v != "" {
				pre = lib + ":" + v
			}
			continue
		}
		out = append(out, kv)
	}
	return append(out, "LD_PRELOAD="+pre)
}
