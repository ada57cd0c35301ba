package dirwatch

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Creates reports an events file made in its directory, or renamed into
// it (the library's are), not other names (books files, temporary
// names), and stops with stop.
func TestWatchCreates(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	dir := t.TempDir()
	stop := make(chan struct{})
	w := Creates(dir, ".events", stop)
	require.NotNil(t, w)
	select {
	case <-w.C:
		t.Fatal("woken with nothing made")
	case <-time.After(50 * time.Millisecond):
	}
	tmp := filepath.Join(t.TempDir(), "1.events.new")
	require.NoError(t, os.WriteFile(tmp, nil, 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "1.events")))
	select {
	case <-w.C:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a file renamed into the directory")
	}
	names, lost := w.Take()
	require.Equal(t, []string{"1.events"}, names)
	require.False(t, lost)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "3.tagalloc"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "4.events.new"), nil, 0o600))
	select {
	case <-w.C:
		t.Fatalf("woken by other names (%q)", w.names)
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "2.events"), nil, 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "5.events"), nil, 0o600))
	deadline := time.After(5 * time.Second)
	for len(names) < 3 {
		select {
		case <-w.C:
			more, _ := w.Take()
			names = append(names, more...)
		case <-deadline:
			t.Fatalf("not woken by files made in the directory (have %q)", names)
		}
	}
	require.Equal(t, []string{"1.events", "2.events", "5.events"}, names)
	close(stop)
	require.Nil(t, Creates(filepath.Join(dir, "missing"), ".events", stop), "a directory that is not there")
}
