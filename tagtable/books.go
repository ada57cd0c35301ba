// The books region's names, for the callers that still find them here:
// the region reader and writer are package books. New code imports books.

package tagtable

import (
	"fmt"
	"io"
	"sync/atomic"

	"github.com/tagalloc/tagalloc/books"
)

// The region's types (package books).
type (
	Snapshot  = books.Snapshot
	TagTotals = books.TagTotals
	Report    = books.Report
	Allocator = books.Allocator
	Region    = books.Region
	Thread    = books.Thread
	Counters  = books.Counters
)

// The tag limits and ids (package books).
const (
	MaxTags     = books.MaxTags
	MaxReports  = books.MaxReports
	Untagged    = books.Untagged
	OverflowTag = books.OverflowTag
)

// ErrFormat wraps every complaint about a region's or an events file's
// contents (books.ErrFormat).
var ErrFormat = books.ErrFormat

// ErrBadTag is books.ErrBadTag.
var ErrBadTag = books.ErrBadTag

// Add is books.Add.
func Add(c *atomic.Uint64, n uint64) { books.Add(c, n) }

// Create is books.Create.
func Create(name string) (*Region, error) { return books.Create(name) }

// ValidTag is books.ValidTag.
func ValidTag(name string) error { return books.ValidTag(name) }

// Kept is books.Kept: the books of a run's ended processes.
type Kept = books.Kept

// NewKept is books.NewKept.
func NewKept(dir string) *Kept { return books.NewKept(dir) }

// RegionPID is books.RegionPID: the pid a region file's name starts with.
func RegionPID(name string) (int, bool) { return books.RegionPID(name) }

// RegionInUse is books.InUse: some process has the region file open or
// mapped.
func RegionInUse(path string) bool { return books.InUse(path) }

// ReadFile is books.ReadFile.
func ReadFile(path string) (*Snapshot, error) { return books.ReadFile(path) }

// ReadDir is books.ReadDir.
func ReadDir(dir string) ([]*Snapshot, error) { return books.ReadDir(dir) }

// ReadRegionAt is books.ReadRegionAt.
func ReadRegionAt(f io.ReaderAt) (*Snapshot, error) { return books.ReadRegionAt(f) }

// Merge is books.Merge.
func Merge(snaps ...*Snapshot) *Snapshot { return books.Merge(snaps...) }

// Parse is books.Parse.
func Parse(b []byte) (*Snapshot, error) { return books.Parse(b) }

func fail(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrFormat, fmt.Sprintf(format, args...))
}
