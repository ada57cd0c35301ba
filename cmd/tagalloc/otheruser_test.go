// A child of tagalloc run that becomes another user still loads the
// library and records its books; a child that runs without the library is
// named in the tree.

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// publicDir is a new directory every user can read and search, with the
// programs given (built from testdata) copied in, mode 0755.
func publicDir(t *testing.T, progs map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "tagalloc-other-user-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	for name, src := range progs {
		copyFile(t, src, filepath.Join(dir, name), 0o755)
	}
	return dir
}

// buildC compiles testdata/NAME.c with cc and flags.
func buildC(t *testing.T, name string, flags ...string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), name)
	args := append(append([]string{"-O1", "-o", out}, flags...), filepath.Join("testdata", name+".c"))
	b, err := exec.Command("cc", args...).CombinedOutput()
	require.NoError(t, err, "%s", b)
	return out
}

// A program that switches to uid and gid 65534 (nobody) and execs a
// program that allocates under known tags is in the report with exact
// books: the program it becomes (same pid) directly, or a forked child
// (-f), under every stacks mode. The process allocated as root before the
// switch, so its books file was root's: the new program replaced it.
func TestRunChildAsAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root: only a process with the right to set user ids can start a child as another user (a set-user-ID program runs without LD_PRELOAD)")
	}
	dir := publicDir(t, map[string]string{"setuid_exec": buildC(t, "setuid_exec"), "tagged": buildTagged(t)})
	for _, tc := range []struct {
		name   string
		stacks string
		fork   bool
	}{
		{"exec", "off", false},
		{"exec-stacks", "sampled", false},
		{"fork-exec", "off", true},
		{"fork-exec-stacks", "full", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "r.json")
			args := []string{"run", "--stacks", tc.stacks, "-o", out, "--", filepath.Join(dir, "setuid_exec")}
			if tc.fork {
				args = append(args, "-f")
			}
			args = append(args, "65534", "65534", filepath.Join(dir, "tagged"), "exit")
			so, se, code := cli(t, args...)
			require.Equal(t, 7, code, "stdout %q stderr %s", so, se)
			require.NotContains(t, se, "cannot be preloaded", "the loader found the library")
			require.NotContains(t, se, "TAGALLOC_DIR", "the library made its books")
			want := parseBooks(t, so)
			require.Len(t, want, 2, "tagged printed its books: %q", so)

			rep, err := reporter.ReadFile(out)
			require.NoError(t, err)
			var p *reporter.Process
			for i := range rep.Processes {
				if c := rep.Processes[i].Command; len(c) == 2 && filepath.Base(c[0]) == "tagged" {
					require.Nil(t, p, "one process ran tagged: %+v", rep.Processes)
					p = &rep.Processes[i]
				}
			}
			require.NotNil(t, p, "the program run as nobody is in the report: %+v", rep.Processes)
			requireTags(t, *p, want)
			require.Equal(t, p.Heap.LiveBytes, sumLive(*p))
			if tc.stacks == "full" {
				require.NotNil(t, p.Stacks, "its events were drained")
			}
		})
	}
}

