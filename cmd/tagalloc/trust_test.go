// Trust: another user's process is refused before any read, and what
// tagalloc writes (reports, about:memory files, diffs, books and events)
// is its owner's alone.

package main

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// copyFile copies src to dst with mode perm.
func copyFile(t *testing.T, src, dst string, perm os.FileMode) {
	t.Helper()
	in, err := os.Open(src)
	require.NoError(t, err)
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	require.NoError(t, err)
	_, err = io.Copy(out, in)
	require.NoError(t, err)
	require.NoError(t, out.Close())
	require.NoError(t, os.Chmod(dst, perm))
}

// A preloaded program running as nobody (uid 65534) has books in its
// memory that root could read; snapshot, top and serve refuse it all the
// same, naming its owner and what to do.
func TestRefusesAnotherUsersProcess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root, to start a process as another user")
	}
	prog := buildTagged(t)
	lib, _, code := cli(t, "lib")
	require.Equal(t, 0, code)
	// nobody must be able to run the program and load the library
	dir, err := os.MkdirTemp("", "tagalloc-other-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	copyFile(t, prog, filepath.Join(dir, "tagged"), 0o755)
	copyFile(t, strings.TrimSpace(lib), filepath.Join(dir, "libtagalloc.so"), 0o644)

	cmd := exec.Command(filepath.Join(dir, "tagged"), "wait")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+filepath.Join(dir, "libtagalloc.so"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	acc := startWaiting(t, cmd)
	require.Contains(t, acc, "webgl-contexts", "the program runs preloaded as nobody")
	pid := strconv.Itoa(cmd.Process.Pid)

	for _, args := range [][]string{
		{"snapshot", pid},
		{"snapshot", pid, "-o", filepath.Join(t.TempDir(), "x.json")},
		{"top", "-n", "1", pid},
		{"serve", "-addr", "127.0.0.1:0", pid},
	} {
		t.Run(args[0], func(t *testing.T) {
			out, se, code := cli(t, args...)
			require.Equal(t, 1, code, "stdout %q stderr %q", out, se)
			require.Empty(t, out)
			require.Contains(t, se, "tagalloc: "+args[0]+": process "+pid+" belongs to ")
			require.Contains(t, se, "uid 65534", "names the owner")
			require.Contains(t, se, "run it as that user")
			require.Contains(t, se, "tagalloc "+args[0]+" "+pid, "says what to run")
		})
	}
	// the same program run as ourselves is read (the refusal is the owner check)
	own := exec.Command(filepath.Join(dir, "tagged"), "wait")
	own.Env = cmd.Env
	startWaiting(t, own)
	js, se, code := cli(t, "snapshot", strconv.Itoa(own.Process.Pid))
	if code != 0 && strings.Contains(se, "reading its memory") {
		t.Skipf("no ptrace rights here: %s", se)
	}
	require.Equal(t, 0, code, se)
	require.Contains(t, js, "webgl-contexts")
}

// A process that does not exist is named as such.
func TestRefusesMissingProcess(t *testing.T) {
	_, se, code := cli(t, "snapshot", "999999999")
	require.Equal(t, 1, code)
	require.Contains(t, se, "process 999999999 does not exist")
}

// Every file tagalloc writes is 0600 and every directory 0700 (but the
// books directory of a run as root: 0733), whatever the umask: the books
// directory of tagalloc run and the books and events
// files in it (as the program sees them while it runs), the report of
// run -o and snapshot -o, report's renderings (JSON, about:memory gzipped,
// pprof, DMD) and diff -o.
func TestFilesAreOwnerOnly(t *testing.T) {
	old := syscall.Umask(0) // not parallel: the children inherit it
	defer syscall.Umask(old)
	dir := t.TempDir()
	mode := func(p string) os.FileMode {
		fi, err := os.Stat(p)
		require.NoError(t, err)
		return fi.Mode().Perm()
	}

	// The books directory and its files, listed from inside the run; stat
	// and sh are preloaded, so each has books of its own there (and, as
	// --stacks full samples every block, an events file: a process makes
	// its ring at its first sample).
	a := filepath.Join(dir, "a.json")
	out, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", a, "--",
		"sh", "-c", `stat -c '%a %n' "$TAGALLOC_DIR" "$TAGALLOC_DIR"/*`)
	require.Equal(t, 0, code, se)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.GreaterOrEqual(t, len(lines), 3, "the dir, then books and events files: %q", out)
	var books, events int
	for i, l := range lines {
		perm, name, _ := strings.Cut(l, " ")
		if i == 0 {
			// others may make files in it when a child can become another
			// user (root), never list it (rundir.go)
			want := "700"
			if childrenMaySwitchUser() {
				want = "733"
			}
			require.Equal(t, want, perm, "books dir %s", name)
			continue
		}
		require.Equal(t, "600", perm, "file %s", name)
		switch {
		case strings.HasSuffix(name, ".tagalloc"):
			books++
		case strings.HasSuffix(name, ".events"):
			events++
		}
	}
	require.NotZero(t, books, "%q", out)
	require.NotZero(t, events, "%q", out)

	prog := buildTagged(t)
	b := filepath.Join(dir, "b.json")
	_, se, code = cli(t, "run", "-q", "-o", b, "--", prog)
	require.Equal(t, 7, code, se)
	written := []string{a, b}
	for _, tc := range [][]string{
		{"report", a, "--format", "json", "-o", filepath.Join(dir, "r.json")},
		{"report", a, "--format", "tree", "-o", filepath.Join(dir, "r.txt")},
		{"report", a, "--format", "dmd", "-o", filepath.Join(dir, "r.dmd")},
		{"report", a, "--format", "pprof", "-o", filepath.Join(dir, "heap.pb.gz")},
		{"report", a, "--format", "about-memory", "-o", filepath.Join(dir, "memory-report.json.gz")},
		{"report", a, "--format", "about-memory", "-o", filepath.Join(dir, "memory-report.json")},
		{"diff", a, b, "-o", filepath.Join(dir, "d.txt")},
		{"diff", a, b, "--format", "json", "-o", filepath.Join(dir, "d.json")},
	} {
		_, se, code := cli(t, tc...)
		require.Equal(t, 0, code, "%v: %s", tc, se)
		written = append(written, tc[len(tc)-1])
	}
	// snapshot -o of a running process
	cmd := exec.Command(prog, "wait")
	lib, _, _ := cli(t, "lib")
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+strings.TrimSpace(lib))
	startWaiting(t, cmd)
	snap := filepath.Join(dir, "snap.json")
	_, se, code = cli(t, "snapshot", strconv.Itoa(cmd.Process.Pid), "-o", snap)
	if code == 0 {
		written = append(written, snap)
	} else {
		require.Contains(t, se, "reading its memory", "only a missing ptrace right excuses it")
	}
	// an existing file keeps no looser mode: it is replaced
	loose := filepath.Join(dir, "loose.json")
	require.NoError(t, os.WriteFile(loose, nil, 0o666))
	require.NoError(t, os.Chmod(loose, 0o666))
	_, se, code = cli(t, "report", a, "--format", "json", "-o", loose)
	require.Equal(t, 0, code, se)
	written = append(written, loose)

	for _, p := range written {
		require.Equal(t, os.FileMode(0o600), mode(p), p)
	}
	left, err := filepath.Glob(filepath.Join(dir, ".*"))
	require.NoError(t, err)
	require.Empty(t, left, "no temporary files left behind")
}
