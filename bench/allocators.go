// Allocators: which malloc each run gets, and where its library is.

package bench

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/tagalloc/tagalloc/cgo"
)

// Allocator is one malloc implementation under test.
type Allocator struct {
	Name string
	// Preload is the library put in LD_PRELOAD; "" for glibc, which is
	// what a dynamically linked program gets without one.
	Preload string
	// Launch, if set, is a command the program runs under instead (its
	// arguments, then the program's): tagalloc run (launcher.go). Output
	// is a file it writes, removed after each run; Dir, if set, the
	// working directory it runs in (where the default run saves its
	// report, removed after each run too).
	Launch []string
	Output string
	Dir    string
}

// Glibc is the baseline: no preload.
const Glibc = "glibc"

// DefaultAllocators is the default -alloc list, in table order.
var DefaultAllocators = []string{Glibc, "jemalloc", "mimalloc", "tcmalloc", "tagalloc"}

// libDirs are searched for the system allocators (Debian multiarch first).
var libDirs = []string{
	"/usr/lib/x86_64-linux-gnu", "/usr/lib/aarch64-linux-gnu",
	"/usr/lib64", "/usr/lib", "/usr/local/lib",
}

// knownLibs are the shared objects of the allocators Debian packages.
var knownLibs = map[string][]string{
	"jemalloc": {"libjemalloc.so.2"},
	"mimalloc": {"libmimalloc.so.2", "libmimalloc.so"},
	"tcmalloc": {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"},
}

// TagallocLibrary finds tagalloc's library; a variable so tests can stub it.
var TagallocLibrary = cgo.Library

// NoCounts is tagalloc built without its books' per-tag counts in the
// fast paths (-DTA_MEASURE_NO_COUNTS): a measurement-only build, so the
// table can show what exact per-tag books cost (tagalloc/tagalloc-nocounts).
const NoCounts = "tagalloc-nocounts"

// NoCountsLibrary builds it; a variable so tests can stub it.
var NoCountsLibrary = func() (string, error) {
	return cgo.Build(cgo.BuildOptions{Extra: []string{"-DTA_MEASURE_NO_COUNTS"}})
}

// FindAllocators resolves names (each "name" or "name=/path/lib.so") to
// allocators. One that cannot be found is left out, with a note saying why;
// an unknown name without a path is an error.
func FindAllocators(names []string) (found []Allocator, notes []string, err error) {
	seen := map[string]bool{}
	for _, spec := range names {
		spec = strings.TrimSpace(spec)
		if spec == "" {
			continue
		}
		name, path, hasPath := strings.Cut(spec, "=")
		if seen[name] {
			return nil, nil, fmt.Errorf("allocator %q given twice", name)
		}
		seen[name] = true
		if hasPath {
			abs, err := filepath.Abs(path)
			if err == nil {
				_, err = os.Stat(abs)
			}
			if err != nil {
				notes = append(notes, fmt.Sprintf("%s: skipped: %v", name, err))
				continue
			}
			found = append(found, Allocator{Name: name, Preload: abs})
			continue
		}
		switch name {
		case Glibc:
			found = append(found, Allocator{Name: Glibc})
		case LaunchRun, LaunchSampled, LaunchDefault:
			a, err := launched(name)
			if err != nil {
				notes = append(notes, name+": skipped: "+briefError(err.Error()))
				continue
			}
			found = append(found, a)
		case "tagalloc", NoCounts:
			build := TagallocLibrary
			if name == NoCounts {
				build = NoCountsLibrary
			}
			lib, err := build()
			if err != nil {
				notes = append(notes, name+": skipped, its library does not build yet: "+briefError(err.Error()))
				continue
			}
			found = append(found, Allocator{Name: name, Preload: lib})
		default:
			files, ok := knownLibs[name]
			if !ok {
				return nil, nil, fmt.Errorf("unknown allocator %q (known: %s; or give name=/path/to/lib.so)",
					name, strings.Join(slices.Concat(DefaultAllocators, []string{NoCounts}, Launched), ", "))
			}
			if lib := findLib(files); lib != "" {
				found = append(found, Allocator{Name: name, Preload: lib})
			} else {
				notes = append(notes, fmt.Sprintf("%s: skipped, %s not found in %s (apt-get install lib%s*)",
					name, files[0], strings.Join(libDirs, ", "), name))
			}
		}
	}
	return found, notes, nil
}

func findLib(files []string) string {
	for _, d := range libDirs {
		for _, f := range files {
			p := filepath.Join(d, f)
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	return ""
}

// briefError is the first line of a (compiler) error message, plus its
// first "error:" line, if any, which usually says what is wrong.
func briefError(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	for _, l := range lines[1:] {
		if strings.Contains(l, "error:") {
			return lines[0] + ": " + strings.TrimSpace(l)
		}
	}
	return lines[0]
}

// environ returns env without LD_PRELOAD, then with preload (if any) and
// extra added.
func environ(env []string, preload string, extra []string) []string {
	out := make([]string, 0, len(env)+len(extra)+1)
	for _, kv := range env {
		if !strings.HasPrefix(kv, "LD_PRELOAD=") {
			out = append(out, kv)
		}
	}
	out = append(out, extra...)
	if preload != "" {
		out = append(out, "LD_PRELOAD="+preload)
	}
	return out
}
