// /metrics for tagalloc serve and run --serve: the current report's books
// as Prometheus metrics, through client_golang (which escapes label
// values: tag names, commands and library paths come from the measured
// programs).

package main

import (
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tagalloc/tagalloc/reporter"
)

var (
	procLabels = []string{"pid", "command"}
	tagLabels  = []string{"pid", "command", "tag"}
	libLabels  = []string{"pid", "command", "library"}
	// a budget's limit says its policy too: one series per budget, whose
	// policy a query can select (policy="fail") or drop (ignoring(policy))
	budgetLabels = []string{"pid", "command", "tag", "policy"}

	descLive       = prometheus.NewDesc("tagalloc_tag_live_bytes", "Usable bytes of the tag's live heap blocks (exact: the allocator's books).", tagLabels, nil)
	descLiveBlocks = prometheus.NewDesc("tagalloc_tag_live_blocks", "The tag's live heap blocks (exact).", tagLabels, nil)
	descLiveReq    = prometheus.NewDesc("tagalloc_tag_live_requested_bytes", "Bytes the program asked for, of the tag's live blocks (only with TAGALLOC_REQUESTED=1).", tagLabels, nil)
	descAlloc      = prometheus.NewDesc("tagalloc_tag_alloc_bytes_total", "Usable bytes ever allocated under the tag (exact).", tagLabels, nil)
	descAllocN     = prometheus.NewDesc("tagalloc_tag_alloc_blocks_total", "Blocks ever allocated under the tag (exact).", tagLabels, nil)
	descPeak       = prometheus.NewDesc("tagalloc_tag_peak_live_bytes_lower_bound",
		"A lower bound of the tag's highest live bytes so far; the peak is exact when tagalloc_tag_peak_live_bytes_upper_bound equals it. Without that series (Go's package alloc), the highest live total seen at queries and slow paths.", tagLabels, nil)
	descPeakUpper = prometheus.NewDesc("tagalloc_tag_peak_live_bytes_upper_bound",
		"An upper bound of the tag's highest live bytes so far (the native library's books: equal to the lower bound while one thread at a time held the tag, about 64 KiB per holding thread above it otherwise).", tagLabels, nil)

	// Tag budgets (reporter.Budget): the tag label is the tag or level the
	// budget covers, whose tags' bytes it counts together.
	descBudget = prometheus.NewDesc("tagalloc_tag_budget_bytes",
		"The tag's budget: a limit on the live bytes of the tag and every tag under it (tagalloc_set_budget, TAGALLOC_BUDGET); policy is what the allocator does past it (fail: the allocation returns NULL; notify: the program's callback runs; observe: counted only).", budgetLabels, nil)
	descBudgetCharged = prometheus.NewDesc("tagalloc_tag_budget_charged_bytes",
		"What counts against the tag's budget: the live bytes of the tag and every tag under it, plus what each thread's counter set of them reserved above its own live bytes (at most 64 KiB a thread); never past the limit under fail.", tagLabels, nil)
	descBudgetExceeded = prometheus.NewDesc("tagalloc_tag_budget_exceeded_total",
		"Times the charge of the tag's budget went past its limit, each counted once until it came back under (under fail, a refused allocation that found it under).", tagLabels, nil)
	descBudgetRefused = prometheus.NewDesc("tagalloc_tag_budget_refused_total",
		"Allocations the tag's budget refused (returned NULL) under the fail policy.", tagLabels, nil)

	descHeapLive     = prometheus.NewDesc("tagalloc_heap_live_bytes", "Usable bytes of all live heap blocks (the sum over tags).", procLabels, nil)
	descHeapBlocks   = prometheus.NewDesc("tagalloc_heap_live_blocks", "All live heap blocks.", procLabels, nil)
	descMapped       = prometheus.NewDesc("tagalloc_heap_mapped_bytes", "Memory the allocator has from the OS for the heap: spans holding blocks, free memory still resident, huge mappings.", procLabels, nil)
	descFreeCached   = prometheus.NewDesc("tagalloc_heap_free_cached_bytes", "Free memory the allocator keeps resident for reuse.", procLabels, nil)
	descSpanFree     = prometheus.NewDesc("tagalloc_heap_span_free_bytes", "Room in spans in use that holds no live block (free blocks, and space never carved, which costs address space but no RAM).", procLabels, nil)
	descBookkeeping  = prometheus.NewDesc("tagalloc_heap_bookkeeping_bytes", "The allocator's own memory: page descriptors and the books.", procLabels, nil)
	descSampleRate   = prometheus.NewDesc("tagalloc_stacks_sample_rate_bytes", "Mean bytes between sampled stacks (1: every block); present only when stacks are on.", procLabels, nil)
	descLibLive      = prometheus.NewDesc("tagalloc_library_estimated_live_bytes", "An estimate, from sampled stacks, of the live heap bytes allocated from the library (the first frame outside libc and the allocator); present only when stacks are on.", libLabels, nil)
	descLibLiveN     = prometheus.NewDesc("tagalloc_library_estimated_live_blocks", "An estimate, from sampled stacks, of the live heap blocks allocated from the library; present only when stacks are on.", libLabels, nil)
	descLibAlloc     = prometheus.NewDesc("tagalloc_library_estimated_alloc_bytes_total", "An estimate, from sampled stacks, of the bytes ever allocated from the library; present only when stacks are on.", libLabels, nil)
	descRSS          = prometheus.NewDesc("tagalloc_process_resident_bytes", "The process's resident memory now (VmRSS of /proc/PID/status), as Linux counts it; present only while the process runs and the file can be read.", procLabels, nil)
	descRSSPeak      = prometheus.NewDesc("tagalloc_process_resident_peak_bytes", "The highest resident memory of the process's program so far (VmHWM; exec resets it); present only while the process runs.", procLabels, nil)
	descRSSAnon      = prometheus.NewDesc("tagalloc_process_resident_anon_bytes", "The anonymous part of the process's resident memory (RssAnon); present only while the process runs.", procLabels, nil)
	descRSSUnique    = prometheus.NewDesc("tagalloc_process_resident_unique_bytes", "The process's resident memory no other process maps (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup; read less often than the others); present only while the process runs and the file can be read.", procLabels, nil)
	metricsDescsList = []*prometheus.Desc{descLive, descLiveBlocks, descLiveReq, descAlloc, descAllocN, descPeak, descPeakUpper,
		descBudget, descBudgetCharged, descBudgetExceeded, descBudgetRefused,
		descHeapLive, descHeapBlocks, descMapped, descFreeCached, descSpanFree, descBookkeeping,
		descSampleRate, descLibLive, descLibLiveN, descLibAlloc,
		descRSS, descRSSPeak, descRSSAnon, descRSSUnique}
)

