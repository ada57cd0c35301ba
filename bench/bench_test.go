package bench

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestMedian(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   []float64
		want float64
	}{
		{"one", []float64{3}, 3},
		{"odd unsorted", []float64{5, 1, 3}, 3},
		{"even", []float64{4, 1, 3, 2}, 2.5},
		{"outlier", []float64{1, 1.1, 0.9, 50, 1}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := append([]float64(nil), tc.in...)
			require.Equal(t, tc.want, Median(in))
			require.Equal(t, tc.in, in, "Median must not reorder its input")
		})
	}
	require.True(t, math.IsNaN(Median(nil)))
}

func TestGeoMean(t *testing.T) {
	g, n := GeoMean([]float64{1, 4})
	require.InDelta(t, 2, g, 1e-12)
	require.Equal(t, 2, n)
	g, n = GeoMean([]float64{0.5, 2, math.NaN(), 0, -1, math.Inf(1)})
	require.InDelta(t, 1, g, 1e-12)
	require.Equal(t, 2, n, "NaN, zero, negative and infinite values are skipped")
	g, n = GeoMean(nil)
	require.True(t, math.IsNaN(g))
	require.Zero(t, n)
}

func TestRatioAndSpread(t *testing.T) {
	require.Equal(t, 0.5, Ratio(1, 2))
	require.True(t, math.IsNaN(Ratio(1, 0)))
	require.True(t, math.IsNaN(Ratio(math.NaN(), 1)))
	require.InDelta(t, 0.2, Spread([]float64{0.9, 1, 1.1}), 1e-12)
	require.Zero(t, Spread([]float64{7}))
}

func TestSchedule(t *testing.T) {
	require.Equal(t, [][]int{{0, 1, 2}, {1, 2, 0}, {2, 0, 1}, {0, 1, 2}}, Schedule(3, 4))
	// Every round runs each allocator once; over n rounds each allocator
	// takes every position once.
	const n = 5
	pos := map[[2]int]int{}
	for _, round := range Schedule(n, n) {
		seen := map[int]bool{}
		for p, a := range round {
			require.False(t, seen[a], "allocator %d twice in one round", a)
			seen[a] = true
			pos[[2]int{a, p}]++
		}
		require.Len(t, seen, n)
	}
	require.Len(t, pos, n*n)
	require.Empty(t, Schedule(3, 0))
}

func TestParseOutput(t *testing.T) {
	s, err := parseOutput("checksum: 00ff\nmetric work_s 0.25\nmetric rss_base_kib 1216\n")
	require.NoError(t, err)
	require.Equal(t, "checksum: 00ff", s.Output)
	require.Equal(t, map[string]float64{"work_s": 0.25, "rss_base_kib": 1216}, s.Metrics)

	_, err = parseOutput("checksum: 1\nmetric x\n")
	require.ErrorContains(t, err, "bad metric line")
	_, err = parseOutput("metric x 1\n")
	require.ErrorContains(t, err, "no output")
}

func TestParseRedisBenchmark(t *testing.T) {
	out := " SET: rps=0.0 (overall: -nan) avg_msec=-nan (overall: -nan)\r" +
		" SET: 952380.94 requests per second, p50=0.743 msec\n" +
		" GET: 1038062.25 requests per second, p50=0.695 msec\n" +
		" LPUSH: rps=719808.8 (overall: 1254666.8)\r LPUSH: 1265822.75 requests per second, p50=0.527 msec\n" +
		" LPOP: 1265822.75 requests per second, p50=0.567 msec\n\n"
	s, err := parseRedisBenchmark(out)
	require.NoError(t, err)
	require.Equal(t, redisTests, s.Output)
	require.InDelta(t, 952.38094, s.Metrics["set_krps"], 1e-6)
	_, err = parseRedisBenchmark(" SET: 1 requests per second\n")
	require.ErrorContains(t, err, "want")
}

