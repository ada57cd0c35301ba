// Report: a Result reduced to medians and ratios (Summary), checked
// against the targets, and rendered as text tables.

package bench

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sort"
	"strings"
)

// Targets are the limits the subject allocator is held to. The best
// peer of a workload is the fastest (or, for faults, the one with the
// fewest) of Peers measured on it.
type Targets struct {
	TimeVsBestPeer    float64 `json:"time_vs_best_peer"`   // time ≤ this × the best peer's
	TimeVsGlibc       float64 `json:"time_vs_glibc"`       // time ≤ this × glibc's
	GeoMeanVsMimalloc float64 `json:"geomean_vs_mimalloc"` // the time ratios' geometric mean ≤ this × mimalloc's
	RSSVsGlibc        float64 `json:"rss_vs_glibc"`        // peak RSS ≤ this × glibc's
	FaultsVsBestPeer  float64 `json:"faults_vs_best_peer"` // minor faults ≤ this × the best peer's (and FaultsSlack more)
	ReturnedIn1s      float64 `json:"returned_in_1s"`      // share of rss_after_free's growth given back 1 s after the frees
	TimeVsNoCounts    float64 `json:"time_vs_nocounts"`    // time ≤ this × the build without the books' counts (when measured)
}

// DefaultTargets are the project's goals: the issue that asked for bench/,
// and "Fault less, hold less" (every workload within 1.10x of the best of
// glibc, jemalloc, mimalloc and tcmalloc, the geometric mean at most
// 0.95x mimalloc's, faults at most 1.5x the best peer's).
var DefaultTargets = Targets{TimeVsBestPeer: 1.10, TimeVsGlibc: 1.00, GeoMeanVsMimalloc: 0.95, RSSVsGlibc: 1.10,
	FaultsVsBestPeer: 1.5, ReturnedIn1s: 0.90, TimeVsNoCounts: 1.03}

// Peers are the allocators the subject is held against.
var Peers = []string{Glibc, "jemalloc", "mimalloc", "tcmalloc"}

// FaultsSlack is the fault count a workload may exceed its faults target
// by: a few hundred faults (a MiB) are a program's start, not a policy.
const FaultsSlack = 256

// DefaultBaselines are what the subject is compared with, in column order.
var DefaultBaselines = []string{Glibc, "mimalloc", "jemalloc", NoCounts}

// MetricReturned is derived from rss_after_free's metrics: the share of
// the memory it grew by that is no longer resident one second after the
// frees, (peak - after_1s) / (peak - base).
const MetricReturned = "returned_in_1s"

// Summary is what the tables show: medians per workload and allocator,
// and the subject's ratios to the baselines. Maps hold only values that
// exist (an allocator that failed or was skipped has no entry).
type Summary struct {
	Runs        int                `json:"runs"`
	Allocators  []string           `json:"allocators"`
	Subject     string             `json:"subject,omitempty"`   // "" when it was not measured
	Baselines   []string           `json:"baselines,omitempty"` // those measured, subject excluded
	Rows        []*Row             `json:"rows"`
	TimeGeoMean map[string]float64 `json:"time_geomean,omitempty"` // baseline → geomean of subject/baseline
	RSSGeoMean  map[string]float64 `json:"rss_geomean,omitempty"`
	Targets     Targets            `json:"targets"`
}

// Row is one workload's line.
type Row struct {
	Workload   string                        `json:"workload"`
	Skipped    string                        `json:"skipped,omitempty"`
	TimeNote   string                        `json:"time_note,omitempty"`
	Time       map[string]float64            `json:"time_s"`       // allocator → median seconds
	RSS        map[string]float64            `json:"peak_rss"`     // allocator → median bytes
	Faults     map[string]float64            `json:"minor_faults"` // allocator → median minor page faults
	Sys        map[string]float64            `json:"sys_s"`        // allocator → median system seconds
	TimeSpread map[string]float64            `json:"time_spread"`  // allocator → (max-min)/median
	Metrics    map[string]map[string]float64 `json:"metrics"`      // metric → allocator → median
	Failed     map[string]string             `json:"failed"`       // allocator → error
	TimeRatio  map[string]float64            `json:"time_ratio"`   // baseline → subject/baseline
	RSSRatio   map[string]float64            `json:"rss_ratio"`    // baseline → subject/baseline
	Misses     []string                      `json:"misses"`       // targets the subject missed
}

