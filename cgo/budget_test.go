package cgo

import (
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tag budgets (testdata/budget_test.c): each policy on one thread, 8
// threads racing at a fail budget's limit (live bytes never pass it),
// nested budgets, a budget set on a tag in use; preloaded, against the
// debug core and under the thread sanitizer.
func TestBudgets(t *testing.T) {
	t.Parallel()
	runEveryBuild(t, "budget_test")
}

// An unmodified program (testdata/budget_prog.c) calls a library that tags
// its own memory (testdata/budget_lib.c): under TAGALLOC_BUDGET the
// library's cache stops at its budget, to the block, while the program
// goes on allocating; without a budget it fills; a budget that cannot be
// read stops the program at start, naming the entry.
func TestBudgetUnmodifiedProgram(t *testing.T) {
	t.Parallel()
	cc, err := Compiler()
	require.NoError(t, err)
	dir := t.TempDir()
	so := filepath.Join(dir, "libbudgetlib.so")
	out, err := exec.Command(cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fPIC", "-shared", "-fno-builtin",
		"-o", so, filepath.Join("testdata", "budget_lib.c")).CombinedOutput()
	require.NoError(t, err, "building the library: %s", out)
	prog := filepath.Join(dir, "budget_prog")
	out, err = exec.Command(cc, "-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror", "-fno-builtin", "-o", prog,
		filepath.Join("testdata", "budget_prog.c"), "-L"+dir, "-lbudgetlib", "-Wl,-rpath,"+dir).CombinedOutput()
	require.NoError(t, err, "building the program: %s", out)
	pre := "LD_PRELOAD=" + lib(t)

	cache := func(r result) int {
		t.Helper()
		require.NoError(t, r.err, "%s%s", r.stdout, r.stderr)
		require.Contains(t, r.stdout, "own OK", "the program's own memory")
		f := strings.Fields(r.stdout)
		require.GreaterOrEqual(t, len(f), 2)
		n, err := strconv.Atoi(f[1])
		require.NoError(t, err, r.stdout)
		return n
	}
	// 16 KiB blocks, a size class of its own: 8 MiB holds 512 of them
	require.Equal(t, 512, cache(runProg(t, time.Minute, []string{pre, "TAGALLOC_BUDGET=thirdparty=8M"}, prog)))
	require.Equal(t, 256, cache(runProg(t, time.Minute, []string{pre, "TAGALLOC_BUDGET=other=1M, thirdparty/cache=4MiB:fail"}, prog)))
	require.Equal(t, 2000, cache(runProg(t, time.Minute, []string{pre}, prog)), "no budget")
	require.Equal(t, 2000, cache(runProg(t, time.Minute, []string{pre, "TAGALLOC_BUDGET=thirdparty=4M:observe"}, prog)), "observed only")

	for _, bad := range []string{"thirdparty=8X", "thirdparty", "=4M", "thirdparty=4M:sometimes", "a//b=1M", "thirdparty=0"} {
		r := runProg(t, time.Minute, []string{pre, "TAGALLOC_BUDGET=" + bad}, prog)
		require.Error(t, r.err, bad)
		require.Contains(t, r.stderr, "TAGALLOC_BUDGET: cannot read", bad)
		require.NotContains(t, r.stdout, "cache", "%s: the program ran", bad)
	}
}