func TestEnviron(t *testing.T) {
	env := []string{"A=1", "LD_PRELOAD=/old.so", "B=2"}
	require.Equal(t, []string{"A=1", "B=2", "X=y", "LD_PRELOAD=/new.so"}, environ(env, "/new.so", []string{"X=y"}))
	require.Equal(t, []string{"A=1", "B=2"}, environ(env, "", nil))
}

func TestFindAllocators(t *testing.T) {
	old := TagallocLibrary
	defer func() { TagallocLibrary = old }()
	TagallocLibrary = func() (string, error) {
		return "", fmt.Errorf("building failed: exit status 1\nmore detail\ncc1: fatal error: static.c: No such file\nlast")
	}

	found, notes, err := FindAllocators([]string{"glibc", "tagalloc", "mine=/does/not/exist.so", "self=" + os.Args[0]})
	require.NoError(t, err)
	require.Equal(t, []Allocator{{Name: Glibc}, {Name: "self", Preload: os.Args[0]}}, found)
	require.Len(t, notes, 2)
	require.Equal(t, "tagalloc: skipped, its library does not build yet: building failed: exit status 1: cc1: fatal error: static.c: No such file", notes[0])
	require.Contains(t, notes[1], "mine: skipped")

	_, _, err = FindAllocators([]string{"nosuchmalloc"})
	require.ErrorContains(t, err, "unknown allocator")
	_, _, err = FindAllocators([]string{"glibc", "glibc"})
	require.ErrorContains(t, err, "twice")
}

func TestWorkloadRegistry(t *testing.T) {
	cfiles, err := fs.Glob(sources, "workloads/*.c")
	require.NoError(t, err)
	used := map[string]bool{}
	names := map[string]bool{}
	for _, w := range Workloads() {
		require.False(t, names[w.Name], "workload %s twice", w.Name)
		names[w.Name] = true
		require.NotEmpty(t, w.Doc, w.Name)
		require.NotNil(t, w.QuickArgs, "%s needs quick arguments", w.Name)
		if w.Kind == KindC {
			used[w.Program] = true
		}
		for _, a := range append(append([]string{w.Stdin}, w.Args...), w.QuickArgs...) {
			if rest, ok := strings.CutPrefix(a, "$SRC/"); ok {
				_, err := sources.ReadFile("workloads/" + rest)
				require.NoError(t, err, "%s uses a script that is not embedded", w.Name)
			}
		}
	}
	for _, f := range cfiles {
		name := strings.TrimSuffix(path.Base(f), ".c")
		require.True(t, used[name], "workloads/%s.c is not in Workloads()", name)
		delete(used, name)
	}
	require.Empty(t, used, "workloads without a C file")
	require.Len(t, Select(Workloads(), func(n string) bool { return strings.HasPrefix(n, "small_random") }), 2)
}

func TestTableRender(t *testing.T) {
	tb := &Table{Title: "T", Header: []string{"name", "a", "longer"},
		Rows:   [][]string{{"x", "1.0", "2"}, {"long-name", "10.25", ""}},
		Footer: [][]string{{"geomean", "", "0.9"}}}
	var b bytes.Buffer
	require.NoError(t, tb.Render(&b))
	require.Equal(t, "T\n"+
		"name           a  longer\n"+
		"------------------------\n"+
		"x            1.0       2\n"+
		"long-name  10.25\n"+
		"------------------------\n"+
		"geomean              0.9\n", b.String())
}

