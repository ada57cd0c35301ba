package cgo

import (
	"bytes"
	"debug/elf"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/sizeclass"
)

// The C test programs (testdata/*_test.c) are built two ways: plain, and run
// with the library preloaded; and linked with the allocator core built under
// the ta_test_ prefix at debug level 2 (and under the thread sanitizer).

var testCFlags = []string{"-std=gnu11", "-O1", "-g", "-Wall", "-Wextra", "-Werror",
	"-Wno-alloc-size-larger-than", "-Wno-use-after-free", "-pthread",
	"-fno-builtin"} // so the compiler cannot elide a malloc/free pair under test

// preloadLib builds the library with warnings fatal, once per test binary.
// strictBuilds caches the -Werror builds of the library the tests use, by
// their extra flags (none, sampling, checking), each built once.
var strictBuilds sync.Map // string -> func() (string, error)

// strictLib builds (once) the library with extra flags, or fails t.
func strictLib(t *testing.T, what string, extra ...string) string {
	t.Helper()
	f, _ := strictBuilds.LoadOrStore(strings.Join(extra, " "), sync.OnceValues(func() (string, error) {
		return Build(BuildOptions{Strict: true, Extra: extra})
	}))
	p, err := f.(func() (string, error))()
	require.NoError(t, err, "building the %s library", what)
	return p
}

func lib(t *testing.T) string { return strictLib(t, "preload") }

// buildC compiles a test program. Variants: "plain" (for LD_PRELOAD),
// "core" (linked with the prefixed core, TA_DEBUG=2), "tsan" (core under
// -fsanitize=thread).
func buildC(t *testing.T, name, variant string) string {
	t.Helper()
	cc, err := Compiler()
	require.NoError(t, err)
	dir := t.TempDir()
	out := filepath.Join(dir, name+"-"+variant)
	args := append([]string(nil), testCFlags...)
	src := filepath.Join("testdata", name+".c")
	switch variant {
	case "plain":
		args = append(args, "-o", out, src, "-ldl")
	case "core", "tsan":
		args = append(args, "-DTA_TEST_PREFIX", "-DTA_PREFIX=ta_test_", "-DTA_DEBUG=2", "-D_GNU_SOURCE",
			"-Iinclude", "-o", out, src, filepath.Join("src", "static.c"), "-ldl")
		if variant == "tsan" {
			args = append(args, "-fsanitize=thread")
		}
	default:
		t.Fatalf("unknown variant %q", variant)
	}
	cmd := exec.Command(cc, args...)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("compiling %s (%s): %v\n%s", name, variant, err, b)
	}
	return out
}

type result struct {
	stdout, stderr string
	err            error
}

func runProg(t *testing.T, timeout time.Duration, env []string, prog string, args ...string) result {
	t.Helper()
	cmd := exec.Command(prog, args...)
	cmd.Env = append(os.Environ(), env...)
	var so, se bytes.Buffer
	cmd.Stdout, cmd.Stderr = &so, &se
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return result{so.String(), se.String(), err}
	case <-time.After(timeout):
		_ = cmd.Process.Kill()
		<-done
		return result{so.String(), se.String(), fmt.Errorf("hung: killed after %v", timeout)}
	}
}

func requirePassed(t *testing.T, what string, r result) {
	t.Helper()
	if r.err != nil {
		t.Fatalf("%s failed: %v\nstdout:\n%s\nstderr:\n%s", what, r.err, r.stdout, r.stderr)
	}
	require.Contains(t, r.stdout, " passed, 0 failed", "%s: no passing summary\n%s", what, r.stdout)
}

func TestConformance(t *testing.T) {
	t.Parallel()
	t.Run("preload", func(t *testing.T) {
		t.Parallel()
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, buildC(t, "api_test", "plain"))
		requirePassed(t, "api_test under LD_PRELOAD", r)
	})
	t.Run("core-debug", func(t *testing.T) {
		t.Parallel()
		r := runProg(t, 2*time.Minute, nil, buildC(t, "api_test", "core"))
		requirePassed(t, "api_test linked with the debug core", r)
	})
	// Its sizes of 32 MiB and more as huge blocks (their own mappings, the
	// cache, mremap), not the arena's large spans they are by default.
	t.Run("huge-from-32M", func(t *testing.T) {
		t.Parallel()
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_HUGE_THRESHOLD=32M"}, buildC(t, "api_test", "plain"))
		requirePassed(t, "api_test under LD_PRELOAD, huge from 32 MiB", r)
	})
	// The suite must be able to fail: under glibc the tagalloc-specific
	// checks do.
	t.Run("detects-other-allocator", func(t *testing.T) {
		t.Parallel()
		r := runProg(t, 2*time.Minute, nil, buildC(t, "api_test", "plain"))
		require.Error(t, r.err, "api_test passed without tagalloc: its checks cannot fail")
		require.Contains(t, r.stderr, "tagalloc is not the allocator")
	})
}

