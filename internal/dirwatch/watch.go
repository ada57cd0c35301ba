// The names a watch has reported, kept until taken.

package dirwatch

import (
	"slices"
	"sync"
)

// Watch collects the names of the files made in a directory (or moved
// into it) as Creates reports them.
type Watch struct {
	C     chan struct{} // a send after each report (one pending is enough)
	mu    sync.Mutex
	names []string
	lost  bool // names were missed (the kernel's queue overflowed)
}

func newWatch() *Watch { return &Watch{C: make(chan struct{}, 1)} }

func (w *Watch) add(names []string, lost bool) {
	w.mu.Lock()
	w.names = append(w.names, names...)
	w.lost = w.lost || lost
	w.mu.Unlock()
	select {
	case w.C <- struct{}{}:
	default:
	}
}

// Take returns the names reported since the last Take, and whether some
// were missed.
func (w *Watch) Take() (names []string, lost bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	names, lost = w.names, w.lost
	w.names, w.lost = nil, false
	return names, lost
}

// Pending says whether name was reported and not yet taken (for tests
// that wait for the kernel to have reported a file).
func (w *Watch) Pending(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Contains(w.names, name)
}
