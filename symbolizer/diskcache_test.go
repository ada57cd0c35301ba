// Tests of the disk cache: hits name frames without the object, answers
// are the same with and without it, bad files are ignored and rewritten, a
// debug file installed later invalidates, what is not kept, Flush's
// bound, concurrent use, two Symbolizers' entries merged; FuzzDiskCache
// feeds bytes to the decoder.

package symbolizer

import (
	"debug/elf"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// textAddrs returns every address of the .text section of the ELF file at
// path.
func textAddrs(t testing.TB, path string) []uint64 {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	text := f.Section(".text")
	require.NotNil(t, text)
	addrs := make([]uint64, 0, text.Size)
	for a := text.Addr; a < text.Addr+text.Size; a++ {
		addrs = append(addrs, a)
	}
	return addrs
}

// result is what one lookup gave.
type result struct {
	frames []Frame
	err    string
}

// lookupAll looks every address up in m with s, as a return address
// (Frames(a+1)) and as an exact one (FramesPC(a)); the addresses are ELF
// virtual addresses, shifted by m.Bias.
func lookupAll(s *Symbolizer, m *Module, addrs []uint64) []result {
	out := make([]result, 0, 2*len(addrs))
	add := func(fr []Frame, err error) {
		r := result{frames: fr}
		if err != nil {
			r.err = err.Error()
		}
		out = append(out, r)
	}
	for _, a := range addrs {
		add(s.Frames(m, a+m.Bias+1))
		add(s.FramesPC(m, a+m.Bias))
	}
	return out
}

// fooFixture is libfoo.so built in a new directory: its module, n of its
// addresses and what they give without a disk cache; a cache directory
// beside it and the library's file there.
type fooFixture struct {
	dir, lib, cache, file string
	m                     Module
	addrs                 []uint64
	want                  []result
}

func newFoo(t *testing.T, n int, tools ...string) *fooFixture {
	t.Helper()
	needTool(t, append([]string{"gcc"}, tools...)...)
	x := &fooFixture{dir: t.TempDir()}
	x.lib = buildLib(t, x.dir)
	x.m = fileModule(t, x.lib)
	require.NotEmpty(t, x.m.BuildID)
	x.addrs = funcAddrs(t, x.lib, n)
	x.want = lookupAll(New(WithDebugDirs()), &x.m, x.addrs)
	x.cache = filepath.Join(x.dir, "cache")
	x.file = cacheFile(x.cache, x.m.BuildID)
	return x
}

// cacheFile is where the cache under dir keeps build-id id.
func cacheFile(dir, id string) string { return (&diskCache{dir: dir}).path(id) }

// readCache decodes the cache file of build-id id under dir.
func readCache(t testing.TB, dir, id string) *diskFile {
	t.Helper()
	data, err := os.ReadFile(cacheFile(dir, id))
	require.NoError(t, err)
	f, err := decodeDiskFile(data)
	require.NoError(t, err)
	return f
}

// loaded reports whether s has loaded (or tried to load) any object.
func loaded(s *Symbolizer) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.byModule) > 0
}

// TestDiskCacheSameFrames: for every address of the program and of its
// library, Frames and FramesPC give the same frames and errors without a
// cache, with a cold one and with a warm one (the warm one under another
// load bias, without loading anything).
func TestDiskCacheSameFrames(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	prog := buildProg(t, dir)
	cache := filepath.Join(dir, "cache")
	for _, path := range []string{prog, lib} {
		m := fileModule(t, path)
		require.NotEmpty(t, m.BuildID)
		addrs := textAddrs(t, path)
		want := lookupAll(New(WithDebugDirs()), &m, addrs)

		cold := New(WithDebugDirs(), WithDiskCache(cache))
		assert.Equal(t, want, lookupAll(cold, &m, addrs), "%s: cold cache", path)
		require.NoError(t, cold.Flush())
		assert.Len(t, readCache(t, cache, m.BuildID).frames, len(addrs), path)

		warm := New(WithDebugDirs(), WithDiskCache(cache))
		moved := m
		moved.Bias, moved.Start = 0x7f1234560000, 0x7f1234560000
		got := lookupAll(warm, &moved, addrs)
		assert.False(t, loaded(warm), "%s: every address was in the cache", path)
		assert.Equal(t, want, got, "%s: warm cache", path)
	}
}

