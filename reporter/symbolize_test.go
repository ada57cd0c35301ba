package reporter

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/symbolizer"
	"github.com/tagalloc/tagalloc/tagtable"
)

// The stacks section names frames through package symbolizer, from the
// file the process ran, and only from that build of it.
func TestSymbolizeWith(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	src := filepath.Join(dir, "p.c")
	require.NoError(t, os.WriteFile(src, []byte("__attribute__((noinline)) int leaf(int x) { return x * 3; }\nint main(int c, char **v) { (void)v; return leaf(c); }\n"), 0o600))
	bin := filepath.Join(dir, "p")
	out, err := exec.Command(cc, "-g", "-O1", "-Wl,--build-id", "-o", bin, src).CombinedOutput()
	require.NoError(t, err, "%s", out)

	id, err := symbolizer.BuildID(bin)
	require.NoError(t, err)
	f, err := elf.Open(bin)
	require.NoError(t, err)
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
	mod := tagtable.Module{Start: base + text.Vaddr, End: base + text.Vaddr + text.Filesz, Offset: text.Off, Bias: base, Path: bin, BuildID: id}
	pc := base + leaf + 2 // a return address inside leaf
	frameOf := func(m tagtable.Module) Frame {
		// a Symbolizer of its own: one that has loaded a build answers for
		// it by build-id wherever its file has gone
		sym := SymbolizeWith(symbolizer.New(symbolizer.WithDebugDirs()))
		p := tagtable.NewProfile(1, "full", 1)
		p.Module(m)
		p.Stack(1, []uint64{pc})
		p.Alloc(0x1000, 16, 16, 0, 1)
		st := FromProfile(p, nil, sym)
		require.Len(t, st.Records, 1)
		require.Len(t, st.Records[0].Frames, 1)
		return st.Records[0].Frames[0]
	}
	fr := frameOf(mod)
	require.Equal(t, "leaf", fr.Function)
	require.Equal(t, "p.c", filepath.Base(fr.File))
	require.True(t, filepath.IsAbs(fr.File), "the source file's full path: %s", fr.File)
	require.Equal(t, 1, fr.Line)
	require.Equal(t, "p", fr.Module)
	require.Equal(t, leaf+2-text.Vaddr+text.Off, fr.Offset)

	stale := mod
	stale.BuildID = "00112233"
	fr = frameOf(stale)
	require.Empty(t, fr.Function, "another build of the file: not trusted")
	require.Equal(t, "p", fr.Module, "the module and offset stand")

	missing := mod
	missing.Path = filepath.Join(dir, "gone")
	require.Empty(t, frameOf(missing).Function)

	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("\x7fELF garbage garbage garbage"), 0o600))
	bad := mod
	bad.Path, bad.BuildID = junk, ""
	require.Empty(t, frameOf(bad).Function, "a corrupt file names nothing, and does not panic")
}
