// tagalloc run: PROG under the library, its report when it ends.

package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/cgo"
	"github.com/tagalloc/tagalloc/drain"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/symbolizer"
	"github.com/tagalloc/tagalloc/tagtable"
)

// runOptions are run's flags and PROG with its arguments.
type runOptions struct {
	out, serve, stacks string
	historyLimit       int
	quiet, check       bool
	prog               []string
}

func parseRun(args []string, stdout io.Writer) (runOptions, error) {
	var o runOptions
	fs := newFlags("run")
	fs.StringVar(&o.out, "o", "", "write the JSON report to `FILE` (- for standard output; default: tagalloc.PROG.PID.json in the current directory, never over an existing file)")
	fs.StringVar(&o.serve, "serve", "", "serve a live view (as tagalloc serve) on `ADDRESS` (e.g. 127.0.0.1:6060) while PROG runs")
	fs.StringVar(&o.stacks, "stacks", "sampled", "record who allocated it, by `MODE`: off, sampled (by bytes, see TAGALLOC_SAMPLE_RATE) or full (every block)")
	historyLimit := fs.String("history-limit", "64M", "with stacks: keep the newest events in at most `SIZE` bytes (K, M, G suffixes; 0: none); the books stay exact")
	fs.BoolVar(&o.quiet, "q", false, "do not print the tree (the line naming the report stays, unless -o names it)")
	fs.BoolVar(&o.check, "check", false, "preload the checking build: overruns, writes after free and double frees abort with a message (TAGALLOC_CHECK selects the checks; slower)")
	pos, err := parse(fs, args, stdout)
	if err != nil {
		return o, err
	}
	if o.stacks != "off" && o.stacks != "sampled" && o.stacks != "full" {
		return o, usagef("run", "--stacks %q: off, sampled or full", o.stacks)
	}
	if o.historyLimit, err = parseSize(*historyLimit); err != nil {
		return o, usagef("run", "--history-limit %s: %v", *historyLimit, err)
	}
	if len(pos) == 0 {
		return o, usagef("run", "no program given (tagalloc run [FLAGS] -- PROG [ARGS...])")
	}
	o.prog = pos
	return o, nil
}

// library builds (or finds) the variant of the library o asks for.
func (o runOptions) library() (string, error) {
	switch {
	case o.stacks != "off" && o.check:
		return cgo.CheckStacksLibrary()
	case o.stacks != "off":
		return cgo.StacksLibrary()
	case o.check:
		return cgo.CheckLibrary()
	}
	return cgo.Library()
}