// TestDiskCacheWithoutObject: once cached, a build-id's frames come back
// after its file is gone or replaced by garbage, as do those of other
// addresses of the units indexed; an address neither cached nor indexed
// shows the file is gone.
func TestDiskCacheWithoutObject(t *testing.T) {
	x := newFoo(t, 8)
	for _, r := range x.want {
		require.Empty(t, r.err)
		require.Equal(t, OriginDWARF, r.frames[0].Origin, "%+v", r.frames)
	}
	first := indexing(New(WithDebugDirs(), WithDiskCache(x.cache)))
	assert.Equal(t, x.want, lookupAll(first, &x.m, x.addrs))
	require.NoError(t, first.Flush())

	fi, err := os.Stat(x.file)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	di, err := os.Stat(filepath.Dir(x.file))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o700), di.Mode().Perm())

	other := x.addrs[0] + 3 // not cached, in a unit the index holds
	wantOther, err := New(WithDebugDirs()).FramesPC(&x.m, other)
	require.NoError(t, err)
	for _, replace := range []func(){
		func() { require.NoError(t, os.WriteFile(x.lib, []byte("not ELF any more"), 0o644)) },
		func() { require.NoError(t, os.Remove(x.lib)) },
	} {
		replace()
		s := New(WithDebugDirs(), WithDiskCache(x.cache))
		assert.Equal(t, x.want, lookupAll(s, &x.m, x.addrs))
		fr, err := s.FramesPC(&x.m, other)
		assert.NoError(t, err)
		assert.Equal(t, wantOther, fr)
		assert.False(t, loaded(s))
	}
	require.NoError(t, os.RemoveAll((&diskCache{dir: x.cache}).unitsDir(x.m.BuildID)))
	s := New(WithDebugDirs(), WithDiskCache(x.cache))
	_, err = s.FramesPC(&x.m, other) // neither cached nor indexed: the file is needed
	assert.Error(t, err)
}

// TestDiskCacheBadFiles: a cache file that is damaged, of another version,
// build-id or configuration is not used (its frames would be wrong here),
// and Flush replaces it with a good one.
func TestDiskCacheBadFiles(t *testing.T) {
	x := newFoo(t, 8)
	m, addrs := x.m, x.addrs
	fp := (&config{}).diskFingerprint(m.BuildID)

	s := New(WithDebugDirs(), WithDiskCache(x.cache))
	lookupAll(s, &m, addrs)
	require.NoError(t, s.Flush())
	valid, err := os.ReadFile(x.file)
	require.NoError(t, err)

	// bogus is a well-formed file naming every address "bogus".
	bogus := func(edit func(*diskFile)) []byte {
		f := &diskFile{version: diskCacheVersion, buildID: m.BuildID, fingerprint: fp, frames: map[uint64][]Frame{}}
		for _, a := range addrs {
			f.frames[a] = []Frame{{Function: "bogus", Origin: OriginDWARF}}
		}
		edit(f)
		return encodeDiskFile(f)
	}
	flipped := append([]byte(nil), valid...)
	flipped[len(flipped)/2] ^= 0x40
	otherID := "00" + m.BuildID[2:]
	if otherID == m.BuildID {
		otherID = "ff" + m.BuildID[2:]
	}
	cases := map[string][]byte{
		"empty":           {},
		"magic-only":      []byte(diskCacheMagic),
		"truncated":       valid[:len(valid)/2],
		"truncated-1":     valid[:len(valid)-1],
		"trailing":        append(append([]byte(nil), valid...), 0),
		"flipped-bit":     flipped,
		"garbage":         []byte("\x00\xff garbage that is not a cache file at all \x01\x02"),
		"other-version":   bogus(func(f *diskFile) { f.version = diskCacheVersion + 1 }),
		"other-build-id":  bogus(func(f *diskFile) { f.buildID = otherID }),
		"other-debug-dir": bogus(func(f *diskFile) { f.fingerprint = (&config{debugDirs: []string{x.dir}}).diskFingerprint(m.BuildID) }),
		"other-demangle":  bogus(func(f *diskFile) { f.fingerprint = (&config{demangle: DemangleFull}).diskFingerprint(m.BuildID) }),
	}
	// The control: bogus as it is is used, so each case above fails if its
	// defect goes unnoticed.
	control := filepath.Join(x.dir, "control")
	require.NoError(t, writeAtomic(cacheFile(control, m.BuildID), bogus(func(*diskFile) {})))
	fr, err := New(WithDebugDirs(), WithDiskCache(control)).FramesPC(&m, addrs[0])
	require.NoError(t, err)
	require.Equal(t, "bogus", fr[0].Function, "the control file is used")

	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			file := cacheFile(cache, m.BuildID)
			require.NoError(t, os.MkdirAll(filepath.Dir(file), 0o700))
			require.NoError(t, os.WriteFile(file, data, 0o600))
			s := New(WithDebugDirs(), WithDiskCache(cache))
			assert.Equal(t, x.want, lookupAll(s, &m, addrs))
			require.NoError(t, s.Flush())
			f := readCache(t, cache, m.BuildID)
			assert.Equal(t, uint64(diskCacheVersion), f.version)
			assert.Equal(t, m.BuildID, f.buildID)
			assert.Equal(t, fp, f.fingerprint)
			assert.Len(t, f.frames, len(addrs))
			for _, fr := range f.frames {
				assert.NotEqual(t, "bogus", fr[0].Function)
			}
		})
	}
}

