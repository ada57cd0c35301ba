package bench

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
)

// Allocators run through tagalloc's launcher, as a user runs a program:
// `tagalloc run --stacks off` (the untracked run the stacks are compared
// with), `tagalloc run --stacks sampled -o FILE`, and `tagalloc run` with
// its defaults (stacks sampled, the report saved as
// tagalloc.PROG.PID.json in the current directory: a directory of the
// harness's own), so that the table shows what sampling costs on each
// workload, drain and report included. Each writes its report, removed
// after the run.
const (
	LaunchRun     = "tagalloc-run"
	LaunchSampled = "tagalloc-sampled"
	LaunchDefault = "tagalloc-default"
)

// Launched lists the launched allocators.
var Launched = []string{LaunchRun, LaunchSampled, LaunchDefault}

// BuildTagalloc builds the tagalloc command into out (go build; run from
// within the module).
func BuildTagalloc(ctx context.Context, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-o", out, "github.com/tagalloc/tagalloc/cmd/tagalloc")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building tagalloc (run from the repository): %v: %s", err, b)
	}
	return nil
}

// launcherDir holds the command the launched allocators use, built once a
// process (it stays for the process's life: the runs need it).
var launcherDir = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tagalloc-bench-")
	if err != nil {
		return "", err
	}
	if err := BuildTagalloc(context.Background(), filepath.Join(dir, "tagalloc")); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
})

// launched returns the allocator name runs through the launcher.
func launched(name string) (Allocator, error) {
	dir, err := launcherDir()
	if err != nil {
		return Allocator{}, err
	}
	a := Allocator{Name: name, Launch: []string{filepath.Join(dir, "tagalloc"), "run", "-q"}}
	switch name {
	case LaunchRun:
		a.Output = filepath.Join(dir, "run.json")
		a.Launch = append(a.Launch, "--stacks", "off", "-o", a.Output)
	case LaunchSampled:
		a.Output = filepath.Join(dir, "report.json")
		a.Launch = append(a.Launch, "--stacks", "sampled", "-o", a.Output)
	case LaunchDefault:
		a.Dir = filepath.Join(dir, "cwd")
		if err := os.MkdirAll(a.Dir, 0o700); err != nil {
			return Allocator{}, err
		}
	}
	a.Launch = append(a.Launch, "--")
	return a, nil
}

// command is prog with args as allocator a runs it.
func (a Allocator) command(ctx context.Context, prog string, args ...string) *exec.Cmd {
	if len(a.Launch) == 0 {
		return exec.CommandContext(ctx, prog, args...)
	}
	cmd := exec.CommandContext(ctx, a.Launch[0], slices.Concat(a.Launch[1:], []string{prog}, args)...)
	cmd.Dir = a.Dir
	return cmd
}

// done removes what a run left (its report: Output, or what it saved in
// Dir).
func (a Allocator) done() {
	if a.Output != "" {
		os.Remove(a.Output)
	}
	if a.Dir != "" {
		left, _ := filepath.Glob(filepath.Join(a.Dir, "tagalloc.*.json"))
		for _, f := range left {
			os.Remove(f)
		}
	}
}
