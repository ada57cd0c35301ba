package tagtable

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"
)

// intMap against a Go map, through growth and heavy churn, clustered
// addresses (neighbours share home slots), site keys (stack<<32 | tag, both
// small), key 0, Clone and Range.
func TestIntMap(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	m, ref := newIntMap(), map[uint64]uint32{}
	addr := func() uint64 {
		switch rng.IntN(1000) {
		case 0:
			return 0
		case 1, 2, 3, 4, 5, 6, 7, 8, 9, 10:
			return uint64(rng.IntN(400))<<32 | uint64(rng.IntN(16))
		}
		return 0x7f0000000000 + 16*uint64(rng.IntN(50000))
	}
	check := func(m *intMap, ref map[uint64]uint32) {
		require.Equal(t, len(ref), m.Len())
		seen := 0
		m.Range(func(a uint64, v uint32) bool {
			require.Equal(t, ref[a], v, "address %#x", a)
			seen++
			return true
		})
		require.Equal(t, len(ref), seen)
	}
	for i := 0; i < 400000; i++ {
		a := addr()
		switch rng.IntN(3) {
		case 0, 1:
			v := rng.Uint32()
			m.Put(a, v)
			ref[a] = v
		case 2:
			v, ok := m.Delete(a)
			rv, rok := ref[a]
			require.Equal(t, rok, ok, "delete %#x", a)
			require.Equal(t, rv, v)
			delete(ref, a)
		}
		if i%1000 == 0 {
			b := addr()
			v, ok := m.Get(b)
			rv, rok := ref[b]
			require.Equal(t, rok, ok, "get %#x", b)
			require.Equal(t, rv, v)
		}
		if i%100000 == 0 {
			check(m, ref)
		}
	}
	check(m, ref)
	for a, v := range ref { // every entry still found after all the shifting
		got, ok := m.Get(a)
		require.True(t, ok, "%#x", a)
		require.Equal(t, v, got)
	}
	c := m.Clone()
	for a := range ref {
		c.Delete(a)
	}
	require.Zero(t, c.Len())
	check(m, ref) // the clone shares nothing
}
