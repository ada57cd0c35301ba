// Real programs under the preload: each runs once without the library and
// then several times with LD_PRELOAD=libtagalloc.so, and must behave the same
// (docs/ARCHITECTURE.md, D1 and D9).

package cgo

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// realProgRepeats is how many times TestRealProg runs each program under the
// preload, after one run without it; -short runs it once.
var realProgRepeats = flag.Int("realprog.repeats", 3, "runs of each real program under the preload in TestRealProg")

// realProgTimeout bounds one run of a case (all its steps). A program still
// running when it expires is reported as hung, with the state and stacks of
// its processes, and killed.
var realProgTimeout = 60 * time.Second

// preloadLib returns the path of the library to preload, building it if
// needed; the test fails if it cannot be built.
func preloadLib(t *testing.T) string {
	t.Helper()
	lib, err := Library()
	if err != nil {
		t.Fatalf("building %s: %v", LibraryName, err)
	}
	return lib
}

// realProg is one case of TestRealProg.
type realProg struct {
	name string
	// need lists the programs the case runs; it is skipped (failed when
	// CI=true) if one is not installed. Steps name them by these names.
	need []string
	// roles are the processes that must report the preload library mapped
	// into them (and, without the preload, not mapped): see checkFile.
	roles []string
	// run does the work: a deterministic workload, step by step.
	run func(r *runner) error
}

func realProgs() []realProg {
	return []realProg{
		{
			name:  "python3-threads",
			need:  []string{"python3"},
			roles: []string{"python3-main"},
			run:   func(r *runner) error { return runPython(r, "threads.py") },
		},
		{
			name:  "python3-multiprocessing-fork",
			need:  []string{"python3"},
			roles: []string{"python3-main", "pool-worker", "fork-child", "fork-grandchild", "fork-with-threads"},
			run:   func(r *runner) error { return runPython(r, "mp.py") },
		},
		{
			name:  "sqlite3",
			need:  []string{"sqlite3"},
			roles: []string{"sqlite3"},
			run:   runSQLite,
		},
		{
			name: "git",
			need: []string{"git"},
			run:  runGit,
		},
		{
			name:  "gcc",
			need:  []string{"gcc"},
			roles: []string{"prog-main", "forked-child"},
			run:   runGCC,
		},
		{
			name:  "bash-pipeline",
			need:  []string{"bash", "sort", "uniq", "awk", "sed", "tr", "wc", "paste", "xargs", "seq", "md5sum"},
			roles: []string{"bash-main", "subshell", "pipeline-stage"},
			run: func(r *runner) error {
				_, err := r.run(step{args: []string{"bash", testdataPath("pipeline.sh")}, stderr: true})
				return err
			},
		},
		{
			name:  "redis",
			need:  []string{"redis-server", "redis-benchmark", "redis-cli"},
			roles: []string{"redis-server"},
			run:   runRedis,
		},
	}
}

// TestRealProg runs real programs under the preload and compares what they
// print, and how they exit, with a run without it.
func TestRealProg(t *testing.T) {
	requireNullDevice(t)
	lib := preloadLib(t)
	enableCores(t)
	mapped, err := filepath.EvalSymlinks(lib)
	require.NoError(t, err)
	repeats := *realProgRepeats
	if testing.Short() {
		repeats = 1
	}
	for _, c := range realProgs() {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			progs := lookProgs(t, c.need)
			base, err := runCase(t, c, progs, lib, mapped, false)
			if err != nil {
				t.Fatalf("%s without the preload failed, so the test or the machine is broken (not the library): %v", c.name, err)
			}
			for i := 1; i <= repeats; i++ {
				got, err := runCase(t, c, progs, lib, mapped, true)
				what := fmt.Sprintf("%s under LD_PRELOAD=%s (run %d of %d)", c.name, lib, i, repeats)
				if err != nil {
					t.Errorf("%s: %v", what, err)
					if errors.Is(err, errHung) {
						return // another hang would only take another timeout
					}
					continue
				}
				if got != base {
					t.Errorf("%s: output differs from the run without the preload (- without, + with):\n%s", what, lineDiff(base, got))
				}
			}
		})
	}
}

// requireNullDevice fails the test if /dev/null is not the null device: a
// plain file there hands what one program wrote to it to the next that
// reads it (git gc's pack-objects reads its stdin, /dev/null, as
// revisions), which would look like the library's fault.
func requireNullDevice(t *testing.T) {
	t.Helper()
	fi, err := os.Stat(os.DevNull)
	if err != nil {
		t.Fatalf("the machine is broken, not the library: %v", err)
	}
	if fi.Mode()&os.ModeCharDevice == 0 {
		t.Fatalf("the machine is broken, not the library: %s is not the null device but %v (as root: rm %s; mknod -m 666 %s c 1 3)",
			os.DevNull, fi.Mode(), os.DevNull, os.DevNull)
	}
}