// Exact per-tag books (testdata/tags_test.c): preloaded, with TAGALLOC_TAG,
// against the debug core, and under the thread sanitizer.
func TestTags(t *testing.T) {
	t.Parallel()
	t.Run("preload", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, buildC(t, "tags_test", "plain"))
		requirePassed(t, "tags_test", r)
		require.Equal(t, 1, strings.Count(r.stderr, "blocks of new tags are charged to \"overflow\""), "the overflow warning is printed once:\n%s", r.stderr)
		require.Contains(t, r.stderr, "invalid tag name \"\"")
	})
	t.Run("TAGALLOC_TAG", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_TAG=whole-process", "TAGS_TEST_DEFAULT=whole-process"},
			buildC(t, "tags_test", "plain"))
		requirePassed(t, "tags_test with TAGALLOC_TAG", r)
	})
	t.Run("core-debug", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, nil, buildC(t, "tags_test", "core"))
		requirePassed(t, "tags_test (debug core)", r)
	})
	t.Run("TAGALLOC_REQUESTED", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_REQUESTED=1"}, buildC(t, "tags_test", "plain"))
		requirePassed(t, "tags_test with requested sizes", r)
		r = runProg(t, 2*time.Minute, []string{"TAGALLOC_REQUESTED=1"}, buildC(t, "tags_test", "core"))
		requirePassed(t, "tags_test with requested sizes (debug core)", r)
	})
	t.Run("tsan", func(t *testing.T) {
		if !tsanAvailable() {
			t.Skip("the thread sanitizer is not available")
		}
		r := runProg(t, 5*time.Minute, []string{"TSAN_OPTIONS=halt_on_error=1"}, buildC(t, "tags_test", "tsan"))
		requirePassed(t, "tags_test under the thread sanitizer", r)
	})
}

// Exact peaks (testdata/peaks_test.c): preloaded, against the debug core,
// and under the thread sanitizer.
func TestPeaks(t *testing.T) {
	t.Parallel()
	runEveryBuild(t, "peaks_test")
}

// runEveryBuild runs the C test program testdata/NAME.c preloaded, linked
// with the debug core, and under the thread sanitizer (where there is
// one), each as a subtest that must pass.
func runEveryBuild(t *testing.T, name string) {
	t.Run("preload", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, buildC(t, name, "plain"))
		requirePassed(t, name, r)
	})
	t.Run("core-debug", func(t *testing.T) {
		r := runProg(t, 2*time.Minute, nil, buildC(t, name, "core"))
		requirePassed(t, name+" (debug core)", r)
	})
	t.Run("tsan", func(t *testing.T) {
		if !tsanAvailable() {
			t.Skip("the thread sanitizer is not available")
		}
		r := runProg(t, 5*time.Minute, []string{"TSAN_OPTIONS=halt_on_error=1"}, buildC(t, name, "tsan"))
		requirePassed(t, name+" under the thread sanitizer", r)
	})
}

// Forked children keep exact books (testdata/forks_test.c): 1000 children
// forked while three threads allocate and free across threads, each
// checking its books against a walk of its heap.
func TestForkedChildrenExact(t *testing.T) {
	t.Parallel()
	forks := "1000"
	if testing.Short() {
		forks = "100"
	}
	r := runProg(t, 5*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, buildC(t, "forks_test", "plain"), forks, "3")
	requirePassed(t, "forks_test", r)
	require.Contains(t, r.stdout, forks+" forks, 0 children whose books differed")
}