// runCmd runs PROG under the library and reports its books; it exits with
// PROG's status (127: not found, 126: could not start).
func runCmd(args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseRun(args, stdout)
	if err != nil {
		return usageExit(err)
	}
	lib, err := o.library()
	if err != nil {
		return exitFailure, err
	}
	path, err := exec.LookPath(o.prog[0])
	if err != nil {
		if errors.Is(err, fs.ErrPermission) { // there, but not executable: 126, as a shell says
			return 126, fmt.Errorf("run: %w", err)
		}
		return 127, fmt.Errorf("run: %w", err)
	}
	dir, err := newRunDir(lib) // the library every user can load, and the books directory (rundir.go)
	if err != nil {
		return exitFailure, fmt.Errorf("run: %w", err)
	}
	defer dir.remove()
	cmd := exec.Command(path, o.prog[1:]...)
	cmd.Args[0] = o.prog[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = append(preloadEnv(os.Environ(), dir.lib), "TAGALLOC_DIR="+dir.books, "TAGALLOC_STACKS="+o.stacks)
	return supervise(cmd, o, dir.books, stdout, stderr)
}

// sweepEvery is how often a run reads the books of the processes that
// have ended and removes their files (books.Kept).
const sweepEvery = time.Second

// supervise starts cmd, serves while it runs (--serve), waits for it
// (forwarding the signals sent to tagalloc alone) and reports its books.
func supervise(cmd *exec.Cmd, o runOptions, books string, stdout, stderr io.Writer) (int, error) {
	// The child shares our terminal's process group, so ^C reaches it
	// directly; we only forward what is sent to us alone.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("run: %w", err)
	}
	res := startResidentPoller(books)
	defer res.finish()
	watch := startProcWatch(cmd.Process.Pid, books)
	// The books of processes that end are read and their files removed
	// while the run goes on (books.Kept): the directory holds the running
	// processes' only, in memory when it is on a memory filesystem.
	kept := tagtable.NewKept(books)
	stopSweeps := kept.Every(sweepEvery)
	var dr *drain.Drainer
	if o.stacks != "off" {
		dr = drain.Start(books, 20*time.Millisecond, o.historyLimit, newSymbolizer())
	}
	if o.serve != "" {
		stop, err := serveRun(o.serve, kept, dr, res, stderr)
		if err != nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			watch.stop()
			stopSweeps()
			return exitFailure, fmt.Errorf("run: --serve: %w", err)
		}
		defer close(stop)
	}
	code, werr := waitForwarding(cmd, sigs)
	stopSweeps()
	res.exited(cmd.Process.Pid, time.Now())
	res.finish()
	seen := watch.stop()
	prog := newProgress(stderr, isTerminal(stderr))
	defer prog.end()
	rep, err := finalReport(kept, cmd.ProcessState, dr, res.resident, stderr, prog)
	prog.clear()
	if err != nil && len(rep.Processes) == 0 {
		return code, fmt.Errorf("run: reading the books: %s", joinedText(err))
	}
	if dr != nil {
		// What this run named, for the next (the symbolizer's disk cache),
		// written while the report is: every frame is named by now.
		flushed := make(chan struct{})
		go func() {
			defer close(flushed)
			flushSymbols()
		}()
		defer func() { <-flushed }() // not cut off by the exit
	}
	rep.WithoutBooks = withoutBooks(seen, rep)
	if !o.quiet {
		printSummary(stderr, rep, dr != nil, o.stacks)
	}
	// One process's books that cannot be read (wrecked by the program)
	// cost the report that process, not the others': named after the
	// tree, by the report's line. What the region held is hostile:
	// cleaned for the terminal, as every error is.
	for _, e := range unjoin(err) {
		fmt.Fprintf(stderr, "tagalloc: run: left out of the report: %s\n", terminalText(e.Error()))
	}
	prog.step("writing the report", nil, "")
	saved, err := saveReport(o, cmd.Process.Pid, rep, stdout)
	prog.end()
	if err != nil {
		return code, fmt.Errorf("run: %w", err)
	}
	// the last line: where the report is, unless -q -o FILE (the user
	// named it and asked for quiet) or -o - (it went to standard output)
	if saved != "" && (!o.quiet || o.out == "") {
		fmt.Fprintln(stderr, savedLine(saved, hasStacks(rep)))
	}
	return code, werr
}

// unjoin lists the errors errors.Join joined in err (err itself if it
// joins none; nothing if nil).
func unjoin(err error) []error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		return j.Unwrap()
	}
	return []error{err}
}

// joinedText is err's message with the errors errors.Join joined in it
// separated by "; " (its newlines would show as "?" on the terminal).
func joinedText(err error) string {
	var parts []string
	for _, e := range unjoin(err) {
		parts = append(parts, e.Error())
	}
	return strings.Join(parts, "; ")
}

// saveReport writes rep where o says: -o - to stdout, -o FILE to FILE,
// and by default to a new file in the current directory named after
// PROG and pid (defaultReportName). It returns the path written ("" for
// standard output).
func saveReport(o runOptions, pid int, rep *reporter.Report, stdout io.Writer) (string, error) {
	switch o.out {
	case "-":
		return "", writeOut(o.out, stdout, rep.WriteJSON)
	case "":
		path, err := saveNew(".", func(n int) string { return defaultReportName(o.prog[0], pid, n) }, rep.WriteJSON)
		if err != nil {
			return "", fmt.Errorf("saving the report in the current directory (-o FILE writes it elsewhere): %w", err)
		}
		return path, nil
	}
	return o.out, writeOut(o.out, stdout, rep.WriteJSON)
}

// hasStacks says whether a process of rep has a stacks section.
func hasStacks(rep *reporter.Report) bool {
	for _, p := range rep.Processes {
		if p.Stacks != nil {
			return true
		}
	}
	return false
}

