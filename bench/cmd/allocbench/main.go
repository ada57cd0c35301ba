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

// run is allocbench: it parses the flags, then either prints an
// allocator's library (-lib), lists the workloads (-list), or measures
// them. The int is the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (int, error) {
	o, err := parseFlags(args, stderr)
	if err != nil {
		return 2, err
	}
	if o.libOf != "" {
		return printLib(stdout, o.libOf)
	}
	workloads, err := selectWorkloads(o.only)
	if err != nil {
		return 2, err
	}
	if o.list {
		for _, w := range workloads {
			fmt.Fprintf(stdout, "%-16s %s\n", w.Name, w.Doc)
		}
		return 0, nil
	}
	return measure(ctx, o, workloads, stdout, stderr)
}

// options are allocbench's flags.
type options struct {
	runs             int
	only, allocs     string
	subject, jsonOut string
	quick, verbose   bool
	timeout          time.Duration
	list             bool
	libOf            string
}

// parseFlags reads the flags (usage and flag errors go to stderr) and
// checks them: no arguments beyond the flags, at least one run.
func parseFlags(args []string, stderr io.Writer) (*options, error) {
	var o options
	fs := flag.NewFlagSet("allocbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&o.runs, "runs", 5, "measured runs per workload and allocator (the median is reported)")
	fs.StringVar(&o.only, "only", "", "run only the workloads whose names match this regular expression")
	fs.StringVar(&o.allocs, "alloc", strings.Join(bench.DefaultAllocators, ","),
		"allocators, comma-separated; each a known name (also tagalloc-nocounts, the build without the books' counts; tagalloc-run, tagalloc-sampled and tagalloc-default, through tagalloc run: --stacks off, --stacks sampled -o FILE, and the defaults) or name=/path/to/lib.so")
	fs.StringVar(&o.subject, "subject", "tagalloc", "the allocator whose ratios to glibc, mimalloc and jemalloc are shown")
	fs.StringVar(&o.jsonOut, "json", "", "also write every sample and the summary to this JSON file")
	fs.BoolVar(&o.quick, "quick", false, "use small inputs (a smoke test, not a measurement)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "limit for one run")
	fs.BoolVar(&o.verbose, "v", false, "print a line per run")
	fs.BoolVar(&o.list, "list", false, "list the workloads and exit")
	fs.StringVar(&o.libOf, "lib", "", "print the preload library of this `allocator` (building it if need be) and exit")
	fs.Usage = func() {
		fmt.Fprintf(stderr, "usage: allocbench [flags]\n\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() != 0 {
		return nil, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if o.runs < 1 {
		return nil, errors.New("-runs must be at least 1")
	}
	return &o, nil
}

// printLib prints the preload library of one allocator ("" for glibc),
// building it if need be: what -lib asks for.
func printLib(stdout io.Writer, name string) (int, error) {
	found, notes, err := bench.FindAllocators([]string{name})
	if err != nil {
		return 2, err
	}
	if len(found) == 0 {
		return 1, fmt.Errorf("%s: %s", name, strings.Join(notes, "; "))
	}
	fmt.Fprintln(stdout, found[0].Preload) // "" for glibc
	return 0, nil
}

// selectWorkloads returns the workloads whose names match only (all of
// them for ""); matching none is an error.
func selectWorkloads(only string) ([]bench.Workload, error) {
	workloads := bench.Workloads()
	if only == "" {
		return workloads, nil
	}
	re, err := regexp.Compile(only)
	if err != nil {
		return nil, fmt.Errorf("-only: %w", err)
	}
	workloads = bench.Select(workloads, re.MatchString)
	if len(workloads) == 0 {
		return nil, fmt.Errorf("-only %q matches no workload (try -list)", only)
	}
	return workloads, nil
}

// measure finds the allocators and builds the workloads, runs them
// interleaved, and prints the report (and a warning if the machine was
// busy); the JSON file, if asked for, is written even when runs failed.
func measure(ctx context.Context, o *options, workloads []bench.Workload, stdout, stderr io.Writer) (int, error) {
	found, notes, err := bench.FindAllocators(strings.Split(o.allocs, ","))
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
	printPlan(stdout, len(workloads), found, notes, o.runs)
	load0, _ := bench.LoadAverage()
	res, runErr := bench.Run(ctx, bench.Config{
		Workloads: workloads, Allocators: found, Built: built,
		Runs: o.runs, Quick: o.quick, Timeout: o.timeout,
		Progress: stderr, Verbose: o.verbose,
	})
	res.Notes = notes
	sum := bench.Summarize(res, o.subject, bench.DefaultBaselines, bench.DefaultTargets)
	if err := sum.Render(stdout); err != nil {
		return 1, err
	}
	warnBusy(stdout, load0, res)
	if o.jsonOut != "" {
		if err := writeJSON(o.jsonOut, map[string]any{"result": res, "summary": sum}); err != nil {
			return 1, err
		}
	}
	if runErr != nil {
		return 1, fmt.Errorf("some runs failed:\n%v", runErr)
	}
	return 0, ctx.Err()
}

// printPlan prints what is about to run, and the notes on allocators
// left out.
func printPlan(stdout io.Writer, nWorkloads int, found []bench.Allocator, notes []string, runs int) {
	var names []string
	for _, a := range found {
		names = append(names, a.Name)
	}
	fmt.Fprintf(stdout, "allocbench: %d workloads x %s, %d runs each, interleaved\n",
		nWorkloads, strings.Join(names, ", "), runs)
	for _, n := range notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
}

// warnBusy says when the load average (before the runs, load0, and as
// each workload started) shows something else was running as well: the
// workloads themselves load the machine by up to 2 (two threads).
func warnBusy(stdout io.Writer, load0 float64, res *bench.Result) {
	busy, cpus := load0, float64(runtime.NumCPU())
	for _, w := range res.Workloads {
		busy = max(busy, w.Load-2)
	}
	if busy > cpus/2 {
		fmt.Fprintf(stdout, "\nnote: the machine was busy with other work (1-minute load average %.1f above the benchmark's own, on %d CPUs): the numbers are noisy\n", busy, int(cpus))
	}
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
