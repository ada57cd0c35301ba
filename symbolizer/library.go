// Roll-up: the library a stack is charged to ("libGLESv2_adreno.so holds
// 78 MiB live"): its first module outside the C runtime and the allocator.

package symbolizer

import (
	"fmt"
	"path"
)

// DefaultSkip is the set of modules a stack is rolled up past: the C and
// C++ runtimes, the dynamic loader, and tagalloc's own library. Patterns
// are path.Match patterns on base names.
var DefaultSkip = []string{
	"libc.so*", "libc-*.so",
	"ld-linux*", "ld-*.so*",
	"libstdc++.so*",
	"libgcc_s.so*",
	"libm.so*", "libm-*.so",
	"libpthread.so*", "libpthread-*.so",
	"libtagalloc.so*",
}

// Rollup names the library a stack is charged to.
type Rollup struct {
	skip []string
}

// NewRollup returns a Rollup that skips the modules whose base names
// match one of the path.Match patterns in skip (DefaultSkip, extended or
// replaced).
func NewRollup(skip ...string) (*Rollup, error) {
	for _, p := range skip {
		if _, err := path.Match(p, ""); err != nil {
			return nil, fmt.Errorf("symbolizer: bad skip pattern %q: %w", p, err)
		}
	}
	return &Rollup{skip: append([]string(nil), skip...)}, nil
}

var defaultRollup = &Rollup{skip: DefaultSkip}

// Library is Rollup.Library with DefaultSkip.
func Library(stack []string) string { return defaultRollup.Library(stack) }

// Skipped reports whether the module at path (or with that base name) is
// in the skip set.
func (r *Rollup) Skipped(p string) bool {
	base := baseName(p)
	for _, pat := range r.skip {
		if ok, _ := path.Match(pat, base); ok {
			return true
		}
	}
	return false
}

// Library returns the base name of the first module of stack (module
// paths or base names, innermost frame first, one per frame) that is not
// skipped; the main executable is a module like any other. A stack wholly
// inside skipped modules (the loader's startup allocations, a thread
// started by libc) is charged to its outermost module; an empty stack to
// "".
func (r *Rollup) Library(stack []string) string {
	for _, p := range stack {
		if p != "" && !r.Skipped(p) {
			return baseName(p)
		}
	}
	for i := len(stack) - 1; i >= 0; i-- {
		if stack[i] != "" {
			return baseName(stack[i])
		}
	}
	return ""
}