// Summarize reduces r. subject is the allocator the ratios are about
// (tagalloc); baselines are what it is compared with.
func Summarize(r *Result, subject string, baselines []string, t Targets) *Summary {
	s := &Summary{Runs: r.Runs, Allocators: r.Allocators, Targets: t,
		TimeGeoMean: map[string]float64{}, RSSGeoMean: map[string]float64{}}
	if slices.Contains(r.Allocators, subject) {
		s.Subject = subject
		for _, b := range baselines {
			if b != subject && slices.Contains(r.Allocators, b) {
				s.Baselines = append(s.Baselines, b)
			}
		}
	}
	timeRatios := map[string][]float64{}
	rssRatios := map[string][]float64{}
	for _, wr := range r.Workloads {
		row := &Row{Workload: wr.Name, Skipped: wr.Skipped, TimeNote: wr.TimeNote,
			Time: map[string]float64{}, RSS: map[string]float64{}, Faults: map[string]float64{},
			Sys: map[string]float64{}, TimeSpread: map[string]float64{},
			Metrics: map[string]map[string]float64{}, Failed: map[string]string{},
			TimeRatio: map[string]float64{}, RSSRatio: map[string]float64{}}
		s.Rows = append(s.Rows, row)
		for _, c := range wr.Cells {
			if c.Err != "" {
				row.Failed[c.Allocator] = c.Err
				continue
			}
			if len(c.Samples) == 0 {
				continue
			}
			var ts, rs, fs, ss []float64
			ms := map[string][]float64{}
			for _, smp := range c.Samples {
				ts = append(ts, smp.Seconds)
				rs = append(rs, float64(smp.MaxRSS))
				fs = append(fs, float64(smp.Faults))
				ss = append(ss, smp.SysSecs)
				for k, v := range smp.Metrics {
					if k != wr.TimeMetric {
						ms[k] = append(ms[k], v)
					}
				}
				if v, ok := returned(smp.Metrics); ok {
					ms[MetricReturned] = append(ms[MetricReturned], v)
				}
			}
			row.Time[c.Allocator] = Median(ts)
			row.RSS[c.Allocator] = Median(rs)
			row.Faults[c.Allocator] = Median(fs)
			row.Sys[c.Allocator] = Median(ss)
			row.TimeSpread[c.Allocator] = Spread(ts)
			for k, vs := range ms {
				if row.Metrics[k] == nil {
					row.Metrics[k] = map[string]float64{}
				}
				row.Metrics[k][c.Allocator] = Median(vs)
			}
		}
		if s.Subject == "" {
			continue
		}
		for _, b := range s.Baselines {
			if x := Ratio(get(row.Time, s.Subject), get(row.Time, b)); !math.IsNaN(x) {
				row.TimeRatio[b] = x
				timeRatios[b] = append(timeRatios[b], x)
			}
			if x := Ratio(get(row.RSS, s.Subject), get(row.RSS, b)); !math.IsNaN(x) {
				row.RSSRatio[b] = x
				rssRatios[b] = append(rssRatios[b], x)
			}
		}
		row.Misses = checkTargets(row, s.Subject, t)
	}
	for _, b := range s.Baselines {
		if g, n := GeoMean(timeRatios[b]); n > 0 {
			s.TimeGeoMean[b] = g
		}
		if g, n := GeoMean(rssRatios[b]); n > 0 {
			s.RSSGeoMean[b] = g
		}
	}
	return s
}

// returned computes MetricReturned from one rss_after_free (or
// rss_after_remote_free) sample.
func returned(m map[string]float64) (float64, bool) {
	base, ok1 := m["rss_base_kib"]
	peak, ok2 := m["rss_peak_kib"]
	later, ok3 := m["rss_after_1s_kib"]
	if !ok1 || !ok2 || !ok3 || peak <= base {
		return 0, false
	}
	return (peak - later) / (peak - base), true
}