// fakeResult builds a Result with known medians: time and RSS per
// allocator, three runs each (the middle one is the median).
func fakeResult() *Result {
	cell := func(alloc string, sec float64, mib int64, metrics map[string]float64) *Cell {
		c := &Cell{Allocator: alloc}
		for _, f := range []float64{1.2, 1, 0.95} {
			c.Samples = append(c.Samples, Sample{Seconds: sec * f, MaxRSS: int64(float64(mib<<20) * f),
				Faults: int64(float64(mib*256) * f), SysSecs: sec * f / 10, Metrics: metrics})
		}
		return c
	}
	rss := func(after float64) map[string]float64 {
		return map[string]float64{"work_s": 1, "rss_base_kib": 1024, "rss_peak_kib": 1024 * 1025, "rss_after_free_kib": after, "rss_after_1s_kib": after}
	}
	return &Result{
		Allocators: []string{"glibc", "jemalloc", "mimalloc", "tagalloc"},
		Runs:       3,
		Workloads: []*WorkloadResult{
			{Name: "fast", Cells: []*Cell{cell("glibc", 2, 10, nil), cell("jemalloc", 1, 12, nil), cell("mimalloc", 1, 11, nil), cell("tagalloc", 1, 10, nil)}},
			{Name: "slow", Cells: []*Cell{cell("glibc", 1, 100, nil), cell("jemalloc", 1, 90, nil), cell("mimalloc", 0.5, 120, nil), cell("tagalloc", 1.5, 150, nil)}},
			{Name: "rss_after_free", TimeMetric: "work_s", TimeNote: "the alloc/free phase",
				Cells: []*Cell{cell("glibc", 1, 1025, rss(1024*100)), cell("jemalloc", 1, 1025, rss(1024*500)), cell("mimalloc", 1, 1025, rss(1024*1025)), cell("tagalloc", 1, 1025, rss(1024*2))}},
			{Name: "broken", Cells: []*Cell{cell("glibc", 1, 1, nil), cell("jemalloc", 1, 1, nil), cell("mimalloc", 1, 1, nil),
				{Allocator: "tagalloc", Err: "broken under tagalloc (run 1): output differs from glibc's"}}},
			{Name: "close", Cells: []*Cell{cell("glibc", 1, 10, nil), cell("jemalloc", 1, 10, nil), cell("mimalloc", 1, 10, nil), cell("tagalloc", 1.05, 10, nil)}},
			{Name: "redis", Skipped: "/usr/bin/redis-server not installed"},
		},
	}
}

func TestSummarize(t *testing.T) {
	s := Summarize(fakeResult(), "tagalloc", DefaultBaselines, DefaultTargets)
	require.Equal(t, []string{"glibc", "mimalloc", "jemalloc"}, s.Baselines)
	fast, slow, rss, broken := s.Rows[0], s.Rows[1], s.Rows[2], s.Rows[3]
	require.InDelta(t, 0.5, fast.TimeRatio["glibc"], 1e-12)
	require.InDelta(t, 3, slow.TimeRatio["mimalloc"], 1e-12)
	require.InDelta(t, 1.5, slow.RSSRatio["glibc"], 1e-12)
	require.Empty(t, fast.Misses)
	require.Equal(t, []string{"time 1.500x glibc > 1.00", "time 3.000x mimalloc (the best peer) > 1.10",
		"RSS 1.50x glibc > 1.10", "faults 1.67x jemalloc (the best peer) > 1.5"}, slow.Misses)
	require.InDelta(t, (1025.0-2)/1024, rss.Metrics[MetricReturned]["tagalloc"], 1e-12)
	require.NotContains(t, rss.Metrics, "work_s", "the time metric is the time, not another metric")
	require.Equal(t, []string{"failed: broken under tagalloc (run 1): output differs from glibc's"}, broken.Misses)
	require.NotContains(t, broken.TimeRatio, "glibc")
	require.Equal(t, []string{"time 1.050x glibc > 1.00 (within the runs' 25% spread)"}, s.Rows[4].Misses)
	// geomean over the workloads that have a ratio: fast 0.5, slow 1.5, rss 1, close 1.05.
	require.InDelta(t, math.Pow(0.5*1.5*1*1.05, 0.25), s.TimeGeoMean["glibc"], 1e-12)

	none := Summarize(fakeResult(), "nosuch", DefaultBaselines, DefaultTargets)
	require.Empty(t, none.Subject)
	require.Empty(t, none.Baselines)
	require.Empty(t, none.TimeGeoMean)
}

