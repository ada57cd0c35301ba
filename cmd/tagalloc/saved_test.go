package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// The first run, as a new user types it: stacks sampled, the report saved
// as tagalloc.PROG.PID.json in the current directory, and one last line
// saying where it is and how to open it.
func TestRunDefaultSavesReport(t *testing.T) {
	prog := buildTagged(t)
	dir := t.TempDir()
	so, se, code := cliIn(t, dir, "run", "--", prog, "exit")
	require.Equal(t, 7, code, se)
	require.NotEmpty(t, parseBooks(t, so))
	saved, err := filepath.Glob(filepath.Join(dir, "tagalloc.tagged.*.json"))
	require.NoError(t, err)
	require.Len(t, saved, 1, se)
	name := filepath.Base(saved[0])
	rep, err := reporter.ReadFile(saved[0])
	require.NoError(t, err)
	p := rep.Processes[0]
	require.Equal(t, fmt.Sprintf("tagalloc.tagged.%d.json", p.PID), name, "named after the program and its pid")
	require.NotNil(t, p.Stacks, "stacks are sampled by default")
	require.Equal(t, "sampled", p.Stacks.Mode)
	fi, err := os.Stat(saved[0])
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the owner's alone")

	lines := strings.Split(strings.TrimSuffix(se, "\n"), "\n")
	last := lines[len(lines)-1]
	require.Equal(t, savedLine(name, true), last, "the last line says where the report is")
	require.Contains(t, last, "tagalloc report "+name+" --web")
	require.Contains(t, se, "heap/webgl-contexts", "the tree is printed")
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, left, 1, "no temporary file left")

	// the line's command opens it
	tree, se2, code := cliIn(t, dir, "report", name)
	require.Equal(t, 0, code, se2)
	require.Contains(t, tree, "heap/webgl-contexts")
	_, se2, code = cliIn(t, dir, "report", name, "--format", "pprof", "-o", filepath.Join(t.TempDir(), "p.pb.gz"))
	require.Equal(t, 0, code, se2)
}

// -q keeps the tree back but not where the report went (tagalloc chose
// the name); -q with -o FILE prints nothing; -o - writes the report to
// standard output and names no file; --stacks off saves a report without
// stacks, and the line offers only the formats it can render.
func TestRunSavedLine(t *testing.T) {
	prog := buildTagged(t)

	dir := t.TempDir()
	_, se, code := cliIn(t, dir, "run", "-q", "--", prog, "exit")
	require.Equal(t, 7, code, se)
	saved, _ := filepath.Glob(filepath.Join(dir, "tagalloc.tagged.*.json"))
	require.Len(t, saved, 1)
	require.Equal(t, savedLine(filepath.Base(saved[0]), true)+"\n", se, "-q: that line alone")

	out := filepath.Join(t.TempDir(), "r.json")
	_, se, code = cliIn(t, dir, "run", "-q", "-o", out, "--", prog, "exit")
	require.Equal(t, 7, code)
	require.Empty(t, se, "-q -o FILE: nothing")
	_, err := reporter.ReadFile(out)
	require.NoError(t, err)

	_, se, code = cliIn(t, dir, "run", "-o", out, "--", prog, "exit")
	require.Equal(t, 7, code)
	require.True(t, strings.HasSuffix(se, savedLine(out, true)+"\n"), "-o FILE: the last line names FILE\n%s", se)

	so, se, code := cliIn(t, dir, "run", "-q", "-o", "-", "--", prog, "exit")
	require.Equal(t, 7, code)
	require.Empty(t, se)
	i := strings.Index(so, "{\n") // after the program's own output
	require.GreaterOrEqual(t, i, 0, so)
	_, err = reporter.Read(strings.NewReader(so[i:]))
	require.NoError(t, err, "-o -: the report on standard output")

	offDir := t.TempDir()
	_, se, code = cliIn(t, offDir, "run", "--stacks", "off", "--", prog, "exit")
	require.Equal(t, 7, code)
	saved, _ = filepath.Glob(filepath.Join(offDir, "tagalloc.tagged.*.json"))
	require.Len(t, saved, 1)
	rep, err := reporter.ReadFile(saved[0])
	require.NoError(t, err)
	require.Nil(t, rep.Processes[0].Stacks, "--stacks off: no stacks")
	require.True(t, strings.HasSuffix(se, savedLine(filepath.Base(saved[0]), false)+"\n"), se)
	require.NotContains(t, se, "--web")

	require.NotContains(t, se, "\r", "not a terminal: no progress line")
	require.NotContains(t, se, "\x1b")
	others, _ := filepath.Glob(filepath.Join(dir, "tagalloc.*.json"))
	require.Len(t, others, 1, "only the default run saved in the working directory")
}

// A directory tagalloc cannot write in: PROG's status, and an error that
// says where the report would have gone and how to put it elsewhere.
func TestRunDefaultUnwritable(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes in any directory")
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	_, se, code := cliIn(t, dir, "run", "-q", "--", "true")
	require.Equal(t, 0, code)
	require.Contains(t, se, "-o FILE writes it elsewhere")
}

