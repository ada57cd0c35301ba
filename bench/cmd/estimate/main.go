// Command estimate measures how accurate `tagalloc run --stacks sampled`
// is: how far the stacks' estimates (each sampled block weighed by the
// inverse of its probability of being sampled) are from the exact books
// (the tags' live and cumulative bytes, which tagalloc always counts
// exactly). Issue 5's targets: the live-heap estimate within 5% of the
// exact total on every workload; per-library totals, for a library
// allocating 1% of the heap or more, within 10%.
//
//	go run ./bench/cmd/estimate [-runs 3] [-stdin FILE] [-rate 512K] -- PROG ARGS...
//	go run ./bench/cmd/estimate -libraries [-runs 5] [-share 0.01] [-stdin FILE] -- PROG ARGS...
//
// The program gets this command's environment (PYTHONMALLOC=malloc, say,
// for Python's objects to go through malloc), and -stdin's file or nothing
// as its standard input; its output is discarded. tagalloc is built from
// ./cmd/tagalloc into a temporary directory unless -tagalloc names a
// binary; -rate sets TAGALLOC_SAMPLE_RATE (default 512 KiB).
//
// # -live (the default): the live heap, while the program runs
//
// The program runs under `tagalloc run -q --serve 127.0.0.1:0 --stacks
// sampled` and /api/report is read every -interval (150ms). In each report,
// every process with a stacks section holding at least -min (4 MiB) live
// is a snapshot: its exact live heap is the sum of tags[].live_bytes and
// its estimate the sum of stacks.records[].live_bytes. Per run, and pooled
// over -runs runs, it prints
//
//   - snapshots: how many were compared (and polls: how many reports were read);
//   - live: the median exact live heap of the snapshots;
//   - median err, mean |err|, worst: of the snapshots' signed relative
//     errors, (estimate - exact) / exact;
//   - summed: the error of the estimates summed over all snapshots against
//     the exact totals summed, which weighs big heaps most;
//   - theory RSE: the relative standard error the sampling predicts for one
//     snapshot, and theory mean |err| (0.8 times that: the mean |error| of
//     normal noise). A block of u bytes is sampled with probability
//     q = 1 - exp(-u/rate) and counted 1/q times, so a live heap of L bytes
//     in blocks much smaller than the rate is estimated with a standard
//     error of sqrt(rate*L), sqrt(rate/L) relative (the "sqrt(rate/live)"
//     column); bigger blocks make it less (the RSE column works it out per
//     stack record from the records' mean block size).
//
// How to read it: a mean |err| close to the theory's is sampling noise, and
// shrinks only with a bigger heap or a smaller -rate; a median or summed
// error far from 0 compared to that noise is a bias. Snapshots of one run
// share their sampled blocks (a block sampled once stays in every later
// snapshot while it lives), so they are far from independent: one run's
// summed error is still mostly one draw of noise. Independent draws are
// the runs: with -runs 2 or more, the runs' summed errors are given as a
// mean and its standard error, and a bias shows as a mean several standard
// errors from 0. The 5% target on a single snapshot can only be met where
// the theory's RSE is well under 5% (at 512 KiB, heaps of 200 MiB and more
// in small blocks); below that it is a target on the bias.
//
// # -libraries: per library, at the end of the run
//
// The program runs once with `--stacks full -o` (every block recorded: its
// stacks.libraries[] are exact) and -runs times (default 5) with `--stacks
// sampled -o`; for the process tagalloc launched, each library's live bytes
// at exit and cumulative bytes (allocated over the run) are compared, for
// the libraries holding at least -share (1%) of the exact run's heap, live
// and cumulative separately. A table per measure gives library, share,
// exact, median estimate, median error, worst error and mean error (with
// its standard error: the runs are independent draws) over the sampled
// runs, and the theory's RSE for one run (from the full run's records),
// after the theory's RSE for the whole heap. Many programs free nearly
// everything before they exit (sqlite3 and python hold tens of KiB then):
// their live comparison is a few samples or none, which that RSE, far
// above 50%, says; their cumulative one is the meaningful one. The exact
// figures come from another run than the estimates, so this is only
// meaningful for a deterministic program (same allocations every run:
// sqlite3 on the same input, Python with the same PYTHONHASHSEED); the
// output says by how much the runs' books differ, which bounds what that
// costs, and checks that the full run's stacks add up to its books (events
// dropped from a full ring would make them inexact).
//
// Exit status: 0 when it measured (whatever the errors), 2 for bad flags,
// 1 when a run failed (tagalloc or the program exited non-zero, or no
// snapshot held -min).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/bench"
	"github.com/tagalloc/tagalloc/internal/size"
	"github.com/tagalloc/tagalloc/reporter"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "estimate: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

