package main

import (
	"bytes"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// runReporters runs testdata/reporters.c under tagalloc run (with extra
// flags) and returns what it expects and its process in the report.
func runReporters(t *testing.T, flags ...string) (map[string]uint64, reporter.Process, string) {
	t.Helper()
	dir := t.TempDir()
	prog := filepath.Join(dir, "reporters")
	b, err := exec.Command("cc", "-O1", "-g", "-fno-omit-frame-pointer", "-o", prog, filepath.Join("testdata", "reporters.c")).CombinedOutput()
	require.NoError(t, err, "%s", b)
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(dir, "report.json")
	cmd := exec.Command(bin, append(append([]string{"run"}, flags...), "-o", out, "--", prog)...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	want := map[string]uint64{}
	for _, l := range strings.Split(so.String(), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "expect" {
			v, err := strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
			want[f[1]] = v
		}
	}
	require.Len(t, want, 6, so.String())
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	require.Len(t, rep.Processes, 1)
	return want, rep.Processes[0], out
}

func item(t *testing.T, p reporter.Process, path string) reporter.Item {
	t.Helper()
	for _, it := range p.Reports {
		if it.Path == path {
			return it
		}
	}
	t.Fatalf("no item %s in %+v", path, p.Reports)
	return reporter.Item{}
}

func tagOf(t *testing.T, p reporter.Process, name string) reporter.Tag {
	t.Helper()
	for _, tg := range p.Tags {
		if tg.Name == name {
			return tg
		}
	}
	t.Fatalf("no tag %s", name)
	return reporter.Tag{}
}

// C memory reporters: their items reach the report, what they measured
// block by block comes out of the tags' lines, and heap-unclassified is
// what no reporter claimed.
func TestMemoryReporters(t *testing.T) {
	want, p, out := runReporters(t, "--stacks", "off") // the books alone: no dark-matter marks below
	require.Equal(t, uint64(4), want["items"])
	require.Equal(t, uint64(2), p.Collections, "once by the program, once at exit")
	entries := item(t, p, "explicit/cache/entries")
	require.Equal(t, "heap", entries.Kind)
	require.Equal(t, want["cache_bytes"]+want["shared_bytes"], entries.Amount)
	nodes := item(t, p, "explicit/list/nodes")
	require.Equal(t, want["list_bytes"]+want["shared_bytes"], nodes.Amount)
	mapped := item(t, p, "explicit/list/mapped")
	require.Equal(t, "nonheap", mapped.Kind)
	require.Equal(t, want["mapped"], mapped.Amount)
	count := item(t, p, "cache-entries")
	require.Equal(t, "other", count.Kind)
	require.Equal(t, "count", count.Units)
	require.Equal(t, uint64(100), count.Amount)

	cache := tagOf(t, p, "cache")
	require.Equal(t, want["cache_bytes"]+want["shared_bytes"], cache.LiveBytes)
	require.Equal(t, want["cache_bytes"]+2*want["shared_bytes"], cache.ReportedBytes, "the shared block was measured twice")
	require.Equal(t, uint64(0), item(t, p, "explicit/heap/cache").Amount, "the cache's reporter claims all of it")
	untagged := tagOf(t, p, reporter.DefaultTag)
	require.Equal(t, want["list_bytes"], untagged.ReportedBytes)
	unclassified := item(t, p, "explicit/heap-unclassified").Amount
	require.Equal(t, untagged.LiveBytes-want["list_bytes"], unclassified)
	require.GreaterOrEqual(t, unclassified, want["dark_bytes"])

	tree, se, code := cli(t, "report", out)
	require.Equal(t, 0, code, se)
	require.Contains(t, tree, "── cache/entries")
	require.Contains(t, tree, "── list/mapped")
	require.Regexp(t, `0 B \(0\.00%\) ── heap/cache .*claimed by reporters`, tree)

	// about:memory takes it as it is: heap items out of heap-unclassified
	_, se, code = cli(t, "report", out, "--format", "about-memory", "-o", filepath.Join(t.TempDir(), "m.json"))
	require.Equal(t, 0, code, se)

	// no stacks: the dark-matter report says what it needs
	dm, se, code := cli(t, "report", out, "--format", "dark-matter")
	require.Equal(t, 0, code, se)
	require.Contains(t, dm, "no dark-matter marks")
}

// Dark matter with every block recorded: the blocks no reporter measured,
// by the function that allocated them; the twice-reported block with both
// reporters; the once-reported ones; all exact.
func TestDarkMatter(t *testing.T) {
	want, p, out := runReporters(t, "-q", "--stacks", "full")
	require.NotNil(t, p.Stacks)
	dm := p.Stacks.DarkMatter
	require.NotNil(t, dm, "no dark-matter section")
	require.Equal(t, uint64(2), dm.Collections)
	require.Equal(t, want["shared_bytes"], dm.TwiceReported.Bytes)
	require.Equal(t, uint64(1), dm.TwiceReported.Blocks)
	require.Equal(t, want["cache_bytes"]+want["list_bytes"], dm.OnceReported.Bytes)
	require.Equal(t, uint64(150), dm.OnceReported.Blocks)
	fn := func(id uint32) string {
		for _, f := range dm.Traces[id] {
			if f.Module == "reporters" {
				return f.Function
			}
		}
		return ""
	}
	var dark, twice bool
	for _, r := range dm.Records {
		switch {
		case r.Kind == "unreported" && fn(r.Allocated) == "leak_dark":
			dark = true
			require.Equal(t, uint64(30), r.Blocks)
			require.Equal(t, want["dark_bytes"], r.Bytes)
			require.Equal(t, uint64(30*300), r.RequestedBytes)
			require.Equal(t, reporter.DefaultTag, r.Tag)
		case r.Kind == "twice-reported":
			twice = true
			require.Equal(t, "make_cache", fn(r.Allocated))
			require.Equal(t, "cache_reporter", fn(r.Reported))
			require.Equal(t, "buggy_reporter", fn(r.ReportedAgain))
			require.Equal(t, "cache", r.Tag)
		case r.Kind == "once-reported":
			require.Contains(t, []string{"make_cache", "make_list"}, fn(r.Allocated))
			require.Contains(t, []string{"cache_reporter", "buggy_reporter"}, fn(r.Reported))
		}
	}
	require.True(t, dark, "no unreported record for leak_dark: %+v", dm.Records)
	require.True(t, twice, "no twice-reported record")

	text, se, code := cli(t, "report", out, "--format", "dark-matter")
	require.Equal(t, 0, code, se)
	require.Contains(t, text, "Twice-reported {\n  1 block in heap block record 1 of 1 (tag cache)")
	require.Contains(t, text, "Reported again at {")
	require.Contains(t, text, "leak_dark")
	require.Contains(t, text, "30 blocks in heap block record")
}

// The cached-CFI unwinder takes the same stacks as libgcc's in a real
// program (Python: deep stacks through libpython and libc), every
// allocation checked (TAGALLOC_UNWIND=2 aborts on a difference).
func TestUnwindMatchesLibgcc(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "py.json")
	cmd := exec.Command(bin, "run", "-q", "--stacks", "full", "-o", out, "--", "python3", "-c",
		"import json, threading; t = threading.Thread(target=lambda: json.dumps(list(range(5000)))); t.start(); t.join(); print(len(json.dumps([{'k': i} for i in range(5000)])))")
	cmd.Env = append(cmd.Environ(), "TAGALLOC_UNWIND=2", "PYTHONMALLOC=malloc")
	b, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", b)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	var stacks int
	for _, p := range rep.Processes {
		if p.Stacks != nil {
			stacks += len(p.Stacks.Records)
		}
	}
	require.Greater(t, stacks, 100, "python's allocation sites")
}
