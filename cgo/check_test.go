package cgo

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The checking build (src/check.c, -DTA_CHECK=1, tagalloc run --check):
// overruns, writes after free and double frees abort with a message naming
// the call, the address, the block and the first bad byte; correct programs
// run clean in it with their books exact.

func checkLib(t *testing.T) string { return strictLib(t, "checking", CheckFlags...) }

// requireAbort: the run was killed by SIGABRT and said each of want.
func requireAbort(t *testing.T, what string, r result, want ...string) {
	t.Helper()
	require.Error(t, r.err, "%s was not caught\nstdout:\n%s", what, r.stdout)
	var ee *exec.ExitError
	require.ErrorAs(t, r.err, &ee, "%s: %v\nstderr:\n%s", what, r.err, r.stderr)
	ws := ee.Sys().(syscall.WaitStatus)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGABRT, "%s: %v\nstderr:\n%s", what, r.err, r.stderr)
	require.NotContains(t, r.stdout, "survived")
	for _, w := range want {
		require.Contains(t, r.stderr, w, "%s", what)
	}
}

func TestCheck(t *testing.T) {
	t.Parallel()
	prog := buildC(t, "check_test", "plain")
	env := []string{"LD_PRELOAD=" + checkLib(t)}
	for _, tc := range []struct {
		mode  string
		env   []string
		wants []string
	}{
		// malloc(24) is asked of the core as 40 bytes: a 48-byte block,
		// canaries at 24..31, the trailer at 32..47
		{"overrun-1", nil, []string{"tagalloc: free(0x", "buffer overrun: byte 24 is 0x41, expected 0xcb",
			"block of 24 bytes requested, 48 usable, tag \"untagged\""}},
		{"overrun-trailer", nil, []string{"tagalloc: free(0x", "buffer overrun: byte 33 is 0x41",
			"block of 32 bytes requested"}},
		{"overrun-large", nil, []string{"tagalloc: free(0x", "buffer overrun: byte 300000 is 0x41",
			"block of 300000 bytes requested"}},
		{"overrun-realloc", nil, []string{"tagalloc: realloc(0x", "buffer overrun: byte 26 is 0x41"}},
		{"overrun-remote", nil, []string{"tagalloc: free(0x", "buffer overrun: byte 25 is 0x41"}},
		{"write-after-free", nil, []string{"tagalloc: free(0x", "write after free: byte 20 of the freed block is 0x42, expected 0xdf",
			"48 bytes usable, tag \"untagged\"", "found as it left the quarantine"}},
		{"write-after-free-head", nil, []string{"tagalloc: free(0x", "write after free: byte 5 of the freed block is 0x42",
			"found as it left the quarantine"}},
		{"write-after-free-large", nil, []string{"tagalloc: free(0x", "write after free: byte 200000 of the freed block is 0x42",
			"found as it left the quarantine"}},
		{"write-after-free-reuse", []string{"TAGALLOC_CHECK=3"}, []string{"tagalloc: malloc(0x",
			"write after free: byte 40 of the freed block is 0x42, expected 0xdf", "found as it was handed out again"}},
		{"write-after-realloc", nil, []string{"write after free: byte 3 of the freed block is 0x42"}},
		{"double-free", nil, []string{"tagalloc: free(0x", "double free", "48 bytes usable"}},
		{"double-free-later", nil, []string{"tagalloc: free(0x", "double free"}},
		{"double-free", []string{"TAGALLOC_CHECK=6"}, []string{"tagalloc: free(0x", "double free"}},
		{"interior", nil, []string{"tagalloc: free(0x", "invalid pointer"}},
	} {
		name := tc.mode
		if len(tc.env) > 0 {
			name += "/" + strings.Join(tc.env, ",")
		}
		t.Run(name, func(t *testing.T) {
			r := runProg(t, time.Minute, append(append([]string(nil), env...), tc.env...), prog, tc.mode)
			requireAbort(t, name, r, tc.wants...)
		})
	}
	t.Run("clean", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, env, prog, "clean")
		requirePassed(t, "check_test clean", r)
		require.Empty(t, r.stderr)
	})
	t.Run("clean-canaries-only", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, append(env, "TAGALLOC_CHECK=1"), prog, "clean")
		require.Error(t, r.err, "without poison the poison test must fail")
		require.Contains(t, r.stderr, "freed memory is poisoned")
		require.Contains(t, r.stdout, "4 passed, 1 failed")
	})
	// The ordinary library has no checks and says so.
	t.Run("ordinary-build-warns", func(t *testing.T) {
		r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_CHECK=7"}, prog, "overrun-1")
		require.NoError(t, r.err, "%s", r.stderr)
		require.Contains(t, r.stderr, "this build of the library has no checks")
	})
}

// A correct program runs clean in the checking build, its books exact:
// the stress test (every entry point, threads, cross-thread frees, forks;
// tagalloc_check_books at the end) and Python.
func TestCheckCleanPrograms(t *testing.T) {
	t.Parallel()
	env := []string{"LD_PRELOAD=" + checkLib(t)}
	t.Run("stress", func(t *testing.T) {
		prog := buildC(t, "stress_test", "plain")
		for _, seed := range []string{"1", "2"} {
			r := runProg(t, 4*time.Minute, env, prog, seed, "4", "15000", "2", "2")
			requirePassed(t, "stress in the checking build, seed "+seed, r)
		}
		r := runProg(t, 4*time.Minute, append(env, "TAGALLOC_REQUESTED=1", "TAGALLOC_DIR="+t.TempDir()), prog, "3", "4", "10000", "2", "2")
		requirePassed(t, "stress in the checking build with requested sizes and shared books", r)
	})
	t.Run("python", func(t *testing.T) {
		py, err := exec.LookPath("python3")
		if err != nil {
			t.Skip("no python3")
		}
		r := runProg(t, 2*time.Minute, env, py, "-c",
			"import json, threading\n"+
				"def work():\n"+
				"    d = {str(i): [i] * (i % 50) for i in range(30000)}\n"+
				"    s = json.dumps(d)\n"+
				"    assert json.loads(s) == d\n"+
				"ts = [threading.Thread(target=work) for _ in range(3)]\n"+
				"[t.start() for t in ts]; work(); [t.join() for t in ts]\n"+
				"b = bytearray()\n"+
				"for i in range(20000): b += b'x' * (i % 100)\n"+
				"print('ok', len(b))\n")
		require.NoError(t, r.err, "python3 in the checking build:\n%s", r.stderr)
		require.Contains(t, r.stdout, "ok 990000")
		require.Empty(t, r.stderr)
	})
}