func TestLifecycle(t *testing.T) {
	t.Parallel()
	r := runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, buildC(t, "lifecycle_test", "plain"))
	requirePassed(t, "lifecycle_test", r)
	t.Log(strings.TrimSpace(r.stdout))
	// without the purger: no thread of ours after a large free
	// (test_purger_thread alone: the RSS test waits for the purger)
	r = runProg(t, 2*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_PURGER=0", "LIFECYCLE_ONLY=purger"}, buildC(t, "lifecycle_test", "plain"))
	requirePassed(t, "lifecycle_test with TAGALLOC_PURGER=0", r)
	// the purger started by the free that empties an abandoned page (it
	// hung): a fresh process, the retain floor 0
	r = runProg(t, time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_RETAIN_MIN=0", "LIFECYCLE_ONLY=aband"}, buildC(t, "lifecycle_test", "plain"))
	requirePassed(t, "lifecycle_test with TAGALLOC_RETAIN_MIN=0", r)
}

// The OS-memory policy, seen with mincore (testdata/ospolicy_test.c): a
// dense program's new big blocks are populated, a sparse one's are not,
// and free memory is kept by what of it is resident.
func TestOSPolicy(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"plain", "core"} {
		// its huge-block tests use 32-64 MiB blocks: huge from 32 MiB (the
		// default, 256 MiB, would make them large spans)
		env := []string{"TAGALLOC_HUGE_THRESHOLD=32M"}
		if v == "plain" {
			env = append(env, "LD_PRELOAD="+lib(t))
		}
		prog := buildC(t, "ospolicy_test", v)
		for _, run := range []struct {
			name string
			env  []string
		}{
			{"", nil},
			// the heap that turns over, its rounds well inside the purge delay
			{" turnover", []string{"OSPOLICY_TURNOVER=1", "TAGALLOC_PURGE_DELAY_MS=10000"}},
			// the density from the first block measured, and page moves (their mappings joined again at purges), in a fresh process
			{" first", []string{"OSPOLICY_FIRST=1"}},
		} {
			r := runProg(t, 2*time.Minute, slices.Concat(env, run.env), prog)
			requirePassed(t, "ospolicy_test-"+v+run.name, r)
			t.Log(strings.TrimSpace(r.stdout))
		}
	}
}

func TestStress(t *testing.T) {
	t.Parallel()
	ops := "60000"
	if testing.Short() {
		ops = "10000"
	}
	t.Run("preload", func(t *testing.T) {
		prog := buildC(t, "stress_test", "plain")
		for _, seed := range []string{"1", "2", "3"} {
			r := runProg(t, 3*time.Minute, []string{"LD_PRELOAD=" + lib(t)}, prog, seed, "4", ops, "2", "2")
			requirePassed(t, "stress seed "+seed, r)
		}
	})
	t.Run("shared-books", func(t *testing.T) {
		// the books in a shared file, as under tagalloc run: a child forked
		// while other threads allocate gets its books from a copy made
		// before the fork (this hung or drifted when the child copied the
		// file the parent kept writing)
		prog := buildC(t, "stress_test", "plain")
		for _, seed := range []string{"1", "4", "6"} {
			r := runProg(t, 3*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_DIR=" + t.TempDir()}, prog, seed, "4", ops, "2", "2")
			requirePassed(t, "stress with shared books, seed "+seed, r)
		}
	})
	t.Run("stacks", func(t *testing.T) {
		// the sampling build, recording every block: threads, cross-thread
		// frees, reallocs and forks with the sampler and its ring in the way
		// (nobody drains the ring: it fills, and drops are counted)
		sl := strictLib(t, "sampling", SamplingFlags...)
		prog := buildC(t, "stress_test", "plain")
		for _, mode := range []string{"full", "sampled"} {
			dir := t.TempDir()
			// every stack is taken twice, by cached CFI rules and by libgcc,
			// and the run aborts if they differ
			r := runProg(t, 3*time.Minute, []string{"LD_PRELOAD=" + sl, "TAGALLOC_DIR=" + dir, "TAGALLOC_STACKS=" + mode, "TAGALLOC_SAMPLE_RATE=4K",
				"TAGALLOC_UNWIND=2"},
				prog, "9", "4", ops, "2", "2")
			requirePassed(t, "stress with stacks "+mode, r)
			ev, _ := filepath.Glob(filepath.Join(dir, "*.events"))
			require.NotEmpty(t, ev, "no events file")
		}
	})
	t.Run("core-debug", func(t *testing.T) {
		prog := buildC(t, "stress_test", "core")
		r := runProg(t, 3*time.Minute, nil, prog, "7", "3", "20000", "2", "1")
		requirePassed(t, "stress (debug core)", r)
	})
	t.Run("requested", func(t *testing.T) {
		// with requested sizes kept, the books' requested bytes must equal
		// the heap walk's too (tagalloc_check_books at the end)
		prog := buildC(t, "stress_test", "plain")
		r := runProg(t, 3*time.Minute, []string{"LD_PRELOAD=" + lib(t), "TAGALLOC_REQUESTED=1"}, prog, "5", "4", ops, "2", "2")
		requirePassed(t, "stress with TAGALLOC_REQUESTED=1", r)
	})
	t.Run("tsan", func(t *testing.T) {
		if !tsanAvailable() {
			if os.Getenv("CI") == "true" {
				t.Fatal("the thread sanitizer is not available (install libtsan2)")
			}
			t.Skip("the thread sanitizer is not available")
		}
		prog := buildC(t, "stress_test", "tsan")
		r := runProg(t, 5*time.Minute, []string{"TSAN_OPTIONS=halt_on_error=1 second_deadlock_stack=1"}, prog, "11", "3", "8000", "2", "0")
		requirePassed(t, "stress under the thread sanitizer", r)
		require.NotContains(t, r.stderr, "ThreadSanitizer")
	})
}

var tsanAvailable = sync.OnceValue(func() bool {
	cc, err := Compiler()
	if err != nil {
		return false
	}
	dir, err := os.MkdirTemp("", "tsan")
	if err != nil {
		return false
	}
	defer os.RemoveAll(dir)
	src := filepath.Join(dir, "t.c")
	_ = os.WriteFile(src, []byte("int main(void){return 0;}\n"), 0o644)
	out := filepath.Join(dir, "t")
	if exec.Command(cc, "-fsanitize=thread", "-o", out, src).Run() != nil {
		return false
	}
	return exec.Command(out).Run() == nil
})

// The library exports exactly the allocator's entry points (glibc's
// __libc_ names of them too) and tagalloc_*.
func TestExportedSymbols(t *testing.T) {
	f, err := elf.Open(lib(t))
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	var got, data []string
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_FUNC {
			got = append(got, s.Name)
		}
		if s.Section != elf.SHN_UNDEF && elf.ST_TYPE(s.Info) == elf.STT_OBJECT {
			data = append(data, s.Name)
		}
	}
	require.Equal(t, []string{"tagalloc_books"}, data)
	sort.Strings(got)
	want := []string{"ClearHeapBlockTagForThread", "SetHeapBlockTagForThread",
		"__libc_calloc", "__libc_free", "__libc_malloc", "__libc_memalign", "__libc_pvalloc", "__libc_realloc", "__libc_valloc", // glibc's other names (alloc.c)
		"aligned_alloc", "calloc", "epoll_pwait", "epoll_wait", "free", "malloc", "malloc_trim", "malloc_usable_size",
		"memalign", "posix_memalign", "pthread_cond_clockwait", "pthread_cond_timedwait", "pthread_cond_wait", "pthread_create", "pthread_join", "pvalloc", "realloc", "reallocarray",
		"sem_clockwait", "sem_timedwait", "sem_wait", // idle points (tags.c)
		"tagalloc_budget_stats", "tagalloc_check", "tagalloc_check_books", "tagalloc_collect_reports", "tagalloc_pop_tag",
		"tagalloc_purge", "tagalloc_push_tag", "tagalloc_register_reporter", "tagalloc_report", "tagalloc_report_block",
		"tagalloc_set_budget", "tagalloc_set_budget_callback", "tagalloc_set_tag", "tagalloc_tag_peak", "tagalloc_tag_stats", "tagalloc_unregister_reporter", "tagalloc_version", "valloc"}
	require.Equal(t, want, got)
}