// saveNew never writes over what is there, of any kind: a regular file, a
// symbolic link (even a dangling one), a named pipe; the next name is
// taken, and the report arrives whole.
func TestSaveNewNeverReplaces(t *testing.T) {
	dir := t.TempDir()
	name := func(n int) string { return defaultReportName("prog", 42, n) }
	require.NoError(t, os.WriteFile(filepath.Join(dir, name(0)), []byte("mine"), 0o644))
	require.NoError(t, os.Symlink(filepath.Join(dir, "nowhere"), filepath.Join(dir, name(1))))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, name(2)), 0o600))
	write := func(w io.Writer) error { _, err := io.WriteString(w, "report"); return err }
	path, err := saveNew(dir, name, write)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dir, "tagalloc.prog.42.3.json"), path)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	require.Equal(t, "report", string(b))
	b, err = os.ReadFile(filepath.Join(dir, name(0)))
	require.NoError(t, err)
	require.Equal(t, "mine", string(b))
	fi, err := os.Lstat(filepath.Join(dir, name(1)))
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type())
	_, err = os.Stat(filepath.Join(dir, "nowhere"))
	require.ErrorIs(t, err, os.ErrNotExist, "the link's target was not created")
	fi, err = os.Lstat(filepath.Join(dir, name(2)))
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type())

	// a failed write leaves nothing
	boom := errors.New("boom")
	_, err = saveNew(dir, func(n int) string { return defaultReportName("other", 1, n) }, func(io.Writer) error { return boom })
	require.ErrorIs(t, err, boom)
	left, _ := filepath.Glob(filepath.Join(dir, "*other*"))
	require.Empty(t, left)
	hidden, _ := filepath.Glob(filepath.Join(dir, ".tagalloc-report-*"))
	require.Empty(t, hidden, "no temporary file left")
}

// The program's name is the user's argument, but it is still put in a
// file name and printed: only safe characters go in.
func TestDefaultReportName(t *testing.T) {
	for prog, want := range map[string]string{
		"python3":                       "tagalloc.python3.7.json",
		"/usr/bin/python3.11":           "tagalloc.python3.11.7.json",
		"../../evil\x1b[2J\n; rm -rf ~": "tagalloc.evil__2J___rm_-rf__.7.json",
		"":                              "tagalloc.prog.7.json",
		"/":                             "tagalloc.prog.7.json",
		"..":                            "tagalloc.prog.7.json",
		"\u202eexe.txt":                 "tagalloc._exe.txt.7.json",
		strings.Repeat("x", 300):        "tagalloc." + strings.Repeat("x", 64) + ".7.json",
	} {
		require.Equal(t, want, defaultReportName(prog, 7, 0), "%q", prog)
	}
	require.Equal(t, "tagalloc.sh.7.2.json", defaultReportName("sh", 7, 2))
	require.Regexp(t, regexp.MustCompile(`^tagalloc\.sh\.[0-9]+(\.[0-9]+)?\.json$`), defaultReportName("sh", 123, 4),
		"every default name matches .gitignore's tagalloc.*.json")
}

// The line quotes a path a shell would split, and shows no control
// characters.
func TestSavedLineQuotes(t *testing.T) {
	require.Equal(t, "tagalloc: report saved to r.json; open it with: tagalloc report r.json [--format json|about-memory]", savedLine("r.json", false))
	l := savedLine("/tmp/my report's\x1b[2J.json", true)
	require.Contains(t, l, `tagalloc report '/tmp/my report'\''s?[2J.json' --web`)
	require.NotContains(t, l, "\x1b")
}

// On a terminal the progress line appears once the work has taken
// progressAfter, is rewritten in place with the count, and is erased at
// the end; off a terminal nothing is written.
func TestProgressLine(t *testing.T) {
	var off bytes.Buffer
	p := newProgress(&off, false)
	p.step("symbolizing", nil, "")
	p.end()
	require.Empty(t, off.String())

	w := &lockedBuffer{}
	p = newProgress(w, true)
	var n atomic.Int64
	n.Store(1234)
	p.step("symbolizing", &n, "addresses")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(w.String(), "symbolizing: 1234 addresses") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.clear()
	got := w.String()
	require.Contains(t, got, "\r\x1b[Ktagalloc: symbolizing: 1234 addresses (")
	require.True(t, strings.HasSuffix(got, "\r\x1b[K"), "cleared: %q", got)
	p.step("writing the report", nil, "")
	for !strings.Contains(w.String(), "writing the report") && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	p.end()
	p.end() // run's deferred end after the explicit one
	got = w.String()
	require.Contains(t, got, "tagalloc: writing the report (")
	require.True(t, strings.HasSuffix(got, "\r\x1b[K"), "erased at the end: %q", got)
	require.NotContains(t, got, "\n", "one line, rewritten in place")
	var nilp *progress
	nilp.step("x", nil, "")
	nilp.clear()
	nilp.end()
}

// lockedBuffer is a bytes.Buffer the progress goroutine and the test may
// share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
