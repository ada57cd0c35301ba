package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"

	"github.com/tagalloc/tagalloc/cgo"
)

const usage = `usage:
  tagalloc lib                     print the path of the preload library (building it if needed)
  tagalloc run [--] PROG [ARGS...] run PROG with the library preloaded, exit with its status
`

func main() {
	code, err := run(os.Args[1:], os.Stdout, os.Stderr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "tagalloc: %v\n", err)
		if code == 0 {
			code = 2
		}
	}
	os.Exit(code)
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
	if err := fs.Parse(args); err != nil {
		return 2, err
	}
	prog := fs.Args()
	if len(prog) == 0 {
		fmt.Fprint(stderr, usage)
		return 2, errors.New("run: no program given (tagalloc run -- PROG [ARGS...])")
	}
	lib, err := cgo.Library()
	if err != nil {
		return 1, err
	}
	path, err := exec.LookPath(prog[0])
	if err != nil {
		return 127, fmt.Errorf("run: %w", err)
	}
	cmd := exec.Command(path, prog[1:]...)
	cmd.Args[0] = prog[0]
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.Env = preloadEnv(os.Environ(), lib)

	// The child shares our terminal's process group, so ^C reaches it
	// directly; we only forward what is sent to us alone.
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT)
	defer signal.Stop(sigs)
	if err := cmd.Start(); err != nil {
		return 126, fmt.Errorf("run: %w", err)
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
	return exitStatus(cmd.ProcessState, err)
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
