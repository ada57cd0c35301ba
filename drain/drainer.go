// The drainer: passes over the events files, paced; draining, with marks;
// forked children started from their parent's profile.

package drain

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/internal/dirwatch"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// Drainer follows the events files in a books directory while the
// program runs: it opens each PID.events as it appears (again when a
// process that exec'd replaces its file), drains it into the profile of
// that process every tick, and once more at the end.
type Drainer struct {
	dir   string
	limit int       // each profile's history limit (bytes)
	t0    time.Time // the clock stamped on events counts from here
	mu    sync.Mutex
	open  map[string]*drained // by path
	gone  []*drained          // the profiles of processes that ended, their rings released (release)
	errs  []error
	stop  chan struct{}
	done  chan struct{}
	warm  *warmer // names return addresses as they come (nil: not)
	npass int
	grew  atomic.Uint64   // the last pass: the most a ring filled since the one before (a share of it, float64 bits)
	watch *dirwatch.Watch // the names made in dir (nil: not watched)
	ended bool            // Finish closed the rings: no more passes
	// The events files as the last look at the directory found them (in
	// name order), and the directory's modification time then.
	files   []string
	dirTime time.Time
}

type drained struct {
	ev   *tagtable.Events
	ino  uint64
	prof *tagtable.Profile
	bad  bool // a malformed record: not drained any more
	// Where the writer was at each pass since the last drain, and when
	// (drainAt): the records before a mark are stamped with its time.
	marks  []mark
	seen   uint64 // the ring's head at the last pass
	warmAt int    // the pass from which its new stacks may be warmed again
	// lookedMs: when it was last asked whether its process has ended
	// (endCheckEvery), on the pass's clock
	lookedMs uint64
}

// mark is a ring position the writer had reached at a pass, and the
// pass's clock (ms since the run began).
type mark struct{ pos, ms uint64 }

// A pass drains a ring only when it must: when a quarter of it is taken
// (drainAt), when it has maxMarks marks or the oldest is maxStale old,
// when a forked child waits for its parent's profile, for the live view
// and at the end. Otherwise it marks where the writer is. A drain in the
// middle of a run takes the launcher's CPU from the program while it
// runs: on two cores that larson's two threads keep busy, draining at
// every pass (5 a run) made it 1.17x slower under --stacks sampled than
// untracked, draining at the end 1.12x (15 interleaved rounds). Records
// drained later keep the time of the pass that first saw them, so the
// timeline is as fine as before.
const (
	drainAt  = 1.0 / 4
	maxMarks = 128
	maxStale = time.Second
)

// A ring that has not moved since the pass before is asked, at most once
// every endCheckEvery, whether its process has ended (processEnded):
// then it is drained a last time, unmapped and its file removed
// (release). In a books directory on a memory filesystem a ring's pages
// are memory until the file goes: a build running thousands of compilers
// would otherwise hold up to 4 MiB for each until the run ends.
const endCheckEvery = time.Second

// passKind says which rings a pass drains.
type passKind int

const (
	passTick  passKind = iota // on the clock: those that must be (drainAt)
	passAll                   // every ring (the live view, the end)
	passFinal                 // every ring; a forked child whose parent's profile never reached its fork starts empty
)

// warmEvery is how many passes go between two looks for new stacks to
// symbolize in the background.
const warmEvery = 10

// ScanEvery is how many passes may go between two readings of the books
// directory when it is not watched (dirwatch): in between, a pass reads
// it only if its modification time moved (a process created or replaced
// its events file). The time can miss a change made within the clock tick
// of the last reading; ScanEvery bounds how late such a file is found.
// Reading the directory and each file's inode at every pass (then every
// 20 ms) was a tenth of the launcher's CPU under redis with --stacks
// sampled (185 -> 165 ms, 4 runs each). Watched, a pass looks only at the
// names made since the last: reading the directory stat'ed every events
// file, so under a shell running hundreds of programs the launcher's CPU
// grew with the square of the processes.
const ScanEvery = 10

