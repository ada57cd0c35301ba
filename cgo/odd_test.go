package cgo

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Odd callers (issue 7 item 6; testdata/odd_test.c), each run preloaded with
// a timeout, so a hang fails: signal handlers that allocate (a timer against
// a tight malloc/free loop; a crash-handler-like one with backtrace()), threads
// that exit holding cached blocks, fork() from many threads at once, dlopen
// of a library whose constructor and destructor allocate. What is promised
// for signal handlers is in src/types.h's error policy.
func TestOdd(t *testing.T) {
	t.Parallel()
	prog := buildC(t, "odd_test", "plain")
	cc, err := Compiler()
	require.NoError(t, err)
	dl := filepath.Join(t.TempDir(), "libodd_dl.so")
	out, err := exec.Command(cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared",
		"-fno-builtin", "-o", dl, filepath.Join("testdata", "odd_dl.c")).CombinedOutput()
	require.NoError(t, err, "building the dlopen library: %s", out)

	for _, tc := range []struct {
		name  string
		args  []string
		check bool // also in the checking build
	}{
		{"signal-alarm", []string{"signal-alarm", "3"}, false},
		// both the loop and the handler take large blocks (the arena
		// lock): before the fix this hung every time
		{"signal-arena", []string{"signal-arena", "3"}, false},
		{"signal-crash", []string{"signal-crash", "3"}, false},
		{"thread-exit", []string{"thread-exit", "300"}, true},
		{"fork-storm", []string{"fork-storm", "10"}, true},
		{"dlopen", []string{"dlopen", dl, "300"}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			envs := [][]string{{"LD_PRELOAD=" + lib(t)}}
			if tc.check { // its quarantine and batched reclaim hold more
				envs = append(envs, []string{"LD_PRELOAD=" + checkLib(t), "ODD_RSS_SLACK_KB=32768"})
			}
			for _, env := range envs {
				r := runProg(t, 90*time.Second, env, prog, tc.args...)
				requirePassed(t, tc.name+" with "+filepath.Base(filepath.Dir(env[0])), r)
				t.Log(strings.TrimSpace(strings.Split(r.stdout, "\n")[0]))
			}
		})
	}
}

// A program that wraps the C library's allocator through glibc's other
// names for it (__libc_malloc and the rest: testdata/libc_wrap_test.c)
// and frees blocks of functions it does not wrap (posix_memalign,
// aligned_alloc, memalign, strdup) with its own free: the library
// defines those names too, so nothing aborts and the wrapped calls are
// in the books. In the checking build too.
func TestLibcNames(t *testing.T) {
	t.Parallel()
	prog := buildC(t, "libc_wrap_test", "plain")
	for _, l := range []string{lib(t), checkLib(t)} {
		r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + l}, prog)
		requirePassed(t, "libc_wrap_test with "+filepath.Base(filepath.Dir(l)), r)
	}
}