func TestLibraryCache(t *testing.T) {
	t.Setenv("TAGALLOC_CACHE", t.TempDir())
	a, err := Library()
	require.NoError(t, err)
	require.True(t, filepath.IsAbs(a))
	b, err := Library()
	require.NoError(t, err)
	require.Equal(t, a, b, "same sources must hit the cache")
	c, err := Build(BuildOptions{Extra: []string{"-DTA_DEBUG=1"}})
	require.NoError(t, err)
	require.NotEqual(t, a, c, "other flags must build elsewhere")
	fi, err := os.Stat(a)
	require.NoError(t, err)
	require.Greater(t, fi.Size(), int64(10000))
}

func TestNoCompiler(t *testing.T) {
	t.Setenv("TAGALLOC_CACHE", t.TempDir())
	t.Setenv("CC", "")
	t.Setenv("PATH", t.TempDir())
	_, err := Library()
	require.True(t, errors.Is(err, ErrNoCompiler), "got %v", err)
	require.Contains(t, err.Error(), "install")

	// a CC that is not there is an error naming it, not a quiet fallback
	t.Setenv("CC", "no-such-cc-tagalloc")
	_, err = Compiler()
	require.True(t, errors.Is(err, ErrNoCompiler), "got %v", err)
	require.Contains(t, err.Error(), `CC="no-such-cc-tagalloc"`)
}

