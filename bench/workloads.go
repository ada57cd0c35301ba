// Workloads: the registry of what is measured, and the build of the C
// workloads and the glibc shim (embedded sources → cached binaries).

package bench

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"

	"github.com/tagalloc/tagalloc/cgo"
)

// sources holds the C workloads, the scripts the real programs run, the
// glibc shim, and the program that measures a run (measure/measure.c).
//
//go:embed workloads preload measure
var sources embed.FS

// Kind says how a workload is run.
type Kind int

const (
	// KindC is a C program from workloads/, built by Build.
	KindC Kind = iota
	// KindProgram is an installed program run with a script from workloads/.
	KindProgram
	// KindRedis is redis-server measured with redis-benchmark (see redis.go).
	KindRedis
)

// Workload is one thing the harness measures.
type Workload struct {
	Name string
	Doc  string
	Kind Kind
	// Program: for KindC the C file's base name in workloads/ (without
	// .c); for KindProgram the program to run (an absolute path tried
	// first, then its base name on $PATH).
	Program string
	// Args and QuickArgs are the arguments of a full and of a quick run
	// (unit tests, go test -bench). "$SRC/" is replaced by the directory
	// holding the embedded scripts.
	Args, QuickArgs []string
	// Stdin names a file (with "$SRC/") fed to the program's input.
	Stdin string
	// Env is added to the environment of the measured process.
	Env []string
	// TimeMetric, when set, names the "metric" line whose value (seconds)
	// is the workload's time instead of the wall time of the process.
	TimeMetric string
	// TimeNote says what the time is when it is not the process's wall
	// time; the report prints it under the time table.
	TimeNote string
	// GlibcShim makes the glibc run preload the shim: the program links
	// another allocator itself, and without the shim "glibc" would not be.
	GlibcShim bool
}

