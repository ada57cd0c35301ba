// Memory reporters in the books (Go programs' memory in the same
// picture: docs/ARCHITECTURE.md, "alloc and arena"): what the program's reporters say (package registry:
// reporter/registry) is published into the region once a second while the package
// is in use, and at PublishReports. The Go runtime's own memory is one of
// them: the runtime/metrics memory classes (no stop-the-world) as
// about:memory reports under explicit/go/.

package alloc

import (
	"fmt"
	"os"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/reporter/registry"
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

// GoRuntimeReporter reports the Go runtime's memory classes; package
// alloc registers it as "go-runtime".
func GoRuntimeReporter(report func(registry.Measurement)) {
	samples := make([]metrics.Sample, len(goReports))
	for i, g := range goReports {
		samples[i].Name = g.metric
	}
	metrics.Read(samples)
	for i, s := range samples {
		if s.Value.Kind() != metrics.KindUint64 {
			continue // not in this Go version
		}
		report(registry.Measurement{Path: goReports[i].path, Description: goReports[i].desc, Amount: s.Value.Uint64()})
	}
}

var reportErrOnce sync.Once

// publishReports runs the registered reporters into the region's reports.
func publishReports(r *books.Region) {
	ms, err := registry.Collect()
	if err != nil {
		reportErrOnce.Do(func() { fmt.Fprintf(os.Stderr, "tagalloc: %v\n", err) })
	}
	if len(ms) > books.MaxReports {
		reportErrOnce.Do(func() {
			fmt.Fprintf(os.Stderr, "tagalloc: memory reporters gave %d items; the books carry %d\n", len(ms), books.MaxReports)
		})
	}
	reps := make([]books.Report, len(ms))
	for i, m := range ms {
		reps[i] = books.Report{Path: m.Path, Description: m.Description, Kind: uint8(m.Kind), Units: uint8(m.Units), Amount: m.Amount}
	}
	r.SetReports(reps)
}

// PublishReports runs the memory reporters now and publishes what they
// say (it also happens once a second while the package is in use); call
// it before a short-lived program exits.
func PublishReports() {
	ensureInit()
	if r := state.region; r != nil {
		publishReports(r)
	}
}

// startReports registers the Go runtime's reporter, publishes now and
// then every interval, for the life of the process.
func startReports(r *books.Region, interval time.Duration) {
	_ = registry.Register("go-runtime", GoRuntimeReporter)
	publishReports(r)
	go func() {
		for range time.Tick(interval) {
			publishReports(r)
			// and the arena's figures: its purge timer returns free spans
			// and cached huge mappings while the program allocates nothing
			// (the allocation paths publish them otherwise)
			publish()
		}
	}()
}