// config is what the flags say.
type config struct {
	prog     []string
	stdin    string
	bin      string
	runs     int
	interval time.Duration
	min      uint64
	rate     uint64 // 0: tagalloc's default
	share    float64
	timeout  time.Duration
	stdout   io.Writer
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("estimate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	c := config{stdout: stdout, min: 4 << 20}
	live := fs.Bool("live", true, "compare the live heap's estimate with the books in snapshots while the program runs")
	libs := fs.Bool("libraries", false, "compare per-library totals of sampled runs with a --stacks full run (deterministic programs only)")
	fs.IntVar(&c.runs, "runs", 0, "runs of the program (default 1 with -live, 5 sampled runs with -libraries)")
	fs.DurationVar(&c.interval, "interval", 150*time.Millisecond, "-live: time between two reads of /api/report")
	fs.Var((*sizeFlag)(&c.min), "min", "-live: compare processes holding at least this much live (K, M, G suffixes)")
	fs.Var((*sizeFlag)(&c.rate), "rate", "TAGALLOC_SAMPLE_RATE for the sampled runs, in bytes (K, M, G suffixes) (default: tagalloc's, 512 KiB)")
	fs.Float64Var(&c.share, "share", 0.01, "-libraries: compare libraries holding at least this fraction of the heap")
	fs.StringVar(&c.stdin, "stdin", "", "feed this file to the program's standard input")
	fs.StringVar(&c.bin, "tagalloc", "", "the tagalloc binary (default: go build ./cmd/tagalloc into a temporary directory)")
	fs.DurationVar(&c.timeout, "timeout", 10*time.Minute, "limit for one run of the program")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: estimate [-live | -libraries] [flags] -- PROG [ARGS...]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); errors.Is(err, flag.ErrHelp) {
		return 0, nil
	} else if err != nil {
		return 2, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	c.prog = fs.Args()
	switch {
	case len(c.prog) == 0:
		return 2, errors.New("no program: estimate [flags] -- PROG [ARGS...]")
	case set["live"] && *live && *libs:
		return 2, errors.New("-live or -libraries, not both")
	case !*live && !*libs:
		return 2, errors.New("-live=false: give -libraries")
	case *libs && (set["interval"] || set["min"]):
		return 2, errors.New("-interval and -min go with -live")
	case !*libs && set["share"]:
		return 2, errors.New("-share goes with -libraries")
	case c.runs < 0 || (set["runs"] && c.runs == 0):
		return 2, errors.New("-runs must be 1 or more")
	case c.interval <= 0 || c.timeout <= 0:
		return 2, errors.New("-interval and -timeout must be positive")
	case c.share < 0 || c.share >= 1:
		return 2, errors.New("-share is a fraction: 0 <= share < 1")
	case set["rate"] && c.rate == 0:
		return 2, errors.New("-rate must be 1 byte or more")
	}
	if c.runs == 0 {
		c.runs = 1
		if *libs {
			c.runs = 5
		}
	}
	if c.stdin != "" {
		f, err := os.Open(c.stdin)
		if err != nil {
			return 2, fmt.Errorf("-stdin: %w", err)
		}
		f.Close()
	}
	if c.bin == "" {
		dir, err := os.MkdirTemp("", "estimate-")
		if err != nil {
			return 1, err
		}
		defer os.RemoveAll(dir)
		c.bin = filepath.Join(dir, "tagalloc")
		if err := bench.BuildTagalloc(ctx, c.bin); err != nil {
			return 1, fmt.Errorf("%w (or give -tagalloc)", err)
		}
	} else if _, err := os.Stat(c.bin); err != nil {
		return 2, fmt.Errorf("-tagalloc: %w", err)
	}
	if *libs {
		return c.libraries(ctx)
	}
	return c.live(ctx)
}

// sizeFlag is a byte count with an optional K, M or G suffix (powers of
// 1024, "KiB" and "KB" alike), as TAGALLOC_ options take them
// (internal/size).
type sizeFlag uint64

func (s *sizeFlag) String() string {
	x := uint64(*s)
	for _, u := range []struct {
		suffix string
		shift  uint
	}{{"GiB", 30}, {"MiB", 20}, {"KiB", 10}} {
		if x != 0 && x%(1<<u.shift) == 0 {
			return strconv.FormatUint(x>>u.shift, 10) + u.suffix
		}
	}
	return strconv.FormatUint(x, 10)
}

func (s *sizeFlag) Set(v string) error {
	x, err := size.Parse(v, math.MaxUint64)
	*s = sizeFlag(x)
	return err
}

// lineLog takes a process's standard error: it shows each whole line to
// watch and keeps the last few for an error message.
type lineLog struct {
	mu    sync.Mutex
	watch func(line string)
	part  []byte
	last  []string
}

func (l *lineLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := strings.IndexByte(string(l.part), '\n')
		if i < 0 {
			break
		}
		line := string(l.part[:i])
		l.part = l.part[i+1:]
		if l.watch != nil {
			l.watch(line)
		}
		if l.last = append(l.last, line); len(l.last) > 10 {
			l.last = l.last[1:]
		}
	}
	return len(p), nil
}

