// The figures: errors of the sampled estimates against the exact books,
// summarized per run and pooled, the noise the sampling theory predicts,
// and the per-library comparison. Nothing here runs a program.

package main

import (
	"math"
	"sort"

	"github.com/tagalloc/tagalloc/bench"
	"github.com/tagalloc/tagalloc/reporter"
)

// snapshot is one process's live heap at one poll: the books' exact total,
// the sampled stacks' estimate of it, and the relative standard error the
// sampling theory predicts for that estimate.
type snapshot struct {
	PID      int
	Exact    float64 // sum of tags[].live_bytes
	Estimate float64 // sum of stacks.records[].live_bytes
	RSE      float64 // predicted standard error / Exact
	Simple   float64 // sqrt(rate/Exact): the prediction for blocks much smaller than the rate
}

// Err is the snapshot's signed relative error (+0.05: 5% too high).
func (s snapshot) Err() float64 { return (s.Estimate - s.Exact) / s.Exact }

// Skipped counts the process snapshots of a poll that were not compared.
type skipped struct {
	Small    int // holding less than -min
	NoStacks int // no stacks section (not sampled, or nothing drained yet)
	Torn     int // books read while the process changed them
}

// snapshots picks the processes of one polled report holding at least
// min bytes live and compares their estimate with their books.
func snapshots(rep *reporter.Report, min float64) ([]snapshot, skipped) {
	var out []snapshot
	var sk skipped
	for i := range rep.Processes {
		p := &rep.Processes[i]
		exact := 0.0
		for _, t := range p.Tags {
			exact += float64(t.LiveBytes)
		}
		switch {
		case p.Stacks == nil:
			sk.NoStacks++
			continue
		case p.Torn:
			sk.Torn++
			continue
		case exact < min || exact == 0:
			sk.Small++
			continue
		}
		est, variance := 0.0, 0.0
		rate := float64(p.Stacks.SampleRate)
		for _, r := range p.Stacks.Records {
			est += float64(r.LiveBytes)
			variance += sampleVariance(float64(r.LiveBytes), float64(r.LiveBlocks), rate)
		}
		// The records give the variance per estimated byte; applied to the
		// exact heap, the prediction does not move with this draw's noise.
		simple := math.Sqrt(max(rate, 1) / exact)
		rse := simple // nothing sampled: no block sizes to go by
		if est > 0 {
			rse = math.Sqrt(variance / (est * exact))
		}
		out = append(out, snapshot{PID: p.PID, Exact: exact, Estimate: est, RSE: rse, Simple: simple})
	}
	return out, sk
}

// sampleVariance is the variance of the sampled estimate of the bytes held
// by blocks blocks totalling bytes, each taken as the mean size u, when a
// block of u bytes is sampled with probability q = 1 - exp(-u/rate) and
// weighed by 1/q (tagtable.Profile.Weight): blocks * u² (1-q)/q. For u much
// smaller than the rate that is bytes*rate, so the relative standard error
// of a total of L bytes is sqrt(rate/L); large blocks add less (a block of
// several times the rate is almost always sampled). Blocks of one stack
// record are not all one size, so this is a guide, not an exact figure.
func sampleVariance(bytes, blocks, rate float64) float64 {
	if bytes <= 0 || blocks <= 0 || rate <= 1 {
		return 0 // nothing, or every block recorded (exact)
	}
	u := bytes / blocks
	q := -math.Expm1(-u / rate)
	return blocks * u * u * (1 - q) / q
}

// summary sums up snapshots' errors (fractions, signed).
type summary struct {
	N          int
	Median     float64 // median signed error
	MeanAbs    float64 // mean |error|
	Worst      float64 // the error farthest from 0, with its sign
	WorstLive  float64 // the exact live heap of that snapshot
	Summed     float64 // sum of estimates / sum of exact totals - 1
	RSE        float64 // median predicted relative standard error of one snapshot
	Simple     float64 // median sqrt(rate/live)
	LiveMedian float64 // median exact live heap
}

// summarize returns the figures of snaps; N is 0 (and the rest NaN) for none.
func summarize(snaps []snapshot) summary {
	nan := math.NaN()
	s := summary{N: len(snaps), Median: nan, MeanAbs: nan, Worst: nan, WorstLive: nan, Summed: nan, RSE: nan, Simple: nan, LiveMedian: nan}
	if len(snaps) == 0 {
		return s
	}
	errs, rses, simple, lives := make([]float64, len(snaps)), make([]float64, len(snaps)), make([]float64, len(snaps)), make([]float64, len(snaps))
	var sumAbs, sumEst, sumExact float64
	s.Worst = 0
	for i, sn := range snaps {
		e := sn.Err()
		errs[i], rses[i], simple[i], lives[i] = e, sn.RSE, sn.Simple, sn.Exact
		sumAbs += math.Abs(e)
		sumEst += sn.Estimate
		sumExact += sn.Exact
		if math.Abs(e) > math.Abs(s.Worst) {
			s.Worst, s.WorstLive = e, sn.Exact
		}
	}
	s.Median = bench.Median(errs)
	s.MeanAbs = sumAbs / float64(len(snaps))
	s.Summed = sumEst/sumExact - 1
	s.RSE, s.Simple, s.LiveMedian = bench.Median(rses), bench.Median(simple), bench.Median(lives)
	return s
}