// runCase runs c once in a fresh directory and returns its transcript (what
// must not change under the preload).
func runCase(t *testing.T, c realProg, progs map[string]string, lib, mapped string, preload bool) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), realProgTimeout)
	defer cancel()
	dir := t.TempDir()
	r := &runner{ctx: ctx, progs: progs, dir: dir, lib: mapped}
	r.env = append(r.env, "HOME="+dir, "LC_ALL=C", "LANG=C", "TZ=UTC",
		"PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1",
		"REALPROG_CHECK="+filepath.Join(dir, checkFile), "REALPROG_LIB="+mapped)
	if preload {
		r.env = append(r.env, "LD_PRELOAD="+lib)
	}
	start := time.Now()
	err := c.run(r)
	sort.Slice(r.times, func(i, j int) bool { return r.times[i].d > r.times[j].d })
	var slow []string
	for _, st := range r.times[:min(3, len(r.times))] {
		slow = append(slow, fmt.Sprintf("`%s` %v", st.name, st.d.Round(time.Millisecond)))
	}
	what := "without the preload"
	if preload {
		what = "under the preload"
	}
	t.Logf("%s: %v (slowest: %s)", what, time.Since(start).Round(time.Millisecond), strings.Join(slow, ", "))
	if bt := coreBacktraces(dir); bt != "" {
		if err == nil {
			err = errors.New("a process dumped core")
		}
		err = fmt.Errorf("%w\n%s", err, bt)
	}
	if err != nil {
		return "", err
	}
	if err := r.verifyPreload(c.roles, preload); err != nil {
		return "", err
	}
	return r.out.String(), nil
}

// lookProgs finds the programs a case needs, or skips the test (fails it
// when CI=true: CI installs them all).
func lookProgs(t *testing.T, names []string) map[string]string {
	t.Helper()
	progs := map[string]string{}
	for _, n := range names {
		p, err := lookProg(n)
		if err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatalf("%s is not installed (CI must install it): %v", n, err)
			}
			t.Skipf("%s is not installed: %v", n, err)
		}
		progs[n] = p
	}
	return progs
}

// lookProg finds a program on PATH; for python3 it prefers the system
// interpreter over a pyenv shim (a shim also works: it execs the real binary
// with LD_PRELOAD still set).
func lookProg(name string) (string, error) {
	if name == "python3" {
		if fi, err := os.Stat("/usr/bin/python3"); err == nil && fi.Mode()&0o111 != 0 {
			return "/usr/bin/python3", nil
		}
	}
	return exec.LookPath(name)
}

// testdataPath is the absolute path of a file in testdata/realprog (steps
// run in a temporary directory).
func testdataPath(name string) string {
	p, err := filepath.Abs(filepath.Join("testdata", "realprog", name))
	if err != nil {
		panic(err)
	}
	return p
}

// checkFile, in a run's directory, collects one line "ROLE mapped|absent" from
// every process that checks its own /proc/self/maps for the library
// ($REALPROG_LIB); the scripts append to $REALPROG_CHECK. It is not part of
// the compared output.
const checkFile = "preload-check.txt"

// runner runs the steps of one run of a case and records the transcript.
type runner struct {
	ctx    context.Context
	progs  map[string]string
	dir    string   // a fresh directory: every step's working directory
	env    []string // added to the environment of every step
	lib    string   // the library as /proc/PID/maps names it
	out    strings.Builder
	checks []string // "ROLE mapped|absent" found by the test itself
	times  []stepTime
}

// stepTime is how long a step took, for the log.
type stepTime struct {
	name string
	d    time.Duration
}

// step is one program run.
type step struct {
	args   []string // args[0]: a name from realProg.need, or a path relative to the run's directory
	name   string   // shown in the transcript and messages instead of args (when they vary between runs)
	env    []string // more environment, overriding
	stdin  string
	stderr bool // stderr is deterministic: compare it too
	// summary, if set, replaces stdout in the transcript (for output that is
	// not deterministic, such as throughput) and may reject it.
	summary func(stdout string) (string, error)
	exit    int // the expected exit status
}

// errHung marks a program that did not finish in time.
var errHung = errors.New("hung")

// run runs s to completion, adds it to the transcript, and returns its stdout.
func (r *runner) run(s step) (string, error) {
	p, err := r.start(s)
	if err != nil {
		return "", err
	}
	return r.finish(p)
}

// finish waits for p, checks how it ended and adds it to the transcript.
func (r *runner) finish(p *proc) (string, error) {
	p.wait()
	r.times = append(r.times, stepTime{p.name, p.elapsed})
	if err := p.failure(); err != nil {
		return "", err
	}
	stdout := r.scrub(p.stdout.String())
	fmt.Fprintf(&r.out, "$ %s\n", p.name)
	if p.step.summary != nil {
		sum, err := p.step.summary(stdout)
		if err != nil {
			return "", fmt.Errorf("`%s`: %v\nstdout:\n%s", p.name, err, tail(stdout, 20))
		}
		r.out.WriteString(sum)
	} else {
		r.out.WriteString(stdout)
	}
	if p.step.stderr && p.stderr.Len() > 0 {
		fmt.Fprintf(&r.out, "[stderr]\n%s", r.scrub(p.stderr.String()))
	}
	if !strings.HasSuffix(r.out.String(), "\n") {
		r.out.WriteString("\n")
	}
	if p.exit != 0 {
		fmt.Fprintf(&r.out, "[exit %d]\n", p.exit)
	}
	return stdout, nil
}

// scrub replaces the run's directory (which differs between runs).
func (r *runner) scrub(s string) string {
	s = strings.ReplaceAll(s, r.dir, "$DIR")
	return strings.ReplaceAll(s, testdataPath(""), "$TESTDATA")
}

// note adds a line of the test's own making to the transcript.
func (r *runner) note(format string, args ...any) {
	fmt.Fprintf(&r.out, "# "+format+"\n", args...)
}

// writeFile writes a file in the run's directory.
func (r *runner) writeFile(name, content string) error {
	p := filepath.Join(r.dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(content), 0o644)
}

