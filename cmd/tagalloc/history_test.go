package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// The forms are internal/size's; the limit is 64 TiB.
func TestParseSize(t *testing.T) {
	for in, want := range map[string]int{"0": 0, "16K": 16 << 10, "64MiB": 64 << 20, "100B": 100, "65536G": 1 << 46} {
		got, err := parseSize(in)
		require.NoError(t, err, in)
		require.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "M", "1.5M", "65537G", "99999999G"} {
		_, err := parseSize(in)
		require.Error(t, err, in)
	}
}

// A ring is drained when a quarter of it is taken, or at the end (a
// program that writes little is not drained while it runs), yet each
// event keeps the time of the pass that first saw it: the textures made
// half a second apart fall at the two ends of the timeline, with nothing
// between.
func TestRunStacksTimelineKeepsTime(t *testing.T) {
	prog := buildStacksProg(t)
	out := filepath.Join(t.TempDir(), "report.json")
	_, se, code := cli(t, "run", "-q", "--stacks", "full", "-o", out, "--", prog, "pause")
	require.Equal(t, 0, code, se)
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	h := rep.Processes[0].Stacks.History
	require.NotNil(t, h)
	require.GreaterOrEqual(t, h.EndMs-h.StartMs, uint64(400), "%+v", h)
	all := h.Timeline[0].AllocBytes
	require.Len(t, all, 16)
	// The first burst fills the buckets from the first on, the second those
	// up to the last, and the pause lies between: at least one empty
	// bucket, whatever share of the run a loaded machine gave each burst.
	var first, last uint64
	lo, hi := 0, len(all)-1
	for ; lo < len(all) && all[lo] != 0; lo++ {
		first += all[lo]
	}
	for ; hi > lo && all[hi] != 0; hi-- {
		last += all[hi]
	}
	require.Less(t, lo, hi, "no empty bucket for the pause: %v", all)
	for i := lo; i <= hi; i++ {
		require.Zero(t, all[i], "bucket %d of %v: between the bursts, in the pause", i, all)
	}
	require.GreaterOrEqual(t, first, uint64(2000*4096), "the first textures at the start: %v", all)
	require.GreaterOrEqual(t, last, uint64(2000*4096), "the second at the end: %v", all)
}

// run --history-limit: a history far smaller than the run's events
// recycles and says so, within its limit, while the stacks' live figures
// stay equal to the books; a bad size is a usage error.
func TestRunStacksHistoryLimit(t *testing.T) {
	prog := buildStacksProg(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "report.json")
	cmd := exec.Command(bin, "run", "-q", "--stacks", "full", "--history-limit", "16K", "-o", out, "--", prog)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	want := parseBooks(t, so.String())
	rep, err := reporter.ReadFile(out)
	require.NoError(t, err)
	st := rep.Processes[0].Stacks
	require.NotNil(t, st)
	h := st.History
	require.NotNil(t, h, "a history section")
	require.Equal(t, uint64(16<<10), h.LimitBytes)
	require.LessOrEqual(t, h.UsedBytes, uint64(16<<10+tagtable.HistorySlack))
	require.Positive(t, h.EventsRecycled, "%+v", h)
	require.Equal(t, h.NextSeq, h.Events+h.EventsRecycled)
	require.GreaterOrEqual(t, h.EndMs, h.StartMs)
	require.NotEmpty(t, h.Timeline)
	require.Equal(t, "all", h.Timeline[0].Name)
	live := map[string][2]uint64{}
	for _, r := range st.Records {
		v := live[r.Tag]
		live[r.Tag] = [2]uint64{v[0] + r.LiveBytes, v[1] + r.LiveBlocks}
	}
	for _, tag := range []string{"gpu", "config", "grow"} {
		require.Equal(t, [2]uint64{want[tag][0], want[tag][1]}, live[tag], "tag %s: stacks vs books, whatever the history forgot", tag)
	}

	var dmd bytes.Buffer
	code, err := run([]string{"report", out, "--format", "dmd"}, &dmd, os.Stderr)
	require.NoError(t, err)
	require.Equal(t, 0, code)
	require.Contains(t, dmd.String(), "# History (limit 16 KiB)")
	require.True(t, strings.Contains(dmd.String(), "Timeline:"), dmd.String())

	var e bytes.Buffer
	code, err = run([]string{"run", "--stacks", "sampled", "--history-limit", "lots", "--", "true"}, &e, &e)
	require.Equal(t, 2, code)
	require.ErrorContains(t, err, "--history-limit lots")
}
