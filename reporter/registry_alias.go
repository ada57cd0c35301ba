// The memory-reporter registry, under its old names: it lives in package
// registry (reporter/registry), which package alloc imports without the
// rest of reporter.

package reporter

import "github.com/tagalloc/tagalloc/reporter/registry"

// Kinds and units of a measurement, as about:memory's.
type (
	Kind  = registry.Kind
	Units = registry.Units
)

const (
	KindNonheap = registry.KindNonheap // memory not from the malloc heap (mappings, the Go heap)
	KindHeap    = registry.KindHeap    // from the malloc heap: claimed from heap-unclassified
	KindOther   = registry.KindOther   // a measurement outside the explicit tree
)

const (
	UnitsBytes           = registry.UnitsBytes
	UnitsCount           = registry.UnitsCount
	UnitsCountCumulative = registry.UnitsCountCumulative
	UnitsPercentage      = registry.UnitsPercentage // hundredths of a percent
)

// Measurement is one thing a reporter says.
type Measurement = registry.Measurement

// Reporter measures part of the program: it calls report once per item.
type Reporter = registry.Reporter

// ErrReporter wraps every complaint about a reporter or what it says.
var ErrReporter = registry.ErrReporter

// MaxPath is the longest path the books carry (bytes).
const MaxPath = registry.MaxPath

// Register adds (or replaces) the reporter called name.
func Register(name string, r Reporter) error { return registry.Register(name, r) }

// Unregister removes the reporter called name; false if there was none.
func Unregister(name string) bool { return registry.Unregister(name) }

// Collect runs every reporter (in name order) and returns their
// measurements, with what was wrong with any of them (registry.Collect).
func Collect() ([]Measurement, error) { return registry.Collect() }