// Passes are paced by how much the fastest ring filled since the pass
// before (pace): they aim to find an eighth of a ring written since,
// once every minEvery to maxEvery, and a ring is drained once a quarter
// of it is taken (drainAt). A file made in the directory (a new
// process's ring) brings the next pass within newRingEvery, unless one is
// due sooner; files made one after another do not put it off. (Within
// minEvery, and put off by each file, a shell running a program every
// few milliseconds had the launcher pass twice per program, or never.)
// The sampled ring is 4 MiB:
// a program writing 1M records a second (realloc_chain, 40 MB) fills an
// eighth of it in about 12 ms, redis under redis-benchmark (150k, 7 MB)
// in 70 ms, larson (2.6 MB) in 200. Each pass wakes the launcher: on two
// cores that two threads of the program keep busy, a pass (then a drain)
// every 20 ms made larson 1.21x slower under --stacks sampled than
// untracked, every 100 ms 1.16x (15 interleaved rounds). The pass's clock
// is stamped on the events it finds.
const (
	paceTarget   = 1.0 / 8
	minEvery     = 2500 * time.Microsecond
	maxEvery     = 100 * time.Millisecond
	newRingEvery = 10 * time.Millisecond
)

// pace is the wait before the next pass, after a wait of last in which
// the fastest ring filled by grew (a share of it, 0-1): at most twice as
// long.
func pace(last time.Duration, grew float64) time.Duration {
	next := 2 * last
	if grew > 0 {
		next = min(next, time.Duration(float64(last)*paceTarget/grew))
	}
	return min(max(next, minEvery), maxEvery)
}

// Start drains first after `every`, then as pace says; with sym,
// it also has new stacks' return addresses symbolized in the background
// (warmer).
func Start(dir string, every time.Duration, historyLimit int, sym reporter.Symbolize) *Drainer {
	d := &Drainer{dir: dir, limit: historyLimit, t0: time.Now(), open: map[string]*drained{}, stop: make(chan struct{}), done: make(chan struct{})}
	if sym != nil {
		d.warm = newWarmer(sym)
	}
	d.watch = dirwatch.Creates(dir, ".events", d.stop)
	var created <-chan struct{} // nil (never ready) when not watched
	if d.watch != nil {
		created = d.watch.C
	}
	go func() {
		defer close(d.done)
		t := time.NewTimer(every)
		defer t.Stop()
		due := time.Now().Add(every) // the next pass
		for {
			select {
			case <-d.stop:
				return
			case <-t.C:
				d.pass(passTick)
				every = pace(every, d.growth())
				due = time.Now().Add(every)
				t.Reset(every)
			case <-created: // a new process's ring: drained soon, as it may fill fast
				// (not at once: a shell starting thousands of processes a
				// second would have the launcher pass as often)
				every = min(every, newRingEvery)
				if soon := time.Now().Add(newRingEvery); soon.Before(due) {
					due = soon
					t.Reset(newRingEvery)
				}
			}
		}
	}()
	return d
}

// growth is the most a ring filled between the last two passes (a share
// of it).
func (d *Drainer) growth() float64 { return math.Float64frombits(d.grew.Load()) }

// pass looks at every events file once and drains those kind says; it
// reports whether it read anything or started a profile. A child forked
// without exec starts from a copy of its parent's profile at the fork
// (the FORK event its ring names): it waits until the parent's ring has
// been drained that far, or, on the last pass, starts empty and borrows
// the parent's stacks.
func (d *Drainer) pass(kind passKind) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.passLocked(kind)
}

func (d *Drainer) passLocked(kind passKind) bool {
	if d.ended {
		return false
	}
	final := kind == passFinal
	all := kind != passTick
	now := uint64(time.Since(d.t0).Milliseconds())
	progress := false
	grew := 0.0
	for _, f := range d.scan(final) {
		o := d.open[f]
		if o == nil {
			ino, err := inode(f)
			if err != nil {
				continue
			}
			ev, err := tagtable.OpenEvents(f)
			if err != nil {
				d.errs = append(d.errs, err)
				d.open[f] = &drained{ino: ino, bad: true}
				continue
			}
			prof, ok := d.start(ev, final, now)
			if !ok {
				ev.Close() // the parent's ring is not open yet, or not written that far
				continue
			}
			o = &drained{ev: ev, ino: ino, prof: prof}
			d.open[f] = o
			progress = true
		}
		if o.bad || o.ev == nil {
			continue
		}
		head := o.ev.Head()
		moved := head > o.seen
		if moved {
			grew = max(grew, float64(head-o.seen)/float64(o.ev.Size()))
			o.seen = head
		}
		// asked before the drain: a process that had ended then wrote
		// everything it will before it
		ended := !moved && !final && now-o.lookedMs >= uint64(endCheckEvery.Milliseconds()) && d.processEnded(o, now)
		if !all && !o.due(now) && !ended {
			if moved {
				o.marks = append(o.marks, mark{head, now})
			}
			continue
		}
		progress = d.drain(o, now) > 0 || progress
		if ended && !o.bad {
			d.release(f, o)
			continue
		}
		if d.warm != nil && !final && d.npass >= o.warmAt {
			d.warm.add(o.prof)
			o.warmAt = d.npass + warmEvery
		}
	}
	d.npass++
	d.grew.Store(math.Float64bits(grew))
	return progress
}