// hashFile adds the SHA-256 of a file in the run's directory to the transcript.
func (r *runner) hashFile(name string) error {
	b, err := os.ReadFile(filepath.Join(r.dir, name))
	if err != nil {
		return err
	}
	r.note("sha256 %s %x (%d bytes)", name, sha256.Sum256(b), len(b))
	return nil
}

// checkMaps records whether the library appears in the given /proc/PID/maps
// text, for role.
func (r *runner) checkMaps(role, maps string) {
	state := "absent"
	for _, line := range strings.Split(maps, "\n") {
		if strings.HasSuffix(line, r.lib) {
			state = "mapped"
			break
		}
	}
	r.checks = append(r.checks, role+" "+state)
}

// verifyPreload checks that every role reported, and that the library was
// mapped into each process that reported exactly when it was preloaded.
func (r *runner) verifyPreload(roles []string, preload bool) error {
	b, err := os.ReadFile(filepath.Join(r.dir, checkFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	lines := append(strings.Fields(string(b)), strings.Fields(strings.Join(r.checks, "\n"))...)
	want := "absent"
	if preload {
		want = "mapped"
	}
	seen := map[string]int{}
	wrong := map[string]int{}
	for i := 0; i+1 < len(lines); i += 2 {
		role, state := lines[i], lines[i+1]
		seen[role]++
		if state != want {
			wrong[role]++
		}
	}
	var msgs []string
	for _, role := range roles {
		if seen[role] == 0 {
			msgs = append(msgs, fmt.Sprintf("no %s process reported whether the library is mapped (the check did not run)", role))
		}
	}
	for role, n := range wrong {
		if preload {
			msgs = append(msgs, fmt.Sprintf("the preload is not in effect: %s is not mapped in %d of %d %s processes", r.lib, n, seen[role], role))
		} else {
			msgs = append(msgs, fmt.Sprintf("%s is mapped in %d of %d %s processes without LD_PRELOAD", r.lib, n, seen[role], role))
		}
	}
	if len(msgs) > 0 {
		sort.Strings(msgs)
		return errors.New(strings.Join(msgs, "; "))
	}
	return nil
}

// proc is a started step.
type proc struct {
	step           step
	name           string // the command line, for messages
	cmd            *exec.Cmd
	stdout, stderr bytes.Buffer
	done           chan struct{} // closed when wait returns
	once           sync.Once
	started        time.Time
	elapsed        time.Duration

	mu   sync.Mutex
	hang string // set by the cancel function when the run's deadline expired

	exit    int            // exit status, or -1
	sig     syscall.Signal // signal that ended the process, or 0
	core    bool
	waitErr error
}

// start starts s in its own process group.
func (r *runner) start(s step) (*proc, error) {
	path := r.progs[s.args[0]]
	if path == "" {
		if !strings.Contains(s.args[0], "/") {
			return nil, fmt.Errorf("step %q: %s is not in the case's need list", strings.Join(s.args, " "), s.args[0])
		}
		path = filepath.Join(r.dir, s.args[0])
	}
	p := &proc{step: s, name: s.name, done: make(chan struct{})}
	if p.name == "" {
		p.name = r.scrub(strings.Join(s.args, " "))
	}
	cmd := exec.CommandContext(r.ctx, path, s.args[1:]...)
	cmd.Dir = r.dir
	cmd.Env = append(append(baseEnv(), r.env...), s.env...)
	cmd.Stdin = strings.NewReader(s.stdin)
	cmd.Stdout = &p.stdout
	cmd.Stderr = &p.stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if errors.Is(r.ctx.Err(), context.DeadlineExceeded) {
			info := describeHang(cmd.Process.Pid)
			p.mu.Lock()
			p.hang = info
			p.mu.Unlock()
		}
		return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	cmd.WaitDelay = 5 * time.Second
	p.cmd = cmd
	p.started = time.Now()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("`%s`: %v", p.name, err)
	}
	return p, nil
}

// baseEnv is the test's environment without a preload of its own (or a
// Python allocator choice: runPython sets it).
func baseEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "LD_PRELOAD=") || strings.HasPrefix(kv, "PYTHONMALLOC=") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

// wait waits for the process (once) and records how it ended. Processes it
// left in its group are killed.
func (p *proc) wait() {
	p.once.Do(func() {
		defer close(p.done)
		p.waitErr = p.cmd.Wait()
		p.elapsed = time.Since(p.started)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		p.exit = -1
		if ps := p.cmd.ProcessState; ps != nil {
			ws := ps.Sys().(syscall.WaitStatus)
			switch {
			case ws.Exited():
				p.exit = ws.ExitStatus()
			case ws.Signaled():
				p.sig = ws.Signal()
				p.core = ws.CoreDump()
			}
		}
	})
}

// failure says how the process went wrong: hung, killed by a signal, an
// unexpected exit status, or output held open by processes it left behind.
func (p *proc) failure() error {
	p.mu.Lock()
	hang := p.hang
	p.mu.Unlock()
	errOut := tail(p.stderr.String(), 30)
	switch {
	case hang != "":
		return fmt.Errorf("`%s` %w: still running after %v (when the run's limit of %v expired), killed\n%s\nstderr (last lines):\n%s",
			p.name, errHung, p.elapsed.Round(time.Second), realProgTimeout, hang, errOut)
	case p.sig != 0:
		core := ""
		if p.core {
			core = ", core dumped"
		}
		return fmt.Errorf("`%s` was killed by signal %s%s\nstderr (last lines):\n%s", p.name, signalName(p.sig), core, errOut)
	case p.exit == -1:
		return fmt.Errorf("`%s` did not run: %v", p.name, p.waitErr)
	case p.exit != p.step.exit:
		hint := ""
		if p.exit > 128 && p.exit < 128+65 {
			hint = fmt.Sprintf(" (a shell's way of saying a child was killed by %s)", signalName(syscall.Signal(p.exit-128)))
		}
		return fmt.Errorf("`%s` exited with status %d, want %d%s\nstderr (last lines):\n%s\nstdout (last lines):\n%s",
			p.name, p.exit, p.step.exit, hint, errOut, tail(p.stdout.String(), 10))
	case errors.Is(p.waitErr, exec.ErrWaitDelay):
		return fmt.Errorf("`%s` exited, but processes it started kept its output open for %v", p.name, p.cmd.WaitDelay)
	}
	return nil
}