// tail is the last lines written, for an error message.
func (l *lineLog) tail() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(append(l.last, string(l.part)), "\n")
}

// launch is one run of tagalloc with the program.
type launch struct {
	cmd   *exec.Cmd
	stdin *os.File
	log   *lineLog
	ctx   context.Context // with the -timeout
	stop  context.CancelFunc
}

// start runs `tagalloc ARGS -- PROG...` with the environment (and
// TAGALLOC_SAMPLE_RATE from -rate), -stdin, and its standard error going
// to watch line by line.
func (c *config) start(ctx context.Context, watch func(string), args ...string) (*launch, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	l := &launch{log: &lineLog{watch: watch}, ctx: ctx, stop: cancel}
	l.cmd = exec.CommandContext(ctx, c.bin, append(append(args, "--"), c.prog...)...)
	l.cmd.Env = os.Environ()
	if c.rate != 0 {
		l.cmd.Env = append(l.cmd.Env, fmt.Sprintf("TAGALLOC_SAMPLE_RATE=%d", c.rate))
	}
	l.cmd.Stdout, l.cmd.Stderr = io.Discard, l.log
	// tagalloc forwards SIGTERM to the program and writes what it has;
	// killed, it would leave the program running.
	l.cmd.Cancel = func() error { return l.cmd.Process.Signal(syscall.SIGTERM) }
	l.cmd.WaitDelay = 30 * time.Second
	if c.stdin != "" {
		f, err := os.Open(c.stdin)
		if err != nil {
			cancel()
			return nil, err
		}
		l.stdin, l.cmd.Stdin = f, f
	}
	if err := l.cmd.Start(); err != nil {
		l.close()
		return nil, fmt.Errorf("starting %s: %w", c.bin, err)
	}
	return l, nil
}

func (l *launch) close() {
	if l.stdin != nil {
		l.stdin.Close()
	}
	l.stop()
}

// wait waits for the run to end; an error carries its last lines of
// standard error.
func (l *launch) wait() error {
	err := l.cmd.Wait()
	timedOut := errors.Is(l.ctx.Err(), context.DeadlineExceeded)
	l.close()
	if err == nil {
		return nil
	}
	if timedOut {
		err = fmt.Errorf("%w (the -timeout)", err)
	}
	return fmt.Errorf("%s: %w\n%s", strings.Join(l.cmd.Args, " "), err, strings.TrimSpace(l.log.tail()))
}

// describe is the program as a shell would have it, with -stdin.
func (c *config) describe() string {
	s := strings.Join(c.prog, " ")
	if c.stdin != "" {
		s += " < " + c.stdin
	}
	return s
}

// pct formats a fraction as a signed percentage, "-" when missing.
func pct(x float64, signed bool) string {
	switch {
	case math.IsNaN(x):
		return "-"
	case signed:
		return fmt.Sprintf("%+.1f%%", 100*x)
	}
	return fmt.Sprintf("%.1f%%", 100*x)
}

// bytesOf formats a byte count.
func bytesOf(x float64) string {
	if math.IsNaN(x) || x < 0 {
		return "-"
	}
	return humanize.IBytes(uint64(x))
}

// liveRun is one -live run: every snapshot, and what the polls saw.
type liveRun struct {
	Snaps   []snapshot
	Polls   int
	Failed  int // polls that got no report (as the program ends, normal)
	LastErr error
	Skipped skipped
	Rate    uint64
}

