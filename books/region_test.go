package books

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/cgo"
)

// runTagged runs testdata/tagged.c preloaded with TAGALLOC_DIR set and
// returns the region directory and the books the program printed.
func runTagged(t testing.TB, mode string) (string, map[string][5]uint64, *os.ProcessState) {
	t.Helper()
	books, want, ps, _ := runTaggedErr(t, mode)
	return books, want, ps
}

// buildTagged builds testdata/tagged.c in a test directory (dir) and
// returns a maker of commands that run it preloaded, with TAGALLOC_DIR
// set to books.
func buildTagged(t testing.TB) (dir string, tagged func(books string, args ...string) *exec.Cmd) {
	t.Helper()
	lib, err := cgo.Library()
	require.NoError(t, err)
	cc, err := cgo.Compiler()
	require.NoError(t, err)
	dir = t.TempDir()
	bin := filepath.Join(dir, "tagged")
	out, err := exec.Command(cc, "-O1", "-fno-builtin", "-o", bin, filepath.Join("testdata", "tagged.c")).CombinedOutput()
	require.NoError(t, err, "%s", out)
	return dir, func(books string, args ...string) *exec.Cmd {
		cmd := exec.Command(bin, args...)
		cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "TAGALLOC_DIR="+books)
		return cmd
	}
}

// runTaggedErr is runTagged, with what the program wrote to stderr.
func runTaggedErr(t testing.TB, mode string) (string, map[string][5]uint64, *os.ProcessState, string) {
	t.Helper()
	return runTaggedIn(t, mode, "")
}

// runTaggedIn is runTaggedErr with the region directory made in base
// ("": a test directory).
func runTaggedIn(t testing.TB, mode, base string) (string, map[string][5]uint64, *os.ProcessState, string) {
	t.Helper()
	dir, tagged := buildTagged(t)
	if base == "" {
		base = dir
	}
	books := filepath.Join(base, "books")
	require.NoError(t, os.Mkdir(books, 0o700))
	cmd := tagged(books, mode)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	_ = cmd.Run()
	want := map[string][5]uint64{}
	for _, l := range strings.Split(strings.TrimSpace(so.String()), "\n") {
		f := strings.Fields(l)
		require.Len(t, f, 6, "line %q", l)
		var v [5]uint64
		for i := range v {
			var err error
			v[i], err = strconv.ParseUint(f[i+1], 10, 64)
			require.NoError(t, err)
		}
		want[f[0]] = v
	}
	return books, want, cmd.ProcessState, se.String()
}

// books4 is what tagged.c printed of a tag's books, without its peak.
func books4(w [5]uint64) [4]uint64 { return [4]uint64{w[0], w[1], w[2], w[3]} }

// requireExactPeak checks that a tag's peak is exactly want.
func requireExactPeak(t *testing.T, want uint64, g TagTotals, name string) {
	t.Helper()
	require.NotZero(t, want, "tag %s: tagged.c computes its peak", name)
	require.True(t, g.PeakBounded, "tag %s: a version-5 region bounds its peak", name)
	require.Equal(t, [2]uint64{want, want}, [2]uint64{g.PeakLiveBytes, g.PeakUpperBytes}, "tag %s: peak (lower, upper)", name)
}

func tagMap(s *Snapshot) map[string]TagTotals {
	m := map[string]TagTotals{}
	for _, tt := range s.Tags {
		m[tt.Name] = tt
	}
	return m
}

func TestRegionMatchesTheProgramsBooks(t *testing.T) {
	for _, mode := range []string{"exit", "kill"} {
		t.Run(mode, func(t *testing.T) {
			books, want, ps := runTagged(t, mode)
			if mode == "kill" {
				ws := ps.Sys().(syscall.WaitStatus)
				require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the program was to die of SIGKILL: %v", ps)
			} else {
				require.Equal(t, 3, ps.ExitCode())
			}
			files, _ := filepath.Glob(filepath.Join(books, "*.tagalloc"))
			require.Len(t, files, 1)
			s, err := ReadFile(files[0])
			require.NoError(t, err)
			require.Equal(t, ps.Pid(), s.PID)
			require.Equal(t, mode == "exit", s.Exited)
			require.Contains(t, s.Command[0], "tagged")
			got := tagMap(s)
			require.Len(t, want, 3)
			for name, w := range want {
				g, ok := got[name]
				require.True(t, ok, "tag %s missing from the region", name)
				require.Equal(t, books4(w), [4]uint64{g.LiveBytes, g.LiveBlocks, g.AllocBytes, g.AllocBlocks}, "tag %s", name)
				// one thread held each tag: its peak is exact, to the
				// block, blips included, after exit and SIGKILL alike
				requireExactPeak(t, w[4], g, name)
			}
			require.Contains(t, got, "untagged")
		})
	}
}

