package reporter

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/dustin/go-humanize"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/sizeclass"
	"github.com/tagalloc/tagalloc/tagtable"
)

// usableOf is the usable size of a small block of req bytes.
func usableOf(req uint64) uint64 {
	return uint64(sizeclass.Classes[sizeclass.ClassOf(uint32(req))].Size)
}

// With every block recorded (--stacks full: weight 1), the estimate is the
// exact sum of the live blocks' requested sizes, through frees and
// reallocs; a tag the books know exactly is left alone; a tag none of
// whose live blocks is in the profile gets 0 samples and no estimate.
func TestEstimateRequestedFull(t *testing.T) {
	prof := tagtable.NewProfile(7, "full", 1)
	defer prof.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	live := map[uint64][2]uint64{} // addr -> usable, requested (tag 1)
	for i := range uint64(5000) {
		req := 1 + rng.Uint64N(3000)
		addr := 0x100000 + i*4096
		prof.Alloc(addr, usableOf(req), req, 1, 1)
		live[addr] = [2]uint64{usableOf(req), req}
	}
	for addr := range live { // free a third, move-realloc a third
		switch addr / 4096 % 3 {
		case 0:
			prof.Free(addr)
			delete(live, addr)
		case 1:
			req := 1 + rng.Uint64N(3000)
			prof.Resize(addr, addr+1<<40, usableOf(req), req, tagtable.Realloc{Selected: true})
			delete(live, addr)
			live[addr+1<<40] = [2]uint64{usableOf(req), req}
		}
	}
	prof.Alloc(0x9000000, 4096, 4000, 2, 1) // exact in the books
	var usable, req uint64
	for _, v := range live {
		usable += v[0]
		req += v[1]
	}
	exact := uint64(4000)
	p := Process{PID: 7, Tags: []Tag{
		{Name: "a", LiveBytes: usable, LiveBlocks: uint64(len(live))},
		{Name: "b", LiveBytes: 4096, LiveRequestedBytes: &exact, LiveBlocks: 1},
		{Name: "c", LiveBytes: 640, LiveBlocks: 10}, // no block of it in the profile
		{Name: "d"}, // no live block
	}}
	names := map[uint32]string{1: "a", 2: "b", 3: "c", 4: "d"}
	p.EstimateRequested(prof, names)
	a := p.Tags[0]
	require.NotNil(t, a.LiveRequestedBytesEstimate)
	require.Equal(t, req, *a.LiveRequestedBytesEstimate, "every block recorded: the exact sum")
	require.Equal(t, uint64(len(live)), *a.LiveRequestedSamples)
	require.Nil(t, a.LiveRequestedBytes, "live_requested_bytes stays exact or null")
	b := p.Tags[1]
	require.Nil(t, b.LiveRequestedBytesEstimate, "exact: no estimate")
	require.Nil(t, b.LiveRequestedSamples)
	c := p.Tags[2]
	require.Nil(t, c.LiveRequestedBytesEstimate)
	require.Equal(t, uint64(0), *c.LiveRequestedSamples, "stacks on, none of its blocks sampled")
	d := p.Tags[3]
	require.Equal(t, uint64(0), *d.LiveRequestedBytesEstimate, "nothing live: nothing asked for")

	// the JSON: the estimate apart, live_requested_bytes null
	js, err := json.Marshal(a)
	require.NoError(t, err)
	require.Contains(t, string(js), `"live_requested_bytes":null`)
	require.Contains(t, string(js), `"live_requested_bytes_estimate":`)
	js, err = json.Marshal(b)
	require.NoError(t, err)
	require.NotContains(t, string(js), `estimate`)

	// the tree and the DMD text: exact from every recorded block (the
	// stacks' live bytes equal the books'), exact, unknown and why
	p.Stacks = FromProfile(prof, names, nil)
	var tree bytes.Buffer
	require.NoError(t, p.WriteTree(&tree))
	require.Contains(t, tree.String(), comma(uint64(len(live)))+" blocks, "+requestedText(req, reqRecorded, uint64(len(live)))+";")
	require.Contains(t, tree.String(), "from "+comma(uint64(len(live)))+" recorded blocks)")
	require.Contains(t, tree.String(), "[1 blocks, 3.9 KiB requested;")
	require.Contains(t, tree.String(), "── heap/d  [0 blocks; 0 B allocated", "nothing live: nothing to say")
	require.Contains(t, tree.String(), "unknown -- requested bytes of 1 tag (those whose line shows none): none of their live blocks was sampled")
	var dmd bytes.Buffer
	require.NoError(t, (&Report{Processes: []Process{p}}).WriteDMD(&dmd))
	require.Contains(t, dmd.String(), "  4,096 bytes (4,000 requested / 96 slop)  b\n")
	require.Contains(t, dmd.String(), "  640 bytes (requested unknown: none of its live blocks was sampled)  c\n")
	require.Contains(t, dmd.String(), comma(req)+" requested / "+comma(usable-req)+" slop; from "+comma(uint64(len(live)))+" recorded blocks)  a\n")

	// sampled: the same figure reads as an estimate
	p.Stacks.Mode = "sampled"
	tree.Reset()
	require.NoError(t, p.WriteTree(&tree))
	require.Contains(t, tree.String(), ", ~"+humanize.IBytes(req)+" requested (estimated from "+comma(uint64(len(live)))+" samples);")

	// without stacks: the tree says how to get them
	q := Process{PID: 8, Tags: []Tag{{Name: "a", LiveBytes: 10, LiveBlocks: 1, AllocBytes: 10, AllocBlocks: 1}}}
	tree.Reset()
	require.NoError(t, q.WriteTree(&tree))
	require.Contains(t, tree.String(), "unknown -- requested bytes of every tag: run with --stacks sampled for an estimate, or TAGALLOC_REQUESTED=1 for exact\n")
}

