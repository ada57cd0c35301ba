package atomicfile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"syscall"
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

// A path that is not a regular file is written, never replaced: renaming
// over /dev/null as root leaves a plain file there for every program.
func TestWriteKeepsNonRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe")
	require.NoError(t, syscall.Mkfifo(fifo, 0o600))
	got := make(chan string, 1)
	go func() {
		b, _ := os.ReadFile(fifo)
		got <- string(b)
	}()
	require.NoError(t, Write(fifo, func(w io.Writer) error { _, err := io.WriteString(w, "through"); return err }))
	fi, err := os.Lstat(fifo)
	require.NoError(t, err)
	require.Equal(t, os.ModeNamedPipe, fi.Mode().Type(), "the pipe is still a pipe")
	require.Equal(t, "through", <-got)

	err = Write(dir, func(w io.Writer) error { return nil })
	require.Error(t, err, "a directory is neither replaced nor written")
	fi, err = os.Stat(dir)
	require.NoError(t, err)
	require.True(t, fi.IsDir())
}

// A symbolic link stays a link; the file it names gets the new contents.
func TestWriteFollowsLink(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target.json")
	require.NoError(t, os.WriteFile(target, []byte("old"), 0o600))
	link := filepath.Join(dir, "link.json")
	require.NoError(t, os.Symlink(target, link))
	require.NoError(t, Write(link, func(w io.Writer) error { _, err := io.WriteString(w, "new"); return err }))
	fi, err := os.Lstat(link)
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type())
	b, err := os.ReadFile(target)
	require.NoError(t, err)
	require.Equal(t, "new", string(b))
}
