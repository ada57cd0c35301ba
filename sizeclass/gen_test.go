package sizeclass

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// The files on disk must be what the generator writes now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, tc := range []struct {
		path string
		want []byte
	}{
		{"classes.go", GoSource()},
		{filepath.Join("..", "cgo", "src", "sizeclasses.h"), CSource()},
	} {
		t.Run(tc.path, func(t *testing.T) {
			got, err := os.ReadFile(tc.path)
			require.NoError(t, err)
			if !bytes.Equal(got, tc.want) {
				t.Fatalf("%s is stale: run `go generate ./sizeclass` (go run ./sizeclass/mkclasses)", tc.path)
			}
		})
	}
}

func TestTableInvariants(t *testing.T) {
	g := Compute()
	require.Len(t, g, NumClasses)
	prev := uint32(0)
	for i, c := range g {
		require.Equal(t, Classes[i], Class{c.Size, c.Pages, c.Objects, c.Magic})
		require.Zero(t, c.Size%MinAlign, "class %d size %d not 16-byte aligned", i, c.Size)
		require.Greater(t, c.Size, prev, "classes must increase")
		span := c.Pages * PageSize
		require.Equal(t, span/c.Size, c.Objects)
		require.LessOrEqual(t, (span%c.Size)*8, span, "class %d: span tail waste > 1/8", i)
		require.Less(t, c.Objects, uint32(1<<16), "objects must fit the page's 16-bit counters")
		if prev >= 128 {
			// Worst request is prev+1: waste (size-prev-1)/size ≤ 1/8.
			require.LessOrEqual(t, float64(c.Size-prev-1)/float64(c.Size), 0.125, "class %d", i)
		}
		// The reciprocal divides exactly for every offset in the span.
		for off := uint32(0); off < span; off++ {
			if got := uint32((uint64(off) * c.Magic) >> MagicShift); got != off/c.Size {
				t.Fatalf("class %d: magic wrong at offset %d: %d != %d", i, off, got, off/c.Size)
			}
		}
		prev = c.Size
	}
	require.EqualValues(t, MaxSmall, prev)
}

func TestClassOf(t *testing.T) {
	for size := uint32(0); size <= MaxSmall; size++ {
		c := ClassOf(size)
		require.True(t, c >= 0 && c < NumClasses, "size %d", size)
		require.GreaterOrEqual(t, Classes[c].Size, size, "size %d", size)
		if c > 0 {
			require.Less(t, Classes[c-1].Size, max(size, 1), "size %d: not the smallest class", size)
		}
	}
}
