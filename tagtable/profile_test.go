package tagtable

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The accessors of the live-block table: a block by address, and every
// block once, stopping when asked.
func TestProfileLiveAccessors(t *testing.T) {
	p := NewProfile(1, "full", 1)
	p.Stack(1, []uint64{0x10})
	for i := uint64(0); i < 10; i++ {
		p.Alloc(0x1000+i*0x100, 64, 60+i, 2, 1)
	}
	p.Free(0x1000)
	p.Resize(0x1100, 0x9000, 128, 100)
	require.Equal(t, 9, p.LiveCount())
	_, ok := p.LiveBlockAt(0x1000)
	require.False(t, ok, "freed")
	_, ok = p.LiveBlockAt(0x1100)
	require.False(t, ok, "moved by realloc")
	b, ok := p.LiveBlockAt(0x9000)
	require.True(t, ok)
	require.Equal(t, LiveBlock{Usable: 128, Requested: 100, Tag: 2, Stack: 1, Weight: 1}, b)
	b, ok = p.LiveBlockAt(0x1500)
	require.True(t, ok)
	require.Equal(t, uint64(65), b.Requested)

	seen := map[uint64]uint64{}
	p.EachLive(func(addr uint64, b *LiveBlock) bool {
		seen[addr] = b.Usable
		return true
	})
	require.Len(t, seen, 9)
	require.Equal(t, uint64(128), seen[0x9000])
	n := 0
	p.EachLive(func(uint64, *LiveBlock) bool { n++; return n < 3 })
	require.Equal(t, 3, n, "stops when f returns false")
}