// meanSE returns the mean of xs and its standard error (sample standard
// deviation / sqrt(n)); the error is NaN for fewer than two values.
func meanSE(xs []float64) (mean, se float64) {
	if len(xs) == 0 {
		return math.NaN(), math.NaN()
	}
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	if len(xs) < 2 {
		return mean, math.NaN()
	}
	ss := 0.0
	for _, x := range xs {
		ss += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(ss/float64(len(xs)-1)) / math.Sqrt(float64(len(xs)))
}

// meanAbsNormal is E|X| / sd for a normal X of mean 0: what a mean |error|
// should be, as a fraction of the standard error, if the errors are noise.
var meanAbsNormal = math.Sqrt(2 / math.Pi)

// measure is one of the two things compared per library: live bytes (at
// the end of the run) or cumulative (allocated over the run).
type measure struct {
	Name   string
	lib    func(reporter.LibraryTotals) uint64
	record func(reporter.StackRecord) (bytes, blocks uint64)
	books  func(reporter.Heap) uint64
}

var measures = []measure{
	{"live", func(l reporter.LibraryTotals) uint64 { return l.LiveBytes },
		func(r reporter.StackRecord) (uint64, uint64) { return r.LiveBytes, r.LiveBlocks },
		func(h reporter.Heap) uint64 { return h.LiveBytes }},
	{"cumulative", func(l reporter.LibraryTotals) uint64 { return l.AllocBytes },
		func(r reporter.StackRecord) (uint64, uint64) { return r.AllocBytes, r.AllocBlocks },
		func(h reporter.Heap) uint64 { return h.AllocBytes }},
}

// libRow is one library's exact figure (from the --stacks full run) and
// its estimates (one per sampled run, 0 where a run never sampled it).
type libRow struct {
	Name      string
	Exact     float64
	Share     float64 // of the exact run's heap total (books)
	Estimates []float64
	RSE       float64 // predicted relative standard error of one estimate
}

// Errs are the row's signed relative errors, one per sampled run.
func (r libRow) Errs() []float64 {
	out := make([]float64, len(r.Estimates))
	for i, e := range r.Estimates {
		out[i] = (e - r.Exact) / r.Exact
	}
	return out
}

// Worst is the error farthest from 0, with its sign.
func (r libRow) Worst() float64 {
	w := 0.0
	for _, e := range r.Errs() {
		if math.Abs(e) > math.Abs(w) {
			w = e
		}
	}
	return w
}

// compareLibraries lines up, for the libraries holding at least share of
// the exact run's heap total by m, the exact figure and each sampled run's
// estimate, biggest first. The predicted error comes from the exact run's
// records (every block recorded) at rate. total is the exact run's books'
// total by m, and totalRSE the predicted relative error of its estimate.
func compareLibraries(exact *reporter.Process, sampled []*reporter.Process, m measure, share, rate float64) (rows []libRow, total, totalRSE float64) {
	total = float64(m.books(exact.Heap))
	if exact.Stacks == nil || total == 0 {
		return nil, total, math.NaN()
	}
	variance, all := map[string]float64{}, 0.0
	for _, r := range exact.Stacks.Records {
		b, n := m.record(r)
		v := sampleVariance(float64(b), float64(n), rate)
		variance[r.Library] += v
		all += v
	}
	for _, l := range exact.Stacks.Libraries {
		x := float64(m.lib(l))
		if x == 0 || x < share*total {
			continue
		}
		row := libRow{Name: l.Name, Exact: x, Share: x / total, RSE: math.Sqrt(variance[l.Name]) / x}
		for _, p := range sampled {
			est := 0.0
			if p.Stacks != nil {
				for _, sl := range p.Stacks.Libraries {
					if sl.Name == l.Name {
						est += float64(m.lib(sl))
					}
				}
			}
			row.Estimates = append(row.Estimates, est)
		}
		rows = append(rows, row)
	}
	sort.SliceStable(rows, func(i, j int) bool { return rows[i].Exact > rows[j].Exact })
	return rows, total, math.Sqrt(all) / total
}

// launched is the process tagalloc run started (the one with an exit
// status), or the first one.
func launched(rep *reporter.Report) *reporter.Process {
	for i := range rep.Processes {
		if p := &rep.Processes[i]; p.ExitCode != nil || p.Signal != "" {
			return p
		}
	}
	if len(rep.Processes) == 0 {
		return nil
	}
	return &rep.Processes[0]
}

// stacksTotal sums a process's library totals by m.
func stacksTotal(p *reporter.Process, m measure) float64 {
	t := 0.0
	if p.Stacks != nil {
		for _, l := range p.Stacks.Libraries {
			t += float64(m.lib(l))
		}
	}
	return t
}