// signalName names a signal: "SIGSEGV (segmentation fault)".
func signalName(s syscall.Signal) string {
	names := map[syscall.Signal]string{
		syscall.SIGABRT: "SIGABRT", syscall.SIGBUS: "SIGBUS", syscall.SIGFPE: "SIGFPE",
		syscall.SIGILL: "SIGILL", syscall.SIGKILL: "SIGKILL", syscall.SIGPIPE: "SIGPIPE",
		syscall.SIGSEGV: "SIGSEGV", syscall.SIGSYS: "SIGSYS", syscall.SIGTERM: "SIGTERM",
		syscall.SIGTRAP: "SIGTRAP", syscall.SIGINT: "SIGINT", syscall.SIGQUIT: "SIGQUIT",
		syscall.SIGHUP: "SIGHUP", syscall.SIGXCPU: "SIGXCPU", syscall.SIGXFSZ: "SIGXFSZ",
	}
	n, ok := names[s]
	if !ok {
		n = "signal " + strconv.Itoa(int(s))
	}
	return fmt.Sprintf("%s (%v)", n, s)
}

// describeHang lists the processes of a hung process group with their state
// and, if gdb is installed, the stacks of their threads.
func describeHang(pgid int) string {
	type procInfo struct {
		pid         int
		comm, state string
	}
	var procs []procInfo
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		s := string(b)
		open, closing := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
		if open < 0 || closing < open {
			continue
		}
		f := strings.Fields(s[closing+1:]) // state ppid pgrp ...
		if len(f) < 3 || f[2] != strconv.Itoa(pgid) {
			continue
		}
		procs = append(procs, procInfo{pid, s[open+1 : closing], f[0]})
	}
	var b strings.Builder
	fmt.Fprintf(&b, "processes in the group:\n")
	for _, p := range procs {
		wchan, _ := os.ReadFile(fmt.Sprintf("/proc/%d/wchan", p.pid))
		fmt.Fprintf(&b, "  pid %d %s state %s wchan %s\n", p.pid, p.comm, p.state, wchan)
	}
	gdb, err := exec.LookPath("gdb")
	if err != nil {
		return b.String()
	}
	for i, p := range procs {
		if i == 4 {
			fmt.Fprintf(&b, "(stacks of the other %d processes not shown)\n", len(procs)-i)
			break
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		cmd := exec.CommandContext(ctx, gdb, "-p", strconv.Itoa(p.pid), "-batch", "-nx", "-ex", "thread apply all bt 30")
		cmd.Env = append(baseEnv(), "DEBUGINFOD_URLS=")
		out, _ := cmd.CombinedOutput()
		cancel()
		fmt.Fprintf(&b, "stacks of pid %d (%s):\n", p.pid, p.comm)
		writeGDBLines(&b, string(out), "#", "Thread ")
	}
	return b.String()
}

// writeGDBLines copies gdb's lines that start with one of prefixes (frames,
// threads), indented, at most 80 of them, each cut at 160 bytes.
func writeGDBLines(b *strings.Builder, out string, prefixes ...string) {
	n := 0
	for _, line := range strings.Split(out, "\n") {
		keep := false
		for _, p := range prefixes {
			keep = keep || strings.HasPrefix(line, p)
		}
		if !keep {
			continue
		}
		if n++; n > 80 {
			b.WriteString("  ...\n")
			return
		}
		if len(line) > 160 {
			line = line[:160] + "..."
		}
		fmt.Fprintf(b, "  %s\n", line)
	}
}

// enableCores lets the programs the test starts dump core (where the
// kernel's core_pattern puts them: with the default, their working
// directory), so that a crash is reported with a backtrace.
func enableCores(t *testing.T) {
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_CORE, &old); err != nil || old.Max == 0 || old.Cur == old.Max {
		return
	}
	l := old
	l.Cur = l.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_CORE, &l); err == nil {
		t.Cleanup(func() { _ = syscall.Setrlimit(syscall.RLIMIT_CORE, &old) })
	}
}

// coreBacktraces finds core files under dir and returns the stacks of
// their threads (with gdb), or "".
func coreBacktraces(dir string) string {
	var cores []string
	_ = filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		n := d.Name()
		if n == "core" || (strings.HasPrefix(n, "core.") && strings.Trim(n[5:], "0123456789") == "") {
			cores = append(cores, path)
		}
		return nil
	})
	if len(cores) == 0 {
		return ""
	}
	var b strings.Builder
	gdb, gdbErr := exec.LookPath("gdb")
	for i, core := range cores {
		if i == 3 {
			fmt.Fprintf(&b, "(%d more core files not shown)\n", len(cores)-i)
			break
		}
		exe := coreExecutable(core)
		fmt.Fprintf(&b, "core file %s of %s:\n", strings.TrimPrefix(core, dir+"/"), exe)
		if gdbErr != nil {
			b.WriteString("  (install gdb for its backtrace)\n")
			continue
		}
		args := []string{"-batch", "-nx", "-ex", "thread apply all bt 30"}
		if exe != "" {
			args = append(args, exe)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		cmd := exec.CommandContext(ctx, gdb, append(args, core)...)
		cmd.Env = append(baseEnv(), "DEBUGINFOD_URLS=")
		out, _ := cmd.CombinedOutput()
		cancel()
		writeGDBLines(&b, string(out), "#", "Thread ", "Core was generated", "Program terminated")
	}
	return b.String()
}

