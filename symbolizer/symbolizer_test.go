// Tests of symbolizing real programs built with gcc: DWARF names, files,
// lines and inlined calls; .dynsym of a stripped library; separate debug
// files; build-id mismatches; files without a build-id.

package symbolizer

import (
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// want is the expected frames of one address, innermost first.
type want struct {
	fn     string
	file   string // base name
	line   int    // 0: not checked
	inline bool
}

func checkFrames(t *testing.T, got []Frame, module string, wants ...want) {
	t.Helper()
	require.Len(t, got, len(wants), "frames %+v", got)
	for i, w := range wants {
		assert.Equal(t, w.fn, got[i].Function, "frame %d: %+v", i, got[i])
		assert.Equal(t, w.file, filepath.Base(got[i].File), "frame %d: %+v", i, got[i])
		if w.line != 0 {
			assert.Equal(t, w.line, got[i].Line, "frame %d: %+v", i, got[i])
		}
		assert.Equal(t, w.inline, got[i].Inlined, "frame %d: %+v", i, got[i])
		assert.Equal(t, module, got[i].Module, "frame %d", i)
		assert.Equal(t, OriginDWARF, got[i].Origin, "frame %d", i)
		assert.False(t, got[i].Stale)
	}
}

// TestFramesLive runs the program, reads its module table from
// /proc/PID/maps while it waits, and after it has exited resolves the
// addresses it printed: its functions' entries (exact PCs) and the return
// addresses of marked calls, in the program and in libfoo.so.
func TestFramesLive(t *testing.T) {
	needTool(t, "gcc")
	for _, variant := range []struct {
		name  string
		flags []string
	}{
		{"O1", nil},
		{"O1-frame-pointers", []string{"-fno-omit-frame-pointer"}},
	} {
		t.Run(variant.name, func(t *testing.T) {
			dir := t.TempDir()
			lib := buildLib(t, dir, variant.flags...)
			prog := buildProg(t, dir, variant.flags...)
			addrs, mods := runProg(t, prog)

			// The module table: both files, with their build-ids, sorted.
			byName := map[string]Module{}
			for i, m := range mods {
				if i > 0 {
					require.LessOrEqual(t, mods[i-1].End, m.Start, "sorted, disjoint")
				}
				byName[m.Name()] = m
			}
			for _, p := range []string{prog, lib} {
				m, ok := byName[filepath.Base(p)]
				require.True(t, ok, "%s in %+v", p, mods)
				id, err := BuildID(p)
				require.NoError(t, err)
				assert.Equal(t, id, m.BuildID)
				assert.Equal(t, p, m.Path)
			}

			s := New(WithDebugDirs())
			lookup := func(name string, ret bool) ([]Frame, string) {
				addr, ok := addrs[name]
				require.True(t, ok, name)
				m, ok := ModuleOf(mods, addr)
				require.True(t, ok, "%s at %#x in no module", name, addr)
				var fr []Frame
				var err error
				if ret {
					fr, err = s.Frames(m, addr)
				} else {
					fr, err = s.FramesPC(m, addr)
				}
				require.NoError(t, err, name)
				return fr, m.Name()
			}
			for _, fn := range []string{"alloc_in_leaf", "middle", "outer", "main"} {
				fr, mod := lookup(fn, false)
				checkFrames(t, fr, mod, want{fn: fn, file: "prog.c"})
				assert.Equal(t, "prog", mod)
			}
			for _, fn := range []string{"foo_alloc", "foo_leaf"} {
				fr, mod := lookup(fn, false)
				checkFrames(t, fr, mod, want{fn: fn, file: "foo.c"})
				assert.Equal(t, "libfoo.so", mod)
			}

			fr, mod := lookup("ret_middle_leaf", true)
			checkFrames(t, fr, mod, want{"middle", "prog.c", markerLine(t, "prog.c", "middle"), false})
			fr, mod = lookup("ret_outer_middle", true)
			checkFrames(t, fr, mod, want{"outer", "prog.c", markerLine(t, "prog.c", "outer"), false})
			fr, mod = lookup("ret_main_foo", true)
			checkFrames(t, fr, mod, want{"main", "prog.c", markerLine(t, "prog.c", "main-foo"), false})
			fr, mod = lookup("ret_foo_leaf", true)
			checkFrames(t, fr, mod, want{"foo_alloc", "foo.c", markerLine(t, "foo.c", "foo_alloc"), false})
			// A call made by a function inlined into outer: two frames.
			fr, mod = lookup("ret_outer_inlined", true)
			checkFrames(t, fr, mod,
				want{"inlined", "prog.c", markerLine(t, "prog.c", "inlined"), true},
				want{"outer", "prog.c", markerLine(t, "prog.c", "outer-inlined"), false})

			// The stack of the allocation in foo_leaf, rolled up: libfoo.so.
			var stack []string
			for _, name := range []string{"ret_foo_leaf", "ret_main_foo"} {
				m, ok := ModuleOf(mods, addrs[name])
				require.True(t, ok)
				stack = append(stack, m.Path)
			}
			assert.Equal(t, "libfoo.so", Library(append([]string{"/lib/x86_64-linux-gnu/libc.so.6", "/x/libtagalloc.so"}, stack...)))
		})
	}
}

// TestStrippedDynsym: a library stripped of .symtab and DWARF still names
// its exported functions from .dynsym; a static function, which .dynsym
// does not hold, is not charged to its neighbour.
func TestStrippedDynsym(t *testing.T) {
	needTool(t, "gcc", "strip")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	fooAlloc, fooLeaf := symbolValue(t, lib, "foo_alloc"), symbolValue(t, lib, "foo_leaf")
	stripped := filepath.Join(dir, "stripped", "libfoo.so")
	copyFile(t, lib, stripped)
	run(t, dir, "strip", "--strip-all", stripped)
	f, err := elf.Open(stripped)
	require.NoError(t, err)
	_, err = f.Symbols()
	assert.ErrorIs(t, err, elf.ErrNoSymbols, "stripped")
	assert.Nil(t, f.Section(".debug_info"), "stripped")
	f.Close()

	s := New(WithDebugDirs())
	m := fileModule(t, stripped)
	fr, err := s.FramesPC(&m, fooAlloc+3)
	require.NoError(t, err)
	require.Len(t, fr, 1)
	assert.Equal(t, Frame{Function: "foo_alloc", Module: "libfoo.so", Origin: OriginDynsym}, fr[0])

	fr, err = s.FramesPC(&m, fooLeaf+1)
	require.NoError(t, err)
	require.Len(t, fr, 1)
	assert.Equal(t, OriginNone, fr[0].Origin, "%+v", fr[0])
	assert.True(t, strings.HasPrefix(fr[0].Function, "libfoo.so+0x"), "%+v", fr[0])
}

// TestDebugFiles: a stripped library is named from DWARF again through its
// separate debug file, found by build-id under a debug directory or by
// its .gnu_debuglink (whose CRC must match).
func TestDebugFiles(t *testing.T) {
	needTool(t, "gcc", "strip", "objcopy")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	id, err := BuildID(lib)
	require.NoError(t, err)
	fooLeaf := symbolValue(t, lib, "foo_leaf")
	debug := filepath.Join(dir, "libfoo.debug")
	run(t, dir, "objcopy", "--only-keep-debug", lib, debug)
	leafWant := func(t *testing.T, s *Symbolizer, m Module, origin Origin) {
		t.Helper()
		fr, err := s.FramesPC(&m, fooLeaf+1)
		require.NoError(t, err)
		require.Len(t, fr, 1)
		assert.Equal(t, origin, fr[0].Origin, "%+v", fr[0])
		if origin == OriginDWARF {
			assert.Equal(t, "foo_leaf", fr[0].Function)
			assert.Equal(t, "foo.c", filepath.Base(fr[0].File))
			assert.NotZero(t, fr[0].Line)
		}
	}

	t.Run("build-id", func(t *testing.T) {
		stripped := filepath.Join(dir, "byid", "libfoo.so")
		copyFile(t, lib, stripped)
		run(t, dir, "strip", "--strip-all", stripped)
		debugDir := filepath.Join(dir, "debug")
		copyFile(t, debug, filepath.Join(debugDir, ".build-id", id[:2], id[2:]+".debug"))
		m := fileModule(t, stripped)
		leafWant(t, New(WithDebugDirs()), m, OriginNone)
		leafWant(t, New(WithDebugDirs(debugDir)), m, OriginDWARF)
	})
	t.Run("debuglink", func(t *testing.T) {
		linked := filepath.Join(dir, "link", "libfoo.so")
		copyFile(t, lib, linked)
		run(t, dir, "strip", "--strip-all", linked)
		run(t, dir, "objcopy", "--add-gnu-debuglink="+debug, linked)
		m := fileModule(t, linked)
		leafWant(t, New(WithDebugDirs()), m, OriginNone) // not beside it yet
		copyFile(t, debug, filepath.Join(dir, "link", ".debug", "libfoo.debug"))
		leafWant(t, New(WithDebugDirs()), m, OriginDWARF)
		// Another file under that name (its CRC differs) is not used.
		data, err := os.ReadFile(debug)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dir, "link", ".debug", "libfoo.debug"), append(data, 0), 0o644))
		leafWant(t, New(WithDebugDirs()), m, OriginNone)
	})
}

