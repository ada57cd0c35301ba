package main

import (
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

// watchCreates wakes the drainer for a file made in its directory, or
// renamed into it (the library's events files are), and stops with stop.
func TestWatchCreates(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("inotify is Linux's")
	}
	dir := t.TempDir()
	stop := make(chan struct{})
	wake := watchCreates(dir, stop)
	require.NotNil(t, wake)
	select {
	case <-wake:
		t.Fatal("woken with nothing made")
	case <-time.After(50 * time.Millisecond):
	}
	tmp := filepath.Join(t.TempDir(), "1.events.new")
	require.NoError(t, os.WriteFile(tmp, nil, 0o600))
	require.NoError(t, os.Rename(tmp, filepath.Join(dir, "1.events")))
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a file renamed into the directory")
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "2.events"), nil, 0o600))
	select {
	case <-wake:
	case <-time.After(5 * time.Second):
		t.Fatal("not woken by a file made in the directory")
	}
	close(stop)
	require.Nil(t, watchCreates(filepath.Join(dir, "missing"), stop), "a directory that is not there")
}
