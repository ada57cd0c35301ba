package tagcgo

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"syscall"

	"github.com/tagalloc/tagalloc/internal/layout"
)

// MaxTagLen is the longest tag name in bytes (tagalloc.h: 1 to 63 bytes;
// internal/layout's MaxTagName, the library's TA_TAG_NAME_MAX).
const MaxTagLen = layout.MaxTagName

// ErrBadTag is wrapped by the error Do returns for an invalid tag name: empty,
// longer than MaxTagLen bytes, or holding a NUL byte. fn is not run then.
var ErrBadTag = errors.New("tagcgo: bad tag name")

// TagStats is what a tag holds now and has held, exactly; bytes are usable
// bytes (the size class of each block), as in the report.
type TagStats struct {
	LiveBytes   uint64 // held now
	LiveBlocks  uint64
	AllocBytes  uint64 // cumulative, over the process's life
	AllocBlocks uint64
	// PeakLiveBytes is the highest live total the library saw at the points
	// it looks (queries, thread exits, about every 256 KiB allocated under
	// the tag): a lower bound of the true peak.
	PeakLiveBytes uint64
}

// Loaded reports whether the native library (libtagalloc.so) is in the
// process, found when the package was initialized. Without it Do only runs
// fn and Stats answers false.
func Loaded() bool { return loaded }

// Do runs fn with tag as the calling OS thread's allocation tag: C blocks
// the thread allocates while fn runs are charged to tag. The goroutine is
// locked to its thread for the call (runtime.LockOSThread) and the tag is
// pushed on the library's per-thread tag stack, then popped when fn returns
// or panics, so a Do nested in another restores the outer tag, and the
// thread's tag after Do is what it was before.
//
// An invalid name (see ErrBadTag) returns an error wrapping ErrBadTag and
// does not run fn, with or without the library, so a program behaves the
// same whether it is preloaded or not.
//
// If the library refuses the tag (Do nested more than 32 deep, or the
// library out of memory), fn still runs, its blocks are charged to the
// enclosing tag, and Do returns an error wrapping the library's errno
// (syscall.EOVERFLOW or syscall.ENOMEM). Otherwise Do returns nil. A panic
// in fn propagates after the tag is restored.
func Do(tag string, fn func()) error {
	if err := checkTag(tag); err != nil {
		return err
	}
	if !loaded {
		fn()
		return nil
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if rc := enter(tag); rc != 0 {
		fn()
		return fmt.Errorf("tagcgo: tag %q not set, fn ran under the enclosing tag: %w", tag, syscall.Errno(rc))
	}
	defer leave()
	fn()
	return nil
}

// Stats returns what tag holds, from the library's books (tagalloc_tag_stats):
// exact at the moment of the call. ok is false if the library is not loaded
// or does not export tagalloc_tag_stats, the name is invalid, or no block was
// ever charged to the tag.
func Stats(tag string) (s TagStats, ok bool) {
	if !loaded || checkTag(tag) != nil {
		return TagStats{}, false
	}
	return stats(tag)
}

func checkTag(tag string) error {
	switch {
	case tag == "":
		return fmt.Errorf("%w: empty (a tag name is 1 to %d bytes, no NUL)", ErrBadTag, MaxTagLen)
	case len(tag) > MaxTagLen:
		return fmt.Errorf("%w: %q... is %d bytes (a tag name is 1 to %d bytes, no NUL)", ErrBadTag, tag[:24], len(tag), MaxTagLen)
	case strings.IndexByte(tag, 0) >= 0:
		return fmt.Errorf("%w: %q holds a NUL byte (a tag name is 1 to %d bytes, no NUL)", ErrBadTag, tag, MaxTagLen)
	}
	return nil
}