// Workloads returns every workload, in report order.
func Workloads() []Workload {
	return []Workload{
		{Name: "small_random", Kind: KindC, Program: "small_random",
			Doc:  "random sizes 8..1024 B replacing random slots of a 20k working set, 1 thread",
			Args: []string{"1"}, QuickArgs: []string{"1", "1000000", "5000"}},
		{Name: "small_random_mt", Kind: KindC, Program: "small_random",
			Doc:  "small_random on 2 threads, each with its own working set",
			Args: []string{"2"}, QuickArgs: []string{"2", "1000000", "5000"}},
		{Name: "cold_free", Kind: KindC, Program: "small_random",
			Doc:  "small_random over 200k slots (about 65 MiB, past the caches), each block freed without being read first: what free and malloc read of a block is a cache miss",
			Args: []string{"1", "5000000", "200000", "1", "0"}, QuickArgs: []string{"1", "200000", "20000", "1", "0"}},
		{Name: "prodcons", Kind: KindC, Program: "prodcons",
			Doc:  "producer mallocs, consumer frees (cross-thread frees through an SPSC ring)",
			Args: []string{"1"}, QuickArgs: []string{"1", "300000"}},
		{Name: "realloc_chain", Kind: KindC, Program: "realloc_chain",
			Doc:  "8 interleaved buffers grown 1..64 B at a time by realloc to 1..4 MiB",
			Args: []string{"8"}, QuickArgs: []string{"8", "1", "1024"}},
		{Name: "large", Kind: KindC, Program: "large",
			Doc:  "blocks of 64 KiB..64 MiB, 4 live, every page touched",
			Args: []string{}, QuickArgs: []string{"40"}},
		{Name: "large_loop", Kind: KindC, Program: "large_loop",
			Doc:  "64 slots of 64 KiB..4 MiB blocks replacing each other, first and last byte touched (pages from and to the OS)",
			Args: []string{"20000", "64", "64", "4096", "0"}, QuickArgs: []string{"500", "64", "64", "4096", "0"}},
		{Name: "large_pair", Kind: KindC, Program: "large_loop",
			Doc:  "2 slots of 5..25 MiB blocks replacing each other, every page touched (a block freed, another as big asked for)",
			Args: []string{"300", "2", "5120", "25600", "1"}, QuickArgs: []string{"20", "2", "5120", "25600", "1"}},
		{Name: "xmalloc", Kind: KindC, Program: "xmalloc",
			Doc:  "2 threads in a ring: each fills batches of 128 blocks of 16..256 B that the next thread frees (every free cross-thread)",
			Args: []string{"2", "40000"}, QuickArgs: []string{"2", "2000"}},
		{Name: "batches", Kind: KindC, Program: "batches",
			Doc:  "2 producer threads queue batches of 4,096 blocks of 64 B (100 waiting at most), 2 consumer threads that never allocate free them (xmalloc-test's pattern, 3,000 batches each)",
			Args: []string{"2", "3000", "64"}, QuickArgs: []string{"2", "20", "64"}},
		{Name: "batches_mixed", Kind: KindC, Program: "batches",
			Doc:  "batches with blocks of 17 sizes from 8 B to 2 KiB, 1,000 batches a producer",
			Args: []string{"2", "1000", "0"}, QuickArgs: []string{"2", "10", "0"}},
		{Name: "mstress", Kind: KindC, Program: "mstress",
			Doc:  "2 threads replace random slots of 2,000 mixed-lifetime blocks (8 B..64 KiB), hand 1 in 10 to a shared array freed by the other thread, free half every 20k steps",
			Args: []string{"2", "2000000"}, QuickArgs: []string{"2", "50000"}},
		{Name: "simple", Kind: KindC, Program: "simple",
			Doc:  "glibc's bench-malloc-simple: batches of 25..1,600 blocks of 16 B..1 KiB malloc'd then freed in order, on the main thread and then on a second one",
			Args: []string{"2000"}, QuickArgs: []string{"20"}},
		{Name: "churn", Kind: KindC, Program: "churn",
			Doc:  "mimalloc's stress test (mimalloc-bench's mstress): 100 rounds of 2 threads that start, make zeroed blocks of 8 B..10 MiB of mixed lifetimes, swap some through 1,000 shared slots and exit",
			Args: []string{"2", "50", "100"}, QuickArgs: []string{"2", "10", "5"}},
		{Name: "rptest", Kind: KindC, Program: "rptest",
			Doc:  "2 threads replace random slots of 4,096 blocks of 16 B..16 KiB, sleeping 2 ms every 5,000 operations (purge timers run between bursts)",
			Args: []string{"2", "1000000"}, QuickArgs: []string{"2", "20000"}},
		{Name: "larson", Kind: KindC, Program: "larson",
			Doc:  "larson server simulation: 2 threads per epoch, blocks freed by later threads",
			Args: []string{"2"}, QuickArgs: []string{"2", "10", "50000"}},
		{Name: "cache_scratch", Kind: KindC, Program: "cache_scratch",
			Doc:  "passive false sharing: 2 threads write small blocks handed out back to back",
			Args: []string{"2"}, QuickArgs: []string{"2", "500"}},
		{Name: "pool_idle", Kind: KindC, Program: "pool_idle",
			Doc:  "8 workers take tasks of 2,000 blocks of 16 B..2 KiB, then wait on a condition variable while the main thread works on 16 MiB of its own; 5 rounds",
			Args: []string{"8", "5"}, QuickArgs: []string{"2", "1"}},
		{Name: "pool_idle_sem", Kind: KindC, Program: "pool_idle",
			Doc:  "pool_idle with the workers waiting on a semaphore (a post a task), as CPython's queues and some pools' workers do",
			Args: []string{"8", "5", "1"}, QuickArgs: []string{"2", "1", "1"}},
		{Name: "spawn", Kind: KindC, Program: "spawn",
			Doc:  "a 20k-block heap, then 200 children one at a time: half fork and exec /bin/true, half allocate and exit",
			Args: []string{"200"}, QuickArgs: []string{"20", "2000"}},
		{Name: "rss_after_free", Kind: KindC, Program: "rss_after_free",
			Doc:  "1 GiB of mixed sizes touched, freed in shuffled order; VmRSS 1 s later (time: alloc/free phase)",
			Args: []string{}, QuickArgs: []string{"64", "1", "100"},
			TimeMetric: "work_s", TimeNote: "the allocate/touch/free phase, not the idle second after it"},
		{Name: "rss_after_remote_free", Kind: KindC, Program: "rss_after_free",
			Doc:  "rss_after_free with the blocks freed by another thread while the thread that made them sleeps in nanosleep (a producer idle after its consumer freed all it made)",
			Args: []string{"1024", "1", "1000", "1"}, QuickArgs: []string{"64", "1", "100", "1"},
			TimeMetric: "work_s", TimeNote: "the allocate/touch/free phase, not the idle second after it"},
		{Name: "many_tags", Kind: KindC, Program: "many_tags",
			Doc:  "32 threads each set 256 tags in turn, 5 blocks of 16..2048 B under each; all live at a barrier, half freed by another thread; 500 rounds",
			Args: []string{"32"}, QuickArgs: []string{"4", "16", "1", "1"}},
		{Name: "python", Kind: KindProgram, Program: "/usr/bin/python3",
			Doc:  "python3: build records, JSON round trips, sort, index (default pymalloc)",
			Args: []string{"$SRC/python_bench.py"}, QuickArgs: []string{"$SRC/python_bench.py", "1"},
			Env: []string{"PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1"}},
		{Name: "python_malloc", Kind: KindProgram, Program: "/usr/bin/python3",
			Doc:  "the python workload with PYTHONMALLOC=malloc: every object from malloc",
			Args: []string{"$SRC/python_bench.py", "2"}, QuickArgs: []string{"$SRC/python_bench.py", "1"},
			Env: []string{"PYTHONHASHSEED=0", "PYTHONDONTWRITEBYTECODE=1", "PYTHONMALLOC=malloc"}},
		{Name: "sqlite", Kind: KindProgram, Program: "/usr/bin/sqlite3",
			Doc:       "sqlite3 :memory:: 200k rows, 2 indexes, aggregates, join, update, delete",
			Args:      []string{"-cmd", ".parameter set @rows 200000", ":memory:"},
			QuickArgs: []string{"-cmd", ".parameter set @rows 20000", ":memory:"},
			Stdin:     "$SRC/sqlite_bench.sql"},
		{Name: "redis", Kind: KindRedis, Program: "/usr/bin/redis-server",
			Doc:       "redis-server on loopback; time = redis-benchmark -P 16 set,get,lpush,lpop; RSS = server's",
			Args:      []string{"300000"},
			QuickArgs: []string{"20000"},
			TimeNote:  "redis-benchmark's wall time (server CPU time is the metric server_cpu_s)",
			GlibcShim: true},
	}
}

