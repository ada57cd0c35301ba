package tagtable

import (
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/tagalloc/tagalloc/cgo"
)

// FuzzParse: whatever the bytes, Parse returns a snapshot or an error that
// wraps ErrFormat; it never panics or loops. Seeded with a real region.
func FuzzParse(f *testing.F) {
	if seed := realRegion(f); seed != nil {
		f.Add(seed)
		f.Add(seed[:len(seed)/3])
	}
	if seed := goRegion(f); seed != nil {
		f.Add(seed)
	}
	f.Add([]byte("TAGALLOC"))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err == nil && s == nil {
			t.Fatal("nil snapshot without an error")
		}
	})
}

// realRegion runs a small tagged program and returns its region's bytes in
// use (nil if the library or compiler is missing).
func realRegion(f *testing.F) []byte {
	lib, err := cgo.Library()
	if err != nil {
		return nil
	}
	cc, err := cgo.Compiler()
	if err != nil {
		return nil
	}
	dir := f.TempDir()
	bin := filepath.Join(dir, "tagged")
	if exec.Command(cc, "-O1", "-fno-builtin", "-o", bin, filepath.Join("testdata", "tagged.c")).Run() != nil {
		return nil
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, "TAGALLOC_DIR="+dir)
	_ = cmd.Run()
	files, _ := filepath.Glob(filepath.Join(dir, "*.tagalloc"))
	if len(files) != 1 {
		return nil
	}
	b, err := os.ReadFile(files[0])
	if err != nil || len(b) < 64 {
		return nil
	}
	used := le64(b[32:])
	if used > uint64(len(b)) {
		return nil
	}
	return b[:used]
}

// goRegion is the bytes of a region the Go writer made, with a few tags
// and two thread records.
func goRegion(f *testing.F) []byte {
	f.Setenv("TAGALLOC_DIR", "")
	r, err := Create("go")
	if err != nil {
		return nil
	}
	defer r.Close()
	for i, name := range []string{"a", "bb", "untagged"} {
		id, _, _ := r.Tag(name)
		for range 2 {
			th, _ := r.NewThread()
			c, _ := th.Counters(id)
			Add(&c.AllocBytes, uint64(64*(i+1)))
			Add(&c.AllocBlocks, 1)
		}
	}
	used := atomic.LoadUint64(&r.hdr.Used)
	return append([]byte(nil), r.mem[:used]...)
}
