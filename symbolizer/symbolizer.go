// The Symbolizer: options, the cache of loaded objects (keyed by build-id,
// or by path, mtime and size for files without one), and Frames.

package symbolizer

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"sync"
	"time"

	"github.com/ianlancetaylor/demangle"
)

// Frame is one source-level frame at an address. One address gives
// several frames when calls were inlined there: innermost first, each
// with Inlined set, then the function the code physically belongs to.
type Frame struct {
	Function string // demangled function name; "module+0xVADDR" when nothing names the address
	File     string // source file, joined with the compile unit's directory when recorded relative; "" without DWARF
	Line     int    // 0 when unknown
	Inlined  bool   // this frame was inlined into the next one of the slice
	Module   string // base name of the module ("libfoo.so")
	Origin   Origin // where Function came from
	Stale    bool   // the file at Module.Path is another build than the process ran: not looked up
}

// Origin says where a frame's function name came from.
type Origin uint8

const (
	OriginNone   Origin = iota // nothing names the address: Function is "module+0xVADDR"
	OriginDWARF                // DWARF (the file's or its separate debug file's)
	OriginSymtab               // the .symtab of the file or its debug file
	OriginDynsym               // .dynsym only: exported functions of a stripped file
)

func (o Origin) String() string {
	switch o {
	case OriginDWARF:
		return "dwarf"
	case OriginSymtab:
		return "symtab"
	case OriginDynsym:
		return "dynsym"
	}
	return "none"
}

// Errors Frames returns (wrapped) beside the fallback frame.
var (
	// ErrBuildIDMismatch: the file at the module's path has another
	// build-id than the process ran (it was rebuilt or upgraded since),
	// and no debug file of the recorded build-id was found.
	ErrBuildIDMismatch = errors.New("symbolizer: the file is not the build the process ran")
	// ErrNoModule: Frames was called with a nil module (ModuleOf found
	// none for the address).
	ErrNoModule = errors.New("symbolizer: address in no known module")
)

// Demangle selects how C++ (Itanium) and Rust names are demangled.
type Demangle uint8

const (
	DemangleSimplified Demangle = iota // "ns::Class::method": no parameters, no template arguments (pprof's default)
	DemangleTemplates                  // "ns::Class<int>::method": template arguments, no parameters
	DemangleFull                       // "ns::Class<int>::method(char const*)"
	DemangleNone                       // mangled names as they are
)

// Option configures a Symbolizer.
type Option func(*config)

type config struct {
	debugDirs []string
	demangle  Demangle
	cacheSize int
	root      string
	diskDir   string
}

// DefaultDebugDir is where separate debug files are looked for unless
// WithDebugDirs says otherwise.
const DefaultDebugDir = "/usr/lib/debug"

// WithDebugDirs sets the directories searched for separate debug files
// (DIR/.build-id/ab/cdef....debug, and DIR/<dir of the file>/<debuglink
// name>); none disables the build-id and DIR search (the debuglink next to
// the file is still followed). The default is /usr/lib/debug.
func WithDebugDirs(dirs ...string) Option {
	return func(c *config) { c.debugDirs = append([]string(nil), dirs...) }
}

// WithDemangle sets how mangled names are shown; the default is
// DemangleSimplified.
func WithDemangle(d Demangle) Option { return func(c *config) { c.demangle = d } }

// WithCacheSize bounds how many loaded objects the Symbolizer keeps (the
// least recently used is dropped); the default is 64.
func WithCacheSize(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.cacheSize = n
		}
	}
}

// WithRoot looks the modules' files up under root: "/proc/PID/root" for a
// process in another mount namespace (a container), or a directory that
// holds copies of another machine's files. Debug directories are not
// prefixed.
func WithRoot(root string) Option { return func(c *config) { c.root = root } }

// Symbolizer turns addresses in modules into frames. It caches every
// object it loads (symbols sorted once, DWARF units indexed on first use)
// and is safe for concurrent use.
type Symbolizer struct {
	cfg      config
	demangle func(string) string

	mu       sync.Mutex
	clock    uint64
	byModule map[modKey]*entry // how each module was resolved
	byID     map[string]*entry // objects loaded without error, by build-id

	disk *diskCache // nil without WithDiskCache
}

// modKey identifies a module's file: by build-id when it has one, else by
// path, modification time and size, so a rebuilt file is loaded again.
type modKey struct {
	path, buildID string
	mtime, size   int64
}

