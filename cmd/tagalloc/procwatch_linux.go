// Which processes of a run ran without books: tagalloc run follows the
// launched process and its descendants through /proc while they run.

package main

import (
	"bufio"
	"bytes"
	"debug/elf"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tagalloc/tagalloc/procbooks"
)

// procWatch follows the launched process and its descendants (found
// through /proc/PID/task/TID/children at each pass, and kept once found,
// even after their parent ends) and looks at each program they run (each
// exec) in /proc/PID/maps: a program whose map holds a books file of the
// run is in the report. One that never did is a candidate for the list
// of processes that ran without tagalloc.
//
// What it cannot see: a process that starts and ends between two passes
// (20 ms apart, or up to 250 ms when passes take long: a pass is given a
// tenth of the time), and the processes of one that does (a daemon's
// double fork). An exec into a program of the same name is seen only
// through the stack's address, which ASLR changes at every exec.
type procWatch struct {
	books string
	procs map[int]*watched
	progs map[fileID]progFile // program files read, by file
	ended []*progImage        // programs that ended (exit or exec) without books seen
	stopc chan struct{}
	done  chan []*progImage
}

// watched is a process followed: its start time (with its pid, who it
// is) and the program it runs now.
type watched struct {
	start uint64
	img   *progImage
}

// progImage is one program a process ran (one exec).
type progImage struct {
	pid        int
	uids       [3]int // real, effective, saved
	command    []string
	comm       string
	exe        string // its program file (/proc/PID/exe), "" if unreadable
	startStack uint64
	misses     int   // looks at its map that found no books of it
	books      bool  // its map held a books file of the run
	lib        bool  // its map held the library
	private    bool  // the library kept its books in its memory (no books file)
	loader     bool  // its map held a dynamic loader
	static     bool  // its program names no dynamic loader (no PT_INTERP)
	ownMalloc  bool  // its program defines malloc: the library is loaded, never called
	others     bool  // its map held another shared object (the loader got past the preloads)
	mapErr     error // its map could not be read
	byExec     bool  // it ended by an exec
	running    bool  // it still ran when the run ended
}

// startProcWatch follows pid and its descendants until stop.
func startProcWatch(pid int, books string) *procWatch {
	w := &procWatch{books: books, procs: map[int]*watched{}, progs: map[fileID]progFile{}, stopc: make(chan struct{}), done: make(chan []*progImage, 1)}
	if st, ok := readProcStat(pid); ok {
		w.procs[pid] = &watched{start: st.start}
	}
	go func() {
		wait := 20 * time.Millisecond
		for {
			t0 := time.Now()
			w.pass()
			next := max(wait, min(10*time.Since(t0), 250*time.Millisecond)) // a pass takes a tenth of the time, up to passes 250 ms apart
			select {
			case <-w.stopc:
				w.done <- w.finish()
				return
			case <-time.After(next):
			}
		}
	}()
	return w
}

// stop ends the watch (after the launched process ended) and returns the
// programs seen without books.
func (w *procWatch) stop() []*progImage {
	close(w.stopc)
	return <-w.done
}

// finish looks once more (twice for a program seen once without books:
// it may have been between its exec and the loading of the library), and
// ends every program still running.
func (w *procWatch) finish() []*progImage {
	w.pass()
	for _, p := range w.procs {
		if p.img != nil && !p.img.books && p.img.misses < 2 {
			time.Sleep(20 * time.Millisecond)
			w.pass()
			break
		}
	}
	for _, p := range w.procs {
		if p.img != nil {
			p.img.running = true
			w.end(p.img)
		}
	}
	return w.ended
}

