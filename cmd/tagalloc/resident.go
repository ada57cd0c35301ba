// The resident memory of a run's processes: tagalloc run polls each
// process's /proc/PID/status (and, less often, smaps_rollup) while it
// runs, so that a process that has ended is reported with its last
// reading and when it was taken.

package main

import (
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/tagalloc/tagalloc/drain"
	"github.com/tagalloc/tagalloc/internal/dirwatch"
	"github.com/tagalloc/tagalloc/internal/procmem"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// Pacing. A process's resident memory cannot be read once it has ended
// (Linux frees it before the parent reaps it), so the figure reported for
// an ended process is the last reading: the more often, the closer to
// its end. Reading one process's status costs about 45 µs; the poller
// waits at least residentDuty times the CPU its last round took (under 2%
// of a core however many processes run), at least residentEvery
// and at most residentMaxEvery. smaps_rollup walks the page tables (1.4 ms
// for 300 MB resident): a process's is read at most every uniqueEvery,
// and then waits uniqueDuty times its cost. A new process's books file
// brings a round within newProcessEvery.
const (
	residentEvery    = 25 * time.Millisecond
	residentMaxEvery = time.Second
	residentDuty     = 50
	uniqueEvery      = 50 * time.Millisecond
	uniqueDuty       = 100
	newProcessEvery  = 5 * time.Millisecond
)

// residentOf gives the resident figures of process pid whose books began
// at startNS (Unix ns); nil: not recorded.
type residentOf func(pid int, startNS uint64) *reporter.Resident

// polled is what the poller knows of one process.
type polled struct {
	pidfd      int    // the process, once read (-1: none); the pid cannot name another while it is open
	startTicks uint64 // its start (ticks since boot), from its first reading; 0: unknown
	status     procmem.Status
	at         time.Time // of status
	polls      int
	unique     *uint64
	uniqueAt   time.Time
	uniqueDue  time.Time
	goneAt     time.Time // when it was found ended (zero: running, as far as known)
	statusErr  string
	uniqueErr  string
}

func newPolled() *polled { return &polled{pidfd: -1} }

// end notes that the process had ended by t.
func (pl *polled) end(t time.Time) {
	if pl.goneAt.IsZero() {
		pl.goneAt = t
	}
	if pl.pidfd >= 0 {
		closePidfd(pl.pidfd)
		pl.pidfd = -1
	}
}

// read reads pid's status, and its smaps_rollup if due (or if always).
// A reading counts only if the process it was taken from is still the
// one first read: its pidfd has not exited after the read (without a
// pidfd, its start time is unchanged).
func (pl *polled) read(pid int, now time.Time, always bool) {
	st, err := procmem.ReadStatus(pid)
	if errors.Is(err, procmem.ErrGone) {
		pl.end(now)
		return
	}
	if err != nil {
		pl.statusErr = err.Error()
		return
	}
	if pl.startTicks == 0 {
		ticks, err := procmem.ReadStartTicks(pid)
		if errors.Is(err, procmem.ErrGone) {
			pl.end(now)
			return
		}
		if err == nil {
			pl.startTicks = ticks
		}
		if fd, err := openPidfd(pid); err == nil {
			pl.pidfd = fd
		}
	} else if pl.pidfd < 0 {
		ticks, err := procmem.ReadStartTicks(pid)
		if err != nil || ticks != pl.startTicks { // ended, and the pid is another's now
			pl.end(now)
			return
		}
	}
	if pl.pidfd >= 0 && pidfdExited(pl.pidfd) {
		pl.end(now)
		return
	}
	pl.status, pl.at, pl.statusErr = st, now, ""
	pl.polls++
	if !always && now.Before(pl.uniqueDue) {
		return
	}
	t0 := time.Now()
	u, err := procmem.ReadPrivate(pid)
	pl.uniqueDue = now.Add(max(uniqueEvery, uniqueDuty*time.Since(t0)))
	switch {
	case errors.Is(err, procmem.ErrGone) || pl.pidfd >= 0 && pidfdExited(pl.pidfd):
		pl.end(time.Now()) // the status read stands: it was alive then
	case err != nil:
		pl.uniqueErr = err.Error()
	default:
		pl.unique, pl.uniqueAt, pl.uniqueErr = u, now, ""
	}
}

// resident is pl's figures for a report of the process whose books began
// at startNS. A reading taken before startNS was of the program the
// process ran before it exec'd this one, and a process that started well
// after startNS is a later one given the same pid: neither is reported.
func (pl *polled) resident(startNS uint64) *reporter.Resident {
	r := &reporter.Resident{Measured: reporter.ResidentNever, Polls: pl.polls}
	var errs []string
	for _, e := range []string{pl.statusErr, pl.uniqueErr} {
		if e != "" {
			errs = append(errs, e)
		}
	}
	r.Error = strings.Join(errs, "; ")
	if pl.polls == 0 {
		return r
	}
	if pl.startTicks != 0 && startNS != 0 {
		// the start from /proc is up to a second early (btime is whole seconds)
		if ns, err := procmem.StartNS(pl.startTicks); err == nil && ns > startNS+2e9 {
			r.Polls, r.Error = 0, fmt.Sprintf("the pid was another process's when read (it started %v after these books)", time.Duration(ns-startNS).Round(time.Millisecond))
			return r
		}
	}
	if startNS != 0 && uint64(pl.at.UnixNano()) < startNS {
		r.Polls, r.Error = 0, "last read before the process exec'd this program"
		return r
	}
	r.Measured = reporter.ResidentRunning
	if !pl.goneAt.IsZero() {
		r.Measured = reporter.ResidentLastPoll
		r.EndedByUnixMS = max(pl.goneAt.UnixMilli(), pl.at.UnixMilli())
	}
	r.ReadAtUnixMS = pl.at.UnixMilli()
	r.RSSBytes, r.PeakRSSBytes, r.AnonBytes = pl.status.RSS, pl.status.HWM, pl.status.Anon
	if pl.unique != nil && (startNS == 0 || uint64(pl.uniqueAt.UnixNano()) >= startNS) {
		r.UniqueBytes, r.UniqueReadAtUnixMS = pl.unique, pl.uniqueAt.UnixMilli()
	}
	return r
}

// residentNow reads a running process's figures once (snapshot, top,
// serve).
func residentNow(pid int, startNS uint64) *reporter.Resident {
	pl := newPolled()
	defer pl.end(time.Now())
	pl.read(pid, time.Now(), true)
	r := pl.resident(startNS)
	if r.Measured == reporter.ResidentLastPoll {
		r.Measured = reporter.ResidentRunning // read once, and it was running then
		r.EndedByUnixMS = 0
	}
	return r
}

// residentPoller polls every process of a run: each books file in the
// books directory (PID.tagalloc, PID.NAME.tagalloc) names one.
type residentPoller struct {
	dir   string
	mu    sync.Mutex
	procs map[int]*polled
	watch *dirwatch.Watch
	stop  chan struct{}
	done  chan struct{}
	ended bool // finish ran: no more reads
	// rounds counts the rounds; every drain.ScanEvery-th reads the whole
	// directory (the first finds what was made before the watch).
	rounds int
}

// startResidentPoller polls the processes of the books directory dir
// until finish.
func startResidentPoller(dir string) *residentPoller {
	p := &residentPoller{dir: dir, procs: map[int]*polled{}, stop: make(chan struct{}), done: make(chan struct{})}
	p.watch = dirwatch.Creates(dir, ".tagalloc", p.stop)
	go p.loop()
	return p
}

func (p *residentPoller) loop() {
	defer close(p.done)
	runtime.LockOSThread() // threadCPU measures this thread's
	defer runtime.UnlockOSThread()
	var created <-chan struct{}
	if p.watch != nil {
		created = p.watch.C
	}
	t := time.NewTimer(newProcessEvery)
	defer t.Stop()
	due := time.Now().Add(newProcessEvery)
	for {
		select {
		case <-p.stop:
			return
		case <-created:
			if soon := time.Now().Add(newProcessEvery); soon.Before(due) {
				due = soon
				t.Reset(newProcessEvery)
			}
		case <-t.C:
			took := p.round(false)
			wait := min(max(residentDuty*took, residentEvery), residentMaxEvery)
			due = time.Now().Add(wait)
			t.Reset(wait)
		}
	}
}

// round finds new processes and reads those still running; it returns
// the CPU time it took (the wall time where the thread's is unknown: a
// round preempted by the program's threads took 18 ms of wall time for
// 1 of CPU, and would have put the next off by almost a second).
func (p *residentPoller) round(scanAll bool) time.Duration {
	start, cpu0 := time.Now(), threadCPU()
	p.mu.Lock()
	defer p.mu.Unlock()
	p.discover(scanAll || p.rounds%drain.ScanEvery == 0)
	p.rounds++
	for pid, pl := range p.procs {
		if pl.goneAt.IsZero() {
			pl.read(pid, time.Now(), false)
		}
	}
	if cpu0 >= 0 {
		if cpu := threadCPU(); cpu >= cpu0 {
			return cpu - cpu0
		}
	}
	return time.Since(start)
}

// discover adds the processes whose books files appeared: those the
// directory watch reported, or (unwatched, names lost, or scanAll) every
// file in the directory. A file made for a pid found ended is a new
// process given the same pid; for a running one, a new program (an exec),
// whose private bytes are read at once: those read before are the old
// program's.
func (p *residentPoller) discover(scanAll bool) {
	if p.watch != nil && !scanAll {
		names, lost := p.watch.Take()
		if !lost {
			for _, n := range names {
				if pid, ok := tagtable.RegionPID(n); ok {
					switch pl := p.procs[pid]; {
					case pl == nil || !pl.goneAt.IsZero():
						p.procs[pid] = newPolled()
					default:
						pl.uniqueDue = time.Time{}
					}
				}
			}
			return
		}
	}
	files, _ := filepath.Glob(filepath.Join(p.dir, "*.tagalloc"))
	for _, f := range files {
		if pid, ok := tagtable.RegionPID(filepath.Base(f)); ok && p.procs[pid] == nil {
			p.procs[pid] = newPolled()
		}
	}
}

// exited notes that pid (the launched process, reaped) ended by t.
func (p *residentPoller) exited(pid int, t time.Time) {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.procs[pid]
	if pl == nil {
		pl = newPolled()
		p.procs[pid] = pl
	}
	pl.end(t)
}

// finish stops polling, and reads once more every process still running
// (a child that outlived the launched process is reported as running).
func (p *residentPoller) finish() {
	p.mu.Lock()
	if p.ended {
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	close(p.stop)
	<-p.done
	p.round(true)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.ended = true
	for _, pl := range p.procs {
		if pl.pidfd >= 0 {
			closePidfd(pl.pidfd)
			pl.pidfd = -1
		}
	}
}

// resident is residentOf for the run's report: a process still running
// (for the live view, before finish) is read afresh.
func (p *residentPoller) resident(pid int, startNS uint64) *reporter.Resident {
	p.mu.Lock()
	defer p.mu.Unlock()
	pl := p.procs[pid]
	if pl == nil {
		if p.ended {
			return &reporter.Resident{Measured: reporter.ResidentNever}
		}
		pl = newPolled()
		p.procs[pid] = pl
	}
	if !p.ended && pl.goneAt.IsZero() {
		pl.read(pid, time.Now(), false)
	}
	return pl.resident(startNS)
}
