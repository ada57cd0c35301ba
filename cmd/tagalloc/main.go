package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"
	"golang.org/x/sys/unix"

	"github.com/tagalloc/tagalloc/cgo"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

const usage = `usage:
  tagalloc lib                           print the path of the preload library (building it if needed)
  tagalloc run [-o FILE.json] [--stacks off|sampled|full] [--history-limit SIZE] [--check] [--] PROG [ARGS...]
                                         run PROG with the library preloaded (children too), print
                                         its per-tag memory tree when it ends, exit with its status;
                                         --check: the checking build (overruns, writes after free)
  tagalloc report FILE.json [--format tree|json|dmd|pprof|about-memory] [-o OUT]
                                         re-render a saved report (about-memory, or firefox: the
                                         memory-report JSON Firefox's about:memory loads; gzipped
                                         if OUT ends in .gz: -o memory-report.json.gz)
  tagalloc diff A.json B.json [--format tree|json] [-o OUT]
                                         what changed from A to B (B - A), per process and tag,
                                         as about:memory's "Load and diff"
  tagalloc serve [-addr 127.0.0.1:6060] PID
                                         a running process's tags over time in a browser, with
                                         /metrics (Prometheus); tagalloc run --serve ADDR does the
                                         same for PROG and its children, with /debug/pprof/heap
  tagalloc snapshot PID [-o FILE.json]   the report of a running process started by tagalloc run
  tagalloc top [-n N] [-interval D] PID  its tags, refreshed (until interrupted, or N times)
`