// processEnded says whether o's process has ended, noting when it was
// asked: no process has its pid (a zombie not yet reaped has), and no
// process has its books file open or mapped (as it has while it lives:
// a process of another pid namespace, named by the pid it has there, may
// be running under a pid this one does not know).
func (d *Drainer) processEnded(o *drained, now uint64) bool {
	o.lookedMs = now
	pid := o.ev.PID()
	return syscall.Kill(pid, 0) == syscall.ESRCH && !tagtable.RegionInUse(filepath.Join(d.dir, fmt.Sprintf("%d.tagalloc", pid)))
}

// release ends the ring at path of a process that has ended, drained to
// its last record: it is unmapped and its file removed (unless the path
// names another file by now: a new process of the same pid made it), and
// its profile kept with the ended ones.
func (d *Drainer) release(path string, o *drained) {
	if ino, err := inode(path); err == nil && ino == o.ino {
		os.Remove(path)
	}
	o.ev.Close()
	o.ev = nil
	delete(d.open, path)
	if i, ok := slices.BinarySearch(d.files, path); ok {
		d.files = slices.Delete(d.files, i, i+1)
	}
	d.gone = append(d.gone, o)
}

// profiles calls f with each process's profile: the ended ones' (whose
// rings were released), then the open rings'. For a pid two processes of
// the run had, the last one f sees is the newest.
func (d *Drainer) profiles(f func(o *drained)) {
	for _, o := range d.gone {
		f(o)
	}
	for _, o := range d.open {
		if o.prof != nil && o.ev != nil {
			f(o)
		}
	}
}

// byPID is the profiles by pid (the newest of a pid's: profiles).
func (d *Drainer) byPID() map[int]*tagtable.Profile {
	m := map[int]*tagtable.Profile{}
	d.profiles(func(o *drained) { m[o.prof.PID] = o.prof })
	return m
}

// due says whether a tick drains o's ring (drainAt).
func (o *drained) due(now uint64) bool {
	return o.ev.Backlog() >= drainAt || len(o.marks) >= maxMarks ||
		len(o.marks) > 0 && now-o.marks[0].ms >= uint64(maxStale.Milliseconds())
}

// drain drains o's ring, the records before each mark stamped with its
// time, the rest with now, and returns how many it read; a malformed
// record marks the ring bad (the error kept for the report).
func (d *Drainer) drain(o *drained, now uint64) int {
	total := 0
	var err error
	for _, m := range o.marks {
		o.prof.SetClock(m.ms)
		var n int
		n, err = o.ev.DrainTo(o.prof, m.pos)
		total += n
		if err != nil {
			break
		}
	}
	o.marks = o.marks[:0]
	if err == nil {
		o.prof.SetClock(now)
		var n int
		n, err = o.ev.Drain(o.prof)
		total += n
	}
	if err != nil {
		d.errs = append(d.errs, err)
		o.bad = true
	}
	o.prof.Dropped, o.prof.DroppedBytes = o.ev.Dropped()
	return total
}

// scan returns the events files in name order. With the directory
// watched, it looks only at the names made since the last scan; it reads
// the whole directory again on the first and the final pass, when names
// were missed, and, not watched, every ScanEvery passes or when the
// directory's modification time moved. A file whose path now names
// another inode (a process that exec'd made its new image's file) is
// closed and forgotten, to be opened as new.
func (d *Drainer) scan(final bool) []string {
	if d.watch != nil && !final && d.npass > 0 {
		if names, lost := d.watch.Take(); !lost {
			for _, n := range names {
				if filepath.Ext(n) == ".events" && filepath.Base(n) == n {
					d.found(filepath.Join(d.dir, n))
				}
			}
			return d.files
		}
	}
	st, err := os.Stat(d.dir)
	if err != nil {
		return d.files
	}
	if d.watch == nil && !final && d.npass%ScanEvery != 0 && st.ModTime().Equal(d.dirTime) {
		return d.files
	}
	d.dirTime = st.ModTime()
	d.files, _ = filepath.Glob(filepath.Join(d.dir, "*.events"))
	for _, f := range d.files {
		d.found(f)
	}
	return d.files
}