// TestDiskCacheDebugFile: frames cached without a debug file are not used
// once one of the build-id is installed (nor the other way round); a debug
// file installed while a Symbolizer runs keeps its frames off the disk.
func TestDiskCacheDebugFile(t *testing.T) {
	x := newFoo(t, 8, "objcopy")
	debugDir := filepath.Join(x.dir, "debug")
	debugFile := filepath.Join(debugDir, ".build-id", x.m.BuildID[:2], x.m.BuildID[2:]+".debug")
	run(t, x.dir, "objcopy", "--only-keep-debug", x.lib, filepath.Join(x.dir, "libfoo.debug"))

	// pass looks the addresses up with a new Symbolizer and flushes,
	// reporting whether the object had to be loaded.
	pass := func() bool {
		t.Helper()
		s := New(WithDebugDirs(debugDir), WithDiskCache(x.cache))
		assert.Equal(t, x.want, lookupAll(s, &x.m, x.addrs))
		require.NoError(t, s.Flush())
		return loaded(s)
	}
	assert.True(t, pass(), "nothing cached yet")
	assert.False(t, pass(), "cached")
	copyFile(t, filepath.Join(x.dir, "libfoo.debug"), debugFile)
	assert.True(t, pass(), "a debug file was installed")
	assert.False(t, pass(), "cached with the debug file")
	require.NoError(t, os.Remove(debugFile))
	assert.True(t, pass(), "the debug file was removed")

	// Installed between the cache's read and Flush: not written.
	before, err := os.ReadFile(x.file)
	require.NoError(t, err)
	s := New(WithDebugDirs(debugDir), WithDiskCache(x.cache))
	_, err = s.FramesPC(&x.m, x.addrs[0]+1) // a miss: the record is read, the object loaded
	require.NoError(t, err)
	copyFile(t, filepath.Join(x.dir, "libfoo.debug"), debugFile)
	require.NoError(t, s.Flush())
	after, err := os.ReadFile(x.file)
	require.NoError(t, err)
	assert.Equal(t, before, after)
}

