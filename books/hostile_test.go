package books

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