func TestForkedChildHasItsOwnRegion(t *testing.T) {
	books, want, _ := runTagged(t, "fork")
	files, _ := filepath.Glob(filepath.Join(books, "*.tagalloc"))
	require.Len(t, files, 2, "parent and child each have a region")
	var parent, child *Snapshot
	for _, f := range files {
		s, err := ReadFile(f)
		require.NoError(t, err)
		if _, ok := tagMap(s)["child"]; ok {
			child = s
		} else {
			parent = s
		}
	}
	require.NotNil(t, parent)
	require.NotNil(t, child)
	require.Equal(t, parent.PID, child.PPID)
	c := tagMap(child)["child"]
	require.Equal(t, books4(want["child"]), [4]uint64{c.LiveBytes, c.LiveBlocks, c.AllocBytes, c.AllocBlocks})
	// The child inherited the parent's live blocks; the parent's books never
	// saw the child's allocations.
	require.NotContains(t, tagMap(parent), "child")
	a := tagMap(parent)["alpha"]
	require.Equal(t, books4(want["alpha"]), [4]uint64{a.LiveBytes, a.LiveBlocks, a.AllocBytes, a.AllocBlocks})
	require.Equal(t, a.LiveBytes, tagMap(child)["alpha"].LiveBytes)
	// Peaks: the parent's are exact. The child's figures begin with its
	// life: what it inherited counts as allocated at its birth, nothing as
	// freed, and its peak (exact, one thread) starts there.
	for _, name := range []string{"alpha", "beta", "blip"} {
		requireExactPeak(t, want[name][4], tagMap(parent)[name], name)
		p, c := tagMap(parent)[name], tagMap(child)[name]
		if p.LiveBlocks == 0 { // blip: the child never held one, so never counted it
			require.NotContains(t, tagMap(child), name)
			continue
		}
		require.Equal(t, [4]uint64{p.LiveBytes, p.LiveBlocks, p.LiveBytes, p.LiveBlocks},
			[4]uint64{c.LiveBytes, c.LiveBlocks, c.AllocBytes, c.AllocBlocks}, "the child's %s: live and allocated", name)
		require.True(t, c.PeakBounded, "tag %s", name)
		require.Equal(t, [2]uint64{p.LiveBytes, p.LiveBytes}, [2]uint64{c.PeakLiveBytes, c.PeakUpperBytes}, "the child's %s: peak (lower, upper)", name)
	}
	require.Less(t, tagMap(child)["alpha"].AllocBytes, a.AllocBytes, "alpha: the parent freed some before the fork")
	// A tag named last before the fork, its name and counters pages away
	// from the first ones': the child's copy has them.
	for _, s := range []*Snapshot{parent, child} {
		last, ok := tagMap(s)["t149"]
		require.True(t, ok, "tag t149 missing from pid %d", s.PID)
		require.Equal(t, books4(want["t149"]), [4]uint64{last.LiveBytes, last.LiveBlocks, last.AllocBytes, last.AllocBlocks}, "pid %d", s.PID)
	}
}

// A fork reads only the pages of its books file that hold data: on a
// memory filesystem, a page of a hole read through the mapping is made,
// and the books of a process that forked once held every page of its
// tables (668 KiB for 7 pages of data: the tables are sized for the most
// tags a program may have).
func TestForkReadsNoHolesOfTheBooks(t *testing.T) {
	var st syscall.Statfs_t
	if err := syscall.Statfs("/dev/shm", &st); err != nil || st.Type != 0x01021994 { // TMPFS_MAGIC
		t.Skip("no memory filesystem at /dev/shm")
	}
	base, err := os.MkdirTemp("/dev/shm", "tagalloc-test-")
	require.NoError(t, err)
	defer os.RemoveAll(base)
	books, _, _, _ := runTaggedIn(t, "fork", base)
	files, _ := filepath.Glob(filepath.Join(books, "*.tagalloc"))
	require.Len(t, files, 2, "parent and child")
	for _, f := range files {
		fi, err := os.Stat(f)
		require.NoError(t, err)
		allocated := fi.Sys().(*syscall.Stat_t).Blocks * 512
		b := make([]byte, 4<<20)
		fd, err := os.Open(f)
		require.NoError(t, err)
		n, _ := fd.ReadAt(b, 0)
		fd.Close()
		data := 0
		for off := 0; off+4096 <= n; off += 4096 {
			if !bytes.Equal(b[off:off+4096], make([]byte, 4096)) {
				data++
			}
		}
		require.Positive(t, data)
		// a few pages more: written, then cleared (a forked child's counters)
		require.LessOrEqual(t, allocated, int64(data+8)*4096, "%s: %d bytes of memory for %d pages of data", filepath.Base(f), allocated, data)
	}
}

