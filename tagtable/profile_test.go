package tagtable

import (
	"testing"
	"unsafe"

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
	p.Resize(0x1100, 0x9000, 128, 100, true)
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

// check verifies the store's invariants: every slot is live or free, once;
// every site is indexed once.
func (p *Profile) check(t *testing.T) {
	t.Helper()
	st := p.store
	require.Equal(t, st.blocks.Len(), st.slotOf.Len()+len(st.freeSlots), "live + free == slots")
	seen := map[uint32]bool{}
	st.slotOf.Range(func(_ uint64, i uint32) bool {
		require.False(t, seen[i], "slot %d twice", i)
		seen[i] = true
		return true
	})
	for _, i := range st.freeSlots {
		require.False(t, seen[i], "slot %d live and free", i)
		seen[i] = true
	}
	require.Equal(t, st.sites.Len(), st.siteOf.Len())
	st.siteOf.Range(func(k uint64, i uint32) bool {
		require.Equal(t, k, st.sites.At(int(i)).SiteKey.key())
		return true
	})
}

// Slots are reused, the books stay right through moves and lost frees,
// and a Clone is a deep copy: what happens to one does not touch the
// other.
func TestProfileStoreAndClone(t *testing.T) {
	p := NewProfile(1, "full", 1)
	defer p.Close()
	for round := uint64(0); round < 3; round++ {
		for i := uint64(0); i < 5000; i++ {
			p.Alloc(0x10000+i*64, 64, 64, uint32(i%3), 1)
		}
		p.check(t)
		for i := uint64(0); i < 5000; i += 2 {
			p.Free(0x10000 + i*64)
		}
		p.check(t)
		for i := uint64(1); i < 5000; i += 2 {
			p.Free(0x10000 + i*64)
		}
	}
	require.Equal(t, 5000, p.store.blocks.Len(), "freed slots are reused")
	p.Alloc(0x100, 16, 16, 1, 2)
	p.Alloc(0x200, 32, 32, 1, 2)
	p.Resize(0x100, 0x200, 48, 40, true) // 0x200's free was lost: it ends
	p.Alloc(0x200, 16, 16, 1, 2)         // and 0x200's again
	p.check(t)
	s, ok := p.Site(SiteKey{Stack: 2, Tag: 1})
	require.True(t, ok)
	require.Equal(t, uint64(1), s.LiveSamples)
	require.Equal(t, 16.0, s.EstLiveBytes)

	c := p.Clone()
	defer c.Close()
	p.Free(0x200)
	p.Alloc(0x300, 8, 8, 1, 2)
	c.check(t)
	b, ok := c.LiveBlockAt(0x200)
	require.True(t, ok, "the clone keeps its block")
	require.Equal(t, uint64(16), b.Usable)
	_, ok = c.LiveBlockAt(0x300)
	require.False(t, ok)
	cs, _ := c.Site(SiteKey{Stack: 2, Tag: 1})
	require.Equal(t, s, cs, "the clone's site is as it was")
	ps, _ := p.Site(SiteKey{Stack: 2, Tag: 1})
	require.NotEqual(t, s, ps)
	require.Equal(t, c.SortedSites()[0].Samples, s.Samples)
}

// A live block fills one cache line, and what allocations and frees
// update in a site another: Drain's touch loads one line for each
// (segments are page-aligned).
func TestLiveBlockIsOneLine(t *testing.T) {
	require.Equal(t, uintptr(64), unsafe.Sizeof(LiveBlock{}))
	// a site is two lines, the figures of allocations and frees in the first
	require.Equal(t, uintptr(128), unsafe.Sizeof(Site{}))
	require.Equal(t, uintptr(64), unsafe.Offsetof(Site{}.Reallocs))
}
