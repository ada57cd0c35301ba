// Mapped object files: a file truncated after it was loaded makes the
// lookups that read it fault; they give frames, never crash.

package symbolizer

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTruncatedWhileMapped loads libfoo.so (its symbols and DWARF unit
// index), truncates the file, and looks up its functions, whose line
// tables and trees are read from the mapping only now: each lookup gives
// a frame (named by the symbol table, read at load) instead of the
// process dying of SIGBUS.
func TestTruncatedWhileMapped(t *testing.T) {
	needTool(t, "gcc")
	dir := t.TempDir()
	lib := buildLib(t, dir)
	copyPath := filepath.Join(dir, "copy", "libfoo.so")
	copyFile(t, lib, copyPath)
	m := fileModule(t, copyPath)
	s := New(WithDebugDirs())
	e := s.entry(&m) // loaded, no unit read yet
	require.NoError(t, e.err)
	require.NotNil(t, e.obj.mem, "the DWARF is read from the mapping")

	require.NoError(t, os.Truncate(copyPath, 64))
	for _, fn := range []string{"foo_alloc", "foo_leaf"} {
		fr, err := s.FramesPC(&m, symbolValue(t, lib, fn))
		require.NoError(t, err)
		require.NotEmpty(t, fr)
		assert.Equal(t, fn, fr[0].Function, "%+v", fr)
	}
}
