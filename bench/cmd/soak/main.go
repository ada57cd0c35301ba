// Command soak runs tagalloc's seeded multi-threaded stress program
// (cgo/testdata/stress_test.c) back to back under the preload, in every
// mode in turn (plain, shared books, sampled stacks, requested sizes,
// injected mapping failures), with random sizes through every entry point,
// cross-thread frees, forks and tag changes, each block's content checked
// at free and the books checked against a heap walk after every round;
// then prints runs, operations, peak threads, faults injected, RSS peak,
// failures and bytes lost (which must be 0). It exits 1 if a run failed.
//
//	go run ./bench/cmd/soak [-duration 2m] [-threads 4] [-ops 20000] [-seed 1] [-v]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "soak: %v\n", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("soak", flag.ContinueOnError)
	fs.SetOutput(stderr)
	duration := fs.Duration("duration", 2*time.Minute, "start runs until this much time has passed (the last one finishes)")
	threads := fs.Int("threads", 4, "worker threads per run (each forked child adds 3)")
	ops := fs.Int("ops", 20000, "loop iterations per thread and round, at most (each run picks half to all)")
	seed := fs.Uint64("seed", 1, "seed of the runs' seeds, sizes, forks and fault rates")
	timeout := fs.Duration("timeout", 5*time.Minute, "a run that takes longer has hung: a failure")
	verbose := fs.Bool("v", false, "print a line per run")
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *threads < 1 || *ops < 2 || *duration <= 0 {
		return 2, fmt.Errorf("-threads >= 1, -ops >= 2 and -duration > 0, please")
	}
	cfg := bench.SoakConfig{Duration: *duration, Threads: *threads, Ops: *ops, Seed: *seed, Timeout: *timeout}
	if *verbose {
		cfg.Log = stderr
	}
	res, err := bench.Soak(ctx, cfg)
	if err != nil {
		return 2, err
	}
	res.WriteSummary(stdout, *threads)
	if res.Failures > 0 || res.LostBytes != 0 {
		for _, r := range res.Runs {
			if r.Err != nil {
				fmt.Fprintf(stderr, "soak: %s run %v %v failed: %v\n%s\n", r.Mode, r.Args, r.Env, r.Err, r.Output)
			}
		}
		return 1, fmt.Errorf("%d failed runs, %d bytes lost", res.Failures, res.LostBytes)
	}
	return 0, nil
}