func TestRenderGolden(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, Summarize(fakeResult(), "tagalloc", DefaultBaselines, DefaultTargets).Render(&b))
	golden := filepath.Join("testdata", "report.golden")
	if *update {
		require.NoError(t, os.MkdirAll("testdata", 0o755))
		require.NoError(t, os.WriteFile(golden, b.Bytes(), 0o644))
	}
	want, err := os.ReadFile(golden)
	require.NoError(t, err, "run go test ./bench -run Golden -update to create it")
	require.Equal(t, string(want), b.String())
}

// TestWorkloads builds the C workloads warning-free (-Werror) and runs each
// quick workload under glibc; then checks that the runner catches an
// allocator whose runs print something else or crash. A few seconds.
func TestWorkloads(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the workloads")
	}
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	b, err := Build(BuildOptions{Dir: filepath.Join(dir, "build"), Strict: true})
	require.NoError(t, err)

	ctx := context.Background()
	for _, w := range Workloads() {
		t.Run(w.Name, func(t *testing.T) {
			if w.Kind != KindC {
				if _, err := findProgram(w.Program); err != nil {
					t.Skipf("%s not installed", w.Program)
				}
			}
			s1, err := RunOnce(ctx, b, w, Allocator{Name: Glibc}, true, time.Minute)
			require.NoError(t, err)
			s2, err := RunOnce(ctx, b, w, Allocator{Name: Glibc}, true, time.Minute)
			require.NoError(t, err)
			require.Equal(t, s1.Output, s2.Output, "output must be deterministic")
			require.Positive(t, s1.Seconds)
			require.Positive(t, s1.MaxRSS)
			require.Positive(t, s1.Faults)
			if w.Kind == KindC {
				require.Regexp(t, `^checksum: [0-9a-f]{16}$`, s1.Output)
			}
		})
	}

	// A run's peak RSS is the workload's own: a child this process starts
	// itself counts this process's resident memory in its peak (clone with
	// CLONE_VM), so runs go through measure. With 128 MiB held here, a
	// quick simple still shows a few MiB.
	t.Run("peak RSS is the workload's", func(t *testing.T) {
		hold := make([]byte, 128<<20)
		for i := range hold {
			hold[i] = byte(i)
		}
		i := slices.IndexFunc(Workloads(), func(w Workload) bool { return w.Name == "simple" })
		require.GreaterOrEqual(t, i, 0)
		s, err := RunOnce(ctx, b, Workloads()[i], Allocator{Name: Glibc}, true, time.Minute)
		require.NoError(t, err)
		require.Less(t, s.MaxRSS, int64(64<<20), "peak RSS %d MiB: the harness's 128 MiB counted", s.MaxRSS>>20)
		runtime.KeepAlive(hold)
	})

	// Fake allocators: one adds a line to the output, one aborts at load.
	noisy := filepath.Join(dir, "noisy.so")
	crash := filepath.Join(dir, "crash.so")
	for lib, body := range map[string]string{
		noisy: `#include <stdio.h>
__attribute__((constructor)) static void hello(void) { puts("hello from the allocator"); }`,
		crash: `#include <stdlib.h>
__attribute__((constructor)) static void die(void) { abort(); }`,
	} {
		src := lib + ".c"
		require.NoError(t, os.WriteFile(src, []byte(body), 0o644))
		out, err := exec.Command(cc, "-shared", "-fPIC", "-o", lib, src).CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	w := Select(Workloads(), func(n string) bool { return n == "small_random" })
	var progress bytes.Buffer
	res, err := Run(ctx, Config{Workloads: w, Built: b, Runs: 2, Quick: true, Progress: &progress,
		Allocators: []Allocator{{Name: Glibc}, {Name: "noisy", Preload: noisy}, {Name: "crash", Preload: crash}}})
	require.Error(t, err)
	require.ErrorContains(t, err, "small_random under noisy (run 1): output differs from glibc's")
	require.ErrorContains(t, err, "small_random under crash")
	cells := res.Workloads[0].Cells
	require.Len(t, cells[0].Samples, 2)
	require.Empty(t, cells[0].Err)
	require.Empty(t, cells[1].Samples)
	require.NotEmpty(t, cells[2].Err)
}

