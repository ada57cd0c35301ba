// The events ring: sampled allocations with their stacks, their frees and
// resizes, and the modules the stacks run through (the writer is
// cgo/src/ring.c; the header, record types and flags are
// internal/layout's, generated for both). tagalloc run maps
// each process's PID.events file read-write, drains the committed records
// while the process runs and once more after it ends, and hands them to a
// Profile.

package tagtable

import (
	"encoding/binary"
	"encoding/hex"

	"github.com/tagalloc/tagalloc/internal/layout"
)

// The events layout this reader knows.
const (
	EventsMagic   = layout.EventsMagic
	EventsVersion = layout.EventsVersion
	evHeaderSize  = layout.EventsHeaderSize // the generated evHeader's size (evheader_gen.go)
	evStackMax    = layout.StackMax
)

// drainBatch is how many records Drain decodes at a time, and how far
// apart the steps of its prefetching are, for a sink that is a
// prefetcher (BenchmarkDrainLive). It reads up to drainAhead records
// ahead.
const (
	drainBatch = 32
	drainAhead = 4 * drainBatch
)

// Event types (internal/layout: each record's body).
const (
	EvModule  = layout.EvModule
	EvStack   = layout.EvStack
	EvAlloc   = layout.EvAlloc
	EvFree    = layout.EvFree
	EvResize  = layout.EvResize
	EvFork    = layout.EvFork
	EvCollect = layout.EvCollect
	EvReport  = layout.EvReport
)

// Module is one executable mapping of a loaded object, as the process
// announced it: addresses [Start, End) map file offset Offset of Path;
// Bias is the object's load bias (address minus ELF virtual address).
type Module struct {
	Start, End, Offset, Bias uint64
	BuildID                  string // hex
	Path                     string
}

// Realloc is how a realloc of a sampled block counted (a RESIZE
// record's flags).
type Realloc struct {
	// Selected: the countdown crossed zero in the bytes the realloc
	// counted (its new size, or its growth if Grown).
	Selected bool
	// Grown: the block grew (or kept its size) without a copy and counted
	// its growth only; a block weighed before stays weighed.
	Grown bool
	// Kept: a small block resized within its size class (no copy, the
	// same usable size) counted nothing: it keeps the weight it had.
	Kept bool
	Run  Run
}

// RESIZE flags (internal/layout, TA_RESIZE_* in C); bits 8-31 and 32-63
// hold a run's LeftOut and Grew.
const (
	resizeSelected = layout.ResizeSelected
	resizeCatchUp  = layout.ResizeCatchUp
	resizeGrown    = layout.ResizeGrown
	resizeKept     = layout.ResizeKept
)

// Run is what a RESIZE record says of the in-place reallocs of its block
// the library left out (cgo/src/sample.c, "thinning": those that changed
// a growing sampled block by under 1/256, all of the kind of the last one
// reported, none smaller than the one before).
type Run struct {
	Thinned bool   // the record carries a run (the rest is zero without)
	LeftOut uint32 // reallocs left out before this one
	Grew    uint32 // of those and this one, how many grew
	// CatchUp: the record is the last realloc left out, written before
	// another record of the block.
	CatchUp bool
	// Prior is the requested size last reported for the block: a block
	// the profile holds at the address with another size is not the
	// run's (the run's was freed by another thread, the address sampled
	// again).
	Prior uint64
}

// EventSink receives decoded events in ring order.
type EventSink interface {
	Module(m Module)
	Stack(id uint32, pcs []uint64)
	Alloc(addr, usable, requested uint64, tag, stack uint32)
	Free(addr uint64)
	// Resize: a sampled block reallocated, as how says.
	Resize(old, new, usable, requested uint64, how Realloc)
	Fork(seq uint64) // the process forked here (the child's ring names seq)
	// Collect: the process's memory reporters began collection seq;
	// Report: one of them measured the sampled block at addr from stack.
	Collect(seq uint64)
	Report(addr uint64, stack uint32)
}