// TestDiskCacheOwnCopies: the frames a lookup returns, from a miss or a
// hit, are the caller's to change; a kept frame without a function is
// named after the address looked up, as without the cache.
func TestDiskCacheOwnCopies(t *testing.T) {
	x := newFoo(t, 1)
	m := x.m
	s := New(WithDebugDirs(), WithDiskCache(x.cache))
	for range 3 { // a miss, then hits
		fr, err := s.Frames(&m, x.addrs[0]+1)
		require.NoError(t, err)
		require.Equal(t, x.want[0].frames, fr)
		fr[0].Function, fr[0].Module = "changed", "changed"
	}

	nameless := filepath.Join(x.dir, "nameless")
	require.NoError(t, writeAtomic(cacheFile(nameless, m.BuildID), encodeDiskFile(&diskFile{
		version: diskCacheVersion, buildID: m.BuildID, fingerprint: (&config{}).diskFingerprint(m.BuildID),
		frames: map[uint64][]Frame{0x1000: {{File: "x.c", Line: 3}}},
	})))
	s = New(WithDebugDirs(), WithDiskCache(nameless))
	fr, err := s.Frames(&m, 0x1001)
	require.NoError(t, err)
	assert.Equal(t, []Frame{{Function: "libfoo.so+0x1001", File: "x.c", Line: 3, Module: "libfoo.so"}}, fr)
	fr, err = s.FramesPC(&m, 0x1000)
	require.NoError(t, err)
	assert.Equal(t, []Frame{{Function: "libfoo.so+0x1000", File: "x.c", Line: 3, Module: "libfoo.so"}}, fr)
	assert.False(t, loaded(s))
}

// TestDiskCacheNotKept: frames of a file without DWARF, and of a module
// without a usable build-id, are not written.
func TestDiskCacheNotKept(t *testing.T) {
	x := newFoo(t, 4, "strip")
	stripped := filepath.Join(x.dir, "stripped", "libfoo.so")
	copyFile(t, x.lib, stripped)
	run(t, x.dir, "strip", "--strip-all", stripped)
	s := New(WithDebugDirs(), WithDiskCache(x.cache))
	m := fileModule(t, stripped)
	lookupAll(s, &m, x.addrs)
	bad := x.m
	bad.BuildID = "../../" + bad.BuildID
	lookupAll(s, &bad, x.addrs)
	require.NoError(t, s.Flush())
	_, err := os.Stat(x.cache)
	assert.True(t, os.IsNotExist(err), "nothing written: %v", err)
	assert.False(t, validBuildID("../../ab"))
	assert.False(t, validBuildID("ABCD"))
	assert.True(t, validBuildID("abcd0123"))
}

// TestDiskCacheFlush: Flush without a cache, or with nothing new, writes
// nothing; a file's addresses are bounded.
func TestDiskCacheFlush(t *testing.T) {
	require.NoError(t, New().Flush())
	x := newFoo(t, 10)
	s := New(WithDebugDirs(), WithDiskCache(x.cache))
	s.disk.limit = 3
	assert.Equal(t, x.want, lookupAll(s, &x.m, x.addrs), "beyond the bound, frames are still found")
	require.NoError(t, s.Flush())
	assert.Len(t, readCache(t, x.cache, x.m.BuildID).frames, 3)
	require.NoError(t, os.Remove(x.file))
	require.NoError(t, s.Flush())
	assert.NoFileExists(t, x.file, "nothing new: nothing written")

	lookupAll(s, &x.m, x.addrs)
	require.NoError(t, s.Flush())
	assert.NoFileExists(t, x.file, "only known addresses looked up: nothing written")
}

// TestDiskCacheMerge: two Symbolizers that read the same (empty) cache and
// each found other addresses both keep theirs when they flush in turn.
func TestDiskCacheMerge(t *testing.T) {
	x := newFoo(t, 16)
	a := New(WithDebugDirs(), WithDiskCache(x.cache))
	b := New(WithDebugDirs(), WithDiskCache(x.cache))
	lookupAll(a, &x.m, x.addrs[:10])
	lookupAll(b, &x.m, x.addrs[6:])
	require.NoError(t, a.Flush())
	require.NoError(t, b.Flush())
	assert.Len(t, readCache(t, x.cache, x.m.BuildID).frames, len(x.addrs))

	require.NoError(t, os.Remove(x.lib))
	c := New(WithDebugDirs(), WithDiskCache(x.cache))
	assert.Equal(t, x.want, lookupAll(c, &x.m, x.addrs))
	assert.False(t, loaded(c))
}