// A child forked when its books file cannot be made (the directory is
// gone) keeps its books in private memory, says so, and counts right; the
// parent's file is untouched.
func TestForkedChildWithoutItsFile(t *testing.T) {
	books, want, ps, stderr := runTaggedErr(t, "fork-lost")
	require.Equal(t, 3, ps.ExitCode(), "%s", stderr)
	require.Contains(t, stderr, "fork: cannot make the books file of pid")
	require.Contains(t, stderr, "its books stay private")
	require.Contains(t, want, "child", "the child printed its own books")
	c := want["child"] // live bytes, live blocks, allocated bytes, allocated blocks
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{c[1], c[3]}, "the child's tag holds its block: %v", c)
	require.GreaterOrEqual(t, c[0], uint64(12345))
	last := want["t149"] // named by the parent: the private books are its copy
	require.Equal(t, [2]uint64{1, 1}, [2]uint64{last[1], last[3]}, "tag t149 in the child: %v", last)
	files, _ := filepath.Glob(filepath.Join(books+".gone", "*.tagalloc"))
	require.Len(t, files, 1, "the parent's file alone")
	s, err := ReadFile(files[0])
	require.NoError(t, err)
	require.NotContains(t, tagMap(s), "child", "the child did not write its parent's books")
	a := tagMap(s)["alpha"]
	require.Equal(t, books4(want["alpha"]), [4]uint64{a.LiveBytes, a.LiveBlocks, a.AllocBytes, a.AllocBlocks})
}

func TestBadRegions(t *testing.T) {
	books, _, _ := runTagged(t, "exit")
	files, _ := filepath.Glob(filepath.Join(books, "*.tagalloc"))
	good, err := os.ReadFile(files[0])
	require.NoError(t, err)
	used := int(le64(good[32:]))
	good = good[:used]
	_, err = Parse(good)
	require.NoError(t, err)
	for _, tc := range []struct {
		name string
		edit func(b []byte) []byte
		msg  string
	}{
		{"empty", func(b []byte) []byte { return nil }, "too short"},
		{"magic", func(b []byte) []byte { b[0] = 'X'; return b }, "magic"},
		{"version", func(b []byte) []byte { b[8] = 9; return b }, "layout version 9"},
		{"used-past-end", func(b []byte) []byte { put64(b[32:], uint64(len(b))+1); return b }, "in use"},
		{"truncated", func(b []byte) []byte { return b[:len(b)/2] }, ""},
		{"thread-outside", func(b []byte) []byte { put64(b[128:], le64(b[24:])+1<<40); return b }, "thread record"},
		{"thread-misaligned", func(b []byte) []byte { put64(b[128:], le64(b[128:])+3); return b }, "misaligned"},
		{"names-outside", func(b []byte) []byte { put64(b[96:], 1<<50); return b }, "tag names"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.edit(append([]byte(nil), good...))
			_, err := Parse(b)
			require.ErrorIs(t, err, ErrFormat)
			require.Contains(t, err.Error(), tc.msg)
		})
	}
}

func le64(b []byte) uint64 {
	var v uint64
	for i := 7; i >= 0; i-- {
		v = v<<8 | uint64(b[i])
	}
	return v
}

func put64(b []byte, v uint64) {
	for i := 0; i < 8; i++ {
		b[i] = byte(v >> (8 * i))
	}
}

// manyTagsRegion runs testdata/many.c (4096 tags over 4 threads) and
// returns its region's path.
func manyTagsRegion(tb testing.TB) string {
	lib, err := cgo.Library()
	require.NoError(tb, err)
	cc, err := cgo.Compiler()
	require.NoError(tb, err)
	dir := tb.TempDir()
	bin := filepath.Join(dir, "many")
	out, err := exec.Command(cc, "-O1", "-fno-builtin", "-pthread", "-o", bin, filepath.Join("testdata", "many.c")).CombinedOutput()
	require.NoError(tb, err, "%s", out)
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "TAGALLOC_DIR="+dir)
	require.NoError(tb, cmd.Run())
	files, _ := filepath.Glob(filepath.Join(dir, "*.tagalloc"))
	require.Len(tb, files, 1)
	return files[0]
}

