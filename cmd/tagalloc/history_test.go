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
// half a second apart are kept apart on the timeline.
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
	// The pause is an empty bucket with at least one burst's bytes on each
	// side. Events are stamped with the time of the drain pass that first
	// saw them, and on a loaded machine the passes over one burst can be
	// seconds apart, so each burst may itself be split by empty buckets;
	// but a drain that stamped everything with its own time would leave
	// no such bucket.
	const burst = 2000 * 4096
	var total uint64
	for _, b := range all {
		total += b
	}
	split := false
	var before uint64
	for _, b := range all {
		if b == 0 && before >= burst && total-before >= burst {
			split = true
		}
		before += b
	}
	require.True(t, split, "no empty bucket with a burst (%d bytes) on each side: %v", burst, all)
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