// pass looks at every process followed and finds their new children.
func (w *procWatch) pass() {
	queue := make([]int, 0, len(w.procs))
	for pid := range w.procs {
		queue = append(queue, pid)
	}
	for len(queue) > 0 {
		pid := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		p := w.procs[pid]
		st, ok := readProcStat(pid)
		if !ok || st.start != p.start || st.state == 'Z' || st.state == 'X' {
			if p.img != nil {
				w.end(p.img)
			}
			delete(w.procs, pid)
			continue
		}
		if p.img != nil && !p.img.same(st) {
			p.img.byExec = true
			w.end(p.img)
			p.img = nil
		}
		if p.img == nil {
			p.img = &progImage{pid: pid, comm: st.comm, startStack: st.startStack, command: procCommand(pid)}
			p.img.exe, _ = os.Readlink("/proc/" + strconv.Itoa(pid) + "/exe")
			p.img.uids, _ = processUIDs(pid)
		}
		w.look(p.img)
		for _, c := range procChildren(pid) {
			if _, ok := w.procs[c]; ok {
				continue
			}
			if cst, ok := readProcStat(c); ok {
				w.procs[c] = &watched{start: cst.start}
				queue = append(queue, c)
			}
		}
	}
}

// same says whether the process still runs img's program: the same name
// and the same stack (0: not known, as in an exec before the stack is
// set, or while the process exits, its memory gone; a stack first known
// now is taken).
func (img *progImage) same(st procStat) bool {
	if img.comm != st.comm || img.startStack != st.startStack && st.startStack != 0 && img.startStack != 0 {
		return false
	}
	if img.startStack == 0 {
		img.startStack = st.startStack
	}
	return true
}

// end files a program that ended (or still runs at the run's end).
func (w *procWatch) end(img *progImage) {
	if !img.books {
		w.ended = append(w.ended, img)
	}
}

// look reads the program's map until it holds a books file of the run
// (three looks at most: a program without books is not looked at for
// ever). What a look finds counts only if the process still runs the same
// program after it: an exec between its reads would mix two programs.
func (w *procWatch) look(img *progImage) {
	if img.books || img.misses >= 3 {
		return
	}
	m, err := w.scanMaps(img.pid)
	if err == nil {
		img.mapErr = nil // an earlier look's error no longer says anything
	}
	switch {
	case err != nil:
		// Only a map this user may not read says "not looked at": a
		// process that ended between its discovery and this look (ENOENT,
		// ESRCH, an empty read) left no program to judge (TestRunGroupsProcesses
		// listed an exited head so, now and then).
		if errors.Is(err, fs.ErrPermission) {
			if st, ok := readProcStat(img.pid); ok && img.same(st) {
				img.mapErr = err
			}
		}
		img.misses++
		return
	case m.books:
		img.books = true
		return
	case m.files == 0:
		return // no file mapped, not even the program: exiting (its memory gone) or in its exec; no look
	case m.inherited:
		return // another process's books: a child of vfork, or of fork before it made its own; no look
	}
	command := img.command
	if command == nil {
		if command = procCommand(img.pid); command == nil {
			return // no command line yet: in its exec, before the loader is mapped; no look
		}
	}
	// the library there but no books file (looked at twice: the first look
	// may come before its first allocation): it kept its books in its
	// memory, if it has any
	private := img.private || m.lib && img.misses >= 1 && readsPrivate(img.pid)
	static := img.static || !m.loader && !w.program(img.pid).interp
	// the library there, no books, none in its memory either (looked at
	// twice): a program with a malloc of its own never calls it
	own := img.ownMalloc || m.lib && !private && img.misses >= 1 && w.program(img.pid).malloc
	if st, ok := readProcStat(img.pid); !ok || !img.same(st) {
		return
	}
	if private && !img.private {
		// the books file may have come since the map was read
		if again, err := w.scanMaps(img.pid); err == nil && again.books {
			img.books = true
			return
		}
	}
	img.command = command
	img.lib = img.lib || m.lib
	img.loader = img.loader || m.loader
	img.others = img.others || m.others
	img.private, img.static, img.ownMalloc = private, static, own
	img.misses++
}

// mapsSeen is what a process's map says to the watch.
type mapsSeen struct {
	files                      int  // file mappings
	books, lib, loader, others bool // as progImage's
	inherited                  bool // the books file of another process of the run
}

