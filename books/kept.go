// The books of a run's processes that have ended, read while the run
// goes on and their files removed.

package books

import (
	"errors"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kept reads the region files of a books directory whose processes have
// ended (no process has the file open or mapped: Sweep) and removes them,
// keeping what they held. A run's books directory on a memory filesystem
// then holds the books of the running processes only, not of every
// process the run ever had (a build's tens of thousands of compilers,
// each ~30 KiB written, held in memory until the run's end). ReadAll is
// ReadDir with the kept processes.
type Kept struct {
	dir     string
	mu      sync.Mutex  // one Sweep or ReadAll at a time
	procs   []*Snapshot // one per ended process, its regions merged
	errs    []error     // regions that could not be read
	scratch []byte      // Sweep's copy buffer
}

// NewKept keeps the books of the ended processes of dir.
func NewKept(dir string) *Kept { return &Kept{dir: dir} }

// Sweep reads and removes the region files in the directory that no
// process has open or mapped any more, and returns how many it took.
// A process's regions taken in one sweep (the native library's and
// package alloc's) are merged, as ReadDir merges them.
func (k *Kept) Sweep() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(k.dir, "*.tagalloc"))
	var taken []*Snapshot
	n := 0
	for _, path := range files {
		if pid, ok := RegionPID(filepath.Base(path)); !ok || processMayLive(pid) {
			continue
		}
		s, ok, err := takeRegion(path, &k.scratch)
		if !ok {
			continue
		}
		n++
		if err != nil {
			k.errs = append(k.errs, err)
			continue
		}
		taken = append(taken, s)
	}
	k.procs = append(k.procs, mergeByPID(taken)...)
	return n
}

// Every sweeps the directory every d until stop is called (which waits
// for a sweep under way).
func (k *Kept) Every(d time.Duration) (stop func()) {
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				k.Sweep()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// ReadAll reads every region file left in the directory (ReadDir) and
// adds the kept processes': one snapshot per process of the run. A pid
// the system gave to two processes of the run, one after the other,
// appears twice.
func (k *Kept) ReadAll() ([]*Snapshot, error) {
	k.mu.Lock() // a sweep moves files from the directory to the kept
	defer k.mu.Unlock()
	snaps, errs := readDir(k.dir)
	return append(slices.Clone(k.procs), mergeByPID(snaps)...), errors.Join(append(slices.Clone(k.errs), errs...)...)
}

// RegionPID is the pid a region file's name starts with (PID.tagalloc,
// or PID.NAME.tagalloc for package alloc's).
func RegionPID(name string) (int, bool) {
	num, _, ok := strings.Cut(name, ".")
	if !ok || !strings.HasSuffix(name, ".tagalloc") {
		return 0, false
	}
	pid, err := strconv.Atoi(num)
	if err != nil || pid <= 0 {
		return 0, false
	}
	return pid, true
}
