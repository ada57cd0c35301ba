// A target that scribbles over its own books region (testdata/scribble.c)
// while tagalloc reads it: snapshot and top of the running process (books
// in a file under tagalloc run, or private and read through /proc/PID/mem),
// and tagalloc run at its exit. tagalloc gives a clear error or a report;
// it never panics or hangs.

package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

var scribbleModes = []string{"random", "header", "cycle", "counts", "used", "names", "zero", "flip"}

func buildScribble(t *testing.T) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "scribble")
	b, err := exec.Command("cc", "-O1", "-fno-builtin", "-o", out, filepath.Join("testdata", "scribble.c"), "-lpthread").CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// hostileTimeout bounds every tagalloc command here: a hang is a failure.
const hostileTimeout = 60 * time.Second

// runBounded runs tagalloc with args, killed after hostileTimeout.
func runBounded(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := tagallocBin()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), hostileTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = t.TempDir()
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	require.NoError(t, ctx.Err(), "tagalloc %v hung", args)
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return so.String(), se.String(), code
}

// requireCalm: no panic, no runtime crash, and no control bytes the
// process put in its books (escape sequences for the terminal) in what
// tagalloc prints.
func requireCalm(t *testing.T, what, text string) {
	t.Helper()
	for _, bad := range []string{"panic", "goroutine ", "fatal error", "SIGSEGV", "runtime error"} {
		require.NotContains(t, text, bad, "%s", what)
	}
	for _, c := range text {
		if c < 0x20 && c != '\n' {
			t.Fatalf("%s printed control byte %#x: %q", what, c, text)
		}
	}
}

// readRunning reads a running hostile process with snapshot and top, and
// checks each either reports or says what is wrong.
func readRunning(t *testing.T, pid string) (reports, errs int) {
	t.Helper()
	for i := 0; i < 3; i++ {
		out, se, code := runBounded(t, "snapshot", pid)
		requireCalm(t, "snapshot", se)
		switch code {
		case 0:
			_, err := reporter.Read(strings.NewReader(out))
			require.NoError(t, err, "snapshot wrote a report tagalloc cannot read")
			reports++
		case 1:
			require.True(t, strings.HasPrefix(se, "tagalloc: snapshot: "), "%q", se)
			require.Contains(t, se, "process "+pid)
			errs++
		default:
			t.Fatalf("snapshot exit %d: %s", code, se)
		}
		out, se, code = runBounded(t, "top", "-n", "3", "-interval", "5ms", pid)
		requireCalm(t, "top", se)
		switch code {
		case 0:
			require.Contains(t, out, "pid "+pid)
			requireCalm(t, "top's output", out)
			reports++
		case 1:
			require.True(t, strings.HasPrefix(se, "tagalloc: top: "), "%q", se)
			errs++
		default:
			t.Fatalf("top exit %d: %s", code, se)
		}
	}
	return reports, errs
}

// startHostile starts cmd (which runs scribble MODE wait) and returns its
// pid once it has scribbled, and a function that ends it (stdin closed)
// and returns tagalloc run's stderr and exit code.
func startHostile(t *testing.T, cmd *exec.Cmd) (string, func() (string, int)) {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var se bytes.Buffer
	cmd.Stderr = &se
	require.NoError(t, cmd.Start())
	done := make(chan struct{})
	timer := time.AfterFunc(hostileTimeout, func() { _ = cmd.Process.Kill() })
	t.Cleanup(func() { timer.Stop(); stdin.Close(); _ = cmd.Process.Kill(); <-done })
	var code int
	wait := func() {
		_ = cmd.Wait() // also ends the copying into se
		code = cmd.ProcessState.ExitCode()
		close(done)
	}
	acc, buf := "", make([]byte, 4096)
	for readyPID(acc) == "" {
		n, err := stdout.Read(buf)
		if err != nil {
			wait() // se is whole only once the command is waited for
			t.Fatalf("the target ended before ready: %v\n%s", err, se.String())
		}
		acc += string(buf[:n])
	}
	go wait()
	return readyPID(acc), func() (string, int) {
		stdin.Close()
		select {
		case <-done:
		case <-time.After(hostileTimeout):
			t.Fatal("tagalloc run did not end after its program did")
		}
		require.True(t, timer.Stop(), "tagalloc run hung")
		return se.String(), code
	}
}

func TestHostileRegion(t *testing.T) {
	prog := buildScribble(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	lib, _, code := cli(t, "lib")
	require.Equal(t, 0, code)
	var reports, errs int
	for _, mode := range scribbleModes {
		t.Run(mode, func(t *testing.T) {
			// tagalloc run reads the wrecked books file when the program exits
			out := filepath.Join(t.TempDir(), "r.json")
			_, se, code := runBounded(t, "run", "-o", out, "--", prog, mode)
			requireCalm(t, "run", se) // the tree too
			if _, err := os.Stat(out); err == nil {
				_, err := reporter.ReadFile(out)
				require.NoError(t, err, "run wrote a report tagalloc cannot read")
				reports++
			} else {
				require.Contains(t, se, "tagalloc: run: reading the books: ", "no report and no clear error (exit %d)", code)
				errs++
			}

			// snapshot and top of the running program, books in a file
			cmd := exec.Command(bin, "run", "-q", "-o", out, "--", prog, mode, "wait")
			pid, end := startHostile(t, cmd)
			r, e := readRunning(t, pid)
			reports, errs = reports+r, errs+e
			se, code = end()
			requireCalm(t, "run (wait)", se)
			if code != 0 {
				require.Contains(t, se, "tagalloc: run: reading the books: ", "exit %d", code)
			}

			// the same with private books, read through /proc/PID/mem
			cmd = exec.Command(prog, mode, "wait")
			cmd.Env = append(os.Environ(), "LD_PRELOAD="+strings.TrimSpace(lib))
			pid, end = startHostile(t, cmd)
			r, e = readRunning(t, pid)
			reports, errs = reports+r, errs+e
			end()
		})
	}
	t.Run("child", func(t *testing.T) {
		// a child wrecks its books and exits; its parent's still make the
		// report, which says whose were left out
		for _, mode := range []string{"zero", "header", "used"} {
			out := filepath.Join(t.TempDir(), "r.json")
			_, se, code := runBounded(t, "run", "-o", out, "--", prog, mode, "child")
			requireCalm(t, "run", se)
			require.Equal(t, 0, code, "%s", se)
			rep, err := reporter.ReadFile(out)
			require.NoError(t, err, "%s: no report: %s", mode, se)
			require.Len(t, rep.Processes, 1, "%s: the parent alone", mode)
			require.Contains(t, se, "tagalloc: run: left out of the report: ", mode)
		}
	})
	t.Run("events", func(t *testing.T) {
		// the events file truncated while tagalloc run --stacks drains it
		// (a SIGBUS in tagalloc before OpenEvents and Drain caught faults)
		out := filepath.Join(t.TempDir(), "r.json")
		_, se, code := runBounded(t, "run", "--stacks", "sampled", "-o", out, "--", prog, "events")
		requireCalm(t, "run --stacks", se)
		require.Equal(t, 0, code, "%s", se)
		_, err := reporter.ReadFile(out)
		require.NoError(t, err, "the books are whole: a report")
		reports++
	})
	t.Logf("hostile regions: %d reports, %d clear errors, no panic or hang", reports, errs)
}
