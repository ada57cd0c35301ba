// The soak: cgo/testdata/stress_test.c run back to back under the preload
// in every mode, for a duration, with its figures summed (bench/cmd/soak,
// TestSoakShort).

package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/cgo"
	"github.com/tagalloc/tagalloc/tagtable"
)

// SoakModes are the ways the stress program runs, in turn: the plain
// preload (books private), shared books in files under a TAGALLOC_DIR (as
// under tagalloc run, read back with tagtable.ReadDir after each run), the
// sampling build recording stacks (TAGALLOC_STACKS=sampled, a small rate),
// requested sizes kept (TAGALLOC_REQUESTED=1: the books' requested bytes
// are checked against the heap walk too), and injected mapping failures
// (TAGALLOC_FAULT_EVERY/TAGALLOC_FAULT_COUNT, random per run). Every mode
// checks the books against a heap walk in the forked children too
// (STRESS_CHECK_CHILD=1).
var SoakModes = []string{"preload", "shared", "stacks", "requested", "faults"}

// SoakConfig says how long and how hard to soak.
type SoakConfig struct {
	Duration time.Duration // no run starts after this; the last one finishes
	Threads  int           // worker threads per run (forked children add 3 each)
	Ops      int           // loop iterations per thread per round, at most (each run picks Ops/2..Ops)
	Seed     uint64        // the runs' seeds, sizes and fault rates follow from it
	Source   string        // stress_test.c; "" for the one in this repository
	Timeout  time.Duration // one run's limit (a run that takes longer is a failure: a hang)
	Log      io.Writer     // a line per run, if set
}

// SoakRun is one run of the stress program.
type SoakRun struct {
	Mode        string
	Args        []string
	Env         []string
	Wall        time.Duration
	Ops         int64 // loop iterations over the parent and its forked children
	ENOMEM      int64 // allocations that failed with ENOMEM (faults mode) and were survived
	PeakThreads int64
	BooksChecks int64 // heap walks that matched the books (each round, each child, the end)
	LostBytes   int64 // books vs heap walk, or worker tags left holding bytes after every free
	MaxRSS      int64 // bytes, of the largest process
	Err         error // nil if the run passed
	Output      string
}

// SoakResult sums the runs.
type SoakResult struct {
	Runs                     []SoakRun
	Wall                     time.Duration
	Ops, ENOMEM, BooksChecks int64
	PeakThreads, MaxRSS      int64
	LostBytes                int64
	Failures                 int
	RegionsRead              int // books files read back with tagtable.ReadDir
}

// StressSource is cgo/testdata/stress_test.c of this source tree.
func StressSource() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "cgo", "testdata", "stress_test.c")
}

// buildStress compiles the stress program (as cgo's tests do, "plain").
func buildStress(src, dir string) (string, error) {
	cc, err := cgo.Compiler()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "stress_test")
	args := []string{"-std=gnu11", "-O2", "-g", "-Wall", "-Wno-alloc-size-larger-than", "-Wno-use-after-free",
		"-pthread", "-fno-builtin", "-o", out, src, "-ldl"}
	if b, err := exec.Command(cc, args...).CombinedOutput(); err != nil {
		return "", fmt.Errorf("compiling %s: %v\n%s", src, err, b)
	}
	return out, nil
}

var (
	statsRE = regexp.MustCompile(`stress-stats: ops (\d+) enomem (\d+) peak_threads (\d+) books_checks (\d+) lost_bytes (\d+)`)
	// _ta_fatal from tagalloc_check_books: usable bytes, or requested
	// bytes (TAGALLOC_REQUESTED=1), that the books and the heap disagree on
	driftRE = regexp.MustCompile(`books of tag "[^"]*": (\d+) (?:bytes in \d+ blocks, but the heap holds|requested bytes, but the heap's live blocks asked for) (\d+)`)
)

// Soak runs the stress program in every mode, in turn, until cfg.Duration
// has passed, and sums what the runs say. An error means it could not
// start (no compiler, no library); failed runs are counted in the result.
func Soak(ctx context.Context, cfg SoakConfig) (*SoakResult, error) {
	cfg = cfg.withDefaults()
	s, err := newSoaker(cfg)
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(s.work)
	res := &SoakResult{}
	start := time.Now()
	for i := 0; time.Since(start) < cfg.Duration && ctx.Err() == nil; i++ {
		mode := SoakModes[i%len(SoakModes)]
		args, env, dir, err := s.plan(i, mode)
		if err != nil {
			return nil, err
		}
		r := runStress(ctx, s.prog, args, env, cfg.Timeout)
		r.Mode = mode
		if dir != "" && r.Err == nil {
			res.RegionsRead += readBackBooks(&r, dir)
		}
		res.add(r)
		cfg.logRun(i, r)
	}
	res.Wall = time.Since(start)
	return res, nil
}

