package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// The CLI is tested as a user runs it: the built binary, in child processes.
var tagallocBin = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "tagalloc-cli")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "tagalloc")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		return "", &buildError{string(out), err}
	}
	return bin, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + "\n" + e.out }

func cli(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	bin, err := tagallocBin()
	require.NoError(t, err)
	cmd := exec.Command(bin, args...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	err = cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return so.String(), se.String(), code
}

func TestLibPrintsAbsolutePath(t *testing.T) {
	out, _, code := cli(t, "lib")
	require.Equal(t, 0, code)
	p := strings.TrimSpace(out)
	require.True(t, filepath.IsAbs(p), "lib printed %q", p)
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.False(t, fi.IsDir())
}

func TestRunPreloadsAndKeepsExitStatus(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		out  string
	}{
		{"exit-0", []string{"sh", "-c", "grep -c libtagalloc /proc/self/maps >/dev/null && echo preloaded"}, 0, "preloaded\n"},
		{"exit-3", []string{"sh", "-c", "exit 3"}, 3, ""},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 128 + 15, ""},
		{"args-with-dashes", []string{"printf", "%s|", "-x", "--y"}, 0, "-x|--y|"},
		{"child-of-child", []string{"sh", "-c", "sh -c 'cat /proc/self/maps' | grep -c libtagalloc >/dev/null && echo yes"}, 0, "yes\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, _, code := cli(t, append([]string{"run", "--"}, tc.args...)...)
			require.Equal(t, tc.code, code)
			require.Equal(t, tc.out, out)
		})
	}
}

func TestRunKeepsUserPreloads(t *testing.T) {
	env := preloadEnv([]string{"A=1", "LD_PRELOAD=/x/other.so"}, "/lib/tagalloc.so")
	require.Equal(t, []string{"A=1", "LD_PRELOAD=/lib/tagalloc.so:/x/other.so"}, env)
	env = preloadEnv([]string{"LD_PRELOAD="}, "/lib/tagalloc.so")
	require.Equal(t, []string{"LD_PRELOAD=/lib/tagalloc.so"}, env)
}

func TestBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"no-command", nil, 2, "no command given"},
		{"unknown", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"run-nothing", []string{"run"}, 2, "no program given"},
		{"run-bad-flag", []string{"run", "--nope", "--", "true"}, 2, "flag provided but not defined"},
		{"run-missing-prog", []string{"run", "--", "/nonexistent/prog"}, 127, "no such file"},
		{"lib-extra-arg", []string{"lib", "x"}, 2, "lib takes no arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, se, code := cli(t, tc.args...)
			require.Equal(t, tc.code, code, se)
			require.Contains(t, se, tc.msg)
			require.Contains(t, se, "tagalloc: ")
		})
	}
}