// TestBuildIDMismatch: after the program is rebuilt with a change, a module
// table recorded from the old build is not symbolized with the new file:
// the frame is "prog+0x..." with Stale set and ErrBuildIDMismatch, unless
// a debug file of the old build-id is at hand.
func TestBuildIDMismatch(t *testing.T) {
	needTool(t, "gcc", "objcopy")
	dir := t.TempDir()
	buildLib(t, dir)
	prog := buildProg(t, dir)
	old := fileModule(t, prog)
	require.NotEmpty(t, old.BuildID)
	middle := symbolValue(t, prog, "middle")
	run(t, dir, "objcopy", "--only-keep-debug", prog, filepath.Join(dir, "prog.debug"))

	kept := New(WithDebugDirs())
	fr, err := kept.FramesPC(&old, middle)
	require.NoError(t, err)
	assert.Equal(t, "middle", fr[0].Function)

	buildProg(t, dir, "-DCHANGED", "-O2")
	now := fileModule(t, prog)
	require.NotEqual(t, old.BuildID, now.BuildID, "the rebuild changed the build-id")

	fr, err = New(WithDebugDirs()).FramesPC(&old, middle)
	require.ErrorIs(t, err, ErrBuildIDMismatch)
	require.Len(t, fr, 1)
	assert.True(t, fr[0].Stale)
	assert.Equal(t, OriginNone, fr[0].Origin)
	assert.Equal(t, fmt.Sprintf("prog+0x%x", middle), fr[0].Function)

	// The Symbolizer that loaded the old build keeps it (the cache is keyed
	// by build-id), so it still answers for the old module table...
	fr, err = kept.FramesPC(&old, middle)
	require.NoError(t, err)
	assert.Equal(t, "middle", fr[0].Function)
	// ...and a debug file of the old build stands in for the replaced file.
	debugDir := filepath.Join(dir, "debug")
	copyFile(t, filepath.Join(dir, "prog.debug"), filepath.Join(debugDir, ".build-id", old.BuildID[:2], old.BuildID[2:]+".debug"))
	fr, err = New(WithDebugDirs(debugDir)).FramesPC(&old, middle)
	require.NoError(t, err)
	assert.Equal(t, "middle", fr[0].Function)
	assert.Equal(t, OriginDWARF, fr[0].Origin)
	assert.False(t, fr[0].Stale)
}

