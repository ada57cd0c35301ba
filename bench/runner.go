// Runner: runs every workload under every allocator, interleaved, and
// measures each run (wall time, peak RSS from wait4's rusage, the output).

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Sample is one measured run of one workload under one allocator.
type Sample struct {
	Seconds float64            `json:"seconds"`      // wall time, or the workload's TimeMetric
	MaxRSS  int64              `json:"max_rss"`      // peak RSS in bytes (rusage ru_maxrss)
	Faults  int64              `json:"minor_faults"` // minor page faults (rusage ru_minflt)
	SysSecs float64            `json:"sys_s"`        // system time (rusage ru_stime): faults, purges, mappings
	Metrics map[string]float64 `json:"metrics,omitempty"`
	Output  string             `json:"-"` // the result lines, compared with glibc's
}

// Cell holds the runs of one workload under one allocator.
type Cell struct {
	Allocator string   `json:"allocator"`
	Samples   []Sample `json:"samples"`
	Err       string   `json:"error,omitempty"` // the first failure; later runs are skipped
}

// WorkloadResult holds one workload's cells, in allocator order.
type WorkloadResult struct {
	Name       string  `json:"name"`
	Doc        string  `json:"doc"`
	Load       float64 `json:"load,omitempty"` // 1-minute load average when it started
	TimeMetric string  `json:"time_metric,omitempty"`
	TimeNote   string  `json:"time_note,omitempty"`
	Skipped    string  `json:"skipped,omitempty"` // why it did not run at all
	Cells      []*Cell `json:"cells,omitempty"`
}

// Result is everything a Run measured.
type Result struct {
	Allocators []string          `json:"allocators"`
	Runs       int               `json:"runs"`
	Quick      bool              `json:"quick"`
	Notes      []string          `json:"notes,omitempty"`
	Workloads  []*WorkloadResult `json:"workloads"`
}

// Config says what Run measures.
type Config struct {
	Workloads  []Workload
	Allocators []Allocator
	Built      *Built
	Runs       int           // measured runs per allocator (default 5)
	Quick      bool          // use each workload's QuickArgs
	Timeout    time.Duration // per run (default 10 minutes)
	Progress   io.Writer     // progress lines; nil for none
	Verbose    bool          // a progress line per run, not per workload
}

// Run measures cfg.Workloads. For each workload it first runs glibc once,
// unmeasured, as a warm-up and to get the reference output; then it makes
// cfg.Runs rounds, each running every allocator once in the order Schedule
// gives. A failed run (non-zero exit, timeout, output differing from
// glibc's) marks that workload × allocator failed, skips its remaining runs,
// and is returned in the joined error; the other cells still run.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if cfg.Runs <= 0 {
		cfg.Runs = 5
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	res := &Result{Runs: cfg.Runs, Quick: cfg.Quick}
	for _, a := range cfg.Allocators {
		res.Allocators = append(res.Allocators, a.Name)
	}
	var errs []error
	for _, w := range cfg.Workloads {
		wr, err := runWorkload(ctx, cfg, w)
		res.Workloads = append(res.Workloads, wr)
		if err != nil {
			errs = append(errs, err)
		}
		if ctx.Err() != nil {
			break
		}
	}
	return res, errors.Join(errs...)
}

