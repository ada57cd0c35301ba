// Package segvec is tagalloc's storage outside the Go heap for the
// service side (docs/ARCHITECTURE.md, D7 and D8): its one job is to hold millions of
// small pointer-free records (stacks, live blocks, events) where the Go GC
// neither scans nor moves them, and to keep a cumulative event history
// within a byte limit by recycling its oldest chunks, while the tables
// built from it stay exact.
//
// Two containers, after Firefox's, and a flat array:
//
//	Vec[T]     mozilla::SegmentedVector. Typed elements in segments of a
//	           power-of-two element count, each at least 64 KiB
//	           (SegmentBytes) and its own anonymous private mapping.
//	           Appending maps a segment when the last is full; nothing
//	           ever moves, so element pointers stay valid. At(i) is
//	           segs[i>>shift] + (i&mask)*size.
//	Chunked    ProfileChunkedBuffer. Variable-length []byte entries
//	           (uvarint length + bytes) in a ring of chunks (1 MiB,
//	           ChunkBytes) within a byte limit (64 MiB, Limit); when the
//	           writer needs a chunk and all Limit/ChunkBytes are live, the
//	           oldest is recycled with every entry that starts in it.
//	           Entries may straddle chunks; one larger than the limit is
//	           refused.
//	Array[T]   A fixed number of zeroed elements in one mapping, for
//	           tables that index it directly (the profile's open-
//	           addressing hash tables); a table that outgrows it makes a
//	           larger one.
//
// Glossary
//
//	segment    a Vec's unit of mapping: PerSegment() elements, >= 64 KiB.
//	chunk      a Chunked's unit of recycling: ChunkBytes of the ring.
//	stream     a Chunked's entries back to back; stream byte b is at ring
//	           offset b mod Cap, in chunk b/ChunkBytes.
//	padding    the end of a chunk left unused because the next entry,
//	           started there, would have needed more chunks than the ring
//	           has; recorded as the chunk's used count.
//	seq        an entry's sequence number, from 0 in append order.
//
// Append, Vec
//  1. If the current segment is full, move to the next one, mapping it
//     if need be (the only system call).
//  2. Store the element at the next-slot pointer and bump it; n++.
//
// Append, Chunked
//  1. Encoded size e = uvarint length + payload; refuse e > Cap.
//  2. If it fits in the current chunk, copy it there (the fast path).
//  3. Else, if from the tail it would span more chunks than the ring
//     has, pad to the next chunk; for each new chunk it enters, recycle
//     the oldest if all are live; copy it piecewise.
//
// Invariants (checked by the tests after every step; see check()):
//
//	Vec:      cap == segments << shift; 0 <= published <= n <= cap
//	Chunked:  live chunks <= Limit/ChunkBytes; Len == Next - Oldest;
//	          Oldest == entries dropped; appended bytes == dropped +
//	          retained; retained encoded bytes <= Cap; every live chunk's
//	          entry count and bytes add up to the counters and to a walk.
//
// Errors and out of memory: constructors return wrapped sentinel errors
// (ErrHasPointers naming the field, ErrOption, ErrOutOfMemory);
// Chunked.Append returns ErrTooLarge. Vec.Append panics with an
// ErrOutOfMemory error if a segment cannot be mapped, like a slice
// append (Vec.Grow reserves ahead and returns the error instead). Use
// after Close and modifying a Chunked inside its Range panic with a
// "segvec:" message.
//
// Concurrency: neither container locks. A Vec has one writer; other
// goroutines may read what the writer has Published (LenAcquire,
// AtShared). A Chunked is one goroutine's at a time.
//
// Memory (mem_linux.go, the only file that maps): Vec segments are
// mapped one by one and unmapped by Shrink and Close; an Array of 2 MiB
// or more, and a Vec's segments of 2 MiB or more after its first, ask for
// transparent huge pages (tables read at random addresses miss the TLB
// less); Chunked maps its
// whole capacity at once with MAP_NORESERVE (pages cost memory once
// written), purges it on Reset and unmaps it on Close. Mappings are named
// "tagalloc segvec" and "tagalloc history" in /proc/PID/maps. Elsewhere
// than Linux (mem_other.go) the memory comes from the Go heap as
// pointer-free blocks: never scanned, but counted by the GC.
package segvec