// scanMaps reads the map of pid.
func (w *procWatch) scanMaps(pid int) (mapsSeen, error) {
	var m mapsSeen
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/maps")
	if err != nil {
		return m, err
	}
	defer f.Close()
	prefix := w.books + "/" + strconv.Itoa(pid) + "."
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 8192), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		i := strings.IndexByte(line, '/')
		if i < 0 {
			continue
		}
		m.files++
		path := line[i:]
		base := filepath.Base(strings.TrimSuffix(path, " (deleted)"))
		switch {
		case strings.HasPrefix(path, prefix) && strings.Contains(path[len(prefix)-1:], ".tagalloc"): // PID.tagalloc, PID.go.tagalloc, and .new while it is made
			m.books = true
			return m, nil
		case strings.HasPrefix(path, w.books+"/") && strings.Contains(path, ".tagalloc"):
			m.inherited = true
		case strings.HasPrefix(base, "libtagalloc.so"):
			m.lib = true
		case strings.HasPrefix(base, "ld-linux") || strings.HasPrefix(base, "ld-musl") || strings.HasPrefix(base, "ld.so"):
			m.loader = true
		case strings.Contains(base, ".so"):
			m.others = true
		}
	}
	return m, sc.Err()
}

// readsPrivate says whether the library in pid keeps books in its memory
// (read through /proc/PID/mem, as snapshot reads a process preloaded by
// hand).
func readsPrivate(pid int) bool {
	_, err := procbooks.Read(pid)
	return err == nil
}

// procStat is what tagalloc needs of /proc/PID/stat.
type procStat struct {
	state      byte
	comm       string
	start      uint64 // start time, in clock ticks after boot
	startStack uint64 // 0 unless we may read the process's memory
}

func readProcStat(pid int) (procStat, bool) {
	var st procStat
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return st, false
	}
	open, end := bytes.IndexByte(b, '('), bytes.LastIndexByte(b, ')')
	if open < 0 || end < open {
		return st, false
	}
	st.comm = string(b[open+1 : end])
	f := strings.Fields(string(b[end+1:])) // f[0] is field 3 (state)
	if len(f) < 26 || len(f[0]) != 1 {
		return st, false
	}
	st.state = f[0][0]
	st.start, err = strconv.ParseUint(f[19], 10, 64) // field 22
	if err != nil {
		return st, false
	}
	st.startStack, _ = strconv.ParseUint(f[25], 10, 64) // field 28
	return st, true
}

// procChildren lists the children of pid's threads.
func procChildren(pid int) []int {
	dir := "/proc/" + strconv.Itoa(pid) + "/task"
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	var out []int
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/children")
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}

// procCommand is pid's command line (nil if it cannot be read).
func procCommand(pid int) []string {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil || len(b) == 0 {
		return nil
	}
	return strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
}

// fileID is a file's identity: its device and inode.
type fileID struct{ dev, ino uint64 }

// progFile is what the watch reads of a program file's ELF headers.
type progFile struct {
	// interp: it names a dynamic loader (true when the file cannot be
	// read: then nothing says it is static).
	interp bool
	// malloc: it defines malloc among its dynamic symbols (Chromium's
	// allocator shim does, as does any program linked with an allocator
	// of its own and exporting it). The loader looks a symbol up in the
	// program before the preloaded libraries, so such a program's
	// mallocs, its libraries' and the C library's own all go to its
	// allocator: the library is loaded and never called.
	malloc bool
}

// program reads the program file pid runs, once a file (Chromium's
// zygote forks a dozen processes of one).
func (w *procWatch) program(pid int) progFile {
	exe := "/proc/" + strconv.Itoa(pid) + "/exe"
	var id fileID
	if fi, err := os.Stat(exe); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			id = fileID{uint64(st.Dev), st.Ino}
			if pf, ok := w.progs[id]; ok {
				return pf
			}
		}
	}
	pf := readProgFile(exe)
	if id != (fileID{}) {
		w.progs[id] = pf
	}
	return pf
}

// readProgFile reads the ELF file at path.
func readProgFile(path string) progFile {
	f, err := elf.Open(path)
	if err != nil {
		return progFile{interp: true}
	}
	defer f.Close()
	var pf progFile
	for _, p := range f.Progs {
		pf.interp = pf.interp || p.Type == elf.PT_INTERP
	}
	syms, _ := f.DynamicSymbols() // a static program has none
	for _, s := range syms {
		if s.Name == "malloc" && s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			pf.malloc = true
		}
	}
	return pf
}
