// Package arena is the memory of package alloc (docs/ARCHITECTURE.md, D2): pure Go, no
// cgo, from mmap, off the Go heap, in the size classes of package
// sizeclass shared with the native allocator. It knows nothing of tags
// beyond an opaque number per block (TagOf); alloc keeps the books.
//
// Glossary
//
//	arena      one reservation of address space (64 GiB, MAP_NORESERVE:
//	           only touched pages cost memory), made at Init.
//	page       64 KiB of the arena. Each page has a 128-byte descriptor
//	           (Span) in a mapping of its own: metadata is out of line
//	           (D4) and holds no Go pointers (links are page indices,
//	           blocks are offsets), so the GC never needs to look at it.
//	span       a run of pages; its first page's descriptor is the head,
//	           the others point back to it, so any address finds it.
//	small      a block of one of the 104 classes (16 B .. 512 KiB); a
//	           small span holds blocks of one class, carved lazily, of
//	           any tags.
//	tag        each block's opaque tag: the span's tag field while all
//	           its blocks in use have one; else the span is mixed and
//	           the tags are in the tag map (a uint16 per block, out of
//	           line: 8 KiB per page reserved, touched only by mixed
//	           spans, purged with their pages). A span that empties takes
//	           the tag of its next block.
//	large      512 KiB < size < 256 MiB (HugeMin): a span of whole pages,
//	           resized where it lies when it can (ResizeLarge).
//	huge       256 MiB and up: its own mapping, found in a table, resized
//	           by mremap (ResizeHuge); a freed one waits in a small cache
//	           for the next (FreeHuge, AllocHuge).
//	cache      one per shard of alloc (a P): per class, a current span
//	           and a list of partial spans, whatever the tags (so a tag
//	           costs no spans). The caller guarantees exclusivity (pinned
//	           to the P), so no locks or atomics.
//
// The allocation path
//  1. Cache.Pop(class, tag) (Bins.Pop): the current span's free list
//     (LIFO), else its next uncarved block unless a partial span has
//     freed blocks (those first, as the native heap does); a tag other
//     than the span's is noted. (fast; its common case, Span.CanPopFast
//     then Span.PopFast, inlines into alloc)
//  2. Cache.Refill: blocks other caches freed into the current span, full
//     spans they freed into (the reclaim stack), the partial list, then
//     blocks carved anew (the current span's, or the one set aside).
//  3. NewSmall (arena lock): a span from the free bins or fresh pages,
//     then Cache.Install on whichever cache the caller is on by then.
//
// The free path
//  1. SpanOf(p): one subtraction and an index (a huge block: the table);
//     TagOf(p): the block's tag, read before the block can be reused.
//  2. Check: p is a block start, cap fits (debug: the block is in use).
//     (Cache.CanFreeFast then Span.PushFast, inlined into alloc, are
//     Check's tests and the owner's push when no list changes.)
//  3. The owner cache pushes on the span's free list; another cache pushes
//     on its remote list (lock-free; the owner takes it whole). A full
//     span that gets a remote free goes on its owner's reclaim stack.
//  4. A span whose blocks all came back goes back to the arena.
//
// Memory returns to the OS by the native library's rules (heap.go,
// purgeLocked): free spans are coalesced with free spans in the same
// state (dirty with dirty, purged with purged) and kept resident ("dirty") for
// at most PurgeDelay (200 ms) in case they are wanted again, then a timer
// purges them (MADV_DONTNEED); dirty memory beyond the retain limit (the
// room under the heap's high-water mark, at least RetainBytes, 8 MiB) is
// purged at once, oldest first. A span comes from a dirty span that
// fits, else a dirty span with the free spans after it, else a purged
// span, else the arena's fresh top. A freed huge block's mapping waits in a
// cache on the same terms (what the retain limit leaves after the free
// spans, at most PurgeDelay), then is unmapped. A span in use every block
// of which other caches freed is purged where it stays, by the same timer,
// if its owner has not taken it back within the delay (emptied.go); a
// cache gives back its spans freed partly at home and partly elsewhere at
// a sweep of its partial lists (cache.go, sweep).
//
// Errors: running out of arena or OS memory is ErrOutOfMemory. Misuse
// found outside an exclusive section panics with a *MisuseError; found
// inside one (where a panic would leave the P pinned), it is noted and
// alloc raises it right after (TakeMisuse). Where a double free of a small
// block is caught: always in debug mode (a bitmap of blocks in use per
// span); otherwise when the owner's count of blocks in use would go
// negative, or the span is no longer in use.
//
// On other systems than Linux the reservation comes from the Go heap
// (mem_other.go): the package works, but the memory is the GC's to count.
package arena