// coreExecutable returns the file of a core's first mapping (from its
// NT_FILE note): the program that dumped it.
func coreExecutable(core string) string {
	f, err := elf.Open(core)
	if err != nil {
		return ""
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE || p.Filesz > 64<<20 {
			continue
		}
		b := make([]byte, p.Filesz)
		if _, err := p.ReadAt(b, 0); err != nil {
			continue
		}
		for len(b) >= 12 {
			nameSize, descSize, typ := f.ByteOrder.Uint32(b), f.ByteOrder.Uint32(b[4:]), f.ByteOrder.Uint32(b[8:])
			off := 12 + int(nameSize+3)&^3
			end := off + int(descSize)
			if end > len(b) {
				break
			}
			desc := b[off:end]
			const ntFile = 0x46494c45 // "FILE"
			if typ == ntFile && len(desc) >= 16 {
				count := f.ByteOrder.Uint64(desc) // then the page size, count (start, end, offset), the names
				if names := 16 + 24*count; count < 1<<20 && names < uint64(len(desc)) {
					name, _, _ := strings.Cut(string(desc[names:]), "\x00")
					return name
				}
			}
			b = b[min(len(b), off+int(descSize+3)&^3):]
		}
	}
	return ""
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	if strings.TrimSpace(s) == "" {
		return "(none)"
	}
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = append([]string{fmt.Sprintf("[... %d lines]", len(lines)-n)}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "\n")
}

// lineDiff shows how got differs from want, line by line (- want, + got),
// with a little context and the command whose output each change is in.
func lineDiff(want, got string) string {
	a, b := strings.Split(want, "\n"), strings.Split(got, "\n")
	// Trim the common prefix and suffix; diff the middle.
	pre := 0
	for pre < len(a) && pre < len(b) && a[pre] == b[pre] {
		pre++
	}
	suf := 0
	for suf < len(a)-pre && suf < len(b)-pre && a[len(a)-1-suf] == b[len(b)-1-suf] {
		suf++
	}
	ma, mb := a[pre:len(a)-suf], b[pre:len(b)-suf]
	type edit struct {
		op   byte // ' ', '-', '+'
		line string
		ai   int // index in a of this line, or of the next line of a
	}
	var edits []edit
	if len(ma)*len(mb) <= 4_000_000 {
		// Longest common subsequence.
		n, m := len(ma), len(mb)
		lcs := make([]int32, (n+1)*(m+1))
		at := func(i, j int) *int32 { return &lcs[i*(m+1)+j] }
		for i := n - 1; i >= 0; i-- {
			for j := m - 1; j >= 0; j-- {
				if ma[i] == mb[j] {
					*at(i, j) = *at(i+1, j+1) + 1
				} else {
					*at(i, j) = max(*at(i+1, j), *at(i, j+1))
				}
			}
		}
		i, j := 0, 0
		for i < n || j < m {
			switch {
			case i < n && j < m && ma[i] == mb[j]:
				edits = append(edits, edit{' ', ma[i], pre + i})
				i++
				j++
			case j < m && (i == n || *at(i, j+1) > *at(i+1, j)):
				edits = append(edits, edit{'+', mb[j], pre + i})
				j++
			default:
				edits = append(edits, edit{'-', ma[i], pre + i})
				i++
			}
		}
	} else {
		// Too big for the table: compare line by line.
		for i := 0; i < max(len(ma), len(mb)); i++ {
			switch {
			case i < len(ma) && i < len(mb) && ma[i] == mb[i]:
				edits = append(edits, edit{' ', ma[i], pre + i})
				continue
			case i < len(ma):
				edits = append(edits, edit{'-', ma[i], pre + i})
			}
			if i < len(mb) {
				edits = append(edits, edit{'+', mb[i], pre + min(i, len(ma))})
			}
		}
	}
	// The command a line of a belongs to: the last "$ " line at or before it.
	cmdOf := func(ai int) string {
		for k := min(ai, len(a)-1); k >= 0; k-- {
			if strings.HasPrefix(a[k], "$ ") {
				return a[k][2:]
			}
		}
		return ""
	}
	var out strings.Builder
	const maxLines, contextLines = 40, 2
	shown, lastCmd, lastShown := 0, "\x00", -1
	for k, e := range edits {
		if e.op == ' ' {
			continue
		}
		if shown >= maxLines {
			fmt.Fprintf(&out, "[... more differences]\n")
			break
		}
		if c := cmdOf(e.ai); c != lastCmd {
			fmt.Fprintf(&out, "in the output of `%s`:\n", c)
			lastCmd, lastShown = c, -1
		}
		from := max(k-contextLines, lastShown+1)
		if lastShown >= 0 && from > lastShown+1 {
			out.WriteString("  ...\n")
		}
		for c := from; c < k; c++ {
			if edits[c].op == ' ' {
				fmt.Fprintf(&out, "   %s\n", edits[c].line)
				shown++
			}
		}
		fmt.Fprintf(&out, " %c %s\n", e.op, e.line)
		shown++
		lastShown = k
		// Trailing context.
		if k+1 < len(edits) && edits[k+1].op == ' ' {
			for c := k + 1; c < len(edits) && c <= k+contextLines && edits[c].op == ' '; c++ {
				fmt.Fprintf(&out, "   %s\n", edits[c].line)
				shown++
				lastShown = c
			}
		}
	}
	return out.String()
}