// The launched allocators run a workload through tagalloc run, untracked,
// with --stacks sampled and with the defaults: the output is glibc's, the
// report files are gone after the run (the default run's, saved in a
// directory of the harness's, too), and redis's server runs under the
// launcher too.
func TestLaunchedAllocators(t *testing.T) {
	if testing.Short() {
		t.Skip("builds tagalloc and runs workloads")
	}
	allocs, notes, err := FindAllocators(Launched)
	require.NoError(t, err)
	require.Empty(t, notes)
	require.Len(t, allocs, 3)
	require.Contains(t, allocs[0].Launch, "off")
	require.Contains(t, allocs[1].Launch, "sampled")
	require.NotContains(t, allocs[2].Launch, "-o", "the default run names its report")
	require.NotEmpty(t, allocs[2].Dir)
	b, err := Build(BuildOptions{Dir: filepath.Join(t.TempDir(), "build"), Strict: true})
	require.NoError(t, err)
	ctx := context.Background()
	for _, w := range Select(Workloads(), func(n string) bool { return n == "small_random" || n == "redis" }) {
		if w.Kind != KindC {
			if _, err := findProgram(w.Program); err != nil {
				continue // redis not installed here
			}
		}
		ref, err := RunOnce(ctx, b, w, Allocator{Name: Glibc}, true, time.Minute)
		require.NoError(t, err)
		for _, a := range allocs {
			s, err := RunOnce(ctx, b, w, a, true, time.Minute)
			require.NoError(t, err, "%s under %s", w.Name, a.Name)
			require.Equal(t, ref.Output, s.Output, "%s under %s", w.Name, a.Name)
			if a.Output != "" {
				_, err := os.Stat(a.Output)
				require.ErrorIs(t, err, os.ErrNotExist, "the report is removed after the run")
			}
			if a.Dir != "" {
				left, err := os.ReadDir(a.Dir)
				require.NoError(t, err)
				require.Empty(t, left, "the default run's report is removed after the run")
			}
		}
	}
}

// BenchmarkWorkloads runs the quick version of every workload under every
// allocator that can be found (tagalloc once its library builds), as
// sub-benchmarks named workload/allocator:
//
//	go test -run '^$' -bench . ./bench/
//
// ns/op is the whole process (or the workload's own phase timing, reported
// as s/op); peak-MiB is its peak RSS. Outputs are checked against glibc's.
// The full-size comparison is the allocbench command.
func BenchmarkWorkloads(b *testing.B) {
	built, err := Build(BuildOptions{})
	if err != nil {
		b.Fatal(err)
	}
	allocs, notes, err := FindAllocators(DefaultAllocators)
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range notes {
		b.Log(n)
	}
	ctx := context.Background()
	for _, w := range Workloads() {
		b.Run(w.Name, func(b *testing.B) {
			if w.Kind != KindC {
				if _, err := findProgram(w.Program); err != nil {
					b.Skipf("%s not installed", w.Program)
				}
			}
			ref, err := RunOnce(ctx, built, w, Allocator{Name: Glibc}, true, time.Minute)
			if err != nil {
				b.Fatalf("%s under glibc: %v", w.Name, err)
			}
			for _, a := range allocs {
				b.Run(a.Name, func(b *testing.B) {
					var secs, rss []float64
					for b.Loop() {
						s, err := RunOnce(ctx, built, w, a, true, time.Minute)
						if err == nil && s.Output != ref.Output {
							err = fmt.Errorf("output differs from glibc's: %s", firstDiff(s.Output, ref.Output))
						}
						if err != nil {
							b.Fatalf("%s under %s: %v", w.Name, a.Name, err)
						}
						secs = append(secs, s.Seconds)
						rss = append(rss, float64(s.MaxRSS)/(1<<20))
					}
					b.ReportMetric(Median(rss), "peak-MiB")
					if w.TimeMetric != "" || w.Kind == KindRedis {
						b.ReportMetric(Median(secs), "s/op")
					}
				})
			}
		})
	}
}