// The C mapping from size to class (sizeclasses.h) agrees with the Go one
// for every small size.
func TestClassesAgreeWithGo(t *testing.T) {
	t.Parallel()
	cc, err := Compiler()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "classes")
	b, err := exec.Command(cc, append(testCFlags, "-o", out, filepath.Join("testdata", "classes_test.c"))...).CombinedOutput()
	require.NoError(t, err, "%s", b)
	res, err := exec.Command(out).Output()
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(string(res)), "\n")
	require.Len(t, lines, sizeclass.MaxSmall+1)
	for size, l := range lines {
		if want := strconv.Itoa(sizeclass.ClassOf(uint32(size))); l != want {
			t.Fatalf("size %d: C class %s, Go class %s", size, l, want)
		}
	}
}

// Misuse is caught where it is cheap: the process aborts with a message
// naming the call and what is wrong, instead of corrupting the heap or
// the books.
func TestMisuse(t *testing.T) {
	t.Parallel()
	prog := buildC(t, "misuse_test", "plain")
	env := []string{"LD_PRELOAD=" + lib(t)}
	for mode, want := range map[string]string{
		"double-free":        "double free",
		"double-free-later":  "double free",
		"double-free-remote": "double free",
		// freed by another thread that holds the block to push later
		// (page.c, remote frees in batches), or has exited, then by the owner
		"double-free-held":      "double free",
		"double-free-held-exit": "double free",
		// a block of a page its thread emptied, waiting for the next
		// thread that needs a page of its class
		"double-free-emptied": "double free",
		"double-free-large":   "invalid pointer",
		"interior":            "invalid pointer",
		"interior-remote":     "invalid pointer",
		"foreign":             "invalid pointer",
		"realloc-freed":       "realloc(",
		// malloc_usable_size names an address that is no block
		"usable-interior":    "malloc_usable_size(",
		"usable-freed-large": "malloc_usable_size(",
		"usable-foreign":     "malloc_usable_size(",
	} {
		t.Run(mode, func(t *testing.T) {
			r := runProg(t, time.Minute, env, prog, mode)
			require.Error(t, r.err, "%s was not caught", mode)
			var ee *exec.ExitError
			require.ErrorAs(t, r.err, &ee)
			ws := ee.Sys().(syscall.WaitStatus)
			require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGABRT, "%s: %v", mode, r.err)
			require.Contains(t, r.stderr, "tagalloc: ")
			require.Contains(t, r.stderr, want)
			require.NotContains(t, r.stdout, "survived")
		})
	}
	r := runProg(t, time.Minute, env, prog, "data-matches")
	require.NoError(t, r.err, "%s", r.stderr)
	require.Contains(t, r.stdout, "survived")
}

// Out of memory, injected: NULL and ENOMEM, books exact, and the
// allocator works again once memory is back.
func TestOutOfMemory(t *testing.T) {
	t.Parallel()
	env := []string{"TAGALLOC_FAULT_EVERY=3", "TAGALLOC_FAULT_COUNT=2000"}
	r := runProg(t, 2*time.Minute, append(env, "LD_PRELOAD="+lib(t)), buildC(t, "oom_test", "plain"))
	requirePassed(t, "oom_test", r)
	t.Log(strings.TrimSpace(r.stdout))
	r = runProg(t, 2*time.Minute, env, buildC(t, "oom_test", "core"))
	requirePassed(t, "oom_test (debug core)", r)
}

// The sampler's exponential draws take -ln(u) from src/negln.h (no libm
// in the library): within 1e-9 of libm's over (0, 1) (relative; absolute
// where -ln u < 1).
func TestNegLn(t *testing.T) {
	t.Parallel()
	cc, err := Compiler()
	require.NoError(t, err)
	out := filepath.Join(t.TempDir(), "negln")
	b, err := exec.Command(cc, append(testCFlags, "-o", out, filepath.Join("testdata", "negln_test.c"), "-lm")...).CombinedOutput()
	require.NoError(t, err, "%s", b)
	res, err := exec.Command(out).CombinedOutput()
	require.NoError(t, err, "%s", res)
	t.Log(strings.TrimSpace(string(res)))
}

// The debug build checks the lock order of types.h's table on every
// acquisition (testdata/lockrank_test.c): in order passes, out of order
// aborts naming both locks.
func TestLockOrderChecked(t *testing.T) {
	t.Parallel()
	r := runProg(t, time.Minute, nil, buildC(t, "lockrank_test", "core"))
	requirePassed(t, "lockrank_test", r)
	require.Contains(t, r.stderr, "lock order: taking _ta_tags_lock while holding _ta_arena_lock")
	require.Contains(t, r.stderr, "lock order: taking _ta_huge_lock while holding _ta_huge_lock")
}