func TestManyTags(t *testing.T) {
	s, err := ReadFile(manyTagsRegion(t))
	require.NoError(t, err)
	m := tagMap(s)
	require.Contains(t, m, "tag-0000")
	require.Len(t, s.Tags, 4096+2, "4096 tags, untagged and overflow")
	// tags past the 4096th are charged to overflow: 4 tags, 3 blocks each
	require.Equal(t, uint64(12), m["overflow"].LiveBlocks)
	require.Equal(t, uint64(3), m["tag-1234"].LiveBlocks)
}

// BenchmarkReadManyTags: one refresh of top/snapshot on a process with
// 4096 tags (the target is <= 50 ms).
func BenchmarkReadManyTags(b *testing.B) {
	path := manyTagsRegion(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := ReadFile(path); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReadSmallRegions: 40 small processes' books, read as
// tagalloc run reads each process's when the run ends (ReadDir); per
// region.
func BenchmarkReadSmallRegions(b *testing.B) {
	dir, tagged := buildTagged(b)
	books := filepath.Join(dir, "books")
	require.NoError(b, os.Mkdir(books, 0o700))
	const n = 40
	for i := 0; i < n; i++ {
		_ = tagged(books, "exit").Run() // exits 3
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if s, err := ReadDir(books); err != nil || len(s) != n {
			b.Fatal(len(s), err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/region")
}

// The region of a process that has ended is read, kept and its file
// removed (Kept.Sweep); ReadAll gives it as ReadDir gave it. A region
// some process still has mapped for writing (as its process does) stays.
func TestKeptTakesEndedProcesses(t *testing.T) {
	books, want, ps := runTagged(t, "exit")
	files, _ := filepath.Glob(filepath.Join(books, "*.tagalloc"))
	require.Len(t, files, 1)
	before, err := ReadDir(books)
	require.NoError(t, err)

	// mapped for writing: in use
	f, err := os.OpenFile(files[0], os.O_RDWR, 0)
	require.NoError(t, err)
	m, err := syscall.Mmap(int(f.Fd()), 0, 4096, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	require.NoError(t, err)
	f.Close()
	k := NewKept(books)
	require.True(t, InUse(files[0]))
	require.Zero(t, k.Sweep(), "a mapped region is in use")
	_, err = os.Stat(files[0])
	require.NoError(t, err)
	require.NoError(t, syscall.Munmap(m))
	require.False(t, InUse(files[0]), "no process has it any more")

	require.Equal(t, 1, k.Sweep())
	require.False(t, InUse(files[0]), "gone")
	_, err = os.Stat(files[0])
	require.True(t, os.IsNotExist(err), "the ended process's file is removed: %v", err)
	left, _ := filepath.Glob(filepath.Join(books, "*"))
	require.Empty(t, left)
	all, err := k.ReadAll()
	require.NoError(t, err)
	require.Equal(t, before, all)
	require.Equal(t, ps.Pid(), all[0].PID)
	a := tagMap(all[0])["alpha"]
	require.Equal(t, books4(want["alpha"]), [4]uint64{a.LiveBytes, a.LiveBlocks, a.AllocBytes, a.AllocBlocks})
	require.Zero(t, k.Sweep(), "nothing left")
}

// ReadAll names each region it could not read as an error of its own (a
// run prints one line for each), the kept ones' and the directory's alike.
func TestKeptReadAllNamesEachBadRegion(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"1.tagalloc", "2.tagalloc"} { // pid 1 lives: never taken
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte("not a region"), 0o600))
	}
	snaps, err := NewKept(dir).ReadAll()
	require.Empty(t, snaps)
	require.Error(t, err)
	j, ok := err.(interface{ Unwrap() []error })
	require.True(t, ok, "%v", err)
	require.Len(t, j.Unwrap(), 2, "one error a region: %v", err)
}

func TestRegionPID(t *testing.T) {
	for name, want := range map[string]int{
		"123.tagalloc": 123, "123.go.tagalloc": 123, "123.events": 0, "x.tagalloc": 0,
		"0.tagalloc": 0, "-4.tagalloc": 0, ".tagalloc": 0, "123.tagalloc.tmp": 0, "tagalloc": 0,
	} {
		got, ok := RegionPID(name)
		require.Equal(t, want != 0, ok, name)
		require.Equal(t, want, got, name)
	}
}