// Select returns the workloads whose names match match (nil: all).
func Select(all []Workload, match func(string) bool) []Workload {
	var out []Workload
	for _, w := range all {
		if match == nil || match(w.Name) {
			out = append(out, w)
		}
	}
	return out
}

// CFlags build the C workloads; Build adds -Werror when asked to be strict.
var CFlags = []string{"-O2", "-pthread", "-Wall", "-Wextra", "-std=gnu11"}

// ShimFlags build the glibc shim.
var ShimFlags = []string{"-O2", "-fPIC", "-shared", "-fvisibility=hidden", "-Wall", "-Wextra"}

// Built is a built set of workloads.
type Built struct {
	Dir     string // root: bin/, lib/, src/
	Shim    string // path of the glibc shim
	Measure string // path of measure (measure/measure.c): runs a workload, reports its rusage
}

// Bin is the path of the built C workload name.
func (b *Built) Bin(name string) string { return filepath.Join(b.Dir, "bin", name) }

// Src is the directory holding the embedded scripts.
func (b *Built) Src() string { return filepath.Join(b.Dir, "src", "workloads") }

// BuildOptions change Build.
type BuildOptions struct {
	Dir    string // build here (default: a directory per source hash in the cache)
	Strict bool   // add -Werror
}

// Build writes the embedded sources and compiles every C workload and the
// shim, or returns an earlier build of the same sources, compiler and flags.
func Build(o BuildOptions) (*Built, error) {
	cc, err := cgo.Compiler()
	if err != nil {
		return nil, err
	}
	cflags := append([]string(nil), CFlags...)
	if o.Strict {
		cflags = append(cflags, "-Werror")
	}
	if o.Dir != "" {
		return buildIn(o.Dir, cc, cflags, o.Strict)
	}
	key, err := cgo.HashFS(sources, cc, append(append([]string(nil), cflags...), ShimFlags...))
	if err != nil {
		return nil, err
	}
	cache, err := cgo.CacheDir()
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cache, "bench-"+key)
	if _, err := os.Stat(filepath.Join(dir, "built")); err == nil {
		return built(dir), nil
	}
	// Build beside the final place and rename, so a concurrent or
	// interrupted build never leaves a half-built directory behind.
	if err := os.MkdirAll(cache, 0o755); err != nil {
		return nil, fmt.Errorf("creating cache %s: %w", cache, err)
	}
	tmp, err := os.MkdirTemp(cache, "bench-build-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	if _, err := buildIn(tmp, cc, cflags, o.Strict); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "built")); serr != nil {
			return nil, err
		}
	}
	return built(dir), nil
}

