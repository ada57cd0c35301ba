// Huge blocks: HugeMin bytes and more, each in its own mapping, found by
// address in a table (a Go map of addresses: no pointers into Go memory
// are kept anywhere but here).

package arena

import (
	"fmt"
	"sync"
	"unsafe"
)

// hugeBlock is one mapping.
type hugeBlock struct {
	mem []byte
	tag uint32
}

var huge struct {
	mu     sync.Mutex
	blocks map[uintptr]hugeBlock
}

// AllocHuge maps a block of at least size bytes (whole OS pages), charged
// to tag. The memory is zero. usable is the mapping's length.
func AllocHuge(size uintptr, tag uint32) (p unsafe.Pointer, usable uintptr, err error) {
	n := (size + 4095) &^ 4095
	if n < size {
		return nil, 0, fmt.Errorf("%w: %d bytes", ErrOutOfMemory, size)
	}
	mem, err := osMap(n)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: mapping %d bytes: %v", ErrOutOfMemory, n, err)
	}
	p = unsafe.Pointer(&mem[0])
	huge.mu.Lock()
	if huge.blocks == nil {
		huge.blocks = map[uintptr]hugeBlock{}
	}
	huge.blocks[uintptr(p)] = hugeBlock{mem: mem, tag: tag}
	huge.mu.Unlock()
	a.hugeLive.Add(uint64(n))
	a.hugeCount.Add(1)
	a.mu.Lock() // the heap's mark and the recent size know it (purgeLocked)
	noteAllocLocked(uint64(n))
	a.mu.Unlock()
	return p, n, nil
}

// HugeOf reports the usable size and tag of the huge block starting at p
// (ok false if there is none).
func HugeOf(p unsafe.Pointer) (usable uintptr, tag uint32, ok bool) {
	huge.mu.Lock()
	b, ok := huge.blocks[uintptr(p)]
	huge.mu.Unlock()
	return uintptr(len(b.mem)), b.tag, ok
}

// ResizeHuge moves the huge block at p to a mapping of mapped bytes
// (whole OS pages, at least 1) with mremap: the kernel moves its page
// tables, not its bytes, so a block grown many times is copied never and
// faults only in its new pages (glibc's mmapped chunks and the native
// realloc grow the same way). It returns the block's address, perhaps
// new, or nil if p is not a huge block, admit refused the extra bytes a
// growth takes (asked, if admit is not nil, under the huge blocks' lock:
// it must not call the arena), or the OS did (the block stays as it was;
// the caller copies it elsewhere).
func ResizeHuge(p unsafe.Pointer, mapped uintptr, admit func(extra uintptr) bool) unsafe.Pointer {
	huge.mu.Lock()
	b, ok := huge.blocks[uintptr(p)]
	old := uintptr(len(b.mem))
	if !ok || mapped == 0 || mapped&4095 != 0 || (mapped > old && admit != nil && !admit(mapped-old)) {
		huge.mu.Unlock()
		return nil
	}
	mem, err := osRemap(b.mem, mapped)
	if err != nil {
		huge.mu.Unlock()
		return nil
	}
	q := unsafe.Pointer(&mem[0])
	delete(huge.blocks, uintptr(p))
	huge.blocks[uintptr(q)] = hugeBlock{mem: mem, tag: b.tag}
	huge.mu.Unlock()
	a.hugeLive.Add(uint64(mapped) - uint64(old))
	a.mu.Lock()
	if mapped > old {
		noteAllocLocked(uint64(mapped))
	} else { // the heap shrank: its free memory may now be over the limit
		purgeLocked(false)
	}
	a.mu.Unlock()
	return q
}

// FreeHuge unmaps the huge block at p, returning its usable size and tag
// (ok false, and nothing done, if p is not one).
func FreeHuge(p unsafe.Pointer) (usable uintptr, tag uint32, ok bool) {
	huge.mu.Lock()
	b, ok := huge.blocks[uintptr(p)]
	if ok {
		delete(huge.blocks, uintptr(p))
	}
	huge.mu.Unlock()
	if !ok {
		return 0, 0, false
	}
	if err := osRelease(b.mem); err != nil {
		panic(fmt.Sprintf("tagalloc: munmap of a huge block failed: %v", err))
	}
	a.hugeLive.Add(-uint64(len(b.mem)))
	a.hugeCount.Add(-1)
	a.mu.Lock() // the heap shrank: its free memory may now be over the limit
	purgeLocked(false)
	a.mu.Unlock()
	return uintptr(len(b.mem)), b.tag, true
}