// runPython runs a script twice: with Python's own small-object allocator
// (the default: objects up to 512 bytes never reach malloc), and with
// PYTHONMALLOC=malloc, so that every object is a malloc block.
func runPython(r *runner, script string) error {
	args := []string{"python3", "-B", testdataPath(script)}
	if _, err := r.run(step{args: args, stderr: true}); err != nil {
		return err
	}
	_, err := r.run(step{args: args, env: []string{"PYTHONMALLOC=malloc"}, stderr: true,
		name: "PYTHONMALLOC=malloc " + r.scrub(strings.Join(args, " "))})
	return err
}

// runSQLite runs sqlite.sql on a new database, reopens it, and checks that
// sqlite3 itself had the library mapped (the script saves /proc/self/maps).
func runSQLite(r *runner) error {
	script, err := os.ReadFile(testdataPath("sqlite.sql"))
	if err != nil {
		return err
	}
	if _, err := r.run(step{args: []string{"sqlite3", "test.db"}, stdin: string(script), stderr: true}); err != nil {
		return err
	}
	maps, err := os.ReadFile(filepath.Join(r.dir, "preload-maps-sqlite3.txt"))
	if err != nil {
		return fmt.Errorf("sqlite3 did not save its /proc/self/maps: %v", err)
	}
	r.checkMaps("sqlite3", string(maps))
	_, err = r.run(step{args: []string{"sqlite3", "-bail", "test.db",
		"PRAGMA integrity_check; SELECT count(*), sum(amount), max(note) FROM orders; SELECT count(*) FROM blobs;"}, stderr: true})
	return err
}

// runGit builds a repository with fixed authors and dates (so the commit
// hashes are fixed too): commits, a branch, a merge, a tag, history and
// diffs, gc and fsck.
func runGit(r *runner) error {
	r.env = append(r.env, "GIT_CONFIG_NOSYSTEM=1", "GIT_AUTHOR_NAME=Real Prog", "GIT_AUTHOR_EMAIL=realprog@example.com",
		"GIT_COMMITTER_NAME=Real Prog", "GIT_COMMITTER_EMAIL=realprog@example.com",
		"GIT_CONFIG_COUNT=2", "GIT_CONFIG_KEY_0=gc.autoDetach", "GIT_CONFIG_VALUE_0=false",
		"GIT_CONFIG_KEY_1=core.autocrlf", "GIT_CONFIG_VALUE_1=false")
	day := 0
	git := func(args ...string) error {
		day++
		date := fmt.Sprintf("GIT_AUTHOR_DATE=2024-03-%02dT12:00:00Z", day%28+1)
		cdate := fmt.Sprintf("GIT_COMMITTER_DATE=2024-03-%02dT12:00:00Z", day%28+1)
		args = append([]string{"git", "-C", "repo"}, args...)
		_, err := r.run(step{args: args, env: []string{date, cdate}, stderr: true})
		return err
	}
	// Files whose content depends on (file, version).
	writeFiles := func(from, to, version int) error {
		for f := from; f < to; f++ {
			var b strings.Builder
			for l := 0; l < 60; l++ {
				fmt.Fprintf(&b, "file %d line %d value %d %s\n", f, l, (f*7919+l*31+version*104729)%100003, strings.Repeat("ab", (f+l+version)%17))
			}
			if err := r.writeFile(fmt.Sprintf("repo/src/dir%d/file%03d.txt", f%8, f), b.String()); err != nil {
				return err
			}
		}
		return nil
	}
	if _, err := r.run(step{args: []string{"git", "init", "-q", "-b", "main", "repo"}, stderr: true}); err != nil {
		return err
	}
	steps := []func() error{
		func() error { return writeFiles(0, 150, 0) },
		func() error { return git("add", "-A") },
		func() error { return git("commit", "-q", "-m", "initial: 150 files") },
		func() error { return writeFiles(0, 40, 1) },
		func() error { return git("commit", "-q", "-a", "-m", "main: change files 0-39") },
		func() error { return git("checkout", "-q", "-b", "feature") },
		func() error { return writeFiles(100, 150, 2) },
		func() error { return git("commit", "-q", "-a", "-m", "feature: change files 100-149") },
		func() error { return writeFiles(150, 170, 2) },
		func() error { return git("add", "-A") },
		func() error { return git("commit", "-q", "-m", "feature: add files 150-169") },
		func() error { return git("checkout", "-q", "main") },
		func() error { return writeFiles(40, 80, 3) },
		func() error { return git("commit", "-q", "-a", "-m", "main: change files 40-79") },
		func() error { return git("merge", "-q", "--no-ff", "-m", "merge feature", "feature") },
		func() error { return git("tag", "-a", "v1.0", "-m", "release 1.0") },
		func() error { return writeFiles(0, 10, 4) },
		func() error { return git("commit", "-q", "-a", "-m", "main: after the release") },
		func() error { return git("log", "--format=%H %s") },
		func() error { return git("log", "--graph", "--format=%h %p %an %ad %s", "--date=iso-strict", "--all") },
		func() error { return git("describe", "--tags", "--long") },
		func() error { return git("diff", "--stat", "v1.0~1", "HEAD") },
		func() error { return git("diff", "v1.0", "HEAD", "--", "src/dir1") },
		func() error { return git("blame", "--porcelain", "src/dir3/file003.txt") },
		func() error { return git("grep", "-n", "-e", "value 1[0-9]*7 ", "HEAD") },
		func() error { return git("gc", "-q", "--prune=now") },
		func() error { return git("fsck", "--full", "--strict", "--no-progress") },
		func() error { return git("rev-list", "--all", "--objects") },
		func() error { return git("cat-file", "-p", "v1.0") },
		func() error { return git("archive", "--format=tar", "-o", "../archive.tar", "v1.0") },
		func() error { return r.hashFile("archive.tar") },
		func() error { return git("status", "--porcelain=v1", "--branch") },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return err
		}
	}
	return nil
}

