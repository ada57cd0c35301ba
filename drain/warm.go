package drain

import (
	"runtime"

	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// warmer names return addresses in the background while the program
// runs, at the lowest CPU priority, so the report at exit finds the object
// files' symbols, line tables and inline trees already read: reading them
// was most of a sampled run's cost after the program had ended (libpython's
// DWARF alone took about 0.6 s). The report still symbolizes every address
// itself; a warmed one costs it a cached lookup.
type warmer struct {
	sym    reporter.Symbolize
	queue  chan []warmPC
	stop   chan struct{}
	seen   map[warmKey]bool // addresses queued, per process
	stacks map[warmStack]bool
}

type warmPC struct {
	m  tagtable.Module
	pc uint64
}

type warmKey struct {
	pid int
	pc  uint64
}

type warmStack struct {
	pid int
	id  uint32
}

func newWarmer(sym reporter.Symbolize) *warmer {
	w := &warmer{sym: sym, queue: make(chan []warmPC, 64), stop: make(chan struct{}),
		seen: map[warmKey]bool{}, stacks: map[warmStack]bool{}}
	go w.run()
	return w
}

func (w *warmer) run() {
	// A thread of its own at nice 19: the program being measured keeps its
	// CPUs; the thread ends with the goroutine (still locked).
	runtime.LockOSThread()
	lowerThreadPriority()
	for {
		select {
		case <-w.stop:
			return
		case batch := <-w.queue:
			for _, x := range batch {
				select {
				case <-w.stop:
					return
				default:
				}
				w.sym(&x.m, x.pc)
			}
		}
	}
}

// add queues the return addresses of p's stacks not seen before (under
// the drainer's lock: p is not changing). When the queue is full they
// are dropped: the report names them itself.
func (w *warmer) add(p *tagtable.Profile) {
	var batch []warmPC
	for id, st := range p.Stacks {
		k := warmStack{p.PID, id}
		if w.stacks[k] {
			continue
		}
		w.stacks[k] = true
		for _, pc := range st {
			pk := warmKey{p.PID, pc}
			if w.seen[pk] {
				continue
			}
			w.seen[pk] = true
			if m, ok := p.ModuleOf(pc); ok {
				batch = append(batch, warmPC{*m, pc})
			}
		}
	}
	if len(batch) == 0 {
		return
	}
	select {
	case w.queue <- batch:
	default:
	}
}

// close stops the warming (what is left, the report does) without
// waiting for the address its thread is naming: that may be an object
// file being read at nice 19 (libc's compressed DWARF: 0.2 to 0.5 s on a
// busy machine), which the report may not need. (If it does, it waits for
// that read as it would for its own.)
func (w *warmer) close() { close(w.stop) }