// Sampled by bytes, the ratio estimator (the tag's exact live bytes times
// the sampled share requested/usable) is close to the truth, and its
// error is several times smaller than the plain weighted sum's
// (Σ weight × requested, the Horvitz-Thompson estimate), whose error is
// that of the number of samples.
func TestEstimateRequestedSampled(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n, rate = 20000, 64 << 10
	reqs := make([]uint64, n)
	var usable, req uint64
	for i := range reqs {
		reqs[i] = 1 + rng.Uint64N(4000)
		usable += usableOf(reqs[i])
		req += reqs[i]
	}
	prof := tagtable.NewProfile(1, "sampled", rate)
	defer prof.Close()
	var ratioSq, htSq, ratioSum float64
	var samples uint64
	const trials = 300
	for range trials {
		var s requestedSums
		var ht float64
		for _, r := range reqs {
			w := prof.Weight(r)
			if rng.Float64() >= 1/w { // taken with probability 1 - exp(-r/rate)
				continue
			}
			s.add(&tagtable.LiveBlock{Usable: usableOf(r), Requested: r, Weight: w})
			ht += w * float64(r)
		}
		est, ok := s.estimate(usable)
		require.True(t, ok)
		require.LessOrEqual(t, est, usable)
		samples += s.samples
		e := float64(est)/float64(req) - 1
		ratioSq += e * e
		ratioSum += float64(est)
		e = ht/float64(req) - 1
		htSq += e * e
	}
	ratio, ht := math.Sqrt(ratioSq/trials), math.Sqrt(htSq/trials)
	t.Logf("%d samples per trial: ratio estimator rms error %.2f%%, weighted sum %.2f%%; mean %.4f of the truth",
		samples/trials, 100*ratio, 100*ht, ratioSum/trials/float64(req))
	require.Less(t, ratio, 0.02)
	require.Less(t, ratio, ht/3, "the ratio's error is well below the weighted sum's")
	require.InDelta(t, 1, ratioSum/trials/float64(req), 0.005, "about unbiased")
}
