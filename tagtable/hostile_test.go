package tagtable

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// An events file the process truncates under the mapping gives an error
// from Drain (it was SIGBUS: a crash of tagalloc run); a FIFO or a link in
// its place is refused at open.
func TestEventsHostile(t *testing.T) {
	var recs [][]byte
	for i := uint64(0); i < 60; i++ {
		recs = append(recs, rec(EvAlloc, 0x1000+i*64, 64, 60, 1|1<<32))
	}
	p := ringFile(t, recs...)
	ev, err := OpenEvents(p)
	if err != nil {
		t.Fatal(err)
	}
	defer ev.Close()
	if err := os.Truncate(p, 0); err != nil {
		t.Fatal(err)
	}
	n, err := ev.Drain(NewProfile(ev.PID(), ev.Mode(), ev.SampleRate()))
	if err == nil || !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), "truncated") {
		t.Fatalf("Drain of a truncated file: %d events, %v", n, err)
	}
	if d, b := ev.Dropped(); d != 0 || b != 0 {
		t.Fatalf("Dropped of a truncated file: %d %d", d, b)
	}
	if h := ev.Head(); h != 0 {
		t.Fatalf("Head of a truncated file: %d", h)
	}
	if ev.PID() != 42 {
		t.Fatalf("PID %d", ev.PID())
	}

	dir := t.TempDir()
	fifo := filepath.Join(dir, "2.events")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	link := filepath.Join(dir, "3.events")
	if err := os.Symlink(p, link); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{fifo, link} {
		done := make(chan error, 1)
		go func() {
			_, err := OpenEvents(f)
			done <- err
		}()
		select {
		case err := <-done:
			if !errors.Is(err, ErrFormat) {
				t.Errorf("OpenEvents(%s): %v", f, err)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("OpenEvents(%s) hung", f)
		}
	}
}