// lookups adds to blocks (from index nb) the addresses of the blocks a
// record of type typ and body b will look up, and to sites (from ns) the
// site it charges (SiteKey.key), as decode reads them; a record decode
// would refuse adds nothing. It returns the new counts.
func lookups(typ uint64, b []byte, blocks []uint64, nb int, sites []uint64, ns int) (int, int) {
	u64 := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	switch {
	case typ == EvAlloc && len(b) >= 32:
		ts := u64(3)
		blocks[nb], sites[ns] = u64(0), SiteKey{Stack: uint32(ts >> 32), Tag: uint32(ts)}.key()
		return nb + 1, ns + 1
	case (typ == EvFree && len(b) >= 8) || (typ == EvReport && len(b) >= 16):
		blocks[nb] = u64(0)
		return nb + 1, ns
	case typ == EvResize && len(b) >= 40:
		blocks[nb], blocks[nb+1] = u64(0), u64(1)
		return nb + 2, ns
	}
	return nb, ns
}

func decode(typ uint64, b []byte, sink EventSink) error {
	u64 := func(i int) uint64 { return binary.LittleEndian.Uint64(b[8*i:]) }
	switch typ {
	case EvModule:
		if len(b) < 40 {
			return fail("module record of %d bytes", len(b))
		}
		bl, pl := uint64(binary.LittleEndian.Uint32(b[32:])), uint64(binary.LittleEndian.Uint32(b[36:]))
		if bl > 64 || 40+bl+pl > uint64(len(b)) {
			return fail("module record: build-id %d and path %d bytes in %d", bl, pl, len(b))
		}
		sink.Module(Module{Start: u64(0), End: u64(1), Offset: u64(2), Bias: u64(3),
			BuildID: hex.EncodeToString(b[40 : 40+bl]), Path: string(b[40+bl : 40+bl+pl])})
	case EvStack:
		if len(b) < 8 {
			return fail("stack record of %d bytes", len(b))
		}
		id, depth := binary.LittleEndian.Uint32(b), uint64(binary.LittleEndian.Uint32(b[4:]))
		if depth > evStackMax || 8+8*depth > uint64(len(b)) {
			return fail("stack record: depth %d in %d bytes", depth, len(b))
		}
		pcs := make([]uint64, depth)
		for i := range pcs {
			pcs[i] = u64(1 + i)
		}
		sink.Stack(id, pcs)
	case EvAlloc:
		if len(b) < 32 {
			return fail("alloc record of %d bytes", len(b))
		}
		ts := u64(3)
		sink.Alloc(u64(0), u64(1), u64(2), uint32(ts), uint32(ts>>32))
	case EvFree:
		if len(b) < 8 {
			return fail("free record of %d bytes", len(b))
		}
		sink.Free(u64(0))
	case EvResize:
		if len(b) < 40 {
			return fail("resize record of %d bytes", len(b))
		}
		f := u64(4)
		how := Realloc{Selected: f&resizeSelected != 0, Grown: f&resizeGrown != 0, Kept: f&resizeKept != 0}
		if len(b) >= 48 { // a run: its counts in the flags, the prior size after them
			how.Run = Run{Thinned: true, LeftOut: uint32(f>>layout.ResizeLeftOutShift) & layout.ResizeLeftOutMax, Grew: uint32(f >> layout.ResizeGrewShift), CatchUp: f&resizeCatchUp != 0, Prior: u64(5)}
		}
		sink.Resize(u64(0), u64(1), u64(2), u64(3), how)
	case EvFork:
		if len(b) < 8 {
			return fail("fork record of %d bytes", len(b))
		}
		sink.Fork(u64(0))
	case EvCollect:
		if len(b) < 8 {
			return fail("collect record of %d bytes", len(b))
		}
		sink.Collect(u64(0))
	case EvReport:
		if len(b) < 16 {
			return fail("report record of %d bytes", len(b))
		}
		sink.Report(u64(0), uint32(u64(1)))
	default:
		return fail("unknown event type %d", typ)
	}
	return nil
}
