// tagalloc run's directory: a preload path every user can load and a
// books directory the run's children can write, whatever user they run as.

package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/tagalloc/tagalloc/cgo"
)

// runDir is one run's directory, made new under os.TempDir() and removed
// when the run ends:
//
//	tagalloc-run-XXXX/           0711: others may pass through, not list
//	    libtagalloc.so           0644: a copy of the cached library, when
//	                             other users could not read the cache's
//	    books-<32 hex digits>/   TAGALLOC_DIR: 0733 when children can
//	                             switch users, else 0700
//
// The library is built into the user's cache (~/.cache/tagalloc), which a
// private home (0700, as root's) hides from every other user: a child
// that switches user before exec (su, setuid then exec, a server dropping
// privileges for a helper) got an ld.so warning and ran without tagalloc.
// A copy in a directory of the run is readable by all, and being the
// run's own, it is neither shared with nor replaceable by anyone else.
//
// The books directory must also take the files of such a child, which
// makes them as the user it became. Its name is random (128 bits) inside a
// directory no one else can list, so only a process that can read the
// environment of one of the run's processes finds it. It has no sticky
// bit: a process that execs as another user replaces the books file its
// pre-exec image made (same pid, other owner), which a sticky directory
// forbids. docs/trust-and-limits.md says what a process that finds it can
// do.
//
// The books directory goes in a directory of its own on a memory
// filesystem when there is one with room (memBase: /dev/shm), made and
// removed the same way, and locked while the run lasts (a later run
// removes one left unlocked by a tagalloc that was killed:
// sweepMemBase): the books and events files are shared mappings
// every process of the run writes, and on a disk's filesystem each file
// made cost an inode's allocation and each page first written a block's,
// again after every writeback (ext4: a shell running 1,000 processes took
// 1.7 s under tagalloc run with them in /tmp, 0.98 s in /dev/shm, 0.45 s
// without tagalloc; 1,000 connections to postgres, each a forked backend,
// 4.4 s, 2.7 s and 2.0 s).
type runDir struct {
	root      string // the run's directory
	booksRoot string // the directory holding the books directory: root, or one on a memory filesystem
	books     string // TAGALLOC_DIR
	lib       string // what LD_PRELOAD names
	// shared: the books directory is writable by other users
	shared bool
	// held: the lock on booksRoot when it is on the memory filesystem
	// (lockDir), released once it is removed
	held *os.File
}

// newRunDir makes the run's directory for the library at cached (the
// build cache's path). The library stays the cached one when every user
// can read it there already, and when the temporary directory cannot hold
// code (mounted noexec); then a child that switches user runs without it,
// as the report says.
func newRunDir(cached string) (*runDir, error) {
	root, err := os.MkdirTemp(runBase(), "tagalloc-run-") // new, 0700, ours: never a path someone made before
	if err != nil {
		return nil, err
	}
	d := &runDir{root: root, booksRoot: root, lib: cached, shared: childrenMaySwitchUser()}
	if mem := memBase(); mem != "" {
		sweepMemBase(mem)
		if r, err := os.MkdirTemp(mem, "tagalloc-run-"); err == nil {
			// unlocked, a later run would take it for left behind
			if d.held = lockDir(r); d.held != nil {
				d.booksRoot = r
			} else {
				os.Remove(r)
			}
		}
	}
	if err := d.fill(); err != nil {
		d.remove()
		return nil, err
	}
	return d, nil
}

func (d *runDir) fill() error {
	var name [16]byte
	if _, err := rand.Read(name[:]); err != nil {
		return err
	}
	d.books = filepath.Join(d.booksRoot, "books-"+hex.EncodeToString(name[:]))
	if err := os.Mkdir(d.books, 0o700); err != nil {
		return err
	}
	if d.shared {
		// wx for others, no r: a process of another user makes and renames
		// its own files by name; it cannot list the others' (chmod: the
		// umask does not apply)
		if err := os.Chmod(d.books, 0o733); err != nil {
			return err
		}
		if err := os.Chmod(d.booksRoot, 0o711); err != nil {
			return err
		}
	}
	if !everyoneCanRead(d.lib) && !noExec(d.root) {
		lib := filepath.Join(d.root, cgo.LibraryName)
		if err := copyChecked(d.lib, lib); err != nil {
			return fmt.Errorf("placing the library where every user can load it: %w", err)
		}
		d.lib = lib
		return os.Chmod(d.root, 0o711)
	}
	return nil
}

// runBase is where run directories are made: os.TempDir(), unless other
// users cannot reach it or it cannot hold code (noexec) and /tmp can.
func runBase() string {
	t := os.TempDir()
	if t != "/tmp" && !(everyoneCanSearch(t) && !noExec(t)) && everyoneCanSearch("/tmp") && !noExec("/tmp") {
		return "/tmp"
	}
	return t
}

// remove removes the run's directories and everything the run's
// processes left in them.
func (d *runDir) remove() {
	if d.booksRoot != d.root {
		os.RemoveAll(d.booksRoot)
	}
	if d.held != nil {
		d.held.Close()
	}
	os.RemoveAll(d.root)
}

// copyChecked copies the library src to dst, a new file (never an
// existing one, nor through a link) of mode 0644, and checks that dst
// holds what src held: its SHA-256 read back from dst.
func copyChecked(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	want := sha256.New()
	_, err = io.Copy(out, io.TeeReader(in, want))
	if err == nil {
		err = out.Chmod(0o644)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	got, err := fileHash(dst)
	if err != nil {
		return err
	}
	if !bytes.Equal(got, want.Sum(nil)) {
		return fmt.Errorf("%s does not hold what %s holds (a full disk?)", dst, src)
	}
	return nil
}

func fileHash(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return nil, err
	}
	return h.Sum(nil), nil
}

// everyoneCanRead says whether any user can read the file at path: it is
// readable by others, and every directory above it searchable by others.
func everyoneCanRead(path string) bool {
	p, err := filepath.EvalSymlinks(path)
	if err != nil {
		return false
	}
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().Perm()&0o004 != 0 && everyoneCanSearch(filepath.Dir(p))
}

// everyoneCanSearch says whether any user can reach the entries of dir:
// it and every directory above it are searchable by others.
func everyoneCanSearch(dir string) bool {
	dir, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return false
	}
	for ; ; dir = filepath.Dir(dir) {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		if dir == filepath.Dir(dir) {
			return true
		}
	}
}