// checkTargets lists the targets the subject missed on one row. A time
// miss smaller than the spread of the runs behind it says so: more runs, or
// a quieter machine, may tell it apart from noise.
func checkTargets(row *Row, subject string, t Targets) []string {
	var miss []string
	if msg, ok := row.Failed[subject]; ok {
		return []string{"failed: " + msg}
	}
	timeMiss := func(x float64, base, what string, limit float64) {
		if math.IsNaN(x) || x <= limit {
			return
		}
		m := fmt.Sprintf("time %.3fx %s%s > %.2f", x, base, what, limit)
		if noise := max(get(row.TimeSpread, subject), get(row.TimeSpread, base)); x/limit-1 < noise {
			m += fmt.Sprintf(" (within the runs' %.0f%% spread)", 100*noise)
		}
		miss = append(miss, m)
	}
	ratio := func(m map[string]float64, base string) float64 { return Ratio(get(m, subject), get(m, base)) }
	timeMiss(ratio(row.Time, Glibc), Glibc, "", t.TimeVsGlibc)
	if best := bestPeer(row.Time); best != "" && best != Glibc { // glibc's own target is the stricter
		timeMiss(ratio(row.Time, best), best, " (the best peer)", t.TimeVsBestPeer)
	}
	timeMiss(ratio(row.Time, NoCounts), NoCounts, "", t.TimeVsNoCounts)
	if x, ok := row.RSSRatio[Glibc]; ok && x > t.RSSVsGlibc {
		miss = append(miss, fmt.Sprintf("RSS %.2fx glibc > %.2f", x, t.RSSVsGlibc))
	}
	if best := bestPeer(row.Faults); best != "" {
		if f, b := get(row.Faults, subject), get(row.Faults, best); f > t.FaultsVsBestPeer*b+FaultsSlack {
			miss = append(miss, fmt.Sprintf("faults %.2fx %s (the best peer) > %.1f", ratio(row.Faults, best), best, t.FaultsVsBestPeer))
		}
	}
	if x, ok := row.Metrics[MetricReturned][subject]; ok && x < t.ReturnedIn1s {
		miss = append(miss, fmt.Sprintf("%.1f%% returned in 1s < %.0f%%", 100*x, 100*t.ReturnedIn1s))
	}
	return miss
}

// bestPeer is the peer with the least of m (time or faults; "" if none
// was measured).
func bestPeer(m map[string]float64) string {
	best := ""
	for _, p := range Peers {
		if v, ok := m[p]; ok && (best == "" || v < m[best]) {
			best = p
		}
	}
	return best
}

// noisy is the time spread above which a median is marked with "~".
const noisy = 0.10