func runWorkload(ctx context.Context, cfg Config, w Workload) (*WorkloadResult, error) {
	wr := &WorkloadResult{Name: w.Name, Doc: w.Doc, TimeMetric: w.TimeMetric, TimeNote: w.TimeNote}
	wr.Load, _ = LoadAverage()
	if w.Kind != KindC {
		if _, err := findProgram(w.Program); err != nil {
			wr.Skipped = fmt.Sprintf("%s not installed", w.Program)
			cfg.progress("%s: skipped: %s\n", w.Name, wr.Skipped)
			return wr, nil
		}
	}
	ref, err := RunOnce(ctx, cfg.Built, w, Allocator{Name: Glibc}, cfg.Quick, cfg.Timeout)
	if err != nil {
		wr.Skipped = "glibc warm-up run failed: " + err.Error()
		return wr, fmt.Errorf("%s: glibc (warm-up, reference output): %w", w.Name, err)
	}
	for _, a := range cfg.Allocators {
		wr.Cells = append(wr.Cells, &Cell{Allocator: a.Name})
	}
	var errs []error
	start := time.Now()
	for r, order := range Schedule(len(cfg.Allocators), cfg.Runs) {
		for _, i := range order {
			a, cell := cfg.Allocators[i], wr.Cells[i]
			if cell.Err != "" {
				continue
			}
			s, err := RunOnce(ctx, cfg.Built, w, a, cfg.Quick, cfg.Timeout)
			if err == nil && s.Output != ref.Output {
				err = fmt.Errorf("output differs from glibc's: %s", firstDiff(s.Output, ref.Output))
			}
			if err != nil {
				err = fmt.Errorf("%s under %s (run %d): %w", w.Name, a.Name, r+1, err)
				cell.Err = err.Error()
				errs = append(errs, err)
				cfg.progress("FAIL %v\n", err)
				if ctx.Err() != nil {
					return wr, errors.Join(errs...)
				}
				continue
			}
			cell.Samples = append(cell.Samples, s)
			if cfg.Verbose {
				cfg.progress("%-16s run %d/%d %-9s %8.3fs %9.1f MiB\n",
					w.Name, r+1, cfg.Runs, a.Name, s.Seconds, float64(s.MaxRSS)/(1<<20))
			}
		}
	}
	if !cfg.Verbose {
		cfg.progress("%-16s %d runs x %d allocators in %.1fs\n", w.Name, cfg.Runs, len(cfg.Allocators),
			time.Since(start).Seconds())
	}
	return wr, errors.Join(errs...)
}

func (cfg Config) progress(format string, args ...any) {
	if cfg.Progress != nil {
		fmt.Fprintf(cfg.Progress, format, args...)
	}
}

// RunOnce runs w once under a and measures it.
func RunOnce(ctx context.Context, b *Built, w Workload, a Allocator, quick bool, timeout time.Duration) (Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	preload := a.Preload
	if preload == "" && a.Launch == nil && w.GlibcShim {
		preload = b.Shim
	}
	defer a.done()
	args := w.Args
	if quick {
		args = w.QuickArgs
	}
	if w.Kind == KindRedis {
		return runRedis(ctx, b, w, args, a, preload)
	}
	prog := b.Bin(w.Program)
	if w.Kind == KindProgram {
		var err error
		if prog, err = findProgram(w.Program); err != nil {
			return Sample{}, err
		}
	}
	cmd := a.command(ctx, prog)
	for _, arg := range args {
		cmd.Args = append(cmd.Args, expand(arg, b))
	}
	// A preloaded allocator's run goes through measure, so that its
	// figures are the workload's own: a child this process starts counts
	// this process's resident memory in its peak (clone with CLONE_VM). A
	// launched one's are the launcher's, the workload's included: what a
	// user of `tagalloc run` pays.
	var report, wr *os.File
	if len(a.Launch) == 0 {
		var err error
		if report, wr, err = os.Pipe(); err != nil {
			return Sample{}, err
		}
		defer report.Close()
		cmd = exec.CommandContext(ctx, b.Measure, append([]string{"3"}, cmd.Args...)...)
		cmd.ExtraFiles = []*os.File{wr}
	}
	cmd.Env = environ(os.Environ(), preload, w.Env)
	if w.Stdin != "" {
		f, err := os.Open(expand(w.Stdin, b))
		if err != nil {
			return Sample{}, err
		}
		defer f.Close()
		cmd.Stdin = f
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &tail{max: 4096, buf: &stderr}
	cmd.WaitDelay = 10 * time.Second // a timed-out run's children may hold its pipes
	start := time.Now()
	err := cmd.Start()
	if wr != nil {
		wr.Close() // measure holds the write end now (or never will)
	}
	if err == nil {
		err = cmd.Wait()
	}
	wall := time.Since(start).Seconds()
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return Sample{}, fmt.Errorf("timed out after %v", timeout)
		}
		return Sample{}, fmt.Errorf("%v%s", err, stderrNote(stderr.String()))
	}
	s, err := parseOutput(stdout.String())
	if err != nil {
		return Sample{}, err
	}
	if report != nil {
		m, err := readMeasure(report)
		if err != nil {
			return Sample{}, err
		}
		s.MaxRSS, s.Faults, s.SysSecs, s.Seconds = m.maxRSS, m.faults, m.sysSecs, m.wallSecs
	} else {
		s.MaxRSS, s.Faults = usage(cmd.ProcessState)
		s.SysSecs = sysSeconds(cmd.ProcessState)
		s.Seconds = wall
	}
	if w.TimeMetric != "" {
		v, ok := s.Metrics[w.TimeMetric]
		if !ok {
			return Sample{}, fmt.Errorf("output has no %q metric", w.TimeMetric)
		}
		s.Seconds = v
	}
	return s, nil
}

