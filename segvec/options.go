// Options of both containers, and the errors they return: one table.

package segvec

import (
	"errors"
	"fmt"
)

// Errors. Each is returned wrapped, with the detail and what to do next.
var (
	// ErrHasPointers: New's element type holds Go pointers, which the GC
	// would not see in memory it never scans.
	ErrHasPointers = errors.New("segvec: element type holds Go pointers")
	// ErrTooLarge: a Chunked entry whose encoded size exceeds the
	// buffer's capacity (Cap), so it could never be retained.
	ErrTooLarge = errors.New("segvec: entry larger than the history limit")
	// ErrOption: an option out of range or given to the wrong container.
	ErrOption = errors.New("segvec: bad option")
	// ErrOutOfMemory: the OS refused a mapping.
	ErrOutOfMemory = errors.New("segvec: out of memory")
)

// Defaults.
const (
	// DefaultSegmentBytes is the least size of a Vec segment: 64 KiB.
	DefaultSegmentBytes = 64 << 10
	// DefaultChunkBytes is a Chunked chunk: 1 MiB.
	DefaultChunkBytes = 1 << 20
	// DefaultLimit is a Chunked buffer's byte limit: 64 MiB.
	DefaultLimit = 64 << 20

	// MinChunkBytes is the smallest chunk (tests use tiny chunks so that
	// entries and their length prefixes straddle often).
	MinChunkBytes = 16
	// MaxChunks bounds Limit/ChunkBytes, so the per-chunk metadata
	// (40 bytes each, on the Go heap) stays small: raise ChunkBytes.
	MaxChunks = 1 << 22
)

// An Option configures New (Vec) or NewChunked.
//
//	option          applies to  default    meaning
//	SegmentBytes    Vec         64 KiB     least bytes per segment
//	ChunkBytes      Chunked     1 MiB      bytes per chunk (unit of recycling)
//	Limit           Chunked     64 MiB     most bytes of chunks kept
//	Name            both        see below  name of the mappings in /proc/PID/maps
//
// Giving an option to the container it does not apply to is an
// ErrOption, so a misplaced Limit is not silently ignored.
type Option func(*config)

type config struct {
	segmentBytes int
	chunkBytes   int
	limit        int
	name         string
	set          uint8 // which options were given (optSegment...)
	bad          error // first out-of-range value
}

const (
	optSegment = 1 << iota
	optChunk
	optLimit
)

// SegmentBytes sets the least size of a Vec segment (default 64 KiB).
// Elements per segment is the smallest power of two whose bytes reach
// it. Larger segments mean fewer mappings for very large vectors.
func SegmentBytes(n int) Option {
	return func(c *config) {
		c.set |= optSegment
		if n <= 0 || n > 1<<40 {
			c.fail(fmt.Errorf("%w: SegmentBytes(%d): want 1 to 1 TiB", ErrOption, n))
		}
		c.segmentBytes = n
	}
}

// ChunkBytes sets the size of a Chunked chunk (default 1 MiB, at least
// MinChunkBytes). A Limit below it lowers it to the limit.
func ChunkBytes(n int) Option {
	return func(c *config) {
		c.set |= optChunk
		if n < MinChunkBytes || n > 1<<40 {
			c.fail(fmt.Errorf("%w: ChunkBytes(%d): want %d bytes to 1 TiB", ErrOption, n, MinChunkBytes))
		}
		c.chunkBytes = n
	}
}

// Limit sets the most bytes a Chunked keeps (default 64 MiB, at least
// MinChunkBytes): floor(Limit/ChunkBytes) chunks, so the effective
// capacity (Cap) is Limit rounded down to whole chunks. A limit below one
// chunk lowers the chunk to the limit (one chunk; Firefox's chunk manager
// does the same).
func Limit(n int) Option {
	return func(c *config) {
		c.set |= optLimit
		if n < MinChunkBytes || n > 1<<46 {
			c.fail(fmt.Errorf("%w: Limit(%d): want %d bytes to 64 TiB", ErrOption, n, MinChunkBytes))
		}
		c.limit = n
	}
}

// Name names the mappings (PR_SET_VMA_ANON_NAME, shown in
// /proc/PID/maps as [anon:NAME]). Defaults: "tagalloc segvec" and
// "tagalloc history".
func Name(s string) Option { return func(c *config) { c.name = s } }

func (c *config) fail(err error) {
	if c.bad == nil {
		c.bad = err
	}
}

// build applies opts over the defaults; notFor are the options that do
// not apply to the container being built.
func build(opts []Option, notFor uint8, what string) (config, error) {
	c := config{segmentBytes: DefaultSegmentBytes, chunkBytes: DefaultChunkBytes, limit: DefaultLimit}
	for _, o := range opts {
		o(&c)
	}
	if c.bad != nil {
		return c, c.bad
	}
	if m := c.set & notFor; m != 0 {
		names := map[uint8]string{optSegment: "SegmentBytes", optChunk: "ChunkBytes", optLimit: "Limit"}
		for bit := uint8(1); bit <= optLimit; bit <<= 1 {
			if m&bit != 0 {
				return c, fmt.Errorf("%w: %s does not apply to %s", ErrOption, names[bit], what)
			}
		}
	}
	return c, nil
}