// withDefaults fills in what cfg leaves zero: 4 threads, 20000 ops, a
// 5-minute limit per run, and this repository's stress_test.c.
func (cfg SoakConfig) withDefaults() SoakConfig {
	if cfg.Threads <= 0 {
		cfg.Threads = 4
	}
	if cfg.Ops <= 0 {
		cfg.Ops = 20000
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 5 * time.Minute
	}
	if cfg.Source == "" {
		cfg.Source = StressSource()
	}
	return cfg
}

// soaker is what every run of a soak shares: the two preload libraries
// (plain and sampling), a scratch directory, the stress program built in
// it, and the random source the runs' parameters are drawn from.
type soaker struct {
	cfg            SoakConfig
	lib, stacksLib string
	work, prog     string
	rng            *rand.Rand
}

// newSoaker finds the libraries and builds the stress program in a new
// scratch directory, which the caller removes (newSoaker removes it itself
// if the build fails).
func newSoaker(cfg SoakConfig) (*soaker, error) {
	lib, err := cgo.Library()
	if err != nil {
		return nil, err
	}
	stacksLib, err := cgo.StacksLibrary()
	if err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "tagalloc-soak-")
	if err != nil {
		return nil, err
	}
	prog, err := buildStress(cfg.Source, work)
	if err != nil {
		os.RemoveAll(work)
		return nil, err
	}
	return &soaker{cfg: cfg, lib: lib, stacksLib: stacksLib, work: work, prog: prog,
		rng: rand.New(rand.NewPCG(cfg.Seed, 0x50a4))}, nil
}

// plan draws run i's parameters (seed, ops, forks; for the faults mode,
// the fault rate) and gives the program's arguments and the environment
// of mode; for the modes with shared books it makes the run's
// TAGALLOC_DIR, returned as dir. The draws happen in a fixed order, so a
// seed gives the same runs.
func (s *soaker) plan(i int, mode string) (args, env []string, dir string, err error) {
	seed := s.rng.Uint64() >> 1
	ops := s.cfg.Ops/2 + s.rng.IntN(s.cfg.Ops/2+1)
	forks := s.rng.IntN(3)
	args = []string{strconv.FormatUint(seed, 10), strconv.Itoa(s.cfg.Threads), strconv.Itoa(ops), "2", strconv.Itoa(forks)}
	env = []string{"LD_PRELOAD=" + s.lib, "STRESS_CHECK_CHILD=1"}
	switch mode {
	case "shared", "stacks":
		dir = filepath.Join(s.work, fmt.Sprintf("run-%d", i))
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, nil, "", err
		}
		env = append(env, "TAGALLOC_DIR="+dir)
		if mode == "stacks" {
			env = []string{"LD_PRELOAD=" + s.stacksLib, "STRESS_CHECK_CHILD=1", "TAGALLOC_DIR=" + dir, "TAGALLOC_STACKS=sampled", "TAGALLOC_SAMPLE_RATE=64K"}
		}
	case "requested":
		env = append(env, "TAGALLOC_REQUESTED=1")
	case "faults":
		env = append(env, "STRESS_ENOMEM_OK=1",
			"TAGALLOC_FAULT_EVERY="+strconv.Itoa(3+s.rng.IntN(40)),
			"TAGALLOC_FAULT_COUNT="+strconv.Itoa(s.rng.IntN(400)))
	}
	return args, env, dir, nil
}

// readBackBooks checks the books files a passing shared-books run left in
// dir (checkRegions), failing r if they are wrong, then removes dir. It
// returns how many files were read.
func readBackBooks(r *SoakRun, dir string) int {
	n, err := checkRegions(dir)
	if err != nil {
		r.Err = err
	}
	os.RemoveAll(dir)
	return n
}

// logRun writes run i's line to cfg.Log, if set: its mode, arguments and
// the environment beyond the preload, its figures and its status; and for
// a failed run, the tail of its output.
func (cfg SoakConfig) logRun(i int, r SoakRun) {
	if cfg.Log == nil {
		return
	}
	status := "ok"
	if r.Err != nil {
		status = "FAILED: " + r.Err.Error()
	}
	fmt.Fprintf(cfg.Log, "soak: run %d %-9s %s %s: %.1fs, %d ops, %d ENOMEM, %d threads, rss %d MiB, %d checks, lost %d: %s\n",
		i+1, r.Mode, strings.Join(r.Args, " "), strings.Join(r.Env[2:], " "), r.Wall.Seconds(), r.Ops, r.ENOMEM, r.PeakThreads,
		r.MaxRSS>>20, r.BooksChecks, r.LostBytes, status)
	if r.Err != nil {
		fmt.Fprintf(cfg.Log, "%s\n", r.Output)
	}
}

