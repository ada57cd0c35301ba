package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// runRequested runs testdata/requested.c under tagalloc run with args
// (before --) and env, and returns the truth the program computed (its
// tag's live requested bytes), the books it printed, the report's "req"
// tag, its process and the tree tagalloc printed.
func runRequested(t *testing.T, args []string, env ...string) (uint64, [4]uint64, reporter.Tag, reporter.Process, string) {
	t.Helper()
	prog := buildC(t, "requested")
	bin, err := tagallocBin()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "r.json")
	cmd := exec.Command(bin, append(append([]string{"run", "-o", out}, args...), "--", prog)...)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Run(), se.String())
	var truth uint64
	for _, l := range strings.Split(so.String(), "\n") {
		if f := strings.Fields(l); len(f) == 3 && f[0] == "truth" && f[1] == "req" {
			truth, err = strconv.ParseUint(f[2], 10, 64)
			require.NoError(t, err)
		}
	}
	require.NotZero(t, truth, "%s", so.String())
	books := parseBooks(t, so.String())["req"]
	rep := validReport(t, reportSchema(t), out) // the new fields are in the schema
	require.Len(t, rep.Processes, 1)
	p := rep.Processes[0]
	for _, tg := range p.Tags {
		if tg.Name == "req" {
			require.Equal(t, books[0], tg.LiveBytes, "books")
			return truth, books, tg, p, se.String()
		}
	}
	t.Fatalf("no tag req in %+v", p.Tags)
	return 0, books, reporter.Tag{}, p, ""
}

// Requested bytes: with every block recorded the estimate is the truth
// the program computed; sampled (the default rate), it is within a few
// percent (the sampled share requested/usable scales the exact live
// bytes); live_requested_bytes stays null (exact or unknown); without
// stacks the tree says how to get them; with TAGALLOC_REQUESTED=1 they
// are exact and no estimate is given.
func TestRunRequestedEstimate(t *testing.T) {
	t.Run("full", func(t *testing.T) {
		truth, books, tg, p, tree := runRequested(t, []string{"--stacks", "full"})
		require.Nil(t, tg.LiveRequestedBytes, "exact or null: the books kept no requested sizes")
		require.NotNil(t, tg.LiveRequestedBytesEstimate)
		require.Equal(t, truth, *tg.LiveRequestedBytesEstimate, "every block recorded: the exact sum")
		require.Equal(t, books[1], *tg.LiveRequestedSamples, "one sample per live block")
		require.Zero(t, p.Stacks.Dropped)
		require.Contains(t, tree, "requested (from "+comma(books[1])+" recorded blocks)")
		var dmd bytes.Buffer
		require.NoError(t, (&reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{p}}).WriteDMD(&dmd))
		require.Contains(t, dmd.String(), comma(truth)+" requested / "+comma(books[0]-truth)+" slop; from "+comma(books[1])+" recorded blocks)  req\n")
	})
	t.Run("sampled", func(t *testing.T) {
		truth, books, tg, _, tree := runRequested(t, []string{"--stacks", "sampled"})
		require.Nil(t, tg.LiveRequestedBytes)
		require.NotNil(t, tg.LiveRequestedBytesEstimate, "%+v", tg)
		est := float64(*tg.LiveRequestedBytesEstimate)
		require.InDelta(t, float64(truth), est, 0.1*float64(truth), "estimate %.0f, truth %d (%d samples)", est, truth, *tg.LiveRequestedSamples)
		require.LessOrEqual(t, *tg.LiveRequestedBytesEstimate, books[0])
		require.Less(t, *tg.LiveRequestedSamples, books[1], "sampled, not every block")
		t.Logf("estimate %.0f, truth %d: %+.2f%% from %d samples", est, truth, 100*(est/float64(truth)-1), *tg.LiveRequestedSamples)
		require.Contains(t, tree, " requested (estimated from "+comma(*tg.LiveRequestedSamples)+" samples)")
		require.Contains(t, tree, "── heap/req  ["+comma(books[1])+" blocks, ~")
	})
	t.Run("off", func(t *testing.T) {
		_, _, tg, p, tree := runRequested(t, []string{"--stacks", "off"})
		require.Nil(t, p.Stacks)
		require.Nil(t, tg.LiveRequestedBytes)
		require.Nil(t, tg.LiveRequestedBytesEstimate)
		require.Nil(t, tg.LiveRequestedSamples)
		require.Contains(t, tree, "unknown -- requested bytes of every tag: run with --stacks sampled for an estimate, or TAGALLOC_REQUESTED=1 for exact\n")
	})
	t.Run("exact", func(t *testing.T) {
		truth, _, tg, _, tree := runRequested(t, []string{"--stacks", "sampled"}, "TAGALLOC_REQUESTED=1")
		require.NotNil(t, tg.LiveRequestedBytes)
		require.Equal(t, truth, *tg.LiveRequestedBytes)
		require.Nil(t, tg.LiveRequestedBytesEstimate, "exact: no estimate")
		require.Nil(t, tg.LiveRequestedSamples)
		require.NotContains(t, tree, "unknown -- requested")
	})
}

// comma writes n with thousands separators, as the tree does.
func comma(n uint64) string {
	s := strconv.FormatUint(n, 10)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