// TestDiskCacheConcurrent: lookups from many goroutines while Flush runs
// again and again (run with -race) all give the uncached answers, and the
// file ends up with every address.
func TestDiskCacheConcurrent(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	prog := buildProg(t, dir)
	mods := []Module{fileModule(t, prog), fileModule(t, lib)}
	addrs := [][]uint64{funcAddrs(t, prog, 64), funcAddrs(t, lib, 64)}
	var want [][]result
	for i := range mods {
		want = append(want, lookupAll(New(WithDebugDirs()), &mods[i], addrs[i]))
	}
	cache := filepath.Join(dir, "cache")
	s := New(WithDebugDirs(), WithDiskCache(cache), WithCacheSize(1))
	var wg sync.WaitGroup
	var stop atomic.Bool
	flushed := make(chan error, 1)
	go func() {
		var err error
		for !stop.Load() && err == nil {
			err = s.Flush()
		}
		flushed <- err
	}()
	for g := range 8 {
		wg.Go(func() {
			for i := range mods {
				k := (g + i) % len(mods)
				assert.Equal(t, want[k], lookupAll(s, &mods[k], addrs[k]))
			}
		})
	}
	wg.Wait()
	stop.Store(true)
	require.NoError(t, <-flushed)
	require.NoError(t, s.Flush())
	for i, m := range mods {
		assert.Len(t, readCache(t, cache, m.BuildID).frames, len(addrs[i]))
	}
}

// TestDiskCacheFromEnv: off, a directory, or the default.
func TestDiskCacheFromEnv(t *testing.T) {
	for _, off := range []string{"off", "0"} {
		t.Setenv(DiskCacheEnv, off)
		_, ok := DiskCacheFromEnv()
		assert.False(t, ok, off)
	}
	t.Setenv(DiskCacheEnv, "/some/dir")
	dir, ok := DiskCacheFromEnv()
	assert.True(t, ok)
	assert.Equal(t, "/some/dir", dir)
	t.Setenv(DiskCacheEnv, "")
	t.Setenv("XDG_CACHE_HOME", "/xdg")
	dir, ok = DiskCacheFromEnv()
	assert.True(t, ok)
	assert.Equal(t, "/xdg/tagalloc/symbols", dir)
	def, err := DefaultDiskCacheDir()
	require.NoError(t, err)
	assert.Equal(t, dir, def)
}

// FuzzDiskCache feeds bytes to the cache file decoder: errors are fine,
// panics are not, and what decodes encodes to a file that decodes to the
// same. Seeds without their checksum are whole once it is appended.
func FuzzDiskCache(f *testing.F) {
	valid := encodeDiskFile(&diskFile{
		version: diskCacheVersion, buildID: "abcdef0123", fingerprint: "demangle=0\n",
		frames: map[uint64][]Frame{
			0x1000: {{Function: "inlined", File: "a.c", Line: 3, Inlined: true, Origin: OriginDWARF}, {Function: "outer", File: "a.c", Line: 9, Origin: OriginDWARF}},
			0x1001: {{Function: "outer", File: "a.c", Line: 10, Origin: OriginDWARF}},
			0x2000: {},
			0x2001: {{Function: "dyn", Origin: OriginDynsym}},
		},
	})
	f.Add(valid)
	f.Add(valid[:len(valid)/2])
	f.Add(valid[:len(valid)-4])
	f.Add([]byte{})
	f.Add([]byte(diskCacheMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		// As they are, and with their checksum made right, so that the
		// mutations reach past it.
		summed := binary.LittleEndian.AppendUint32(slices.Clip(data), crc32.ChecksumIEEE(data))
		for _, b := range [][]byte{data, summed} {
			d, err := decodeDiskFile(b)
			if err != nil {
				continue
			}
			again, err := decodeDiskFile(encodeDiskFile(d))
			require.NoError(t, err)
			require.Equal(t, d, again)
		}
	})
}
