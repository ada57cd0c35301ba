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

// The target process owns the entries of its books directory: a FIFO, a
// symbolic link or a directory in place of its books file gives an error
// at once (a FIFO used to hang the reader in open), and a file claiming
// more bytes than it has is read for what it has.
func TestReadDirHostileEntries(t *testing.T) {
	dir := t.TempDir()
	if err := unix.Mkfifo(filepath.Join(dir, "1.tagalloc"), 0o600); err != nil {
		t.Skip("no FIFOs here:", err)
	}
	if err := os.Symlink("/dev/zero", filepath.Join(dir, "2.tagalloc")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "3.tagalloc"), 0o700); err != nil {
		t.Fatal(err)
	}
	short := smallRegion()
	le64put(short[32:], 200<<20) // used: 200 MiB, in a file of 1.4 KB
	if err := os.WriteFile(filepath.Join(dir, "4.tagalloc"), short, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := ReadDir(dir)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil || !errors.Is(err, ErrFormat) {
			t.Fatalf("ReadDir: %v", err)
		}
		for _, want := range []string{"1.tagalloc: not a valid tagalloc books region: not a regular file",
			"2.tagalloc: not a valid tagalloc books region: a symbolic link",
			"3.tagalloc: not a valid tagalloc books region: not a regular file",
			"4.tagalloc: not a valid tagalloc books region: 209715200 bytes in use, but the region has"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("ReadDir's error lacks %q:\n%v", want, err)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadDir hung on a hostile books directory")
	}
}

func le64put(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

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
