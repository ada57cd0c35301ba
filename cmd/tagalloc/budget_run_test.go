package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// A budget set from the environment of an unmodified program reaches the
// report: tagalloc run of cgo/testdata/budget_prog.c, whose library tags
// its cache "thirdparty/cache", under TAGALLOC_BUDGET=thirdparty=8M. The
// library's cache stopped at the budget (one refusal), the report says so
// in JSON and in the tree, and the tag never held more than the limit.
func TestRunBudgetFromEnvironment(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join("..", "..", "cgo", "testdata")
	so := filepath.Join(dir, "libbudgetlib.so")
	out, err := exec.Command("cc", "-O1", "-g", "-fPIC", "-shared", "-fno-builtin", "-o", so, filepath.Join(src, "budget_lib.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	prog := filepath.Join(dir, "budget_prog")
	out, err = exec.Command("cc", "-O1", "-g", "-fno-builtin", "-o", prog, filepath.Join(src, "budget_prog.c"),
		"-L"+dir, "-lbudgetlib", "-Wl,-rpath,"+dir).CombinedOutput()
	require.NoError(t, err, "%s", out)
	bin, err := tagallocBin()
	require.NoError(t, err)

	report := filepath.Join(dir, "r.json")
	cmd := exec.Command(bin, "run", "-o", report, "--", prog)
	cmd.Env = append(os.Environ(), "TAGALLOC_BUDGET=thirdparty=8M")
	var so2, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so2, &se
	require.NoError(t, cmd.Run(), se.String())
	require.Contains(t, so2.String(), "cache 512 of 2000")
	require.Contains(t, so2.String(), "own OK")
	require.Contains(t, se.String(), "budget thirdparty: ")
	require.Contains(t, se.String(), " of 8.0 MiB (fail), 1 refused, 1 crossing")

	rep, err := reporter.ReadFile(report)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 1)
	p := rep.Processes[0]
	require.Len(t, p.Budgets, 1)
	b := p.Budgets[0]
	require.Equal(t, "thirdparty", b.Tag)
	require.Equal(t, uint64(8<<20), b.LimitBytes)
	require.Equal(t, "fail", b.Policy)
	require.Equal(t, uint64(1), b.Refused)
	require.LessOrEqual(t, b.ChargedBytes, b.LimitBytes)
	for _, tg := range p.Tags {
		if tg.Name == "thirdparty/cache" {
			require.Equal(t, uint64(8<<20), tg.AllocBytes, "512 blocks of 16 KiB, then refused")
			require.LessOrEqual(t, tg.PeakLiveBytes, uint64(8<<20))
		}
	}
}