// TestNoBuildID: a file linked without a build-id is cached by path, mtime
// and size, so a rebuilt file is read again.
func TestNoBuildID(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	buildLib(t, dir)
	prog := buildProg(t, dir, "-Wl,--build-id=none")
	_, err := BuildID(prog)
	require.ErrorIs(t, err, ErrNoBuildID)
	m := fileModule(t, prog)
	require.Empty(t, m.BuildID)
	s := New(WithDebugDirs())
	for _, flags := range [][]string{nil, {"-DCHANGED", "-O2"}} {
		prog := buildProg(t, dir, append(flags, "-Wl,--build-id=none")...)
		outer := symbolValue(t, prog, "outer")
		fr, err := s.FramesPC(&m, outer)
		require.NoError(t, err)
		assert.Equal(t, "outer", fr[0].Function, "flags %v", flags)
	}
}

// TestCorruptFiles: truncated, garbage and damaged files give an error (or,
// when only a part is damaged, whatever still reads), never a panic.
func TestCorruptFiles(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	buildLib(t, dir)
	prog := buildProg(t, dir)
	data, err := os.ReadFile(prog)
	require.NoError(t, err)
	f, err := elf.Open(prog)
	require.NoError(t, err)
	info := f.Section(".debug_info")
	symtab := f.Section(".symtab")
	f.Close()
	require.NotNil(t, info)
	middle := symbolValue(t, prog, "middle")

	damaged := func(off, n uint64) []byte {
		d := append([]byte(nil), data...)
		for i := off; i < off+n && i < uint64(len(d)); i++ {
			d[i] = byte(i*131 + 7)
		}
		return d
	}
	cases := []struct {
		name    string
		data    []byte
		wantErr bool
	}{
		{"empty", nil, true},
		{"not-elf", []byte("#!/bin/sh\necho hello\n"), true},
		{"header-only", data[:64], true},
		{"truncated-half", data[:len(data)/2], true},
		{"truncated-last-byte", data[:len(data)-1], true},
		{"garbage-header", damaged(16, 48), true},
		{"garbage-debug-info", damaged(info.Offset, info.Size), false},
		{"garbage-symtab", damaged(symtab.Offset, symtab.Size), false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "prog")
			require.NoError(t, os.WriteFile(p, c.data, 0o644))
			_, idErr := BuildID(p)
			m := Module{Path: p}
			s := New(WithDebugDirs())
			for _, pc := range []uint64{0, middle, middle + 5, 1 << 40} {
				fr, err := s.FramesPC(&m, pc)
				require.NotEmpty(t, fr)
				if c.wantErr {
					assert.Error(t, err)
					assert.Error(t, idErr)
					assert.Equal(t, OriginNone, fr[0].Origin)
					assert.True(t, strings.HasPrefix(fr[0].Function, "prog+0x"), fr[0].Function)
				}
			}
		})
	}
}