func main() {
	stopProfile := cpuProfile(os.Getenv("TAGALLOC_CPUPROFILE"))
	code, err := run(os.Args[1:], os.Stdout, os.Stderr)
	stopProfile()
	if err != nil {
		fmt.Fprintf(os.Stderr, "tagalloc: %v\n", err)
		if code == 0 {
			code = 2
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

func run(args []string, stdout, stderr io.Writer) (int, error) {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2, errors.New("no command given")
	}
	switch args[0] {
	case "lib":
		if len(args) != 1 {
			return 2, fmt.Errorf("lib takes no arguments (got %q)", args[1:])
		}
		p, err := cgo.Library()
		if err != nil {
			return 1, err
		}
		fmt.Fprintln(stdout, p)
		return 0, nil
	case "run":
		return runCmd(args[1:], stderr)
	case "report":
		return reportCmd(args[1:], stdout, stderr)
	case "snapshot":
		return snapshotCmd(args[1:], stdout, stderr)
	case "top":
		return topCmd(args[1:], stdout, stderr)
	case "diff":
		return diffCmd(args[1:], stdout, stderr)
	case "serve":
		return serveCmd(args[1:], stdout, stderr)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0, nil
	default:
		fmt.Fprint(stderr, usage)
		return 2, fmt.Errorf("unknown command %q", args[0])
	}
}

func runCmd(args []string, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the JSON report to `FILE`")
	serveAddr := fs.String("serve", "", "serve a live view on `ADDRESS` (e.g. 127.0.0.1:6060) while PROG runs")
	stacks := fs.String("stacks", "off", "who allocated it: off, sampled (by bytes, see TAGALLOC_SAMPLE_RATE) or full (every block)")
	historyLimit := fs.String("history-limit", "64M", "with --stacks: keep the newest events in at most `SIZE` bytes (K, M, G suffixes; 0: none); the books stay exact")
	quiet := fs.Bool("q", false, "do not print the tree")
	check := fs.Bool("check", false, "preload the checking build: overruns, writes after free and double frees abort with a message (TAGALLOC_CHECK selects the checks; slower)")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if *stacks != "off" && *stacks != "sampled" && *stacks != "full" {
		return 2, fmt.Errorf("run: --stacks %s: off, sampled or full", *stacks)
	}
	histLimit, err := parseSize(*historyLimit)
	if err != nil {
		return 2, fmt.Errorf("run: --history-limit %s: %w", *historyLimit, err)
	}
	prog := fs.Args()
	if len(prog) == 0 {
		fmt.Fprint(stderr, usage)
		return 2, errors.New("run: no program given (tagalloc run -- PROG [ARGS...])")
	}
	build := cgo.Library
	switch {
	case *stacks != "off" && *check:
		build = cgo.CheckStacksLibrary
	case *stacks != "off":
		build = cgo.StacksLibrary
	case *check:
		build = cgo.CheckLibrary
	}
	lib, err := build()
	if err != nil {
		return 1, err
	}
	path, err := exec.LookPath(prog[0])
	if err != nil {
		return 127, fmt.Errorf("run: %w", err)
	}
	books, err := os.MkdirTemp("", "tagalloc-run-") // 0700: the books are the user's alone
	if err != nil {
		return 1, fmt.Errorf("run: %w", err)
	}
	defer os.RemoveAll(books)
	cmd := exec.Command(path, prog[1:]...)
	cmd.Args[0] = prog[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(preloadEnv(os.Environ(), lib), "TAGALLOC_DIR="+books, "TAGALLOC_STACKS="+*stacks)

	// The child shares our terminal's process group, so ^C reaches it
	// directly; we only forward what is sent to us alone.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("run: %w", err)
	}
	var dr *drainer
	if *stacks != "off" {
		dr = startDrainer(books, 20*time.Millisecond, histLimit, newSymbolizer())
	}
	if *serveAddr != "" {
		stopServe := make(chan struct{})
		defer close(stopServe)
		srv := &server{snap: func() (*reporter.Report, error) {
			if dr == nil {
				return collect(books, nil, nil)
			}
			var rep *reporter.Report
			var err error
			dr.with(func(profiles map[int]*tagtable.Profile) { rep, err = collect(books, nil, profiles) })
			return rep, err
		}}
		ready := make(chan error, 1)
		go func() {
			err := srv.serve(*serveAddr, time.Second, stopServe, func(a net.Addr) {
				fmt.Fprintf(stderr, "tagalloc: serving on http://%s/\n", a)
				ready <- nil
			})
			if err != nil {
				ready <- err
			}
		}()
		if err := <-ready; err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			return 1, fmt.Errorf("run: --serve: %w", err)
		}
	}
	done := make(chan struct{})
	go func() {
		for {
			select {
			case s := <-sigs:
				_ = cmd.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = cmd.Wait()
	close(done)
	code, werr := exitStatus(cmd.ProcessState, err)
	var rep *reporter.Report
	var rerr error
	if dr != nil {
		// the books are read while the rings are drained: the program
		// has ended, and the launcher has the cores to itself (larson's
		// report came 1 ms sooner, 11.5 -> 10.5 ms after it ended, 9 runs)
		type read struct {
			snaps []*tagtable.Snapshot
			err   error
		}
		c := make(chan read, 1)
		go func() {
			snaps, err := tagtable.ReadDir(books)
			c <- read{snaps, err}
		}()
		profiles, errs := dr.finish()
		for _, e := range errs {
			fmt.Fprintf(stderr, "tagalloc: stacks: %v\n", e)
		}
		r := <-c
		rep, rerr = report(r.snaps, r.err, cmd.ProcessState, profiles)
	} else {
		rep, rerr = collect(books, cmd.ProcessState, nil)
	}
	if rerr != nil {
		return code, fmt.Errorf("run: reading the books: %w", rerr)
	}
	if !*quiet {
		fmt.Fprintln(stderr)
		_ = rep.WriteSummary(stderr)
		if dr != nil && len(rep.Processes) > 0 && rep.Processes[0].Stacks == nil {
			// it made no ring: a process makes one at its first sample
			fmt.Fprintf(stderr, "\nWho allocated it (--stacks %s): no block was sampled\n", *stacks)
		}
	}
	if *out != "" {
		if err := reporter.WriteFileAtomic(*out, rep.WriteJSON); err != nil {
			return code, fmt.Errorf("run: writing %s: %w", *out, err)
		}
	}
	if dr != nil {
		flushSymbols() // what this run named, for the next (symbolizer's disk cache)
	}
	return code, werr
}

// collect reads every region in the books directory into a report, with
// the stacks of the processes that have a profile; the launched process
// gets its exit status.
func collect(dir string, ps *os.ProcessState, profiles map[int]*tagtable.Profile) (*reporter.Report, error) {
	snaps, err := tagtable.ReadDir(dir)
	return report(snaps, err, ps, profiles)
}

// report makes the report of the regions read (err: what could not be
// read; the others are reported all the same), as collect says.
func report(snaps []*tagtable.Snapshot, err error, ps *os.ProcessState, profiles map[int]*tagtable.Profile) (*reporter.Report, error) {
	rep := &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{}}
	sym := newSymbolizer()
	for _, s := range snaps {
		p := reporter.FromSnapshot(s)
		if prof := profiles[s.PID]; prof != nil {
			p.Stacks = reporter.FromProfile(prof, s.TagNames, sym)
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

func reportCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("report", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "tree", "tree, json, dmd (stack records, with --stacks), dark-matter (blocks by what memory reporters said, with --stacks), pprof (with --stacks) or about-memory (Firefox's; also firefox)")
	out := fs.String("o", "", "write to `FILE` instead of standard output")
	file, rest := splitFirst(args)
	if err := fs.Parse(rest); err != nil {
		return 2, err
	}
	if file == "" && fs.NArg() == 1 {
		file = fs.Arg(0)
	} else if fs.NArg() != 0 || file == "" {
		return 2, errors.New("report: give one report file (tagalloc report FILE.json [--format tree|json|dmd|dark-matter|pprof|about-memory])")
	}
	rep, err := reporter.ReadFile(file)
	if err != nil {
		return 1, err
	}
	return render(rep, *format, *out, stdout)
}

func render(rep *reporter.Report, format, out string, stdout io.Writer) (int, error) {
	var write func(io.Writer) error
	switch format {
	case "tree":
		write = rep.WriteTree
	case "json":
		write = rep.WriteJSON
	case "dmd":
		write = rep.WriteDMD
	case "dark-matter", "darkmatter":
		write = rep.WriteDarkMatter
	case "pprof":
		write = func(w io.Writer) error { return rep.WritePprof(w, 0) }
	case "about-memory", "firefox":
		write = rep.WriteMemoryReport
		if strings.HasSuffix(out, ".gz") { // as about:memory decides
			write = rep.WriteMemoryReportGzip
		}
	default:
		return 2, fmt.Errorf("unknown format %q (tree, json, dmd, dark-matter, pprof or about-memory)", format)
	}
	if out == "" {
		return 0, write(stdout)
	}
	return 0, reporter.WriteFileAtomic(out, write)
}

// splitFirst takes a leading non-flag argument (tagalloc report FILE -o X).
func splitFirst(args []string) (string, []string) {
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return args[0], args[1:]
	}
	return "", args
}

func pidArg(args []string) (int, []string, error) {
	first, rest := splitFirst(args)
	if first == "" {
		return 0, nil, errors.New("give a process id")
	}
	pid, err := strconv.Atoi(first)
	if err != nil || pid <= 0 {
		return 0, nil, fmt.Errorf("%q is not a process id", first)
	}
	return pid, rest, nil
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
	return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}, nil
}

func snapshotCmd(args []string, stdout, stderr io.Writer) (int, error) {
	pid, rest, err := pidArg(args)
	if err != nil {
		return 2, fmt.Errorf("snapshot: %w (tagalloc snapshot PID -o FILE.json)", err)
	}
	fs := flag.NewFlagSet("snapshot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	out := fs.String("o", "", "write the JSON report to `FILE` (default: standard output)")
	format := fs.String("format", "json", "json or tree")
	if err := fs.Parse(rest); err != nil {
		return 2, err
	}
	rep, err := snapshot(pid, "snapshot")
	if err != nil {
		return 1, fmt.Errorf("snapshot: %w", err)
	}
	return render(rep, *format, *out, stdout)
}

func topCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("top", flag.ContinueOnError)
	fs.SetOutput(stderr)
	n := fs.Int("n", 0, "refresh this many times, then stop (0: until interrupted)")
	interval := fs.Duration("interval", time.Second, "time between refreshes")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	pid, _, err := pidArg(fs.Args())
	if err != nil {
		return 2, fmt.Errorf("top: %w (tagalloc top PID)", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	defer signal.Stop(sigs)
	for i := 0; *n == 0 || i < *n; i++ {
		rep, err := snapshot(pid, "top")
		if err != nil {
			return 1, fmt.Errorf("top: %w", err)
		}
		if *n == 0 {
			fmt.Fprint(stdout, "\x1b[H\x1b[2J") // clear the screen between refreshes
		}
		writeTop(stdout, rep.Processes[0])
		if *n != 0 && i == *n-1 {
			break
		}
		select {
		case <-sigs:
			return 0, nil
		case <-time.After(*interval):
		}
	}
	return 0, nil
}

func writeTop(w io.Writer, p reporter.Process) {
	fmt.Fprintf(w, "pid %d  %s  live %s in %s blocks  (%s)\n", p.PID, strings.Join(p.Command, " "),
		humanize.IBytes(p.Heap.LiveBytes), humanize.Comma(int64(p.Heap.LiveBlocks)), time.Now().Format("15:04:05"))
	fmt.Fprintf(w, "%12s %7s %12s %12s %12s  %s\n", "LIVE", "%", "BLOCKS", "ALLOCATED", "PEAK", "TAG")
	for _, t := range p.Tags {
		share := 0.0
		if p.Heap.LiveBytes > 0 {
			share = 100 * float64(t.LiveBytes) / float64(p.Heap.LiveBytes)
		}
		fmt.Fprintf(w, "%12s %6.2f%% %12s %12s %12s  %s\n", humanize.IBytes(t.LiveBytes), share, humanize.Comma(int64(t.LiveBlocks)),
			humanize.IBytes(t.AllocBytes), humanize.IBytes(t.PeakLiveBytes), t.Name)
	}
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