// liveOnce runs the program once under --serve and polls its reports.
func (c *config) liveOnce(ctx context.Context) (*liveRun, error) {
	addrc := make(chan string, 1)
	l, err := c.start(ctx, func(line string) {
		if a, ok := strings.CutPrefix(line, "tagalloc: serving on http://"); ok {
			select {
			case addrc <- strings.TrimSuffix(strings.TrimSpace(a), "/"):
			default:
			}
		}
	}, "run", "-q", "--serve", "127.0.0.1:0", "--stacks", "sampled")
	if err != nil {
		return nil, err
	}
	done := make(chan error, 1)
	go func() { done <- l.wait() }()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-done:
		if err == nil {
			err = errors.New("tagalloc ended without saying where it served")
		}
		return nil, err
	}
	res := &liveRun{}
	client := &http.Client{Timeout: 30 * time.Second}
	tick := time.NewTimer(c.interval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			return res, err
		case <-tick.C:
		}
		rep, err := fetch(ctx, client, "http://"+addr+"/api/report")
		res.Polls++
		if err != nil {
			res.Failed++
			res.LastErr = err
		} else {
			snaps, sk := snapshots(rep, float64(c.min))
			res.Snaps = append(res.Snaps, snaps...)
			res.Skipped.Small += sk.Small
			res.Skipped.NoStacks += sk.NoStacks
			res.Skipped.Torn += sk.Torn
			for _, p := range rep.Processes {
				if p.Stacks != nil && res.Rate == 0 {
					res.Rate = p.Stacks.SampleRate
				}
			}
		}
		tick.Reset(c.interval)
	}
}

// fetch reads a report from url.
func fetch(ctx context.Context, client *http.Client, url string) (*reporter.Report, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return reporter.Read(resp.Body)
}

// live is -live: the runs, a line each, and the pooled figures.
func (c *config) live(ctx context.Context) (int, error) {
	w := c.stdout
	fmt.Fprintf(w, "estimate -live: %s\n", c.describe())
	var all []snapshot
	var summed []float64
	t := &bench.Table{Header: []string{"run", "polls", "snapshots", "live (median)", "median err", "mean |err|", "worst (its live)", "summed",
		"theory RSE", "sqrt(rate/live)", "theory mean |err|"}}
	row := func(name, polls string, s summary) []string {
		return []string{name, polls, strconv.Itoa(s.N), bytesOf(s.LiveMedian), pct(s.Median, true), pct(s.MeanAbs, false),
			pct(s.Worst, true) + " at " + bytesOf(s.WorstLive), pct(s.Summed, true), pct(s.RSE, false), pct(s.Simple, false), pct(meanAbsNormal*s.RSE, false)}
	}
	var rate uint64
	for i := range c.runs {
		res, err := c.liveOnce(ctx)
		if err != nil {
			return 1, fmt.Errorf("run %d: %w", i+1, err)
		}
		if res.Rate != 0 {
			rate = res.Rate
		}
		s := summarize(res.Snaps)
		fmt.Fprintf(w, "run %d: %d polls (%d failed), %d snapshots; passed over: %d under -min, %d without stacks, %d torn\n",
			i+1, res.Polls, res.Failed, s.N, res.Skipped.Small, res.Skipped.NoStacks, res.Skipped.Torn)
		if res.Failed == res.Polls && res.LastErr != nil {
			fmt.Fprintf(w, "  last poll: %v\n", res.LastErr)
		}
		t.Rows = append(t.Rows, row(strconv.Itoa(i+1), strconv.Itoa(res.Polls), s))
		all = append(all, res.Snaps...)
		if s.N > 0 {
			summed = append(summed, s.Summed)
		}
	}
	if len(all) == 0 {
		return 1, fmt.Errorf("no snapshot held %s live or more: lower -min or -interval", bytesOf(float64(c.min)))
	}
	if c.runs > 1 {
		t.Footer = [][]string{row("all", "", summarize(all))}
	}
	fmt.Fprintf(w, "\nsampled at %s (the report's sample_rate), /api/report every %v, processes holding %s or more live:\n",
		bytesOf(float64(rate)), c.interval, bytesOf(float64(c.min)))
	if err := t.Render(w); err != nil {
		return 1, err
	}
	fmt.Fprintf(w, "errors: (estimate - exact) / exact of each snapshot's live heap; summed: of the sums over all snapshots.\n")
	fmt.Fprintf(w, "theory: the standard error sampling predicts for one snapshot; a mean |err| near theory mean |err| is noise.\n")
	fmt.Fprintf(w, "A run's snapshots share their sampled blocks, so they are not independent draws: the runs are.\n")
	if len(summed) > 1 {
		m, se := meanSE(summed)
		fmt.Fprintf(w, "runs' summed errors: mean %s, standard error %s over %d runs (a bias shows as a mean beyond 2-3 standard errors)\n",
			pct(m, true), pct(se, false), len(summed))
	}
	return 0, nil
}