// TestConcurrent: one Symbolizer used from many goroutines (run with
// -race) gives every goroutine the same answers.
func TestConcurrent(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	prog := buildProg(t, dir)
	mp, ml := fileModule(t, prog), fileModule(t, lib)
	pcs := []struct {
		m  *Module
		pc uint64
		fn string
	}{
		{&mp, symbolValue(t, prog, "middle"), "middle"},
		{&mp, symbolValue(t, prog, "outer"), "outer"},
		{&ml, symbolValue(t, lib, "foo_alloc"), "foo_alloc"},
		{&ml, symbolValue(t, lib, "foo_leaf"), "foo_leaf"},
	}
	s := New(WithDebugDirs(), WithCacheSize(1)) // also churns the cache
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for g := range 8 {
		wg.Go(func() {
			for i := range 200 {
				p := pcs[(g+i)%len(pcs)]
				fr, err := s.FramesPC(p.m, p.pc)
				if err == nil && fr[0].Function != p.fn {
					err = errors.New(fr[0].Function + " != " + p.fn)
				}
				if err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestCPlusPlus: Itanium names are demangled, from DWARF linkage names and
// from .dynsym alike, as each Demangle mode says.
func TestCPlusPlus(t *testing.T) {
	needTool(t, "g++", "strip")
	dir := t.TempDir()
	lib := filepath.Join(dir, "libcxx.so")
	run(t, dir, "g++", "-g", "-O1", "-fPIC", "-shared", "-Wl,--build-id", "-o", lib, testdata(t, "cxx.cc"))
	stripped := filepath.Join(dir, "stripped", "libcxx.so")
	copyFile(t, lib, stripped)
	run(t, dir, "strip", "--strip-all", stripped)
	make := symbolValue(t, lib, "_ZN2ns3BoxIlE4makeEi")
	plain := symbolValue(t, lib, "_ZN2ns5plainEi")
	for _, c := range []struct {
		mode        Demangle
		make, plain string
	}{
		{DemangleSimplified, "ns::Box::make", "ns::plain"},
		{DemangleTemplates, "ns::Box<long>::make", "ns::plain"},
		{DemangleFull, "ns::Box<long>::make(int)", "ns::plain(int)"},
		{DemangleNone, "_ZN2ns3BoxIlE4makeEi", "_ZN2ns5plainEi"},
	} {
		for _, file := range []struct {
			path   string
			origin Origin
		}{{lib, OriginDWARF}, {stripped, OriginDynsym}} {
			s := New(WithDebugDirs(), WithDemangle(c.mode))
			m := fileModule(t, file.path)
			for pc, want := range map[uint64]string{make: c.make, plain: c.plain} {
				fr, err := s.FramesPC(&m, pc)
				require.NoError(t, err)
				require.Len(t, fr, 1)
				assert.Equal(t, want, fr[0].Function, "mode %d, %s", c.mode, file.origin)
				assert.Equal(t, file.origin, fr[0].Origin)
			}
		}
	}
}

// TestSystemDebugFile: libc, named from its separate debug file under
// /usr/lib/debug when Debian's libc6-dbg is installed.
func TestSystemDebugFile(t *testing.T) {
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	id, err := BuildID(libc)
	if err != nil {
		t.Skipf("no %s here: %v", libc, err)
	}
	if _, err := os.Stat(filepath.Join(DefaultDebugDir, ".build-id", id[:2], id[2:]+".debug")); err != nil {
		t.Skipf("no debug file of libc (apt-get install libc6-dbg): %v", err)
	}
	f, err := elf.Open(libc)
	require.NoError(t, err)
	syms, err := f.DynamicSymbols()
	f.Close()
	require.NoError(t, err)
	var malloc uint64
	for _, s := range syms {
		if s.Name == "malloc" {
			malloc = s.Value
		}
	}
	require.NotZero(t, malloc)
	m := fileModule(t, libc)
	fr, err := New().FramesPC(&m, malloc+8)
	require.NoError(t, err)
	last := fr[len(fr)-1]
	assert.Equal(t, OriginDWARF, last.Origin, "%+v", fr)
	assert.Contains(t, last.Function, "malloc")
	assert.Equal(t, "malloc.c", filepath.Base(last.File), "%+v", fr)
	assert.Equal(t, "libc.so.6", last.Module)
	t.Logf("libc malloc+8: %+v", fr)
}

// TestRoot: WithRoot looks the modules' paths up under another root (a
// container's /proc/PID/root, or copies of another machine's files).
func TestRoot(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	root := filepath.Join(dir, "root")
	copyFile(t, lib, filepath.Join(root, "opt", "lib", "libfoo.so"))
	m := fileModule(t, lib)
	m.Path = "/opt/lib/libfoo.so"
	fooAlloc := symbolValue(t, lib, "foo_alloc")

	fr, err := New(WithDebugDirs()).FramesPC(&m, fooAlloc)
	require.Error(t, err, "no such file outside the root")
	assert.Equal(t, fmt.Sprintf("libfoo.so+0x%x", fooAlloc), fr[0].Function)

	fr, err = New(WithDebugDirs(), WithRoot(root)).FramesPC(&m, fooAlloc)
	require.NoError(t, err)
	assert.Equal(t, "foo_alloc", fr[0].Function)
	assert.Equal(t, "libfoo.so", fr[0].Module)
}
