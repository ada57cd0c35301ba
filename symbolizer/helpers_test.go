// Test helpers: building the C test programs with gcc, running them, and
// finding the lines of their marked call sites.

package symbolizer

import (
	"bufio"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// needTool skips the test when a tool the C test programs need is missing.
func needTool(t testing.TB, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := exec.LookPath(n); err != nil {
			t.Skipf("%s is not installed (the test builds C programs with it): %v", n, err)
		}
	}
}

// run runs a command, failing the test with its output if it fails.
func run(t testing.TB, dir string, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %s:\n%s", name, strings.Join(args, " "), out)
}

func testdata(t testing.TB, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	require.NoError(t, err)
	return p
}

// buildLib builds testdata/foo.c into dir/libfoo.so.
func buildLib(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, "libfoo.so")
	args := append([]string{"-g", "-O1", "-fPIC", "-shared", "-Wl,--build-id"}, flags...)
	run(t, dir, "gcc", append(args, "-o", out, testdata(t, "foo.c"))...)
	return out
}

// buildProg builds testdata/prog.c into dir/prog, linked with dir/libfoo.so.
func buildProg(t testing.TB, dir string, flags ...string) string {
	t.Helper()
	out := filepath.Join(dir, "prog")
	args := append([]string{"-g", "-O1", "-Wl,--build-id"}, flags...)
	args = append(args, "-o", out, testdata(t, "prog.c"), "-L"+dir, "-lfoo", "-Wl,-rpath,"+dir)
	run(t, dir, "gcc", args...)
	return out
}

// markerLine returns the line of testdata/file holding "CALL-MARKER name".
func markerLine(t testing.TB, file, name string) int {
	t.Helper()
	data, err := os.ReadFile(testdata(t, file))
	require.NoError(t, err)
	for i, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, "CALL-MARKER "+name+" ") {
			return i + 1
		}
	}
	t.Fatalf("no CALL-MARKER %s in %s", name, file)
	return 0
}

// runProg starts prog, reads the addresses it prints, reads its module
// table while it waits on stdin, and lets it exit (so every lookup after
// this happens after the process is gone).
func runProg(t testing.TB, prog string) (map[string]uint64, []Module) {
	t.Helper()
	cmd := exec.Command(prog)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	addrs := map[string]uint64{}
	sc := bufio.NewScanner(stdout)
	ready := false
	for sc.Scan() {
		if sc.Text() == "ready" {
			ready = true
			break
		}
		name, hex, ok := strings.Cut(sc.Text(), " ")
		require.True(t, ok, "line %q", sc.Text())
		v, err := strconv.ParseUint(strings.TrimPrefix(hex, "0x"), 16, 64)
		require.NoError(t, err, "line %q", sc.Text())
		addrs[name] = v
	}
	require.True(t, ready, "the program ended before it was ready")
	mods, err := ReadModules(cmd.Process.Pid)
	stdin.Close()
	require.NoError(t, cmd.Wait())
	require.NoError(t, err)
	return addrs, mods
}

// symbolValue returns the value of the named symbol in the .symtab of the
// ELF file at path.
func symbolValue(t testing.TB, path, name string) uint64 {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name == name {
			return s.Value
		}
	}
	t.Fatalf("no symbol %s in %s", name, path)
	return 0
}

// fileModule is the Module of the file at path as if loaded at its link
// addresses (Bias 0), for lookups by ELF virtual address.
func fileModule(t testing.TB, path string) Module {
	t.Helper()
	id, err := BuildID(path)
	if err != nil {
		id = ""
	}
	return Module{Path: path, BuildID: id, Start: 0, End: ^uint64(0)}
}

// copyFile copies src to dst.
func copyFile(t testing.TB, src, dst string) {
	t.Helper()
	data, err := os.ReadFile(src)
	require.NoError(t, err)
	require.NoError(t, os.MkdirAll(filepath.Dir(dst), 0o755))
	require.NoError(t, os.WriteFile(dst, data, 0o755))
}
