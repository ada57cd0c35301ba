package books

import (
	"bytes"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"
)

// A sparse file's holes are zeros that readUsed does not read; what it
// returns is the file's bytes all the same, cut at used or at the end.
func TestReadUsedSkipsHoles(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sparse")
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	const size = 4 << 20
	require.NoError(t, f.Truncate(size))
	for _, d := range []struct {
		off int64
		b   byte
		n   int
	}{{0, 'A', 5000}, {1<<20 - 100, 'B', 3000}, {3 << 20, 'C', 10}} {
		_, err := f.WriteAt(bytes.Repeat([]byte{d.b}, d.n), d.off)
		require.NoError(t, err)
	}
	whole, err := os.ReadFile(path)
	require.NoError(t, err)

	if runtime.GOOS == "linux" {
		start, end, ok := nextData(f, 8192)
		if ok { // the filesystem tells holes from data
			require.Equal(t, int64(1<<20-4096), start, "the data around 1 MiB starts on its block")
			require.GreaterOrEqual(t, end, int64(1<<20+2900))
			require.Less(t, end, int64(3<<20))
			start, end, _ = nextData(f, 3<<20+4096)
			require.Equal(t, [2]int64{size, size}, [2]int64{start, end}, "no data after the last block")
		} else {
			t.Log("this filesystem does not tell holes from data: everything is read")
		}
	}
	for _, used := range []uint64{size, 3<<20 + 5, 1 << 20, 100, size + 1<<20} {
		want := whole[:min(used, size)]
		got, err := readUsed(f, used, nil)
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "used %d: %d bytes read, %d wanted", used, len(got), len(want))
		got, err = readUsed(bytes.NewReader(whole), used, nil) // no holes to skip
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "used %d, from memory", used)
		got, err = readUsed(f, used, bytes.Repeat([]byte{0xff}, size)) // a buffer reused: its old bytes gone, holes too
		require.NoError(t, err)
		require.True(t, bytes.Equal(want, got), "used %d, into a used buffer", used)
	}
}