// runGCC compiles prog.c and a generated file with many functions (cc1, as
// and ld under the preload when it is set), then runs both programs.
func runGCC(r *runner) error {
	if err := r.writeFile("big.c", generateC()); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"gcc", "-O2", "-g", "-Wall", "-Wextra", "-pthread", "-o", "prog", testdataPath("prog.c")},
		{"gcc", "-O2", "-Wall", "-c", "-o", "big.o", "big.c"},
		{"gcc", "-o", "big", "big.o"},
		{"./big"},
		{"./prog"},
	} {
		if _, err := r.run(step{args: args, stderr: true}); err != nil {
			return err
		}
	}
	return nil
}

// generateC writes a C program with many functions for cc1 to optimize.
func generateC() string {
	var b strings.Builder
	b.WriteString("#include <stdio.h>\n#include <string.h>\n\n")
	const funcs = 60
	for f := 0; f < funcs; f++ {
		fmt.Fprintf(&b, "static unsigned long f%d(unsigned long x) {\n  unsigned long acc = %d;\n  char buf[64];\n", f, f*2654435761%1000003)
		b.WriteString("  for (int i = 0; i < 40; i++) {\n    switch ((x + i) % 12) {\n")
		for c := 0; c < 12; c++ {
			fmt.Fprintf(&b, "    case %d: acc = acc * %d + (x >> %d) + i; break;\n", c, 3+2*((f+c)%23), (f+c)%13)
		}
		b.WriteString("    }\n  }\n")
		fmt.Fprintf(&b, "  memset(buf, (int)(acc & 0x7f), sizeof buf);\n  for (int i = 0; i < 64; i++) acc += (unsigned long)buf[i] * %d;\n", f+1)
		if f > 0 {
			fmt.Fprintf(&b, "  if (x %% 7 == %d) acc ^= f%d(x / 3);\n", f%7, f-1)
		}
		b.WriteString("  return acc;\n}\n\n")
	}
	b.WriteString("int main(void) {\n  unsigned long h = 0;\n")
	fmt.Fprintf(&b, "  unsigned long (*fs[])(unsigned long) = {")
	for f := 0; f < funcs; f++ {
		fmt.Fprintf(&b, "f%d, ", f)
	}
	b.WriteString("};\n  for (unsigned i = 0; i < sizeof fs / sizeof fs[0]; i++) {\n    h = h * 31 + fs[i](i * 1000003UL);\n")
	b.WriteString("    if (i % 20 == 19) printf(\"after f%u: %016lx\\n\", i, h);\n  }\n  return 0;\n}\n")
	return b.String()
}

