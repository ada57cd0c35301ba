// Command allocbench runs tagalloc's benchmark workloads under glibc,
// jemalloc, mimalloc, tcmalloc and tagalloc, interleaved, and prints median
// times, peak RSS and tagalloc's ratios to the others (see package bench).
//
//	go run ./bench/cmd/allocbench [-runs 5] [-only REGEX] [-alloc glibc,jemalloc,...] [-json out.json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code, err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "allocbench: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("allocbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	runs := fs.Int("runs", 5, "measured runs per workload and allocator (the median is reported)")
	only := fs.String("only", "", "run only the workloads whose names match this regular expression")
	allocs := fs.String("alloc", strings.Join(bench.DefaultAllocators, ","),
		"allocators, comma-separated; each a known name (also tagalloc-nocounts, the build without the books' counts; tagalloc-run, tagalloc-sampled and tagalloc-default, through tagalloc run: --stacks off, --stacks sampled -o FILE, and the defaults) or name=/path/to/lib.so")
	subject := fs.String("subject", "tagalloc", "the allocator whose ratios to glibc, mimalloc and jemalloc are shown")
	jsonOut := fs.String("json", "", "also write every sample and the summary to this JSON file")
	quick := fs.Bool("quick", false, "use small inputs (a smoke test, not a measurement)")
	timeout := fs.Duration("timeout", 10*time.Minute, "limit for one run")
	verbose := fs.Bool("v", false, "print a line per run")
	list := fs.Bool("list", false, "list the workloads and exit")
	libOf := fs.String("lib", "", "print the preload library of this `allocator` (building it if need be) and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: allocbench [flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	if fs.NArg() != 0 {
		return 2, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if *runs < 1 {
		return 2, errors.New("-runs must be at least 1")
	}
	if *libOf != "" {
		found, notes, err := bench.FindAllocators([]string{*libOf})
		if err != nil {
			return 2, err
		}
		if len(found) == 0 {
			return 1, fmt.Errorf("%s: %s", *libOf, strings.Join(notes, "; "))
		}
		fmt.Fprintln(stdout, found[0].Preload) // "" for glibc
		return 0, nil
	}
	workloads := bench.Workloads()
	if *only != "" {
		re, err := regexp.Compile(*only)
		if err != nil {
			return 2, fmt.Errorf("-only: %w", err)
		}
		workloads = bench.Select(workloads, re.MatchString)
		if len(workloads) == 0 {
			return 2, fmt.Errorf("-only %q matches no workload (try -list)", *only)
		}
	}
	if *list {
		for _, w := range workloads {
			fmt.Fprintf(stdout, "%-16s %s\n", w.Name, w.Doc)
		}
		return 0, nil
	}

	found, notes, err := bench.FindAllocators(strings.Split(*allocs, ","))
	if err != nil {
		return 2, err
	}
	if len(found) == 0 {
		return 1, errors.New("no allocator to measure")
	}
	built, err := bench.Build(bench.BuildOptions{})
	if err != nil {
		return 1, err
	}
	var names []string
	for _, a := range found {
		names = append(names, a.Name)
	}
	fmt.Fprintf(stdout, "allocbench: %d workloads x %s, %d runs each, interleaved\n",
		len(workloads), strings.Join(names, ", "), *runs)
	for _, n := range notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	load0, _ := bench.LoadAverage()
	res, runErr := bench.Run(ctx, bench.Config{
		Workloads: workloads, Allocators: found, Built: built,
		Runs: *runs, Quick: *quick, Timeout: *timeout,
		Progress: stderr, Verbose: *verbose,
	})
	res.Notes = notes
	sum := bench.Summarize(res, *subject, bench.DefaultBaselines, bench.DefaultTargets)
	if err := sum.Render(stdout); err != nil {
		return 1, err
	}
	// The workloads themselves load the machine by up to 2 (two threads):
	// warn when the load says something else was running as well.
	busy, cpus := load0, float64(runtime.NumCPU())
	for _, w := range res.Workloads {
		busy = max(busy, w.Load-2)
	}
	if busy > cpus/2 {
		fmt.Fprintf(stdout, "\nnote: the machine was busy with other work (1-minute load average %.1f above the benchmark's own, on %d CPUs): the numbers are noisy\n", busy, int(cpus))
	}
	if *jsonOut != "" {
		if err := writeJSON(*jsonOut, map[string]any{"result": res, "summary": sum}); err != nil {
			return 1, err
		}
	}
	if runErr != nil {
		return 1, fmt.Errorf("some runs failed:\n%v", runErr)
	}
	return 0, ctx.Err()
}

// writeJSON writes v to path atomically (temp file, then rename).
func writeJSON(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".allocbench-*.json")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