type entry struct {
	once    sync.Once
	obj     *object
	err     error
	stale   bool
	keep    bool   // its frames go to the disk cache: the file of the build-id, with DWARF
	lastUse uint64 // guarded by Symbolizer.mu

	loadTime    time.Duration // how long loading it took
	indexedMore bool          // indexMore saw it (guarded by Symbolizer.mu)
}

// New returns a Symbolizer.
func New(opts ...Option) *Symbolizer {
	cfg := config{debugDirs: []string{DefaultDebugDir}, cacheSize: 64}
	for _, o := range opts {
		o(&cfg)
	}
	s := &Symbolizer{cfg: cfg, byModule: map[modKey]*entry{}, byID: map[string]*entry{}}
	var dopts []demangle.Option
	switch cfg.demangle {
	case DemangleSimplified:
		dopts = []demangle.Option{demangle.NoParams, demangle.NoEnclosingParams, demangle.NoTemplateParams}
	case DemangleTemplates:
		dopts = []demangle.Option{demangle.NoParams, demangle.NoEnclosingParams}
	case DemangleFull:
		dopts = []demangle.Option{demangle.NoClones}
	}
	if cfg.demangle != DemangleNone {
		s.demangle = func(name string) string { return demangle.Filter(name, dopts...) }
	}
	if cfg.diskDir != "" {
		s.disk = newDiskCache(cfg.diskDir, cfg.diskFingerprint)
	}
	return s
}

// Frames returns the frames at a return address addr in module m,
// innermost first; it looks up addr-1, inside the call instruction, so
// the line is the call's and not the next statement's. Every address of a
// stack collected by unwinding (frame pointers, backtrace(3),
// _Unwind_Backtrace) is a return address; use FramesPC for the exact
// address of an instruction (a function's entry, a signal's PC).
//
// The slice is never empty. When nothing names the address, its one frame
// is "module+0xVADDR" (addr - m.Bias, the address `addr2line -e FILE`
// takes), Origin OriginNone; err is then non-nil if the module's file
// could not be used (missing, not ELF, malformed, or, wrapping
// ErrBuildIDMismatch with Stale set, another build than the process ran).
func (s *Symbolizer) Frames(m *Module, addr uint64) ([]Frame, error) {
	return s.frames(m, addr-1, addr)
}

// FramesPC is Frames for the exact address pc of an instruction.
func (s *Symbolizer) FramesPC(m *Module, pc uint64) ([]Frame, error) {
	return s.frames(m, pc, pc)
}

func (s *Symbolizer) frames(m *Module, pc, addr uint64) ([]Frame, error) {
	if m == nil {
		return []Frame{{Function: fmt.Sprintf("0x%x", addr)}}, ErrNoModule
	}
	// Objects are read from mapped files: a file truncated meanwhile
	// faults, which becomes a panic the loader and lookups recover (image).
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	// With a disk cache, the frames of a build-id's address found by an
	// earlier run (or earlier in this one) are used without the object.
	var rec *diskRecord
	if s.disk != nil && m.BuildID != "" {
		rec = s.disk.record(m.BuildID)
	}
	// Else the unit index: the frames at any address of a compile unit an
	// earlier run (or Flush) indexed.
	if rec != nil {
		if fr, ok := rec.get(pc - m.Bias); ok {
			return named(fr, m, addr), nil
		}
		if fr, ok := s.disk.indexed(rec, pc-m.Bias); ok {
			rec.put(pc-m.Bias, fr, s.disk.limit)
			return named(fr, m, addr), nil
		}
	}
	e := s.entry(m)
	if e.err != nil {
		return fallback(m, addr, e.stale), e.err
	}
	fr := e.obj.frames(pc - m.Bias)
	if rec != nil && e.keep {
		rec.put(pc-m.Bias, fr, s.disk.limit)
		s.disk.want(rec, e.obj, pc-m.Bias)
	}
	return named(fr, m, addr), nil
}

// named fills in the frames an object gave for addr in m (none: the
// fallback frame): the module's name, and "module+0xVADDR" where no
// function was named.
func named(fr []Frame, m *Module, addr uint64) []Frame {
	if len(fr) == 0 {
		return fallback(m, addr, false)
	}
	name := m.Name()
	for i := range fr {
		fr[i].Module = name
		if fr[i].Function == "" {
			fr[i].Function = fmt.Sprintf("%s+0x%x", name, addr-m.Bias)
		}
	}
	return fr
}

