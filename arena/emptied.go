// Spans other caches' frees emptied: arena.c's "pages emptied by other
// threads" (docs/ARCHITECTURE.md, "Returning memory to the OS").
//
// A small span every block of which other caches freed is empty, and
// only its owner gave it back: at its next Refill of the class. An owner
// whose shard stops allocating (the goroutines that made the blocks
// moved to other Ps, or wait) held it for good. The push that makes a
// span's remote count every block of it sets the span's bit in the
// emptied map and asks for the purge timer (ReleaseSpans arms it, after
// the free that noted the span: Free runs pinned, where no timer is
// made). At each firing the timer, under a.mu (no span in use is given
// back meanwhile, so none changes class), takes each bit's span as it
// finds it: still emptied, it marks it seen (remoteSeen, by
// compare-and-swap: a collect clears it); seen at the firing before and
// still emptied, it purges it where it is (remotePurging, madvise,
// remotePurged). A span its owner retired full meanwhile is handed to the
// owner's reclaim stack, as the free that empties a full span does. The
// owner's collect takes such a span as empty with nothing to carve, and
// gives it back to the arena, whose lock orders that after the madvise
// (the owner never spins, pinned, on a purge in progress). So a span its
// owner collects within the purge delay is never purged, and one left
// alone goes one to two delays after it was emptied. Not in debug mode
// (its bitmap says which blocks are in use).

package arena

import (
	"math/bits"

	"github.com/tagalloc/tagalloc/sizeclass"
)

// noteEmptied notes span page for the purge timer: a push just made its
// remote list every block of it.
func noteEmptied(page uint32) {
	if a.bits != nil {
		return
	}
	if !a.emptiedUsed.Load() {
		a.emptiedUsed.Store(true)
	}
	w, bit := &a.emptied[page/64], uint64(1)<<(page%64)
	if w.Or(bit)&bit == 0 {
		a.emptiedPending.Add(1)
		a.emptiedKick.Store(true)
	}
}

// lookEmptiedLocked is the purge timer's look at the emptied spans.
func lookEmptiedLocked() {
	if a.emptiedPending.Load() == 0 {
		return
	}
	for w := range (a.top + 63) / 64 {
		for m := a.emptied[w].Load(); m != 0; m &= m - 1 {
			bit := m & -m
			// cleared first: a push that empties the span again from here
			// on sets it again, and counts it
			a.emptied[w].And(^bit)
			a.emptiedPending.Add(-1)
			s := spanAt(w*64 + uint32(bits.TrailingZeros64(bit)))
			if s.kind != kindSmall {
				continue
			}
			// the count first: objects is the owner's to set up on a span
			// just taken; a count means its blocks were handed out since
			x := s.remote.Load()
			if n := remoteCount(x); n == 0 || n != s.objects || remoteGone(x) {
				continue
			}
			if x&remoteSeen == 0 { // first look: again at the next
				if s.remote.CompareAndSwap(x, x|remoteSeen) {
					noteEmptied(s.page)
				}
				continue
			}
			clean := x &^ remoteSeen
			if !s.remote.CompareAndSwap(x, clean|remotePurging) {
				continue // collected meanwhile
			}
			osPurge(a.mem[uintptr(s.page)<<sizeclass.PageShift:][:s.Bytes()])
			// a push since (a double free) leaves the word to the
			// owner's collect, which reports it
			s.remote.CompareAndSwap(clean|remotePurging, clean|remotePurged)
			// retired full meanwhile: no free will bring it back, so this does
			if s.full.Load() == fullYes && s.full.CompareAndSwap(fullYes, fullClaimed) {
				s.toReclaim()
			}
		}
	}
}