func built(dir string) *Built {
	return &Built{Dir: dir, Shim: filepath.Join(dir, "lib", "glibc_shim.so"), Measure: filepath.Join(dir, "lib", "measure")}
}

// buildIn writes the sources into dir and compiles everything there.
func buildIn(dir, cc string, cflags []string, strict bool) (*Built, error) {
	b := built(dir)
	for _, d := range []string{"bin", "lib", "src"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return nil, err
		}
	}
	if err := cgo.WriteFS(sources, filepath.Join(dir, "src")); err != nil {
		return nil, err
	}
	cfiles, err := fs.Glob(sources, "workloads/*.c")
	if err != nil {
		return nil, err
	}
	srcDir := b.Src()
	for _, f := range cfiles {
		name := strings.TrimSuffix(path.Base(f), ".c")
		args := append(append([]string(nil), cflags...), "-o", b.Bin(name), filepath.Join(srcDir, name+".c"))
		if err := compile(cc, args); err != nil {
			return nil, fmt.Errorf("building workload %s: %w", name, err)
		}
	}
	sflags := append([]string(nil), ShimFlags...)
	if strict {
		sflags = append(sflags, "-Werror")
	}
	args := append(sflags, "-o", b.Shim, filepath.Join(dir, "src", "preload", "glibc_shim.c"), "-ldl")
	if err := compile(cc, args); err != nil {
		return nil, fmt.Errorf("building the glibc shim: %w", err)
	}
	margs := append(append([]string(nil), cflags...), "-o", b.Measure, filepath.Join(dir, "src", "measure", "measure.c"))
	if err := compile(cc, margs); err != nil {
		return nil, fmt.Errorf("building measure: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "built"), nil, 0o644); err != nil {
		return nil, err
	}
	return b, nil
}

func compile(cc string, args []string) error {
	out, err := exec.Command(cc, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %v\n%s", cc, strings.Join(args, " "), err, out)
	}
	return nil
}

// findProgram resolves a KindProgram's program: the path given if it is
// there, else its base name on $PATH.
func findProgram(p string) (string, error) {
	if filepath.IsAbs(p) {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
			return p, nil
		}
	}
	return exec.LookPath(filepath.Base(p))
}

func expand(s string, b *Built) string { return strings.ReplaceAll(s, "$SRC/", b.Src()+"/") }