// fallback is the one frame "module+0xVADDR" of addr in m.
func fallback(m *Module, addr uint64, stale bool) []Frame {
	name := m.Name()
	return []Frame{{Function: fmt.Sprintf("%s+0x%x", name, addr-m.Bias), Module: name, Stale: stale}}
}

// entry returns the cache entry of m's file, loading it on first use.
func (s *Symbolizer) entry(m *Module) *entry {
	key := modKey{path: m.Path, buildID: m.BuildID}
	if m.BuildID == "" {
		if fi, err := os.Stat(cleanPath(s.cfg.root, m.Path)); err == nil {
			key.mtime, key.size = fi.ModTime().UnixNano(), fi.Size()
		}
	}
	s.mu.Lock()
	e := s.byModule[key]
	if e == nil && m.BuildID != "" {
		if e = s.byID[m.BuildID]; e != nil {
			s.byModule[key] = e
		}
	}
	if e == nil {
		e = &entry{}
		s.byModule[key] = e
		s.evictLocked(e)
	}
	s.clock++
	e.lastUse = s.clock
	s.mu.Unlock()

	e.once.Do(func() {
		var standIn bool
		start := time.Now()
		e.obj, standIn, e.stale, e.err = s.load(m)
		e.loadTime = time.Since(start)
		// What the disk cache keeps: frames from DWARF of the file the
		// process ran (not a debug file standing in for another build),
		// the costly part to compute again; a file without DWARF loads
		// fast, and may be named better next time (an unstripped copy or
		// a debug file found by .gnu_debuglink, which the cache's
		// fingerprint does not see).
		e.keep = e.err == nil && !standIn && e.obj.dw != nil
		if e.err == nil && m.BuildID != "" {
			s.mu.Lock()
			if s.byID[m.BuildID] == nil {
				s.byID[m.BuildID] = e
			}
			s.mu.Unlock()
		}
	})
	return e
}

// evictLocked drops least recently used entries beyond the cache size,
// never keep.
func (s *Symbolizer) evictLocked(keep *entry) {
	live := map[*entry]bool{}
	for _, e := range s.byModule {
		live[e] = true
	}
	for len(live) > s.cfg.cacheSize {
		var old *entry
		for e := range live {
			if e != keep && (old == nil || e.lastUse < old.lastUse) {
				old = e
			}
		}
		if old == nil {
			return
		}
		delete(live, old)
		for k, e := range s.byModule {
			if e == old {
				delete(s.byModule, k)
			}
		}
		for k, e := range s.byID {
			if e == old {
				delete(s.byID, k)
			}
		}
	}
}

// load opens m's file (and its debug file) and loads it. When the module
// records a build-id, the file must have it too; if it does not (or is
// gone), a debug file of the recorded build-id can still stand in
// (standIn).
func (s *Symbolizer) load(m *Module) (obj *object, standIn, stale bool, err error) {
	defer recoverInto(&err)
	path := cleanPath(s.cfg.root, m.Path)
	exe, openErr := openImage(path)
	if openErr != nil {
		exe = nil
	} else {
		defer exe.Close() // unmapped unless the object keeps its DWARF
	}
	var fileID string
	if exe != nil {
		fileID, _ = buildIDOf(exe.File)
	}
	var dbg *image
	switch {
	case m.BuildID != "" && (exe == nil || fileID != m.BuildID):
		if dbg = openDebugByID(s.cfg.debugDirs, m.BuildID); dbg == nil {
			if exe == nil {
				return nil, false, false, fmt.Errorf("symbolizer: %s: %w", m.Path, openErr)
			}
			got := fileID
			if got == "" {
				got = "none"
			}
			return nil, false, true, fmt.Errorf("%w: %s has build-id %s, the process ran %s (and no debug file of it is in %v)",
				ErrBuildIDMismatch, m.Path, got, m.BuildID, s.cfg.debugDirs)
		}
		exe = nil // another build: its symbols would be wrong
	case exe == nil:
		return nil, false, false, fmt.Errorf("symbolizer: %s: %w", m.Path, openErr)
	default:
		if fileID != "" {
			dbg = openDebugByID(s.cfg.debugDirs, fileID)
		}
		if dbg == nil {
			dbg = openDebugLink(s.cfg.debugDirs, exe.File, path, m.Path)
		}
	}
	if dbg != nil {
		defer dbg.Close()
	}
	obj, err = newObject(exe, dbg, s.demangle)
	if err != nil {
		return nil, false, false, fmt.Errorf("symbolizer: %s: %w", m.Path, err)
	}
	return obj, exe == nil, false, nil
}
