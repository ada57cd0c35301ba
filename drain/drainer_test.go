package drain

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/internal/dirwatch"
)

// The drainer's passes come sooner as rings fill, later (up to maxEvery)
// as they stay empty, and never more often than minEvery.
func TestDrainPace(t *testing.T) {
	ms := time.Millisecond
	require.Equal(t, 40*ms, pace(20*ms, 0), "an empty ring: twice the wait")
	require.Equal(t, maxEvery, pace(80*ms, 0))
	require.Equal(t, 40*ms, pace(20*ms, 1.0/16), "half the target: twice the wait, no more")
	require.Equal(t, 10*ms, pace(20*ms, 1.0/4), "twice the target: half the wait")
	require.Equal(t, minEvery, pace(20*ms, 1), "a full ring: as soon as may be")
	require.Equal(t, minEvery, pace(minEvery, 0.5))
	require.Equal(t, 20*ms, pace(20*ms, paceTarget))
}

// Watched, a pass looks at the names made since the last one: a new
// events file joins the list in name order, and one that a new file
// replaced (a process that exec'd) is closed and forgotten.
func TestScanFollowsTheWatch(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	dir := t.TempDir()
	d := &Drainer{dir: dir, open: map[string]*drained{}, stop: make(chan struct{})}
	defer close(d.stop)
	d.watch = dirwatch.Creates(dir, ".events", d.stop)
	require.NotNil(t, d.watch)
	make1 := func(name string) string {
		p := filepath.Join(dir, name)
		tmp := p + ".new"
		require.NoError(t, os.WriteFile(tmp, nil, 0o600))
		require.NoError(t, os.Rename(tmp, p))
		return p
	}
	a := make1("20.events")
	require.Equal(t, []string{a}, d.scan(false), "the first pass reads the directory")
	ino, err := inode(a)
	require.NoError(t, err)
	d.open[a] = &drained{ino: ino}
	d.npass++
	make1("10.tagalloc")
	b, c := make1("10.events"), make1("30.events")
	waitFor := func(name string) { // until the watch has reported name
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			if d.watch.Pending(name) {
				return
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatalf("the watch did not report %s", name)
	}
	waitFor("30.events") // the last made
	require.Equal(t, []string{b, a, c}, d.scan(false))
	require.NotNil(t, d.open[a], "a file still there is kept")
	make1("20.events") // process 20 exec'd
	waitFor("20.events")
	require.Equal(t, []string{b, a, c}, d.scan(false))
	require.Nil(t, d.open[a], "a replaced file is forgotten, to be opened as new")
}

// Files made one after another, faster than passes come, do not put the
// next pass off: a shell starting a program every millisecond still has
// its rings drained.
func TestNewFilesDoNotPutPassesOff(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	dir := t.TempDir()
	d := Start(dir, 20*time.Millisecond, 1<<20, nil)
	passes := func() int {
		d.mu.Lock()
		defer d.mu.Unlock()
		return d.npass
	}
	start := time.Now()
	for i := 0; time.Since(start) < 300*time.Millisecond; i++ {
		require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("%d.events", i)), nil, 0o600))
		time.Sleep(time.Millisecond)
	}
	n := passes()
	_, _ = d.Finish()
	// at least one pass per newRingEvery (10 ms) is due: 30 in 300 ms;
	// a loaded machine may deliver far fewer, never none
	require.GreaterOrEqual(t, n, 5, "passes in 300 ms of a new file every millisecond")
}