// Render writes the report: time and peak RSS tables with the subject's
// ratios, the other measurements, the target check, and the failures.
// Each section is written by its own method, in this order; the whole
// report is built in memory and written to w at once.
func (s *Summary) Render(w io.Writer) error {
	var b strings.Builder
	s.renderTime(&b)
	s.renderRSS(&b)
	s.renderFaultsAndSys(&b)
	s.renderMetrics(&b)
	s.renderTargets(&b)
	s.renderProblems(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// renderTime writes the time table (a "~" marks a noisy median), then the
// workloads' notes on what their time measures.
func (s *Summary) renderTime(b *strings.Builder) {
	tt := s.ratioTable(fmt.Sprintf("Time: median of %d runs, seconds (~: runs differ by more than %.0f%%)", s.Runs, 100*noisy),
		func(r *Row, a string) string {
			cell := cellOr(r, a, fmtNum("%.3f", get(r.Time, a)))
			if get(r.TimeSpread, a) > noisy {
				cell = "~" + cell
			}
			return cell
		},
		func(r *Row) map[string]float64 { return r.TimeRatio }, s.TimeGeoMean)
	b.WriteString("\n")
	tt.Render(b)
	for _, r := range s.measuredRows() {
		if r.TimeNote != "" {
			b.WriteString(fmt.Sprintf("  %s: time is %s\n", r.Workload, r.TimeNote))
		}
	}
}

// renderRSS writes the peak RSS table, in MiB.
func (s *Summary) renderRSS(b *strings.Builder) {
	rt := s.ratioTable(fmt.Sprintf("Peak RSS: median of %d runs, MiB (rusage maxrss)", s.Runs),
		func(r *Row, a string) string { return cellOr(r, a, fmtNum("%.1f", get(r.RSS, a)/(1<<20))) },
		func(r *Row) map[string]float64 { return r.RSSRatio }, s.RSSGeoMean)
	b.WriteString("\n")
	rt.Render(b)
}

// ratioTable is the shape the time and RSS tables share: a row per
// measured workload with a cell per allocator, then a column per baseline
// with the subject's ratio to it, and a geomean footer when there are
// baselines.
func (s *Summary) ratioTable(title string, cell func(r *Row, alloc string) string,
	ratios func(r *Row) map[string]float64, geo map[string]float64) *Table {
	var ratioHead []string
	for _, base := range s.Baselines {
		ratioHead = append(ratioHead, s.Subject+"/"+base)
	}
	t := &Table{Title: title, Header: append(append([]string{"workload"}, s.Allocators...), ratioHead...)}
	for _, r := range s.measuredRows() {
		row := []string{r.Workload}
		for _, a := range s.Allocators {
			row = append(row, cell(r, a))
		}
		for _, base := range s.Baselines {
			row = append(row, fmtNum("%.2f", get(ratios(r), base)))
		}
		t.Rows = append(t.Rows, row)
	}
	if len(s.Baselines) > 0 {
		t.Footer = [][]string{geoRow(len(s.Allocators), s.Baselines, geo)}
	}
	return t
}

// renderFaultsAndSys writes the minor page faults and system time tables: where
// time and RSS go for the large-block workloads (memory given back to the
// OS and taken again costs a fault a page, and the kernel's time).
func (s *Summary) renderFaultsAndSys(b *strings.Builder) {
	for _, tab := range []struct {
		title  string
		format string
		scale  float64
		of     func(*Row) map[string]float64
	}{
		{"Minor page faults: median of %d runs, thousands (rusage minflt)", "%.1f", 1.0 / 1000, func(r *Row) map[string]float64 { return r.Faults }},
		{"System time: median of %d runs, seconds (rusage stime)", "%.3f", 1, func(r *Row) map[string]float64 { return r.Sys }},
	} {
		ft := &Table{Title: fmt.Sprintf(tab.title, s.Runs), Header: append([]string{"workload"}, s.Allocators...)}
		for _, r := range s.measuredRows() {
			row := []string{r.Workload}
			for _, a := range s.Allocators {
				row = append(row, cellOr(r, a, fmtNum(tab.format, get(tab.of(r), a)*tab.scale)))
			}
			ft.Rows = append(ft.Rows, row)
		}
		b.WriteString("\n")
		ft.Render(b)
	}
}

// renderMetrics writes the workloads' own measurements, a row per
// workload and metric, when any workload has some.
func (s *Summary) renderMetrics(b *strings.Builder) {
	mt := &Table{Title: "Other measurements (medians)", Header: append([]string{"workload: metric"}, s.Allocators...)}
	for _, r := range s.Rows {
		for _, m := range metricOrder(r.Metrics) {
			label, format, scale := metricFormat(m)
			row := []string{r.Workload + ": " + label}
			for _, a := range s.Allocators {
				row = append(row, cellOr(r, a, fmtNum(format, get(r.Metrics[m], a)*scale)))
			}
			mt.Rows = append(mt.Rows, row)
		}
	}
	if len(mt.Rows) > 0 {
		b.WriteString("\n")
		mt.Render(b)
	}
}

// renderTargets writes the targets, each measured workload that missed
// one, and how many met them all; or, when the subject was not measured,
// why there are no ratios.
func (s *Summary) renderTargets(b *strings.Builder) {
	if s.Subject == "" {
		b.WriteString("\nNo ratios: the subject allocator was not measured (see the notes; -subject picks another).\n")
		return
	}
	t := s.Targets
	b.WriteString(fmt.Sprintf("\nTargets for %s: time <= %.2fx the best peer's (of %s) and <= %.2fx glibc, geomean <= %.2fx mimalloc, peak RSS <= %.2fx glibc, minor faults <= %.1fx the best peer's (+%d), >= %.0f%% of rss_after_free's memory returned within 1 s\n",
		s.Subject, t.TimeVsBestPeer, strings.Join(Peers, ", "), t.TimeVsGlibc, t.GeoMeanVsMimalloc, t.RSSVsGlibc, t.FaultsVsBestPeer, FaultsSlack, 100*t.ReturnedIn1s))
	if g, ok := s.TimeGeoMean["mimalloc"]; ok {
		verdict := "met"
		if g > t.GeoMeanVsMimalloc {
			verdict = "MISS"
		}
		b.WriteString(fmt.Sprintf("  geomean time %.2fx mimalloc: %s\n", g, verdict))
	}
	met, measured := 0, 0
	for _, r := range s.measuredRows() {
		measured++
		if len(r.Misses) == 0 {
			met++
			continue
		}
		b.WriteString(fmt.Sprintf("  MISS %s: %s\n", r.Workload, strings.Join(r.Misses, "; ")))
	}
	b.WriteString(fmt.Sprintf("  %d of %d workloads meet every target\n", met, measured))
}

// renderProblems lists the skipped workloads and the failed runs, if any.
func (s *Summary) renderProblems(b *strings.Builder) {
	var bad []string
	for _, r := range s.Rows {
		if r.Skipped != "" {
			bad = append(bad, fmt.Sprintf("  %s: skipped: %s", r.Workload, r.Skipped))
		}
		for _, a := range s.Allocators {
			if msg, ok := r.Failed[a]; ok {
				bad = append(bad, "  FAILED "+msg)
			}
		}
	}
	if len(bad) > 0 {
		b.WriteString("\nProblems:\n" + strings.Join(bad, "\n") + "\n")
	}
}

// measuredRows are the rows of the workloads that ran (not skipped): the
// ones the time, RSS and faults tables and the target count are about.
func (s *Summary) measuredRows() []*Row {
	var rows []*Row
	for _, r := range s.Rows {
		if r.Skipped == "" {
			rows = append(rows, r)
		}
	}
	return rows
}

// geoRow is the geomean footer of a ratio table: blank under the
// allocators, the geomean under each baseline's ratio.
func geoRow(nAllocs int, baselines []string, g map[string]float64) []string {
	row := []string{"geomean"}
	for range nAllocs {
		row = append(row, "")
	}
	for _, base := range baselines {
		row = append(row, fmtNum("%.2f", get(g, base)))
	}
	return row
}

// cellOr returns FAIL for an allocator that failed on r, else s.
func cellOr(r *Row, alloc, s string) string {
	if _, ok := r.Failed[alloc]; ok {
		return "FAIL"
	}
	return s
}

// metricFormat turns a metric's name into a label, a format and a scale:
// *_kib are shown in MiB, *_s in seconds, *_krps as is, shares in percent.
func metricFormat(name string) (label, format string, scale float64) {
	switch {
	case name == MetricReturned:
		return name + " (%)", "%.0f", 100
	case strings.HasSuffix(name, "_kib"):
		return strings.TrimSuffix(name, "_kib") + " (MiB)", "%.1f", 1.0 / 1024
	case strings.HasSuffix(name, "_s"):
		return strings.TrimSuffix(name, "_s") + " (s)", "%.3f", 1
	case strings.HasSuffix(name, "_krps"):
		return strings.TrimSuffix(name, "_krps") + " (k req/s)", "%.0f", 1
	}
	return name, "%.4g", 1
}

func get(m map[string]float64, k string) float64 {
	if v, ok := m[k]; ok {
		return v
	}
	return math.NaN()
}

// firstMetrics come first, in this order (the story of rss_after_free);
// other metrics follow by name.
var firstMetrics = []string{"rss_base_kib", "rss_peak_kib", "rss_after_free_kib", "rss_after_1s_kib", MetricReturned}

func metricOrder[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	rank := func(k string) int {
		if i := slices.Index(firstMetrics, k); i >= 0 {
			return i
		}
		return len(firstMetrics)
	}
	sort.Slice(ks, func(i, j int) bool {
		if ri, rj := rank(ks[i]), rank(ks[j]); ri != rj {
			return ri < rj
		}
		return ks[i] < ks[j]
	})
	return ks
}
