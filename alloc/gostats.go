// The Go runtime's own memory, published next to the tags (DESIGN.md:
// Go programs' memory in the same picture): read from runtime/metrics
// (no stop-the-world) once a second while the package is in use, as
// about:memory reports under explicit/go/.

package alloc

import (
	"runtime/metrics"
	"time"

	"github.com/tagalloc/tagalloc/tagtable"
)

// goReports maps runtime/metrics memory classes to report paths. They
// are nonheap for tagalloc: the Go heap is not the allocator's heap.
var goReports = []struct{ metric, path, desc string }{
	{"/memory/classes/heap/objects:bytes", "explicit/go/heap/objects", "Go heap: live objects and dead ones not yet swept."},
	{"/memory/classes/heap/unused:bytes", "explicit/go/heap/unused", "Go heap: reserved for objects, not in use."},
	{"/memory/classes/heap/free:bytes", "explicit/go/heap/free", "Go heap: free, resident, not returned to the OS."},
	{"/memory/classes/heap/stacks:bytes", "explicit/go/stacks", "Goroutine stacks."},
	{"/memory/classes/os-stacks:bytes", "explicit/go/os-stacks", "Stacks of threads the OS allocated (cgo, locked threads)."},
	{"/memory/classes/metadata/other:bytes", "explicit/go/runtime-metadata", "The runtime's own metadata (mspans, GC structures, ...)."},
	{"/memory/classes/other:bytes", "explicit/go/other", "Other runtime memory (profiling buckets, trace buffers, ...)."},
	{"/memory/classes/heap/released:bytes", "go/heap-released", "Go heap memory returned to the OS (not resident)."},
	{"/memory/classes/total:bytes", "go/total", "All memory the Go runtime mapped."},
}

// publishGo reads the runtime's memory classes into the region's reports.
func publishGo(r *tagtable.Region) {
	samples := make([]metrics.Sample, len(goReports))
	for i, g := range goReports {
		samples[i].Name = g.metric
	}
	metrics.Read(samples)
	reps := make([]tagtable.Report, 0, len(samples))
	for i, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			continue // not in this Go version
		}
		reps = append(reps, tagtable.Report{Path: goReports[i].path, Description: goReports[i].desc, Amount: s.Value.Uint64()})
	}
	r.SetReports(reps)
}

// startGoReports publishes now and then every interval, for the life of
// the process.
func startGoReports(r *tagtable.Region, interval time.Duration) {
	publishGo(r)
	go func() {
		for range time.Tick(interval) {
			publishGo(r)
		}
	}()
}