// fileRun runs the program once with --stacks mode and reads its report.
func (c *config) fileRun(ctx context.Context, mode, path string) (*reporter.Report, error) {
	l, err := c.start(ctx, nil, "run", "-q", "--stacks", mode, "-o", path)
	if err != nil {
		return nil, err
	}
	if err := l.wait(); err != nil {
		return nil, err
	}
	return reporter.ReadFile(path)
}

// libraries is -libraries: one exact run, -runs sampled runs, a table per
// measure.
func (c *config) libraries(ctx context.Context) (int, error) {
	w := c.stdout
	dir, err := os.MkdirTemp("", "estimate-reports-")
	if err != nil {
		return 1, err
	}
	defer os.RemoveAll(dir)
	fmt.Fprintf(w, "estimate -libraries: %s\n", c.describe())
	fmt.Fprintf(w, "1 run with --stacks full (exact), %d with --stacks sampled; meaningful only if the program is deterministic.\n", c.runs)
	rep, err := c.fileRun(ctx, "full", filepath.Join(dir, "full.json"))
	if err != nil {
		return 1, fmt.Errorf("the full run: %w", err)
	}
	exact := launched(rep)
	if exact == nil || exact.Stacks == nil {
		return 1, errors.New("the full run's report has no stacks for the launched process")
	}
	var sampled []*reporter.Process
	var rate uint64
	for i := range c.runs {
		rep, err := c.fileRun(ctx, "sampled", filepath.Join(dir, fmt.Sprintf("sampled-%d.json", i+1)))
		if err != nil {
			return 1, fmt.Errorf("sampled run %d: %w", i+1, err)
		}
		p := launched(rep)
		if p == nil || p.Stacks == nil {
			return 1, fmt.Errorf("sampled run %d: no stacks for the launched process", i+1)
		}
		rate = p.Stacks.SampleRate
		sampled = append(sampled, p)
	}
	fmt.Fprintf(w, "sampled at %s; the full run dropped %d events\n", bytesOf(float64(rate)), exact.Stacks.Dropped)
	if exact.Stacks.Dropped > 0 {
		fmt.Fprintf(w, "WARNING: the full run lost events to a full ring: its library figures are not exact\n")
	}
	for _, m := range measures {
		books := float64(m.books(exact.Heap))
		spread := 0.0
		for _, p := range sampled {
			if d := math.Abs(float64(m.books(p.Heap))/books - 1); books > 0 && d > spread {
				spread = d
			}
		}
		fmt.Fprintf(w, "\n%s: books %s in the full run; its stacks' libraries add up to %s of that; the sampled runs' books differ from it by up to %s\n",
			m.Name, bytesOf(books), pct(stacksTotal(exact, m)/books, false), pct(spread, false))
		rows, _, rse := compareLibraries(exact, sampled, m, c.share, float64(rate))
		fmt.Fprintf(w, "theory RSE of the whole's estimate: %s", pct(rse, false))
		if rse > 0.5 {
			fmt.Fprintf(w, " (too little for sampling at this rate: the comparison below says nothing)")
		}
		fmt.Fprintln(w)
		if len(rows) == 0 {
			fmt.Fprintf(w, "no library holds %s of it\n", pct(c.share, false))
			continue
		}
		t := &bench.Table{Header: []string{"library", "share", "exact", "median estimate", "median err", "worst err", "mean err ± SE", "theory RSE"}}
		within := 0
		for _, r := range rows {
			mean, se := meanSE(r.Errs())
			if math.Abs(r.Worst()) <= 0.10 {
				within++
			}
			t.Rows = append(t.Rows, []string{r.Name, pct(r.Share, false), bytesOf(r.Exact), bytesOf(bench.Median(r.Estimates)),
				pct(bench.Median(r.Errs()), true), pct(r.Worst(), true), pct(mean, true) + " ± " + pct(se, false), pct(r.RSE, false)})
		}
		if err := t.Render(w); err != nil {
			return 1, err
		}
		fmt.Fprintf(w, "%d of %d libraries within 10%% in all %d sampled runs (issue 5's target)\n", within, len(rows), c.runs)
	}
	return 0, nil
}