// runRedis starts redis-server on 127.0.0.1, drives it with redis-benchmark,
// loads and reads back deterministic data with redis-cli, and shuts it down;
// the server must exit with status 0.
func runRedis(r *runner) error {
	srv, port, err := startRedis(r)
	if err != nil {
		return err
	}
	defer func() { // on failure
		select {
		case <-srv.done:
		default:
			_ = syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGKILL)
			<-srv.done
		}
	}()
	maps, err := os.ReadFile(fmt.Sprintf("/proc/%d/maps", srv.cmd.Process.Pid))
	if err != nil {
		return fmt.Errorf("reading redis-server's maps: %v", err)
	}
	r.checkMaps("redis-server", string(maps))
	p := strconv.Itoa(port)
	cli := func(s step, args ...string) step {
		s.args = append([]string{"redis-cli", "-h", "127.0.0.1", "-p", p}, args...)
		s.name = strings.Join(append([]string{"redis-cli"}, args...), " ")
		return s
	}
	benchTests := regexp.MustCompile(`(?m)^\s*([A-Z]+): [0-9.]+ requests per second`)
	bench := step{
		args: []string{"redis-benchmark", "-h", "127.0.0.1", "-p", p, "-q", "-n", "20000", "-t", "set,get,incr,lpush,lpop,sadd,hset", "-P", "8"},
		name: "redis-benchmark -q -n 20000 -t set,get,incr,lpush,lpop,sadd,hset -P 8",
		summary: func(out string) (string, error) {
			var names []string
			for _, m := range benchTests.FindAllStringSubmatch(strings.ReplaceAll(out, "\r", "\n"), -1) {
				names = append(names, m[1])
			}
			if len(names) != 7 {
				return "", fmt.Errorf("want 7 tests to report requests per second, got %d (%v)", len(names), names)
			}
			return "completed: " + strings.Join(names, " ") + "\n", nil
		},
	}
	if _, err := r.run(bench); err != nil {
		return err
	}
	if _, err := r.run(cli(step{}, "DBSIZE")); err != nil {
		return err
	}
	if _, err := r.run(cli(step{}, "FLUSHALL")); err != nil {
		return err
	}
	// Bulk load: strings of many sizes, lists, hashes, sets, sorted sets.
	var load bytes.Buffer
	resp := func(args ...string) {
		fmt.Fprintf(&load, "*%d\r\n", len(args))
		for _, a := range args {
			fmt.Fprintf(&load, "$%d\r\n%s\r\n", len(a), a)
		}
	}
	for i := 0; i < 12000; i++ {
		k := strconv.Itoa(i)
		resp("SET", "str:"+k, strings.Repeat(string(rune('a'+i%26)), 1+(i*7919)%(1<<(i%15+1))))
		resp("RPUSH", "list:"+strconv.Itoa(i%50), k)
		resp("HSET", "hash:"+strconv.Itoa(i%40), "f"+k, strings.Repeat("v", i%300))
		resp("SADD", "set:"+strconv.Itoa(i%30), strconv.Itoa(i*31%5000))
		resp("ZADD", "zset:"+strconv.Itoa(i%20), strconv.Itoa(i*17%1000), "m"+k)
		if i%3 == 0 {
			resp("APPEND", "str:"+strconv.Itoa(i/2), strings.Repeat("+", i%500))
		}
		if i%5 == 0 {
			resp("DEL", "str:"+strconv.Itoa(i/3))
		}
	}
	if _, err := r.run(cli(step{stdin: load.String()}, "--pipe")); err != nil {
		return err
	}
	var cmds strings.Builder
	for _, c := range []string{
		"DBSIZE", "STRLEN str:1", "STRLEN str:16383", "GETRANGE str:11999 0 40", "GET str:3",
		"LLEN list:7", "LRANGE list:7 0 9", "LINDEX list:49 -1", "HLEN hash:3", "HGET hash:3 f3043",
		"SCARD set:11", "SISMEMBER set:1 31", "SISMEMBER set:1 32", "ZCARD zset:5", "ZRANGE zset:5 0 9 WITHSCORES",
		"ZRANGEBYSCORE zset:6 100 120", "SORT list:3 LIMIT 0 10", "INCRBY counter 41", "INCR counter",
		"SET obj:big abc", "DEBUG DIGEST", "DEBUG DIGEST-VALUE str:100 hash:7 zset:3",
	} {
		cmds.WriteString(c + "\n")
	}
	if _, err := r.run(cli(step{stdin: cmds.String(), stderr: true})); err != nil {
		return err
	}
	if _, err := r.run(cli(step{stderr: true}, "SHUTDOWN", "NOSAVE")); err != nil {
		return err
	}
	select {
	case <-srv.done:
	case <-time.After(20 * time.Second):
		_ = syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGKILL)
		<-srv.done
		return fmt.Errorf("redis-server did not exit within 20s of SHUTDOWN NOSAVE\nlog:\n%s", tail(srv.stdout.String(), 20))
	}
	if err := srv.failure(); err != nil {
		return fmt.Errorf("%v\nlog (last lines):\n%s", err, tail(srv.stdout.String(), 20))
	}
	r.note("redis-server exited with status %d", srv.exit)
	return nil
}

// startRedis starts redis-server on a free port of 127.0.0.1 and waits until
// it answers PING.
func startRedis(r *runner) (*proc, int, error) {
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		args := []string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1",
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", r.dir, "--logfile", ""}
		if redisMajor(r.progs["redis-server"]) >= 7 {
			args = append(args, "--enable-debug-command", "local") // for DEBUG DIGEST (allowed by default before 7)
		}
		srv, err := r.start(step{args: args})
		if err != nil {
			return nil, 0, err
		}
		// Reap it as soon as it exits; srv.done says when. Its output is
		// only read after that.
		go srv.wait()
		if lastErr = waitRedis(r.ctx, port, srv); lastErr == nil {
			return srv, port, nil
		}
		_ = syscall.Kill(-srv.cmd.Process.Pid, syscall.SIGKILL)
		srv.wait()
		if f := srv.failure(); f != nil && srv.sig != syscall.SIGKILL {
			lastErr = fmt.Errorf("%v: %v\nlog:\n%s", lastErr, f, tail(srv.stdout.String(), 20))
		} else {
			lastErr = fmt.Errorf("%v\nlog:\n%s", lastErr, tail(srv.stdout.String(), 20))
		}
		if !strings.Contains(srv.stdout.String(), "Address already in use") {
			break
		}
	}
	return nil, 0, fmt.Errorf("starting redis-server: %v", lastErr)
}

// redisMajor returns the major version of redis-server ("Redis server
// v=7.0.15 ..."), or 0.
func redisMajor(path string) int {
	out, _ := exec.Command(path, "--version").Output()
	m := regexp.MustCompile(`v=([0-9]+)\.`).FindSubmatch(out)
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

// waitRedis waits until the server on port answers PING, it exits, or the
// run's deadline expires.
func waitRedis(ctx context.Context, port int, srv *proc) error {
	for {
		select {
		case <-srv.done:
			return errors.New("redis-server exited before answering PING")
		case <-ctx.Done():
			return errors.New("redis-server did not answer PING before the deadline")
		default:
		}
		c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", port), time.Second)
		if err == nil {
			_ = c.SetDeadline(time.Now().Add(2 * time.Second))
			_, _ = c.Write([]byte("PING\r\n"))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "+PONG") {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}
