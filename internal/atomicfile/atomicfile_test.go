package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "r.json")
	require.NoError(t, Write(p, func(w io.Writer) error { _, err := io.WriteString(w, "first"); return err }))
	fi, err := os.Stat(p)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	boom := errors.New("boom")
	err = Write(p, func(w io.Writer) error { _, _ = io.WriteString(w, "half"); return boom })
	require.ErrorIs(t, err, boom)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.Equal(t, "first", string(b), "a failed write leaves the file as it was")
	left, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, left, 1, "no temporary file left behind")
}
