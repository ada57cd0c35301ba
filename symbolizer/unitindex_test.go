// Tests of the unit index: the frames it gives are the object's at every
// address (small programs, C++ with inlining, and the system's libc and
// libpython when present), without loading the object; blocks of other
// Symbolizers are merged; bad files are ignored; FuzzUnitIndex feeds bytes
// to its decoder.

package symbolizer

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// unitAddrs returns the addresses of addrs that a DWARF compile unit of
// the object at path holds.
func unitAddrs(t testing.TB, path string, addrs []uint64) []uint64 {
	t.Helper()
	m := fileModule(t, path)
	s := New(WithDebugDirs())
	e := s.entry(&m)
	require.NoError(t, e.err)
	require.NotNil(t, e.obj.dw, path)
	var out []uint64
	for _, a := range addrs {
		if e.obj.dw.unitFor(a) != nil {
			out = append(out, a)
		}
	}
	return out
}

// indexing has s index, at Flush, every unit a lookup loaded the object
// for (and the others of its objects), whatever the time it takes.
func indexing(s *Symbolizer) *Symbolizer {
	s.disk.minBudget, s.disk.maxBlocks = time.Hour, 1<<30
	return s
}

// indexFiles returns the names of the unit index files under dir of
// build-id id (ranges and the blocks' units).
func indexFiles(t testing.TB, dir, id string) []string {
	t.Helper()
	ents, err := os.ReadDir((&diskCache{dir: dir}).unitsDir(id))
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}

// TestUnitIndexSameFrames: once one address of a unit was looked up, every
// address of the unit is named from the index (the frames file gone)
// without loading the object, as the object names it; the others still
// load it. Programs at -O1 and -O2, a C++ library with inlined templates.
func TestUnitIndexSameFrames(t *testing.T) {
	needTool(t, "gcc", "g++")
	dir := t.TempDir()
	var paths []string
	for _, o := range []string{"-O1", "-O2"} {
		d := filepath.Join(dir, o)
		require.NoError(t, os.MkdirAll(d, 0o755))
		lib := buildLib(t, d, o)
		paths = append(paths, lib, buildProg(t, d, o))
		both := filepath.Join(d, "both") // two units: prog.c and foo.c
		run(t, d, "gcc", "-g", o, "-Wl,--build-id", "-o", both, testdata(t, "prog.c"), testdata(t, "foo.c"))
		paths = append(paths, both)
	}
	cxx := filepath.Join(dir, "libcxx.so")
	run(t, dir, "g++", "-g", "-O2", "-fPIC", "-shared", "-Wl,--build-id", "-o", cxx, testdata(t, "cxx.cc"))
	paths = append(paths, cxx)

	for _, path := range paths {
		m := fileModule(t, path)
		require.NotEmpty(t, m.BuildID)
		addrs := textAddrs(t, path)
		want := lookupAll(New(WithDebugDirs()), &m, addrs)
		cache := filepath.Join(t.TempDir(), "cache")

		// One address of each unit, then all from the index.
		inUnits := unitAddrs(t, path, addrs)
		require.NotEmpty(t, inUnits, path)
		cold := indexing(New(WithDebugDirs(), WithDiskCache(cache)))
		seen := map[*unit]bool{}
		for _, a := range inUnits {
			e := cold.entry(&m)
			if u := e.obj.dw.unitFor(a); !seen[u] {
				seen[u] = true
				_, err := cold.FramesPC(&m, a)
				require.NoError(t, err)
			}
		}
		require.NoError(t, cold.Flush())
		assert.Len(t, indexFiles(t, cache, m.BuildID), len(seen)+1, "%s: the ranges and a block a unit", path)
		require.NoError(t, os.Remove(cacheFile(cache, m.BuildID)))

		warm := New(WithDebugDirs(), WithDiskCache(cache))
		moved := m
		moved.Bias, moved.Start = 0x7f1234560000, 0x7f1234560000
		inWant := lookupAll(New(WithDebugDirs()), &m, inUnits)
		assert.Equal(t, inWant, lookupAll(warm, &moved, inUnits), "%s: from the index", path)
		assert.False(t, loaded(warm), "%s: every address was in an indexed unit", path)

		all := New(WithDebugDirs(), WithDiskCache(cache))
		assert.Equal(t, want, lookupAll(all, &moved, addrs), "%s: the index and the object", path)
	}
}

