// Where tagalloc run saves its report when -o does not say (a new file
// named after the program and its pid, as heaptrack and memray do), the
// line that says where it went, and the progress line shown on a terminal
// while the report is made.

package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// defaultReportName is the report's name in the current directory:
// tagalloc.PROG.PID.json, PROG the base name of the program with anything
// but letters, digits, '.', '_', '+' and '-' made '_'; tries after the
// first (n > 0) add .n before .json.
func defaultReportName(prog string, pid, n int) string {
	base := filepath.Base(prog)
	if base == "." || base == ".." || base == "/" {
		base = "prog"
	}
	base = strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '.', r == '_', r == '+', r == '-':
			return r
		}
		return '_'
	}, base)
	if len(base) > 64 {
		base = base[:64]
	}
	name := "tagalloc." + base + "." + strconv.Itoa(pid)
	if n > 0 {
		name += "." + strconv.Itoa(n)
	}
	return name + ".json"
}

// maxNameTries bounds the names saveNew tries.
const maxNameTries = 1000

// saveNew writes a new file in dir, named by name(0), or name(1), ...
// when that name is taken: never over an existing file of any kind. The
// report is written to a temporary file and linked to its name, so the
// name never shows half a report; where the file system has no hard
// links, the name is created exclusively and written in place. It
// returns the path written.
func saveNew(dir string, name func(n int) string, write func(io.Writer) error) (string, error) {
	tmp, err := os.CreateTemp(dir, ".tagalloc-report-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	if err := write(tmp); err != nil {
		tmp.Close()
		return "", err
	}
	if err := tmp.Close(); err != nil {
		return "", err
	}
	for n := 0; n < maxNameTries; n++ {
		path := filepath.Join(dir, name(n))
		err := os.Link(tmp.Name(), path)
		switch {
		case err == nil:
			return path, nil
		case errors.Is(err, os.ErrExist):
			continue
		}
		// no hard links here: create the name exclusively
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		if err != nil {
			return "", err
		}
		if err := write(f); err != nil {
			f.Close()
			os.Remove(path)
			return "", err
		}
		if err := f.Close(); err != nil {
			os.Remove(path)
			return "", err
		}
		return path, nil
	}
	return "", fmt.Errorf("%s to %s are all taken", name(0), name(maxNameTries-1))
}

// savedLine is the one line run ends with: where the report is and how to
// open it (the formats that need stacks only when it has them).
func savedLine(path string, stacks bool) string {
	q := shellQuote(path)
	if !stacks {
		return fmt.Sprintf("tagalloc: report saved to %s; open it with: tagalloc report %s [--format json|about-memory]", q, q)
	}
	return fmt.Sprintf("tagalloc: report saved to %s; open it with: tagalloc report %s [--format dmd|pprof|dark-matter|json|about-memory] or tagalloc report %s --web",
		q, q, q)
}

// shellQuote quotes s for a POSIX shell if it needs it, with what a
// terminal would act on made '?' (terminalText).
func shellQuote(s string) string {
	safe := s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("._+-/=:,@%", r))
	}) < 0
	if !safe {
		s = "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	return terminalText(s)
}

// progress shows, on a terminal only, one line that says what run is
// doing after PROG ended (draining, symbolizing, writing the report) once
// that has taken progressAfter; the line is rewritten in place and erased
// when the work ends or something else is printed. A nil *progress does
// nothing.
type progress struct {
	w     io.Writer
	start time.Time
	mu    sync.Mutex
	phase string
	count *atomic.Int64 // how many of unit the phase has done; nil: not counted
	unit  string
	shown bool
	stop  chan struct{}
	done  chan struct{}
	once  sync.Once // end's
}

const (
	progressAfter = 300 * time.Millisecond
	progressEvery = 200 * time.Millisecond
)

// newProgress returns a progress line on w if tty, else nil.
func newProgress(w io.Writer, tty bool) *progress {
	if !tty {
		return nil
	}
	p := &progress{w: w, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(progressEvery)
		defer t.Stop()
		for {
			select {
			case <-p.stop:
				return
			case <-t.C:
				p.draw()
			}
		}
	}()
	return p
}

// step starts a phase; count, if not nil, is what it has done of unit.
func (p *progress) step(phase string, count *atomic.Int64, unit string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.phase, p.count, p.unit = phase, count, unit
	p.mu.Unlock()
}

// line is the progress line's text.
func (p *progress) line() string {
	s := "tagalloc: " + p.phase
	if p.count != nil {
		s += fmt.Sprintf(": %d %s", p.count.Load(), p.unit)
	}
	return s + fmt.Sprintf(" (%.1f s)", time.Since(p.start).Seconds())
}

func (p *progress) draw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.phase == "" || time.Since(p.start) < progressAfter {
		return
	}
	fmt.Fprint(p.w, "\r\x1b[K"+p.line())
	p.shown = true
}

// clear erases the line, if shown, so that something else can be printed;
// the next tick draws it again if a phase is on.
func (p *progress) clear() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shown {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.shown = false
	}
	p.phase = ""
}

// end stops the line and erases it; later calls do nothing.
func (p *progress) end() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		close(p.stop)
		<-p.done
		p.clear()
	})
}