// serveRun serves the live view of the books (and the drainer's stacks,
// and the processes' resident memory) on addr until stop is closed.
func serveRun(addr string, kept *tagtable.Kept, dr *drain.Drainer, res *residentPoller, stderr io.Writer) (stop chan struct{}, err error) {
	stop = make(chan struct{})
	srv := &server{snap: func() (*reporter.Report, error) {
		if dr == nil {
			return collect(kept, nil, nil, res.resident)
		}
		var rep *reporter.Report
		var err error
		dr.With(func(profiles map[int]*tagtable.Profile) { rep, err = collect(kept, nil, profiles, res.resident) })
		return rep, err
	}}
	ready := make(chan error, 1)
	go func() {
		err := srv.serve(addr, time.Second, stop, func(a net.Addr) {
			fmt.Fprintf(stderr, "tagalloc: serving on http://%s/\n", a)
			ready <- nil
		})
		if err != nil {
			ready <- err
		}
	}()
	if err := <-ready; err != nil {
		close(stop)
		return nil, err
	}
	return stop, nil
}

// waitForwarding waits for cmd, passing it the signals of sigs, and
// returns its exit status as ours.
func waitForwarding(cmd *exec.Cmd, sigs <-chan os.Signal) (int, error) {
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
	err := cmd.Wait()
	close(done)
	return exitStatus(cmd.ProcessState, err)
}

// finalReport reads the books of the ended run with the drainer's stacks
// and the processes' resident memory (res): the books are read while the
// rings are drained (the program has ended, and tagalloc has the cores to
// itself). prog shows how far it got.
func finalReport(kept *tagtable.Kept, ps *os.ProcessState, dr *drain.Drainer, res residentOf, stderr io.Writer, prog *progress) (*reporter.Report, error) {
	if dr == nil {
		prog.step("reading the books", nil, "")
		return collect(kept, ps, nil, res)
	}
	type read struct {
		snaps []*tagtable.Snapshot
		err   error
	}
	c := make(chan read, 1)
	go func() {
		snaps, err := kept.ReadAll()
		c <- read{snaps, err}
	}()
	prog.step("draining the stacks", nil, "")
	profiles, errs := dr.Finish()
	prog.clear()
	for _, e := range errs {
		fmt.Fprintf(stderr, "tagalloc: stacks: %v\n", e)
	}
	// The stacks' return addresses are named while the books are read
	// (they need nothing of them), each (module, address) once.
	var named atomic.Int64
	prog.step("symbolizing", &named, "addresses")
	sym := nameAll(profiles, newSymbolizer(), &named)
	r := <-c
	return reportWith(r.snaps, r.err, ps, profiles, sym, res)
}

// nameAll names every return address of the profiles' stacks with sym,
// on all CPUs, counting them in named, and returns sym answering from
// what it found (and asking sym for anything else).
func nameAll(profiles map[int]*tagtable.Profile, sym reporter.Symbolize, named *atomic.Int64) reporter.Symbolize {
	type key struct {
		path, buildID string
		bias, pc      uint64 // what a frame depends on, with the module's name (path)
	}
	type job struct {
		k key
		m *tagtable.Module
	}
	var jobs []job
	index := map[key]int{}
	for _, p := range profiles {
		for _, st := range p.Stacks {
			for _, pc := range st {
				m, ok := p.ModuleOf(pc)
				if !ok {
					continue
				}
				k := key{m.Path, m.BuildID, m.Bias, pc}
				if _, ok := index[k]; !ok {
					index[k] = len(jobs)
					jobs = append(jobs, job{k, m})
				}
			}
		}
	}
	out := make([][]symbolizer.Frame, len(jobs))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(jobs)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(jobs); i = int(next.Add(1) - 1) {
				out[i] = sym(jobs[i].m, jobs[i].k.pc)
				named.Add(1)
			}
		})
	}
	wg.Wait()
	return func(m *tagtable.Module, pc uint64) []symbolizer.Frame {
		if i, ok := index[key{m.Path, m.BuildID, m.Bias, pc}]; ok {
			return out[i] // the reporter only reads them
		}
		return sym(m, pc)
	}
}

// printSummary prints the run's tree, saying so when --stacks sampled no
// block at all.
func printSummary(w io.Writer, rep *reporter.Report, stacksOn bool, mode string) {
	fmt.Fprintln(w)
	_ = rep.WriteSummary(w)
	if stacksOn && len(rep.Processes) > 0 && rep.Processes[0].Stacks == nil {
		// it made no ring: a process makes one at its first sample
		fmt.Fprintf(w, "\nWho allocated it (--stacks %s): no block was sampled\n", mode)
	}
	rep.WriteWithoutBooks(w)
}
