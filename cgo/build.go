// Building the preload library: embedded sources → per-user cache → path.

package cgo

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Sources holds the C sources (src/) and the public header (include/).
//
//go:embed src include
var Sources embed.FS

// LibraryName is the file name of the built preload library.
const LibraryName = "libtagalloc.so"

// ErrNoCompiler is returned when no C compiler can be found.
var ErrNoCompiler = errors.New("no C compiler found ($CC when set, else cc or gcc): install one (apt-get install gcc) or set CC")

// CFlags are the flags every build of the library uses. Warnings are on;
// Strict builds (CI, tests) add -Werror.
var CFlags = []string{
	"-std=gnu11", "-O2", "-g", "-fPIC", "-fvisibility=hidden",
	"-ftls-model=initial-exec", "-fno-semantic-interposition",
	"-fno-builtin-malloc", "-fno-builtin-free", "-fno-builtin-calloc", "-fno-builtin-realloc",
	"-Wall", "-Wextra", "-D_GNU_SOURCE",
}

// LDFlags link the shared library.
var LDFlags = []string{"-shared", "-Wl,-z,now", "-Wl,-z,nodelete", "-lpthread"}

// Compiler returns the C compiler to use: $CC, else cc, else gcc.
func Compiler() (string, error) {
	if cc := os.Getenv("CC"); cc != "" { // the user's choice: no other in its place, as go build does
		p, err := exec.LookPath(cc)
		if err != nil {
			return "", fmt.Errorf("%w: CC=%q: %v", ErrNoCompiler, cc, err)
		}
		return p, nil
	}
	for _, c := range []string{"cc", "gcc"} {
		if p, err := exec.LookPath(c); err == nil {
			return p, nil
		}
	}
	return "", ErrNoCompiler
}

// WriteFS copies every file of fsys into dir (overwriting), creating the
// directories it needs: how embedded C sources reach the compiler.
func WriteFS(fsys fs.FS, dir string) error {
	return fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(path))
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		b, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, b, 0o644)
	})
}

// HashFS hashes every file of fsys (name and contents), the compiler's
// identity and the given flags, so a build cache keyed by it rebuilds when
// any of them changes.
func HashFS(fsys fs.FS, cc string, flags []string) (string, error) {
	h := sha256.New()
	var names []string
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			names = append(names, path)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	sort.Strings(names)
	for _, n := range names {
		b, err := fs.ReadFile(fsys, n)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(h, "%s\x00%d\x00", n, len(b))
		h.Write(b)
	}
	fmt.Fprintf(h, "cc=%s\x00flags=%s\x00", cc, strings.Join(flags, " "))
	if fi, err := os.Stat(cc); err == nil {
		fmt.Fprintf(h, "ccsize=%d ccmtime=%d\x00", fi.Size(), fi.ModTime().UnixNano())
	}
	return hex.EncodeToString(h.Sum(nil))[:20], nil
}

// CacheDir is where built libraries are kept: $TAGALLOC_CACHE, else the
// user cache directory (for example ~/.cache/tagalloc).
func CacheDir() (string, error) {
	if d := os.Getenv("TAGALLOC_CACHE"); d != "" {
		return d, nil
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no cache directory (set TAGALLOC_CACHE): %w", err)
	}
	return filepath.Join(d, "tagalloc"), nil
}

// BuildOptions change how the library is built.
type BuildOptions struct {
	Strict bool     // add -Werror
	Extra  []string // extra compiler flags (for example -DTA_DEBUG=2)
}

var buildMu sync.Mutex

// Library returns the absolute path of the preload library, building it
// first if the cache does not hold one for these sources.
func Library() (string, error) { return Build(BuildOptions{}) }

// SamplingFlags build the variant of the library that samples stacks
// (cgo/src/sample.c); tagalloc run --stacks preloads it, so the ordinary
// library pays nothing for sampling. Its unwinder (libgcc's, for the FDE
// lookup and the stacks the cached rules cannot take) is linked in, its
// symbols kept to the library: needing libgcc_s.so.1 made every process
// under --stacks load one more library, most of them to take no stack
// (a fork and exec of /bin/true, 200 in a row: 3.44 -> 3.22 ms each;
// the plain build 3.14).
var SamplingFlags = []string{"-DTA_SAMPLING=1", "-static-libgcc", "-Wl,--exclude-libs,ALL"}

// StacksLibrary is Library with SamplingFlags.
func StacksLibrary() (string, error) { return Build(BuildOptions{Extra: SamplingFlags}) }

// CheckFlags build the checking variant of the library (cgo/src/check.c:
// canaries, poisoning, delayed reuse; TAGALLOC_CHECK selects which);
// tagalloc run --check preloads it, so the ordinary library pays nothing.
var CheckFlags = []string{"-DTA_CHECK=1"}

// CheckLibrary is Library with CheckFlags.
func CheckLibrary() (string, error) { return Build(BuildOptions{Extra: CheckFlags}) }

// CheckStacksLibrary is Library with CheckFlags and SamplingFlags (run
// --check --stacks).
func CheckStacksLibrary() (string, error) {
	return Build(BuildOptions{Extra: append(append([]string(nil), CheckFlags...), SamplingFlags...)})
}

// Build builds (or finds in the cache) the library with the given options.
func Build(o BuildOptions) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	cc, err := Compiler()
	if err != nil {
		return "", err
	}
	flags := append([]string(nil), CFlags...)
	if o.Strict {
		flags = append(flags, "-Werror")
	}
	flags = append(flags, o.Extra...)
	key, err := HashFS(Sources, cc, append(flags, LDFlags...))
	if err != nil {
		return "", err
	}
	cache, err := CacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, key)
	lib := filepath.Join(dir, LibraryName)
	if _, err := os.Stat(lib); err == nil {
		return lib, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("creating cache %s: %w", dir, err)
	}
	work, err := os.MkdirTemp(dir, "build-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(work)
	if err := WriteFS(Sources, work); err != nil {
		return "", err
	}
	tmp := filepath.Join(work, LibraryName)
	args := append(append([]string(nil), flags...), "-I", filepath.Join(work, "include"),
		"-o", tmp, filepath.Join(work, "src", "static.c"))
	args = append(args, LDFlags...)
	cmd := exec.Command(cc, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("building %s with %s failed: %v\n%s", LibraryName, cc, err, out)
	}
	if err := os.Rename(tmp, lib); err != nil {
		return "", err
	}
	return lib, nil
}
