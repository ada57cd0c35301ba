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