// add counts one run into the sums.
func (res *SoakResult) add(r SoakRun) {
	res.Runs = append(res.Runs, r)
	res.Ops += r.Ops
	res.ENOMEM += r.ENOMEM
	res.BooksChecks += r.BooksChecks
	res.LostBytes += r.LostBytes
	res.PeakThreads = max(res.PeakThreads, r.PeakThreads)
	res.MaxRSS = max(res.MaxRSS, r.MaxRSS)
	if r.Err != nil {
		res.Failures++
	}
}

// runStress runs the program once and reads its figures.
func runStress(ctx context.Context, prog string, args, env []string, timeout time.Duration) SoakRun {
	r := SoakRun{Args: args, Env: env}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), env...)
	// A hang may be in a child the program forked: the timeout kills the
	// whole process group, and Wait gives up on output pipes a survivor
	// still holds (else a hung child hung the soak past its timeout).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	t0 := time.Now()
	err := cmd.Run()
	r.Wall = time.Since(t0)
	r.Output = tailLines(out.String(), 20)
	if ps := cmd.ProcessState; ps != nil {
		if ru, ok := ps.SysUsage().(*syscall.Rusage); ok {
			r.MaxRSS = ru.Maxrss << 10
		}
	}
	if m := statsRE.FindStringSubmatch(out.String()); m != nil {
		v := func(i int) int64 { n, _ := strconv.ParseInt(m[i], 10, 64); return n }
		r.Ops, r.ENOMEM, r.PeakThreads, r.BooksChecks, r.LostBytes = v(1), v(2), v(3), v(4), v(5)
	}
	for _, m := range driftRE.FindAllStringSubmatch(out.String(), -1) {
		books, _ := strconv.ParseInt(m[1], 10, 64)
		heap, _ := strconv.ParseInt(m[2], 10, 64)
		r.LostBytes += max(books-heap, heap-books)
	}
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		r.Err = fmt.Errorf("hung: killed after %v", timeout)
	case err != nil:
		r.Err = err
	case statsRE.FindString(out.String()) == "":
		r.Err = errors.New("no stress-stats line")
	case r.LostBytes != 0:
		r.Err = fmt.Errorf("%d bytes lost", r.LostBytes)
	case !strings.Contains(out.String(), "1 passed, 0 failed"):
		r.Err = errors.New("no passing summary")
	}
	return r
}

// checkRegions reads the books files a shared-books run left (the parent's
// and each forked child's) as tagalloc run would: every one must parse,
// and no worker tag of the parent may hold bytes after the program freed
// every block.
func checkRegions(dir string) (int, error) {
	snaps, err := tagtable.ReadDir(dir)
	if err != nil {
		return len(snaps), fmt.Errorf("reading the books: %w", err)
	}
	if len(snaps) == 0 {
		return 0, errors.New("no books files")
	}
	for _, s := range snaps {
		if s.PPID != os.Getpid() { // a forked child: it keeps the blocks it copied
			continue
		}
		for _, t := range s.Tags {
			if strings.HasPrefix(t.Name, "stress-") && t.LiveBytes != 0 {
				return len(snaps), fmt.Errorf("the books file says tag %s holds %d bytes after every block was freed", t.Name, t.LiveBytes)
			}
		}
	}
	return len(snaps), nil
}

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// WriteSummary prints the figures the README's trust table quotes.
func (res *SoakResult) WriteSummary(w io.Writer, threads int) {
	byMode := map[string]int{}
	for _, r := range res.Runs {
		byMode[r.Mode]++
	}
	var modes []string
	for _, m := range SoakModes {
		modes = append(modes, fmt.Sprintf("%s %d", m, byMode[m]))
	}
	secs := res.Wall.Seconds()
	fmt.Fprintf(w, "soak: %v, %d runs (%s), %d worker threads per run\n", res.Wall.Round(time.Second), len(res.Runs), strings.Join(modes, ", "), threads)
	fmt.Fprintf(w, "operations:      %d (%.0f/s over the wall time)\n", res.Ops, float64(res.Ops)/max(secs, 1e-9))
	fmt.Fprintf(w, "peak threads:    %d (workers at once, over a process and its forked children)\n", res.PeakThreads)
	fmt.Fprintf(w, "faults injected: %d allocations failed with ENOMEM (injected mapping failures), all survived\n", res.ENOMEM)
	fmt.Fprintf(w, "RSS peak:        %d MiB (largest process)\n", res.MaxRSS>>20)
	fmt.Fprintf(w, "books checks:    %d heap walks equal to the books; %d books files read back\n", res.BooksChecks, res.RegionsRead)
	fmt.Fprintf(w, "failures:        %d\n", res.Failures)
	fmt.Fprintf(w, "bytes lost:      %d\n", res.LostBytes)
}