// Describe and Collect make the server a Prometheus collector of the
// current report.
func (s *server) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range metricsDescsList {
		ch <- d
	}
}

func (s *server) Collect(ch chan<- prometheus.Metric) {
	rep, err := s.snap()
	if err != nil {
		return
	}
	collectReport(rep, ch)
}

// collectReport sends rep's metrics to ch. Label values are made valid
// UTF-8 (the client refuses anything else, and the names come from the
// measured programs), and series that then share their labels (two names
// that differ only in invalid bytes, or two processes under one pid) are
// summed: a series sent twice would fail the whole scrape.
func collectReport(rep *reporter.Report, ch chan<- prometheus.Metric) {
	type series struct {
		desc   *prometheus.Desc
		kind   prometheus.ValueType
		labels []string
		value  float64
	}
	var all []series
	at := map[string]int{}
	for _, p := range rep.Processes {
		pid, cmd := strconv.Itoa(p.PID), ""
		if len(p.Command) > 0 {
			cmd = p.Command[0]
		}
		send := func(d *prometheus.Desc, t prometheus.ValueType, v uint64, labels ...string) {
			labels = append([]string{pid, cmd}, labels...)
			for i, l := range labels {
				labels[i] = strings.ToValidUTF8(l, "\uFFFD")
			}
			key := d.String() + "\xff" + strings.Join(labels, "\xff")
			if i, ok := at[key]; ok {
				all[i].value += float64(v)
				return
			}
			at[key] = len(all)
			all = append(all, series{d, t, labels, float64(v)})
		}
		for _, t := range p.Tags {
			send(descLive, prometheus.GaugeValue, t.LiveBytes, t.Name)
			send(descLiveBlocks, prometheus.GaugeValue, t.LiveBlocks, t.Name)
			if t.LiveRequestedBytes != nil {
				send(descLiveReq, prometheus.GaugeValue, *t.LiveRequestedBytes, t.Name)
			}
			send(descAlloc, prometheus.CounterValue, t.AllocBytes, t.Name)
			send(descAllocN, prometheus.CounterValue, t.AllocBlocks, t.Name)
			send(descPeak, prometheus.GaugeValue, t.PeakLiveBytes, t.Name)
			if t.PeakLiveBytesUpper != nil {
				send(descPeakUpper, prometheus.GaugeValue, *t.PeakLiveBytesUpper, t.Name)
			}
		}
		for _, b := range p.Budgets {
			send(descBudget, prometheus.GaugeValue, b.LimitBytes, b.Tag, b.Policy)
			send(descBudgetCharged, prometheus.GaugeValue, b.ChargedBytes, b.Tag)
			send(descBudgetExceeded, prometheus.CounterValue, b.Crossings, b.Tag)
			send(descBudgetRefused, prometheus.CounterValue, b.Refused, b.Tag)
		}
		h := p.Heap
		send(descHeapLive, prometheus.GaugeValue, h.LiveBytes)
		send(descHeapBlocks, prometheus.GaugeValue, h.LiveBlocks)
		send(descMapped, prometheus.GaugeValue, h.MappedBytes)
		send(descFreeCached, prometheus.GaugeValue, h.FreeCachedBytes)
		send(descSpanFree, prometheus.GaugeValue, h.SpanFreeBytes)
		send(descBookkeeping, prometheus.GaugeValue, h.BookkeepingBytes)
		// resident memory of running processes only: an ended process's
		// last reading is not what it holds now (it holds nothing)
		if r := p.Resident; r != nil && r.Measured == reporter.ResidentRunning {
			for _, m := range []struct {
				d *prometheus.Desc
				v *uint64
			}{{descRSS, r.RSSBytes}, {descRSSPeak, r.PeakRSSBytes}, {descRSSAnon, r.AnonBytes}, {descRSSUnique, r.UniqueBytes}} {
				if m.v != nil {
					send(m.d, prometheus.GaugeValue, *m.v)
				}
			}
		}
		if st := p.Stacks; st != nil {
			send(descSampleRate, prometheus.GaugeValue, st.SampleRate)
			for _, l := range st.Libraries {
				send(descLibLive, prometheus.GaugeValue, l.LiveBytes, l.Name)
				send(descLibLiveN, prometheus.GaugeValue, l.LiveBlocks, l.Name)
				send(descLibAlloc, prometheus.CounterValue, l.AllocBytes, l.Name)
			}
		}
	}
	for _, s := range all {
		if m, err := prometheus.NewConstMetric(s.desc, s.kind, s.value, s.labels...); err == nil {
			ch <- m
		}
	}
}
