package tagcgo

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// needCgo skips the test when cgo programs cannot be built here.
func needCgo(t *testing.T) {
	t.Helper()
	out, err := exec.Command("go", "env", "CGO_ENABLED", "CC").Output()
	require.NoError(t, err)
	f := strings.Fields(string(out))
	if len(f) < 2 || f[0] != "1" {
		t.Skip("cgo is disabled (go env CGO_ENABLED)")
	}
	if _, err := exec.LookPath(f[1]); err != nil {
		t.Skipf("no C compiler (go env CC = %q): %v", f[1], err)
	}
}

// build runs the go builds in parallel: pkg path -> binary path in dir.
func build(t *testing.T, dir string, pkgs map[string]string) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan string, len(pkgs))
	for pkg, bin := range pkgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if out, err := exec.Command("go", "build", "-o", filepath.Join(dir, bin), pkg).CombinedOutput(); err != nil {
				errs <- pkg + ": " + err.Error() + "\n" + string(out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Fatal(e)
	}
}

type tagFigures struct{ LiveBytes, LiveBlocks, AllocBytes, AllocBlocks uint64 }

// What testdata/cgoprog's C side allocates under each tag, in usable bytes
// (every size is a size class, or whole 64 KiB pages for 1 MiB).
var wantTags = map[string]tagFigures{
	// 3x4096 2x65536 5x48 2x1024, less 4096 and 48 freed inside and 65536 freed untagged
	"c-side": {2*4096 + 65536 + 4*48 + 2*1024, 9, 3*4096 + 2*65536 + 5*48 + 2*1024, 12},
	// 3x256 262144 1MiB, less one 256
	"inner":   {2*256 + 262144 + 1<<20, 4, 3*256 + 262144 + 1<<20, 5},
	"worker":  {10 * 2048, 10, 10 * 2048, 10},
	"panicky": {4096, 1, 4096, 1},
	"deep":    {40 * 16, 40, 40 * 16, 40}, // 32 levels tagged, 8 more run under the enclosing one
}

func TestPreloadedProgram(t *testing.T) {
	needCgo(t)
	dir := t.TempDir()
	build(t, dir, map[string]string{
		"./testdata/cgoprog":                        "cgoprog",
		"github.com/tagalloc/tagalloc/cmd/tagalloc": "tagalloc",
	})
	prog, cli := filepath.Join(dir, "cgoprog"), filepath.Join(dir, "tagalloc")

	t.Run("not-preloaded", func(t *testing.T) {
		cmd := exec.Command(prog)
		cmd.Env = withoutPreload(os.Environ())
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Equal(t, "loaded false\ndeep-errors 0\nran 2\n", string(out))
	})

	t.Run("preloaded", func(t *testing.T) {
		report := filepath.Join(dir, "report.json")
		cmd := exec.Command(cli, "run", "-q", "-o", report, "--", prog)
		var so, se bytes.Buffer
		cmd.Stdout, cmd.Stderr = &so, &se
		require.NoError(t, cmd.Run(), "stdout:\n%s\nstderr:\n%s", &so, &se)
		out := so.String()
		require.Contains(t, out, "loaded true\n")
		require.Contains(t, out, "deep-errors 8\n")
		require.Contains(t, out, "ran 2\n")

		// What tagcgo.Stats said inside the program.
		stats := map[string]tagFigures{}
		for _, l := range strings.Split(out, "\n") {
			f := strings.Fields(l)
			if len(f) != 7 || f[0] != "stats" {
				continue
			}
			var v [5]uint64
			for i := range v {
				n, err := strconv.ParseUint(f[i+2], 10, 64)
				require.NoError(t, err, l)
				v[i] = n
			}
			require.GreaterOrEqual(t, v[4], v[0], "peak >= live: %s", l)
			stats[f[1]] = tagFigures{v[0], v[1], v[2], v[3]}
		}
		require.Equal(t, wantTags, stats, "tagcgo.Stats in the program (never-used must be absent)")

		rep, err := reporter.ReadFile(report)
		require.NoError(t, err)
		require.Len(t, rep.Processes, 1)
		got := map[string]tagFigures{}
		for _, tg := range rep.Processes[0].Tags {
			got[tg.Name] = tagFigures{tg.LiveBytes, tg.LiveBlocks, tg.AllocBytes, tg.AllocBlocks}
		}
		for name, w := range wantTags {
			require.Equal(t, w, got[name], "tag %s in the report", name)
		}
		require.NotContains(t, got, "never-used")
	})

	// This package's own tests, in this test binary, preloaded.
	t.Run("tests-preloaded", func(t *testing.T) {
		cmd := exec.Command(cli, "run", "-q", "--", os.Args[0], "-test.count=1", "-test.v",
			"-test.run", "^(TestLoaded|TestBadTagsDoNotRunFn|TestPanicInFnPropagates|TestConcurrentDo)$")
		cmd.Env = append(os.Environ(), "TAGCGO_WANT_LOADED=1")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		require.Contains(t, string(out), "--- PASS: TestLoaded", "%s", out)
		require.Equal(t, 4, strings.Count(string(out), "--- PASS:"), "%s", out)
	})
}

// With a library that has only Set/Clear (no push/pop), Do sets the tag and
// restores the enclosing one by name, or clears it at the outermost level.
func TestSetClearFallback(t *testing.T) {
	needCgo(t)
	dir := t.TempDir()
	build(t, dir, map[string]string{"./testdata/cgoprog": "cgoprog"})
	lib := filepath.Join(dir, "libsetclear.so")
	out, err := exec.Command(goEnv(t, "CC"), "-shared", "-fPIC", "-O1", "-o", lib, "testdata/setclear/setclear.c").CombinedOutput()
	require.NoError(t, err, "%s", out)

	cmd := exec.Command(filepath.Join(dir, "cgoprog"))
	cmd.Env = append(withoutPreload(os.Environ()), "LD_PRELOAD="+lib)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), "stderr:\n%s", &se)
	require.Equal(t, "loaded true\ndeep-errors 8\nran 2\n", so.String(), "no tagalloc_tag_stats: no stats lines")

	// Each thread's events, in order.
	events := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(se.String()), "\n") {
		tid, ev, ok := strings.Cut(l, " ")
		require.True(t, ok, l)
		events[tid] = append(events[tid], ev)
	}
	var seqs []string
	for _, ev := range events {
		seqs = append(seqs, strings.Join(ev, ","))
	}
	all := strings.Join(seqs, "\n")
	require.Contains(t, all, "set c-side,set inner,set c-side,clear")
	require.Contains(t, all, "set worker,clear")
	require.Contains(t, all, "set panicky,clear")
	deep := strings.Repeat("set deep,", 32+31) + "clear" // 32 levels in, 31 restores, then clear
	require.Contains(t, all, deep)
	require.Equal(t, 32+31+1+4+2+2, strings.Count(all, ",")+len(seqs), "no other events:\n%s", all)
}

func goEnv(t *testing.T, key string) string {
	t.Helper()
	out, err := exec.Command("go", "env", key).Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}

func withoutPreload(env []string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, "LD_PRELOAD=") {
			out = append(out, e)
		}
	}
	return out
}
