// Benchmarks and the time budget: 10k distinct addresses of one module.

package symbolizer

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// benchFuncs is how many functions the generated benchmark program has
// (each with an inlined helper and a call): about 40 KiB of code.
const benchFuncs = 1000

// benchAddrs is how many distinct addresses a benchmark pass looks up.
const benchAddrs = 10000

// buildBenchProg writes and compiles a C program of benchFuncs functions
// in two compile units, returning its path.
func buildBenchProg(tb testing.TB) string {
	tb.Helper()
	needTool(tb, "gcc")
	dir := tb.TempDir()
	var srcs []string
	for unit := range 2 {
		var b strings.Builder
		b.WriteString("extern int sink;\n")
		for i := range benchFuncs / 2 {
			n := unit*benchFuncs/2 + i
			fmt.Fprintf(&b, "static inline __attribute__((always_inline)) int h%d(int x) {\n  return x * %d + (x >> 3);\n}\n", n, n|1)
			if i > 0 {
				fmt.Fprintf(&b, "int f%d(int x);\n", n-1)
			}
			fmt.Fprintf(&b, "__attribute__((noinline)) int f%d(int x) {\n  int y = h%d(x);\n", n, n)
			if i > 0 {
				fmt.Fprintf(&b, "  if (y & 1)\n    y += f%d(y >> 1);\n", n-1)
			}
			fmt.Fprintf(&b, "  sink += y;\n  return y ^ %d;\n}\n", n)
		}
		src := filepath.Join(dir, fmt.Sprintf("u%d.c", unit))
		require.NoError(tb, os.WriteFile(src, []byte(b.String()), 0o644))
		srcs = append(srcs, src)
	}
	main := filepath.Join(dir, "main.c")
	require.NoError(tb, os.WriteFile(main, []byte(fmt.Sprintf(
		"int sink;\nint f%d(int);\nint f%d(int);\nint main(int c, char **v) { return f%d(c) + f%d(c); }\n",
		benchFuncs/2-1, benchFuncs-1, benchFuncs/2-1, benchFuncs-1)), 0o644))
	out := filepath.Join(dir, "bench")
	run(tb, dir, "gcc", append([]string{"-g", "-O1", "-Wl,--build-id", "-o", out, main}, srcs...)...)
	return out
}

// funcAddrs returns n distinct addresses spread evenly over the sized
// functions of the .symtab (or .dynsym) of the file at path (ELF virtual
// addresses): where return addresses are, never in the padding between
// functions.
func funcAddrs(tb testing.TB, path string, n int) []uint64 {
	tb.Helper()
	f, err := elf.Open(path)
	require.NoError(tb, err)
	defer f.Close()
	syms, err := f.Symbols()
	if err != nil {
		syms, err = f.DynamicSymbols()
	}
	require.NoError(tb, err)
	seen := map[uint64]bool{}
	var ranges [][2]uint64
	total := uint64(0)
	for _, s := range syms {
		if elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Size == 0 || s.Value == 0 || seen[s.Value] {
			continue
		}
		seen[s.Value] = true
		ranges = append(ranges, [2]uint64{s.Value, s.Size})
		total += s.Size
	}
	require.GreaterOrEqual(tb, total, uint64(n))
	addrs := make([]uint64, 0, n)
	off, at := uint64(0), 0
	for i := range n {
		want := uint64(i) * total / uint64(n)
		for off+ranges[at][1] <= want {
			off += ranges[at][1]
			at++
		}
		addrs = append(addrs, ranges[at][0]+want-off)
	}
	return addrs
}

// pass symbolizes every address once, failing on an unnamed one.
func pass(tb testing.TB, s *Symbolizer, m *Module, addrs []uint64) {
	for _, a := range addrs {
		fr, err := s.Frames(m, a+1)
		if err != nil || fr[0].Origin == OriginNone {
			tb.Fatalf("%#x: %v %+v", a, err, fr)
		}
	}
}

// BenchmarkFrames symbolizes 10k distinct addresses of one module per
// operation: "warm" with the module loaded and its units indexed, "cold"
// from a new Symbolizer (load, symbol sort, unit index and line tables
// included); the same for libc through its debug file when libc6-dbg is
// installed. ns/addr is the figure to read.
func BenchmarkFrames(b *testing.B) {
	type target struct {
		name string
		path string
		opts []Option
	}
	targets := []target{{"generated", buildBenchProg(b), []Option{WithDebugDirs()}}}
	const libc = "/lib/x86_64-linux-gnu/libc.so.6"
	if id, err := BuildID(libc); err == nil {
		if _, err := os.Stat(filepath.Join(DefaultDebugDir, ".build-id", id[:2], id[2:]+".debug")); err == nil {
			targets = append(targets, target{"libc-dbg", libc, nil})
		}
	}
	for _, tg := range targets {
		m := fileModule(b, tg.path)
		addrs := funcAddrs(b, tg.path, benchAddrs)
		b.Run(tg.name+"/warm", func(b *testing.B) {
			s := New(tg.opts...)
			pass(b, s, &m, addrs)
			for b.Loop() {
				pass(b, s, &m, addrs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(addrs)), "ns/addr")
		})
		b.Run(tg.name+"/cold", func(b *testing.B) {
			for b.Loop() {
				pass(b, New(tg.opts...), &m, addrs)
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(len(addrs)), "ns/addr")
		})
	}
}

// TestBudget: 10k distinct addresses of one module within ~100 ms once the
// module is loaded (checked with slack for a loaded CI machine; the
// benchmark has the real figure).
func TestBudget(t *testing.T) {
	if testing.Short() || raceEnabled {
		t.Skip("timing: not under -short or the race detector")
	}
	path := buildBenchProg(t)
	m := fileModule(t, path)
	addrs := funcAddrs(t, path, benchAddrs)
	s := New(WithDebugDirs())
	start := time.Now()
	pass(t, s, &m, addrs)
	cold := time.Since(start)
	start = time.Now()
	pass(t, s, &m, addrs)
	warm := time.Since(start)
	t.Logf("10k addresses: first pass (load included) %v, again %v", cold, warm)
	require.Less(t, warm, 300*time.Millisecond)
	require.Less(t, cold, 2*time.Second)
}