// The run's directories: the library every user can read (0644 in a 0711
// directory, unless the cache already is), the books directory 0733 in a
// 0711 directory when children can switch users (root) and 0700 in a 0700
// one otherwise, that directory on the memory filesystem when there is
// one with room (memBase); all of it removed when the run ends.
func TestRunDirModes(t *testing.T) {
	out, se, code := cli(t, "run", "-q", "--stacks", "off", "-o", filepath.Join(t.TempDir(), "r.json"), "--",
		"sh", "-c", `lib=${LD_PRELOAD%%:*}; echo "$TAGALLOC_DIR"; echo "$lib"; stat -c '%a' "$TAGALLOC_DIR" "$(dirname "$TAGALLOC_DIR")" "$lib" "$(dirname "$lib")"`)
	require.Equal(t, 0, code, se)
	f := strings.Fields(out)
	require.Len(t, f, 6, "%q", out)
	books, lib, booksMode, booksRootMode, libMode, libDirMode := f[0], f[1], f[2], f[3], f[4], f[5]
	booksRoot := filepath.Dir(books)
	require.True(t, strings.HasPrefix(filepath.Base(booksRoot), "tagalloc-run-"), booksRoot)
	require.Regexp(t, `^books-[0-9a-f]{32}$`, filepath.Base(books), "a name no one can guess")
	if mem := memBase(); mem != "" {
		require.Equal(t, mem, filepath.Dir(booksRoot), "the books on the memory filesystem")
	} else {
		require.Equal(t, runBase(), filepath.Dir(booksRoot))
	}
	if os.Geteuid() == 0 {
		require.Equal(t, [2]string{"733", "711"}, [2]string{booksMode, booksRootMode})
	} else {
		require.Equal(t, [2]string{"700", "700"}, [2]string{booksMode, booksRootMode})
	}
	libDir := filepath.Dir(lib)
	if strings.HasPrefix(filepath.Base(libDir), "tagalloc-run-") {
		require.Equal(t, runBase(), filepath.Dir(libDir))
		require.Equal(t, [2]string{"644", "711"}, [2]string{libMode, libDirMode}, "others pass through, never list")
	} else {
		require.True(t, everyoneCanRead(lib), "the cached library %s, readable by all", lib)
	}
	for _, d := range []string{booksRoot, libDir} {
		if strings.HasPrefix(filepath.Base(d), "tagalloc-run-") {
			_, err := os.Stat(d)
			require.True(t, os.IsNotExist(err), "the run's directory %s is removed: %v", d, err)
		}
	}
}

// A run's directory on the memory filesystem that no run holds (its
// tagalloc was killed) is removed by the next run; one a run holds, and
// one made less than a minute ago (not locked yet), are not.
func TestRunSweepsLeftRunDirs(t *testing.T) {
	mem := memBase()
	if mem == "" {
		t.Skip("no memory filesystem with room")
	}
	old := time.Now().Add(-2 * staleAfter)
	made := func(age time.Time) string {
		d, err := os.MkdirTemp(mem, "tagalloc-run-")
		require.NoError(t, err)
		t.Cleanup(func() { os.RemoveAll(d) })
		require.NoError(t, os.WriteFile(filepath.Join(d, "1.tagalloc"), []byte("books"), 0o600))
		require.NoError(t, os.Chtimes(d, age, age))
		return d
	}
	left, held, young := made(old), made(old), made(time.Now())
	lock := lockDir(held)
	require.NotNil(t, lock)
	defer lock.Close()
	_, se, code := cli(t, "run", "-q", "--stacks", "off", "-o", filepath.Join(t.TempDir(), "r.json"), "--", "true")
	require.Equal(t, 0, code, se)
	_, err := os.Stat(left)
	require.True(t, os.IsNotExist(err), "the directory no run holds is removed: %v", err)
	for _, d := range []string{held, young} {
		_, err := os.Stat(filepath.Join(d, "1.tagalloc"))
		require.NoError(t, err, "kept")
	}
}

