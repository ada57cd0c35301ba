package main

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// drainer follows the events files in a books directory while the
// program runs: it opens each PID.events as it appears (again when a
// process that exec'd replaces its file), drains it into the profile of
// that process every tick, and once more at the end.
type drainer struct {
	dir  string
	mu   sync.Mutex
	open map[string]*drained // by path
	errs []error
	stop chan struct{}
	done chan struct{}
}

type drained struct {
	ev   *tagtable.Events
	ino  uint64
	prof *tagtable.Profile
	bad  bool // a malformed record: not drained any more
}

func startDrainer(dir string, every time.Duration) *drainer {
	d := &drainer{dir: dir, open: map[string]*drained{}, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(d.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				d.pass()
			}
		}
	}()
	return d
}

// pass drains every events file once.
func (d *drainer) pass() {
	d.mu.Lock()
	defer d.mu.Unlock()
	files, _ := filepath.Glob(filepath.Join(d.dir, "*.events"))
	for _, f := range files {
		fi, err := os.Stat(f)
		if err != nil {
			continue
		}
		ino := fi.Sys().(*syscall.Stat_t).Ino
		o := d.open[f]
		if o != nil && o.ino != ino { // exec'd: the new image's file
			o.ev.Close()
			o = nil
		}
		if o == nil {
			ev, err := tagtable.OpenEvents(f)
			if err != nil {
				d.errs = append(d.errs, err)
				d.open[f] = &drained{ino: ino, bad: true}
				continue
			}
			o = &drained{ev: ev, ino: ino, prof: tagtable.NewProfile(ev.PID(), ev.Mode(), ev.SampleRate())}
			d.open[f] = o
		}
		if o.bad || o.ev == nil {
			continue
		}
		if _, err := o.ev.Drain(o.prof); err != nil {
			d.errs = append(d.errs, err)
			o.bad = true
		}
		o.prof.Dropped, o.prof.DroppedBytes = o.ev.Dropped()
	}
}

// finish stops the ticker, drains once more and returns the profiles by
// pid (and what went wrong on the way).
func (d *drainer) finish() (map[int]*tagtable.Profile, []error) {
	close(d.stop)
	<-d.done
	d.pass()
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[int]*tagtable.Profile{}
	for _, o := range d.open {
		if o.ev != nil {
			out[o.prof.PID] = o.prof
			o.ev.Close()
		}
	}
	return out, d.errs
}

// newSymbolizer names frames from the modules' ELF and DWARF tables.
func newSymbolizer() reporter.Symbolize { return reporter.NewELFSymbols().Symbolize }
