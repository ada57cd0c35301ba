// The registry of memory reporters, and what a measurement may say.

package registry

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Kinds and units of a measurement, as about:memory's.
type (
	Kind  uint8
	Units uint8
)

const (
	KindNonheap Kind = 0 // memory not from the malloc heap (mappings, the Go heap)
	KindHeap    Kind = 1 // from the malloc heap: claimed from heap-unclassified
	KindOther   Kind = 2 // a measurement outside the explicit tree
)

const (
	UnitsBytes           Units = 0
	UnitsCount           Units = 1
	UnitsCountCumulative Units = 2
	UnitsPercentage      Units = 3 // hundredths of a percent
)

// Measurement is one thing a reporter says.
type Measurement struct {
	Path        string
	Kind        Kind
	Units       Units
	Amount      uint64
	Description string
}

// Reporter measures part of the program: it calls report once per item.
type Reporter func(report func(Measurement))

// ErrReporter wraps every complaint about a reporter or what it says.
var ErrReporter = errors.New("memory reporter")

// MaxPath is the longest path the books carry (bytes).
const MaxPath = 111

var registry struct {
	sync.Mutex
	byName map[string]Reporter
}

// Register adds (or replaces) the reporter called name.
func Register(name string, r Reporter) error {
	if name == "" || r == nil {
		return fmt.Errorf("%w: a reporter needs a name and a function", ErrReporter)
	}
	registry.Lock()
	defer registry.Unlock()
	if registry.byName == nil {
		registry.byName = map[string]Reporter{}
	}
	registry.byName[name] = r
	return nil
}

// Unregister removes the reporter called name; false if there was none.
func Unregister(name string) bool {
	registry.Lock()
	defer registry.Unlock()
	_, ok := registry.byName[name]
	delete(registry.byName, name)
	return ok
}

// Collect runs every reporter (in name order) and returns their
// measurements, with what was wrong with any of them: an item with no
// path, a path longer than MaxPath, an explicit item that is not in
// bytes, a kind or units out of range, or a path given twice is left out
// and named in the error. A reporter that panics is left out, and named.
func Collect() ([]Measurement, error) {
	registry.Lock()
	names := make([]string, 0, len(registry.byName))
	for n := range registry.byName {
		names = append(names, n)
	}
	sort.Strings(names)
	fns := make([]Reporter, len(names))
	for i, n := range names {
		fns[i] = registry.byName[n]
	}
	registry.Unlock() // reporters run unlocked: they may register others
	var out []Measurement
	var errs []error
	seen := map[string]bool{}
	for i, fn := range fns {
		func() {
			defer func() {
				if v := recover(); v != nil {
					errs = append(errs, fmt.Errorf("%w %q panicked: %v", ErrReporter, names[i], v))
				}
			}()
			fn(func(m Measurement) {
				if err := m.check(); err != nil {
					errs = append(errs, fmt.Errorf("%w %q: %v", ErrReporter, names[i], err))
					return
				}
				if seen[m.Path] {
					errs = append(errs, fmt.Errorf("%w %q: %s reported twice", ErrReporter, names[i], m.Path))
					return
				}
				seen[m.Path] = true
				out = append(out, m)
			})
		}()
	}
	return out, errors.Join(errs...)
}

func (m Measurement) check() error {
	switch {
	case m.Path == "" || len(m.Path) > MaxPath:
		return fmt.Errorf("path %q: 1 to %d bytes", m.Path, MaxPath)
	case strings.ContainsFunc(m.Path, func(r rune) bool { return r < 0x20 || r == 0x7f }):
		return fmt.Errorf("path %q holds a control character", m.Path)
	case m.Kind > KindOther || m.Units > UnitsPercentage:
		return fmt.Errorf("%s: kind %d, units %d", m.Path, m.Kind, m.Units)
	case strings.HasPrefix(m.Path, "explicit/") && (m.Units != UnitsBytes || m.Kind == KindOther):
		return fmt.Errorf("%s: an explicit item is heap or nonheap bytes", m.Path)
	case strings.HasPrefix(m.Path, "explicit/heap/") || m.Path == "explicit/heap-unclassified" ||
		strings.HasPrefix(m.Path, "explicit/heap-overhead/"):
		return fmt.Errorf("%s: the allocator's own path", m.Path)
	}
	return nil
}