// A child that runs without the library (LD_PRELOAD removed) is named in
// the tree, with why; so is one whose library could not make its books in
// the run's directory, and a static program, when cc can build one (here
// setuid_exec, forking and waiting for a sleep that is preloaded again).
// The shell, which made its books, is not.
func TestRunNamesChildrenWithoutBooks(t *testing.T) {
	script := `env -u LD_PRELOAD sleep 1; TAGALLOC_DIR=/nonexistent sleep 1.01; true`
	args := []string{"sh"}
	static := filepath.Join(publicDir(t, nil), "static_exec") // a short path: the tree cuts commands at 70 bytes
	b, err := exec.Command("cc", "-O1", "-static", "-o", static, filepath.Join("testdata", "setuid_exec.c")).CombinedOutput()
	if err == nil {
		script = `env -u LD_PRELOAD sleep 1; TAGALLOC_DIR=/nonexistent sleep 1.01; "$0" -f "$1" "$2" /bin/sleep 1; true`
		args = []string{static, strconv.Itoa(os.Getuid()), strconv.Itoa(os.Getgid())}
	} else {
		t.Logf("no static program (cc -static: %s)", b)
	}
	out := filepath.Join(t.TempDir(), "r.json")
	_, se, code := cli(t, append([]string{"run", "--stacks", "off", "-o", out, "--", "sh", "-c", script}, args...)...)
	require.Equal(t, 0, code, se)
	require.Contains(t, se, "ran without tagalloc's books (their memory is not in this report):")
	rep := validReport(t, reportSchema(t), out)
	whys := map[string]string{} // the report keeps the list: command -> why
	for _, p := range rep.WithoutBooks {
		require.Equal(t, os.Geteuid(), p.UID)
		whys[strings.Join(p.Command, " ")] = p.Why
	}
	require.Equal(t, "the library was not loaded (LD_PRELOAD removed, or the library unreadable for its user)", whys["sleep 1"], "%+v", rep.WithoutBooks)
	require.Contains(t, whys["sleep 1.01"], "could not make its books", "%+v", rep.WithoutBooks)
	require.Regexp(t, `pid \d+ +\S+ \(uid \d+\): the library was not loaded \(LD_PRELOAD removed, or the library unreadable for its user\)\n    sleep 1\n`, se)
	require.Regexp(t, `pid \d+ +\S+ \(uid \d+\): the library could not make its books in the run's directory \(it kept them in its memory\)\n    sleep 1\.01\n`, se)
	if err == nil {
		require.Regexp(t, `: no dynamic loader \(a static program\): LD_PRELOAD does not reach it\n    \S*static_exec -f \d+ \d+ /bin/sleep 1\n`, se)
	}
	require.NotContains(t, se, "    sh -c", "the shell made its books")
	require.NotContains(t, se, "    /bin/sleep", "the sleep under the static program made its books")
	so, _, code := cli(t, "report", out)
	require.Equal(t, 0, code)
	require.Contains(t, so, "ran without tagalloc's books", "tagalloc report shows the list too")
}

// A program with a malloc of its own (Chromium's allocator shim) loads
// the library and never calls it: it and the child it forks without an
// exec (a zygote's) are named with why, in the tree and the report; the
// shell that ran it made its books and is not.
func TestRunNamesProgramsWithTheirOwnMalloc(t *testing.T) {
	own := filepath.Join(publicDir(t, map[string]string{"own_malloc": buildC(t, "own_malloc")}), "own_malloc")
	out := filepath.Join(t.TempDir(), "r.json")
	_, se, code := cli(t, "run", "--stacks", "off", "-o", out, "--", "sh", "-c", `"$0" -f; exec "$0"`, own)
	require.Equal(t, 0, code, se)
	const why = "its program defines malloc (an allocator of its own, as Chromium's): the library is loaded but never called"
	require.Regexp(t, `  3 processes of \S*own_malloc, \S+ \(uid \d+\): `+regexp.QuoteMeta(why)+`\n    pids \d+ \d+ \d+\n    e\.g\. \S*own_malloc`, se, "one line: one program, one reason")
	rep := validReport(t, reportSchema(t), out)
	cmds := map[string]int{}
	for _, p := range rep.WithoutBooks {
		require.Equal(t, why, p.Why, "%+v", p)
		cmds[strings.Join(p.Command, " ")]++
	}
	require.Equal(t, map[string]int{own + " -f": 2, own: 1}, cmds, "the program, its forked child, and the program the shell became: %+v", rep.WithoutBooks)
	require.Len(t, rep.Processes, 1, "the shell's books: %+v", rep.Processes)
	require.Equal(t, "sh", rep.Processes[0].Command[0])
}