// TestUnitIndexSystemLibraries: the index gives the object's frames at
// every 61st address (TAGALLOC_TEST_EVERY) of the system's libc (through
// its debug file when installed) and of libpython, when they have DWARF.
func TestUnitIndexSystemLibraries(t *testing.T) {
	if testing.Short() {
		t.Skip("reads every unit of large libraries")
	}
	var paths []string
	for _, p := range []string{"/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6"} {
		if _, err := os.Stat(p); err == nil {
			paths = append(paths, p)
			break
		}
	}
	if py, err := exec.LookPath("python3"); err == nil {
		out, err := exec.Command(py, "-c", "import sysconfig, os; print(os.path.join(sysconfig.get_config_var('LIBDIR') or '', sysconfig.get_config_var('INSTSONAME') or ''))").Output()
		if p := string(out); err == nil && len(p) > 1 {
			p = p[:len(p)-1]
			if _, err := os.Stat(p); err == nil {
				paths = append(paths, p)
			}
		}
	}
	every := 61
	if v, err := strconv.Atoi(os.Getenv("TAGALLOC_TEST_EVERY")); err == nil && v > 0 {
		every = v // 1: every address (a few minutes)
	}
	tested := 0
	for _, path := range paths {
		m := fileModule(t, path)
		plain := New()
		e := plain.entry(&m)
		if e.err != nil || e.obj.dw == nil || m.BuildID == "" {
			t.Logf("%s: no DWARF", path)
			continue
		}
		tested++
		var addrs []uint64
		for _, a := range textAddrs(t, path) {
			if a%uint64(every) == 0 {
				addrs = append(addrs, a)
			}
		}
		t.Logf("%s: %d addresses", path, len(addrs))
		want := lookupAll(plain, &m, addrs)
		cache := filepath.Join(t.TempDir(), "cache")
		cold := indexing(New(WithDiskCache(cache)))
		assert.Equal(t, want, lookupAll(cold, &m, addrs), "%s: cold", path)
		require.NoError(t, cold.Flush())
		require.NoError(t, os.Remove(cacheFile(cache, m.BuildID)))
		// Another address of each unit (one more): from the index.
		for i := range addrs {
			addrs[i]++
		}
		want = lookupAll(plain, &m, addrs)
		warm := New(WithDiskCache(cache))
		assert.Equal(t, want, lookupAll(warm, &m, addrs), "%s: from the index", path)
	}
	if tested == 0 {
		t.Skip("no system library with DWARF")
	}
}

// TestUnitIndexMerge: two Symbolizers that each indexed another unit of a
// program both keep theirs when they flush in turn, and a third uses both.
func TestUnitIndexMerge(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	both := filepath.Join(dir, "both")
	run(t, dir, "gcc", "-g", "-O1", "-Wl,--build-id", "-o", both, testdata(t, "prog.c"), testdata(t, "foo.c"))
	m := fileModule(t, both)
	main, alloc := symbolValue(t, both, "main"), symbolValue(t, both, "foo_alloc")
	cache := filepath.Join(dir, "cache")
	a := indexing(New(WithDebugDirs(), WithDiskCache(cache)))
	b := indexing(New(WithDebugDirs(), WithDiskCache(cache)))
	_, err := a.FramesPC(&m, main)
	require.NoError(t, err)
	_, err = b.FramesPC(&m, alloc)
	require.NoError(t, err)
	require.NoError(t, a.Flush())
	require.NoError(t, b.Flush())
	assert.Len(t, indexFiles(t, cache, m.BuildID), 3, "the ranges, two blocks")

	require.NoError(t, os.Remove(cacheFile(cache, m.BuildID)))
	want := lookupAll(New(WithDebugDirs()), &m, []uint64{main + 1, alloc + 1})
	c := New(WithDebugDirs(), WithDiskCache(cache))
	assert.Equal(t, want, lookupAll(c, &m, []uint64{main + 1, alloc + 1}))
	assert.False(t, loaded(c))
}

