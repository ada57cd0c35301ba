// Statistics: medians of the runs, ratios between allocators, and the
// geometric mean that summarizes ratios across workloads.

package bench

import (
	"math"
	"sort"
)

// Median returns the median of xs (the mean of the middle two for an even
// count), or NaN for none. xs is not modified.
func Median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	m := len(s) / 2
	if len(s)%2 == 1 {
		return s[m]
	}
	return (s[m-1] + s[m]) / 2
}

// GeoMean returns the geometric mean of the finite positive values in xs
// (others, such as the NaN of a missing ratio, are skipped), and how many
// were used. With none it returns NaN, 0.
func GeoMean(xs []float64) (float64, int) {
	sum, n := 0.0, 0
	for _, x := range xs {
		if x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) {
			sum += math.Log(x)
			n++
		}
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return math.Exp(sum / float64(n)), n
}

// Ratio returns a/b, or NaN when either is missing or b is zero.
func Ratio(a, b float64) float64 {
	if math.IsNaN(a) || math.IsNaN(b) || b == 0 {
		return math.NaN()
	}
	return a / b
}

// Spread is (max-min)/median: how much the runs disagree (0 for one run).
func Spread(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	lo, hi := xs[0], xs[0]
	for _, x := range xs {
		lo, hi = math.Min(lo, x), math.Max(hi, x)
	}
	return Ratio(hi-lo, Median(xs))
}

// Schedule returns the order of the runs: rounds of n allocators (indexes),
// each round a rotation of the previous one, so every allocator runs once
// per round and takes each position in turn. Interleaving this way spreads
// slow drifts of the machine (thermal, other load, page cache) over all
// allocators instead of charging them to whichever ran last.
func Schedule(n, rounds int) [][]int {
	out := make([][]int, rounds)
	for r := range out {
		order := make([]int, n)
		for i := range order {
			order[i] = (r + i) % n
		}
		out[r] = order
	}
	return out
}