// LoadAverage is the 1-minute load average (/proc/loadavg). Other work on
// the machine makes the measurements noisy; the command warns about it.
func LoadAverage() (float64, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0, errors.New("empty /proc/loadavg")
	}
	return strconv.ParseFloat(f[0], 64)
}

// parseOutput splits a workload's standard output into "metric NAME VALUE"
// lines and the rest, the result that must not depend on the allocator.
func parseOutput(out string) (Sample, error) {
	s := Sample{Metrics: map[string]float64{}}
	var keep []string
	for line := range strings.Lines(out) {
		line = strings.TrimRight(line, "\r\n")
		if rest, ok := strings.CutPrefix(line, "metric "); ok {
			f := strings.Fields(rest)
			if len(f) != 2 {
				return s, fmt.Errorf("bad metric line %q", line)
			}
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				return s, fmt.Errorf("bad metric line %q: %v", line, err)
			}
			s.Metrics[f[0]] = v
			continue
		}
		keep = append(keep, line)
	}
	s.Output = strings.Join(keep, "\n")
	if strings.TrimSpace(s.Output) == "" {
		return s, errors.New("no output (a workload must print its checksum)")
	}
	return s, nil
}

// measured is what measure (measure/measure.c) reported of a run.
type measured struct {
	maxRSS, faults    int64
	sysSecs, wallSecs float64
}

// readMeasure reads measure's line from r: "maxrss_kib minflt utime_us
// stime_us wall_ns".
func readMeasure(r io.Reader) (measured, error) {
	b, err := io.ReadAll(io.LimitReader(r, 256))
	if err != nil {
		return measured{}, fmt.Errorf("reading measure's report: %w", err)
	}
	f := strings.Fields(string(b))
	if len(f) != 5 {
		return measured{}, fmt.Errorf("measure's report %q: want 5 numbers", b)
	}
	var v [5]int64
	for i, x := range f {
		if v[i], err = strconv.ParseInt(x, 10, 64); err != nil || v[i] < 0 {
			return measured{}, fmt.Errorf("measure's report %q: bad number %q", b, x)
		}
	}
	return measured{maxRSS: v[0] * 1024, faults: v[1], sysSecs: float64(v[3]) / 1e6, wallSecs: float64(v[4]) / 1e9}, nil
}

// usage returns the peak resident set of the waited-for process, in bytes,
// and its minor page faults (each a page the kernel had to map in: memory
// newly touched, or touched again after the allocator gave it back).
func usage(ps *os.ProcessState) (maxRSS, faults int64) {
	if ps == nil {
		return 0, 0
	}
	if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
		return ru.Maxrss * 1024, ru.Minflt // Linux reports ru_maxrss in KiB
	}
	return 0, 0
}

// sysSeconds is the system time of the waited-for process (its
// children's too, when it waited for them): page faults, madvise, mmap.
func sysSeconds(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return ps.SystemTime().Seconds()
}

// cpuSeconds is the user+system time of the waited-for process.
func cpuSeconds(ps *os.ProcessState) float64 {
	if ps == nil {
		return 0
	}
	return (ps.UserTime() + ps.SystemTime()).Seconds()
}

// firstDiff describes where got and want first differ, briefly.
func firstDiff(got, want string) string {
	g, w := strings.Split(got, "\n"), strings.Split(want, "\n")
	for i := 0; i < len(g) || i < len(w); i++ {
		var gl, wl string
		if i < len(g) {
			gl = g[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if gl != wl {
			return fmt.Sprintf("line %d: got %q, want %q", i+1, clip(gl, 80), clip(wl, 80))
		}
	}
	return "same lines"
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

func stderrNote(s string) string {
	s = strings.TrimSpace(s)
	if s == "" {
		return ""
	}
	return "; stderr: " + clip(s, 600)
}

// tail keeps the last max bytes written to it.
type tail struct {
	max int
	buf *bytes.Buffer
}

func (t *tail) Write(p []byte) (int, error) {
	t.buf.Write(p)
	if over := t.buf.Len() - t.max; over > 0 {
		t.buf.Next(over)
	}
	return len(p), nil
}