// TestUnitIndexBadFiles: unit index files that are damaged, of another
// version, build-id or configuration, or malformed inside, are not used
// (the answers are the object's), and Flush replaces them.
func TestUnitIndexBadFiles(t *testing.T) {
	x := newFoo(t, 8)
	m := x.m
	s := indexing(New(WithDebugDirs(), WithDiskCache(x.cache)))
	lookupAll(s, &m, x.addrs)
	require.NoError(t, s.Flush())
	dc := &diskCache{dir: x.cache}
	names := indexFiles(t, x.cache, m.BuildID)
	require.Len(t, names, 2, "the ranges and foo.c's block")
	blockName := names[0]
	if blockName == "ranges" {
		blockName = names[1]
	}
	unit, err := strconv.ParseUint(blockName, 16, 64)
	require.NoError(t, err)
	fp := (&config{}).diskFingerprint(m.BuildID)
	good := func(name string) []byte {
		data, err := os.ReadFile(filepath.Join(dc.unitsDir(m.BuildID), name))
		require.NoError(t, err)
		return data
	}
	validRanges, validBlock := good("ranges"), good(blockName)
	sealed, err := unseal(validBlock, unitBlockMagic)
	require.NoError(t, err)
	pd := diskDecoder{b: sealed.payload}
	require.Equal(t, unit, pd.uvarint())
	b, err := decodeUnitBlock(pd.b)
	require.NoError(t, err)

	// bogus is a block whose every interval names "bogus", sealed as edit
	// says.
	bogus := func(edit func(*sealedFile)) []byte {
		out := binary.AppendUvarint(nil, unit)
		out = binary.AppendUvarint(out, 1) // strings
		out = appendString(out, "bogus")
		out = binary.AppendUvarint(out, 0) // chains
		out = binary.AppendUvarint(out, 1) // intervals
		out = binary.AppendUvarint(out, b.bounds[0])
		out = binary.AppendUvarint(out, b.bounds[len(b.bounds)-1]-b.bounds[0])
		out = append(out, 1, 0, 1, byte(OriginSymtab))
		out = binary.AppendUvarint(out, 0) // rows
		f := &sealedFile{version: diskCacheVersion, buildID: m.BuildID, fingerprint: fp, payload: out}
		edit(f)
		return seal(unitBlockMagic, f)
	}
	// The control: the bogus block as it is is used.
	control := filepath.Join(x.dir, "control")
	cdc := &diskCache{dir: control}
	require.NoError(t, writeAtomic(cdc.rangesPath(m.BuildID), validRanges))
	require.NoError(t, writeAtomic(cdc.blockPath(m.BuildID, unit), bogus(func(*sealedFile) {})))
	fr, err := New(WithDebugDirs(), WithDiskCache(control)).FramesPC(&m, x.addrs[0])
	require.NoError(t, err)
	require.Equal(t, "bogus", fr[0].Function, "the control files are used")

	flipped := func(data []byte) []byte {
		data = slices.Clone(data)
		data[len(data)/2] ^= 0x40
		return data
	}
	otherID := "00" + m.BuildID[2:]
	if otherID == m.BuildID {
		otherID = "ff" + m.BuildID[2:]
	}
	cases := map[string]struct{ ranges, block []byte }{
		"empty-ranges":     {[]byte{}, bogus(func(*sealedFile) {})},
		"truncated-ranges": {validRanges[:len(validRanges)-1], bogus(func(*sealedFile) {})},
		"flipped-ranges":   {flipped(validRanges), bogus(func(*sealedFile) {})},
		"block-as-ranges":  {bogus(func(*sealedFile) {}), bogus(func(*sealedFile) {})},
		"empty-block":      {validRanges, []byte{}},
		"truncated-block":  {validRanges, validBlock[:len(validBlock)/2]},
		"flipped-block":    {validRanges, flipped(validBlock)},
		"ranges-as-block":  {validRanges, validRanges},
		"other-version":    {validRanges, bogus(func(f *sealedFile) { f.version++ })},
		"other-build-id":   {validRanges, bogus(func(f *sealedFile) { f.buildID = otherID })},
		"other-demangle": {validRanges, bogus(func(f *sealedFile) {
			f.fingerprint = (&config{demangle: DemangleFull}).diskFingerprint(m.BuildID)
		})},
		"other-unit": {validRanges, bogus(func(f *sealedFile) { f.payload[0] ^= 1 })},
		"bad-block": {validRanges, bogus(func(f *sealedFile) {
			f.payload = append(binary.AppendUvarint(nil, unit), 0xff)
		})},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			cache := filepath.Join(t.TempDir(), "cache")
			dc := &diskCache{dir: cache}
			require.NoError(t, writeAtomic(dc.rangesPath(m.BuildID), c.ranges))
			require.NoError(t, writeAtomic(dc.blockPath(m.BuildID, unit), c.block))
			s := indexing(New(WithDebugDirs(), WithDiskCache(cache)))
			assert.Equal(t, x.want, lookupAll(s, &m, x.addrs))
			require.NoError(t, s.Flush())
			require.NoError(t, os.Remove(cacheFile(cache, m.BuildID)))
			s = New(WithDebugDirs(), WithDiskCache(cache))
			assert.Equal(t, x.want, lookupAll(s, &m, x.addrs), "rewritten")
			assert.False(t, loaded(s), "rewritten: from the index")
		})
	}
}

