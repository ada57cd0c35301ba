package main

import (
	"bytes"
	"context"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// proc is a process whose books hold live (one tag) and whose stacks
// records hold est, in blocks of 64 bytes.
func proc(pid int, live, est uint64) reporter.Process {
	return reporter.Process{PID: pid,
		Tags:   []reporter.Tag{{Name: "a", LiveBytes: live / 2}, {Name: "b", LiveBytes: live - live/2}},
		Stacks: &reporter.Stacks{SampleRate: 512 << 10, Records: []reporter.StackRecord{{LiveBytes: est / 4, LiveBlocks: est / 4 / 64}, {LiveBytes: est - est/4, LiveBlocks: (est - est/4) / 64}}}}
}

func TestSnapshots(t *testing.T) {
	torn := proc(4, 8<<20, 8<<20)
	torn.Torn = true
	noStacks := proc(5, 8<<20, 8<<20)
	noStacks.Stacks = nil
	rep := &reporter.Report{Processes: []reporter.Process{
		proc(1, 10<<20, 11<<20), // +10%
		proc(2, 1<<20, 1<<20),   // under -min
		proc(3, 4<<20, 3<<20),   // -25%, at -min exactly
		torn, noStacks,
	}}
	snaps, sk := snapshots(rep, 4<<20)
	require.Len(t, snaps, 2)
	assert.Equal(t, skipped{Small: 1, NoStacks: 1, Torn: 1}, sk)
	assert.Equal(t, 1, snaps[0].PID)
	assert.InDelta(t, 0.10, snaps[0].Err(), 1e-9)
	assert.InDelta(t, -0.25, snaps[1].Err(), 1e-9)
	// Blocks of 64 bytes at 512 KiB: sqrt(rate/live) less a hair.
	assert.InDelta(t, math.Sqrt(512.0/(10<<10)), snaps[0].Simple, 1e-9)
	assert.InDelta(t, snaps[0].Simple, snaps[0].RSE, 0.001)
	assert.Less(t, snaps[0].RSE, snaps[0].Simple)
}

func TestSampleVarianceLimits(t *testing.T) {
	rate := float64(512 << 10)
	// Blocks much smaller than the rate: bytes*rate.
	assert.InEpsilon(t, 1e6*rate, sampleVariance(1e6, 1e6/16, rate), 1e-4)
	// Blocks many times the rate are always sampled: no noise.
	assert.Less(t, sampleVariance(1e9, 10, rate), 1e-6)
	// Every block recorded, or nothing: exact.
	assert.Zero(t, sampleVariance(1e6, 100, 1))
	assert.Zero(t, sampleVariance(0, 0, rate))
}

// TestSampleVarianceSimulated samples blocks as tagalloc does (each block
// of u bytes with probability 1-exp(-u/rate), counted 1/q times) and
// checks that the estimates are unbiased and vary as sampleVariance says.
func TestSampleVarianceSimulated(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, tc := range []struct{ u, n, rate float64 }{{1000, 2000, 64 << 10}, {100 << 10, 300, 64 << 10}} {
		q := -math.Expm1(-tc.u / tc.rate)
		const trials = 4000
		var sum, sum2 float64
		for range trials {
			est := 0.0
			for range int(tc.n) {
				if r.Float64() < q {
					est += tc.u / q
				}
			}
			sum += est
			sum2 += est * est
		}
		mean := sum / trials
		variance := sum2/trials - mean*mean
		assert.InEpsilon(t, tc.u*tc.n, mean, 0.01, "unbiased, u=%v", tc.u)
		assert.InEpsilon(t, sampleVariance(tc.u*tc.n, tc.n, tc.rate), variance, 0.08, "variance, u=%v", tc.u)
	}
}

func TestSummarize(t *testing.T) {
	snaps := []snapshot{
		{Exact: 100, Estimate: 110, RSE: 0.1, Simple: 0.2},
		{Exact: 200, Estimate: 160, RSE: 0.3, Simple: 0.1},
		{Exact: 100, Estimate: 105, RSE: 0.2, Simple: 0.3},
	}
	s := summarize(snaps)
	assert.Equal(t, 3, s.N)
	assert.InDelta(t, 0.05, s.Median, 1e-9)
	assert.InDelta(t, (0.10+0.20+0.05)/3, s.MeanAbs, 1e-9)
	assert.InDelta(t, -0.20, s.Worst, 1e-9)
	assert.InDelta(t, 200, s.WorstLive, 1e-9)
	assert.InDelta(t, 375.0/400-1, s.Summed, 1e-9)
	assert.InDelta(t, 0.2, s.RSE, 1e-9)
	assert.InDelta(t, 0.2, s.Simple, 1e-9)
	assert.InDelta(t, 100, s.LiveMedian, 1e-9)

	none := summarize(nil)
	assert.Zero(t, none.N)
	assert.True(t, math.IsNaN(none.Median) && math.IsNaN(none.Summed) && math.IsNaN(none.Worst))
}

func TestMeanSE(t *testing.T) {
	m, se := meanSE([]float64{0.01, 0.03, 0.05})
	assert.InDelta(t, 0.03, m, 1e-12)
	assert.InDelta(t, 0.02/math.Sqrt(3), se, 1e-12)
	m, se = meanSE([]float64{0.04})
	assert.InDelta(t, 0.04, m, 1e-12)
	assert.True(t, math.IsNaN(se))
}

// libProc is a process with the given library totals (live = alloc/2)
// and, for the full run, one record per library in blocks of 100 bytes.
func libProc(libs map[string]uint64) *reporter.Process {
	p := &reporter.Process{PID: 1, Stacks: &reporter.Stacks{SampleRate: 1}}
	for name, alloc := range libs {
		p.Stacks.Libraries = append(p.Stacks.Libraries, reporter.LibraryTotals{Name: name, LiveBytes: alloc / 2, AllocBytes: alloc})
		p.Stacks.Records = append(p.Stacks.Records, reporter.StackRecord{Library: name,
			LiveBytes: alloc / 2, LiveBlocks: alloc / 200, AllocBytes: alloc, AllocBlocks: alloc / 100})
		p.Heap.LiveBytes += alloc / 2
		p.Heap.AllocBytes += alloc
	}
	return p
}

func TestCompareLibraries(t *testing.T) {
	exact := libProc(map[string]uint64{"libbig.so": 600_000, "libmid.so": 395_000, "libtiny.so": 5_000})
	s1 := libProc(map[string]uint64{"libbig.so": 660_000, "libmid.so": 355_500, "libtiny.so": 9_000})
	s2 := libProc(map[string]uint64{"libbig.so": 570_000}) // never sampled libmid
	rows, total, rse := compareLibraries(exact, []*reporter.Process{s1, s2}, measures[1], 0.01, 512<<10)
	assert.Equal(t, 1e6, total)
	assert.InDelta(t, math.Sqrt(512<<10/1e6), rse, 0.001)
	require.Len(t, rows, 2, "libtiny holds 0.5%%: left out")
	big, mid := rows[0], rows[1]
	assert.Equal(t, "libbig.so", big.Name)
	assert.InDelta(t, 0.6, big.Share, 1e-9)
	assert.Equal(t, []float64{660_000, 570_000}, big.Estimates)
	assert.InDeltaSlice(t, []float64{0.10, -0.05}, big.Errs(), 1e-9)
	assert.InDelta(t, 0.10, big.Worst(), 1e-9)
	assert.InDelta(t, math.Sqrt(512<<10/600_000.0), big.RSE, 0.001, "small blocks: sqrt(rate/bytes)")
	assert.Equal(t, "libmid.so", mid.Name)
	assert.InDeltaSlice(t, []float64{-0.10, -1}, mid.Errs(), 1e-9)
	assert.InDelta(t, -1, mid.Worst(), 1e-9)

	live, total, _ := compareLibraries(exact, []*reporter.Process{s1}, measures[0], 0.5, 512<<10)
	assert.Equal(t, 5e5, total)
	require.Len(t, live, 1)
	assert.Equal(t, []float64{330_000}, live[0].Estimates)

	assert.Equal(t, 1e6, stacksTotal(exact, measures[1]))
	none, _, _ := compareLibraries(&reporter.Process{}, nil, measures[0], 0.01, 512<<10)
	assert.Empty(t, none)
}

func TestLaunched(t *testing.T) {
	code := 0
	rep := &reporter.Report{Processes: []reporter.Process{{PID: 7}, {PID: 8, ExitCode: &code}, {PID: 9}}}
	assert.Equal(t, 8, launched(rep).PID)
	rep.Processes[1].ExitCode = nil
	assert.Equal(t, 7, launched(rep).PID)
	assert.Nil(t, launched(&reporter.Report{}))
}

// The forms are internal/size's (tested there against the cases the
// library's parser is tested against too).
func TestSizeFlag(t *testing.T) {
	for in, want := range map[string]uint64{"512": 512, "4B": 4, "4MiB": 4 << 20, "1GB": 1 << 30} {
		var s sizeFlag
		require.NoError(t, s.Set(in), in)
		assert.Equal(t, want, uint64(s), in)
	}
	for _, in := range []string{"", "4X", "1.5M", "99999999999999999999G"} {
		var s sizeFlag
		assert.Error(t, s.Set(in), in)
	}
	s := sizeFlag(4 << 20)
	assert.Equal(t, "4MiB", s.String())
	s = 1000
	assert.Equal(t, "1000", s.String())
}

func TestLineLog(t *testing.T) {
	var got []string
	l := &lineLog{watch: func(s string) { got = append(got, s) }}
	for _, part := range []string{"tagalloc: serv", "ing on http://127.0.0.1:4", "1234/\nsecond\n", "third, unfinished"} {
		_, _ = l.Write([]byte(part))
	}
	assert.Equal(t, []string{"tagalloc: serving on http://127.0.0.1:41234/", "second"}, got)
	assert.True(t, strings.HasSuffix(l.tail(), "second\nthird, unfinished"))
}

func TestBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"-live", "-libraries", "--", "true"},
		{"-live=false", "--", "true"},
		{"-libraries", "-min", "1M", "--", "true"},
		{"-share", "0.1", "--", "true"},
		{"-runs", "0", "--", "true"},
		{"-interval", "0s", "--", "true"},
		{"-libraries", "-share", "1.5", "--", "true"},
		{"-rate", "0", "--", "true"},
		{"-stdin", "/nonexistent/file", "--", "true"},
		{"-tagalloc", "/nonexistent/tagalloc", "--", "true"},
		{"-bogus"},
	} {
		var out, errOut bytes.Buffer
		code, err := run(context.Background(), args, &out, &errOut)
		assert.Equal(t, 2, code, "%q", args)
		assert.Error(t, err, "%q", args)
		assert.Empty(t, out.String(), "%q", args)
	}
	code, err := run(context.Background(), []string{"-h"}, &bytes.Buffer{}, &bytes.Buffer{})
	assert.Equal(t, 0, code)
	assert.NoError(t, err)
}
