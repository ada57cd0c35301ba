package reporter

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/tagtable"
)

func TestELFSymbols(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	require.NoError(t, os.WriteFile(src, []byte("__attribute__((noinline)) int leaf(int x) { return x * 3; }\nint main(int c, char **v) { (void)v; return leaf(c); }\n"), 0o600))
	bin := filepath.Join(dir, "p")
	out, err := exec.Command(cc, "-g", "-O1", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "%s", out)

	f, err := elf.Open(bin)
	require.NoError(t, err)
	id := elfBuildID(f)
	var leaf uint64
	syms, _ := f.Symbols()
	for _, s := range syms {
		if s.Name == "leaf" {
			leaf = s.Value
		}
	}
	var text elf.ProgHeader
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && p.Flags&elf.PF_X != 0 {
			text = p.ProgHeader
		}
	}
	f.Close()
	require.NotZero(t, leaf)
	// the process mapped the text segment at base+vaddr
	base := uint64(0x555500000000)
	m := &tagtable.Module{Start: base + text.Vaddr, End: base + text.Vaddr + text.Filesz, Offset: text.Off, Path: bin, BuildID: id}
	pc := base + leaf + 2 // a return address inside leaf
	s := NewELFSymbols()
	fn, file, line := s.Symbolize(m, pc)
	require.Equal(t, "leaf", fn)
	require.Equal(t, "p.c", file)
	require.Equal(t, 1, line)

	stale := *m
	stale.BuildID = "00112233"
	fn, _, _ = s.Symbolize(&stale, pc)
	require.Empty(t, fn, "another build of the file: not trusted")

	missing := *m
	missing.Path = filepath.Join(dir, "gone")
	fn, _, _ = s.Symbolize(&missing, pc)
	require.Empty(t, fn)

	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("\x7fELF garbage garbage garbage"), 0o600))
	bad := *m
	bad.Path, bad.BuildID = junk, ""
	fn, _, _ = s.Symbolize(&bad, pc)
	require.Empty(t, fn, "a corrupt file names nothing, and does not panic")
}
