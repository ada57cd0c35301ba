package procbooks

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/books"
)

func tagMap(s *books.Snapshot) map[string]books.TagTotals {
	m := map[string]books.TagTotals{}
	for _, tt := range s.Tags {
		m[tt.Name] = tt
	}
	return m
}

// TestReadFindsMemfd: a Go program's books in a memfd (no TAGALLOC_DIR),
// found in the map by an outside reader, read the same as the writer's
// own snapshot (as books' TestWriterRegionParses writes them).
func TestReadFindsMemfd(t *testing.T) {
	t.Setenv("TAGALLOC_DIR", "")
	r, err := books.Create("go")
	require.NoError(t, err)
	defer r.Close()
	require.Empty(t, r.Path(), "no TAGALLOC_DIR: a memfd")
	cache, _, err := r.Tag("cache")
	require.NoError(t, err)
	bufs, _, err := r.Tag("buffers")
	require.NoError(t, err)
	a, err := r.NewThread()
	require.NoError(t, err)
	b, err := r.NewThread()
	require.NoError(t, err)
	charge := func(th *books.Thread, id uint32, n, f, size uint64) {
		c, err := th.Counters(id)
		require.NoError(t, err)
		books.Add(&c.AllocBytes, n*size)
		books.Add(&c.AllocBlocks, n)
		books.Add(&c.FreeBytes, f*size)
		books.Add(&c.FreeBlocks, f)
		books.Add(&c.AllocReq, n*size)
		books.Add(&c.FreeReq, f*size)
	}
	charge(a, cache, 10, 0, 4096)
	charge(b, cache, 0, 3, 4096)
	charge(a, bufs, 2, 0, 65536)
	charge(b, books.Untagged, 5, 5, 64)
	r.NotePeak(cache, 10*4096)
	s, err := r.Snapshot()
	require.NoError(t, err)
	got := tagMap(s)
	require.Equal(t, uint64(7*4096), got["cache"].LiveBytes)

	p, err := Read(os.Getpid())
	require.NoError(t, err)
	require.Equal(t, got, tagMap(p))
	require.False(t, p.Native())
}

// TestReadNoProcess: a process that does not exist is named in the error.
func TestReadNoProcess(t *testing.T) {
	_, err := Read(1 << 30)
	require.Error(t, err)
	require.True(t, strings.HasPrefix(err.Error(), "process 1073741824"), err.Error())
}
