// Source paths: a file compiled by a relative name ("cc -g -c ../x.c", so
// DW_AT_name and the line table's entries are relative) is named by its
// absolute path, for DWARF 4 and 5, in the frame of the line table's row
// and in the caller's frame of an inlined call (DW_AT_call_file).

package symbolizer

import (
	"debug/elf"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRelativeSourcePaths builds DIR/src/proj/{x.c,y.c,inc/h.h} from
// DIR/src/proj/build as ../x.c and ../y.c (the include directory given
// as -I../inc), links them, and checks every frame's file is the
// absolute path of the file it names.
func TestRelativeSourcePaths(t *testing.T) {
	needTool(t, "gcc")
	for _, version := range []string{"4", "5"} {
		t.Run("dwarf"+version, func(t *testing.T) {
			proj := filepath.Join(t.TempDir(), "src", "proj")
			build := filepath.Join(proj, "build")
			require.NoError(t, os.MkdirAll(filepath.Join(proj, "inc"), 0o755))
			require.NoError(t, os.MkdirAll(build, 0o755))
			files := map[string]string{
				"x.c": "#include \"h.h\"\n" +
					"int helper(int);\n" +
					"__attribute__((noinline)) int work(int v) {\n" +
					"  return twice(v) + helper(v);\n" + // line 4
					"}\n" +
					"int main(int c, char **a) { return work(c); }\n",
				"y.c": "int sink;\n" +
					"__attribute__((noinline)) int helper(int v) {\n" +
					"  sink ^= v;\n" + // line 3
					"  return sink;\n" +
					"}\n",
				"inc/h.h": "extern int sink;\n" +
					"static inline __attribute__((always_inline)) int twice(int v) {\n" +
					"  sink += v;\n" + // line 3
					"  return v * 2;\n" +
					"}\n",
			}
			for name, src := range files {
				require.NoError(t, os.WriteFile(filepath.Join(proj, name), []byte(src), 0o644))
			}
			flags := []string{"-g", "-gdwarf-" + version, "-O1", "-I../inc", "-c"}
			run(t, build, "gcc", append(flags, "../x.c", "-o", "x.o")...)
			run(t, build, "gcc", append(flags, "../y.c", "-o", "y.o")...)
			run(t, build, "gcc", "-Wl,--build-id", "-o", "prog", "x.o", "y.o")
			prog := filepath.Join(build, "prog")
			m := fileModule(t, prog)
			s := New(WithDebugDirs())

			// Every address of work and helper: absolute names of the
			// files they come from, the inlined twice's from inc/h.h
			// with its caller's frame in x.c.
			sawInline := false
			for _, fn := range []string{"work", "helper"} {
				lo, hi := symbolRange(t, prog, fn)
				for pc := lo; pc < hi; pc++ {
					fr, err := s.FramesPC(&m, pc)
					require.NoError(t, err)
					for i, f := range fr {
						require.True(t, filepath.IsAbs(f.File), "%s+%#x frame %d: %+v", fn, pc-lo, i, f)
						want := map[string]string{"work": "x.c", "helper": "y.c", "twice": "inc/h.h"}[f.Function]
						require.NotEmpty(t, want, "%s+%#x frame %d: %+v", fn, pc-lo, i, f)
						sameFile(t, filepath.Join(proj, want), f.File)
					}
					if fr[0].Function == "twice" && fr[0].Line == 3 {
						sawInline = true
						require.Len(t, fr, 2)
						assert.Equal(t, "work", fr[1].Function)
						assert.Equal(t, 4, fr[1].Line)
					}
				}
			}
			assert.True(t, sawInline, "no address of the inlined sink += v")
		})
	}
}

// symbolRange returns the address range of the named function symbol in
// the .symtab of the ELF file at path.
func symbolRange(t testing.TB, path, name string) (lo, hi uint64) {
	t.Helper()
	f, err := elf.Open(path)
	require.NoError(t, err)
	defer f.Close()
	syms, err := f.Symbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Name == name && s.Size > 0 {
			return s.Value, s.Value + s.Size
		}
	}
	t.Fatalf("no sized symbol %s in %s", name, path)
	return 0, 0
}

// sameFile checks that path names the file want (by device and inode:
// the compiler records the directory it ran in as it saw it).
func sameFile(t testing.TB, want, path string) {
	t.Helper()
	a, err := os.Stat(want)
	require.NoError(t, err)
	b, err := os.Stat(path)
	require.NoError(t, err, "the frame's file")
	require.True(t, os.SameFile(a, b), "%s is not %s", path, want)
}