// found notes that path was made (or is there): a new name joins the
// files, and an open file that path no longer names is forgotten.
func (d *Drainer) found(path string) {
	if i, ok := slices.BinarySearch(d.files, path); !ok {
		d.files = slices.Insert(d.files, i, path)
	}
	if o := d.open[path]; o != nil {
		if ino, err := inode(path); err == nil && ino != o.ino {
			if o.ev != nil {
				o.ev.Close()
			}
			delete(d.open, path)
		}
	}
}

// inode is the inode number of the file at path.
func inode(path string) (uint64, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	return fi.Sys().(*syscall.Stat_t).Ino, nil
}

// start makes the profile a ring feeds: empty, or for a forked child a
// copy of the parent's at the fork (the parent's ring is drained to it
// first if need be); false means wait for the parent. A child whose copy
// the parent no longer keeps (tagtable.MaxForks), or whose parent's
// profile never reached its fork by the last pass, starts empty.
func (d *Drainer) start(ev *tagtable.Events, final bool, now uint64) (*tagtable.Profile, bool) {
	fresh := func() *tagtable.Profile {
		p := tagtable.NewProfile(ev.PID(), ev.Mode(), ev.SampleRate())
		if err := p.SetHistoryLimit(d.limit); err != nil {
			d.errs = append(d.errs, fmt.Errorf("pid %d: no event history: %w", ev.PID(), err))
			_ = p.SetHistoryLimit(0)
		}
		return p
	}
	ppid, seq := ev.ForkedFrom()
	if ppid == 0 {
		return fresh(), true
	}
	orphan := func() *tagtable.Profile {
		p := fresh()
		p.Parent = ppid // its inherited blocks are unknown; its parent's stacks are borrowed
		return p
	}
	var parent *drained // the newest of ppid's
	d.profiles(func(o *drained) {
		if o.prof.PID == ppid {
			parent = o
		}
	})
	if o := parent; o != nil {
		if !o.bad && o.ev != nil {
			// Bring the parent's profile up to where its ring is: the
			// child's FORK event and every fork after it are there by now
			// (the parent wrote them before the child could run), so
			// whether the child's copy is still kept depends on how many
			// times the parent forked since (MaxForks), not on when the
			// last pass happened to drain it.
			d.drain(o, now)
		}
		if base := o.prof.Forks[seq]; base != nil {
			delete(o.prof.Forks, seq)
			base.PID = ev.PID()
			return base, true
		}
		if seq <= o.prof.ForkSeen {
			return orphan(), true // its copy is gone
		}
	}
	if !final {
		return nil, false
	}
	return orphan(), true
}

// Finish stops the ticker, drains until nothing moves, and returns the
// profiles by pid (and what went wrong on the way).
func (d *Drainer) Finish() (map[int]*tagtable.Profile, []error) {
	close(d.stop)
	<-d.done
	if d.warm != nil {
		d.warm.close()
		d.warm = nil
	}
	for d.pass(passAll) {
	}
	d.pass(passFinal)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.ended = true
	out := d.byPID()
	var rings []*tagtable.Events
	for _, o := range d.open {
		if o.ev != nil {
			rings = append(rings, o.ev)
		}
	}
	// Unmapped meanwhile: the report needs nothing more of them (4 MiB
	// each, unmapping a few was a few ms after the program ended).
	go func() {
		for _, ev := range rings {
			ev.Close()
		}
	}()
	for _, p := range out {
		p.Forks = nil
		if par := out[p.Parent]; p.Parent != 0 && par != nil {
			p.Inherit(par)
		}
	}
	return out, d.errs
}

// With drains what the rings hold now, then calls f with the profiles,
// by pid, while nothing drains into them. Draining first keeps a live
// view's estimates level with the books f reads next: a profile up to a
// tick behind them read low on a growing heap.
func (d *Drainer) With(f func(map[int]*tagtable.Profile)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.passLocked(passAll)
	f(d.byPID())
}