// FuzzUnitIndex feeds bytes to the unit index decoders: errors are fine,
// panics are not; ranges that decode encode to the same, and a block's
// lookups stay in bounds.
func FuzzUnitIndex(f *testing.F) {
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := f.TempDir()
		lib := buildLib(f, dir)
		m := fileModule(f, lib)
		cache := filepath.Join(dir, "cache")
		s := indexing(New(WithDebugDirs(), WithDiskCache(cache)))
		lookupAll(s, &m, funcAddrs(f, lib, 4))
		if s.Flush() == nil {
			ents, _ := os.ReadDir((&diskCache{dir: cache}).unitsDir(m.BuildID))
			for _, e := range ents {
				data, err := os.ReadFile(filepath.Join((&diskCache{dir: cache}).unitsDir(m.BuildID), e.Name()))
				if err != nil {
					continue
				}
				for _, magic := range []string{unitRangesMagic, unitBlockMagic} {
					if sf, err := unseal(data, magic); err == nil {
						f.Add(sf.payload)
						d := diskDecoder{b: sf.payload}
						d.uvarint()
						f.Add(d.b)
					}
				}
			}
		}
	}
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		if sf, err := unseal(binary.LittleEndian.AppendUint32(slices.Clip(data), crc32.ChecksumIEEE(data)), unitBlockMagic); err == nil {
			_ = seal(unitBlockMagic, sf)
		}
		if units, err := decodeRanges(data); err == nil {
			again, err := decodeRanges(encodeRanges(units))
			require.NoError(t, err)
			require.Equal(t, units, again)
			ix := &unitIndex{units: units}
			for _, r := range units[:min(len(units), 64)] {
				ix.unitFor(r.lo)
				ix.unitFor(r.hi)
			}
		}
		b, err := decodeUnitBlock(data)
		if err != nil {
			return
		}
		pcs := []uint64{0, 1, ^uint64(0)}
		for _, x := range b.bounds {
			pcs = append(pcs, x-1, x, x+1)
		}
		for _, c := range b.chunks {
			pcs = append(pcs, c.addr, c.addr+1, c.addr+64)
		}
		for _, pc := range pcs[:min(len(pcs), 256)] {
			b.frames(pc)
		}
	})
}
