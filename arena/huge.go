// Huge blocks: HugeMin bytes and more, each in its own mapping, found by
// address in a table (a Go map of addresses: no pointers into Go memory
// are kept anywhere but here). A freed mapping waits in a small cache for
// the next huge block (its pages resident: reusing it costs no faults)
// until the purge delay passes or the retain limit wants it gone, as the
// native library's huge.c keeps them.

package arena

import (
	"fmt"
	"sync"
	"time"
	"unsafe"
)

// hugeBlock is one mapping.
type hugeBlock struct {
	mem []byte
	tag uint32
}

// cachedMap is a freed mapping in the cache, with when it was freed (ns
// since the arena's start).
type cachedMap struct {
	mem []byte
	at  int64
}

// hugeCacheMax is how many freed mappings the cache holds at most.
const hugeCacheMax = 16

var huge struct {
	mu     sync.Mutex // after a.mu when both are held
	blocks map[uintptr]hugeBlock
	cache  []cachedMap // oldest first
}

// HugeSize is the usable size of a huge block asked for size bytes: whole
// OS pages (0 if size is within a page of overflowing).
func HugeSize(size uintptr) uintptr { return (size + 4095) &^ 4095 }

// AllocHuge maps a block of at least size bytes (whole OS pages), charged
// to tag: a cached mapping if one fits (zero false: it held a freed
// block), else a fresh one (zero true). usable is the mapping's length.
func AllocHuge(size uintptr, tag uint32) (p unsafe.Pointer, usable uintptr, zero bool, err error) {
	n := HugeSize(size)
	if n < size {
		return nil, 0, false, fmt.Errorf("%w: %d bytes", ErrOutOfMemory, size)
	}
	huge.mu.Lock()
	mem := takeCachedLocked(n)
	huge.mu.Unlock()
	if mem == nil {
		if mem, err = osMap(n); err != nil {
			return nil, 0, false, fmt.Errorf("%w: mapping %d bytes: %v", ErrOutOfMemory, n, err)
		}
		zero = true
	}
	p, n = unsafe.Pointer(&mem[0]), uintptr(len(mem))
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
	return p, n, zero, nil
}

// takeCachedLocked takes a cached mapping for n bytes (whole OS pages) out
// of the cache, or returns nil: the smallest of n bytes or more, cut to n
// (mremap) if it is a quarter bigger or more; else the largest of a
// quarter of n or more, grown to n (mremap moves its resident pages; only
// the rest fault in). Native huge.c's rule, without its pieces of one
// mapping.
func takeCachedLocked(n uintptr) []byte {
	best, under := -1, -1
	for i, c := range huge.cache {
		switch m := uintptr(len(c.mem)); {
		case m >= n:
			if best < 0 || m < uintptr(len(huge.cache[best].mem)) {
				best = i
			}
		case m >= n/4:
			if under < 0 || m > uintptr(len(huge.cache[under].mem)) {
				under = i
			}
		}
	}
	if best < 0 {
		best = under
	}
	if best < 0 {
		return nil
	}
	mem := uncacheLocked(best)
	if m := uintptr(len(mem)); m < n || m >= n+n/4 {
		r, err := osRemap(mem, n)
		if err != nil { // the OS said no: it goes, and a fresh mapping serves
			_ = osRelease(mem)
			return nil
		}
		mem = r
	}
	return mem
}

// expireCachedLocked unmaps the cached mappings freed longer than the
// purge delay ago, or all of them (all), or, oldest first, those the
// limit leaves no room for: free memory (the dirty spans and the cache)
// over limit bytes. It returns whether mappings stay cached. (a.mu and
// huge.mu held.)
func expireCachedLocked(all bool, now int64, limit uint64) bool {
	delay := int64(a.opt.PurgeDelay)
	for len(huge.cache) > 0 {
		if !all && now-huge.cache[0].at < delay && a.dirtyBytes.Load()+a.hugeCached.Load() <= limit {
			break
		}
		if err := osRelease(uncacheLocked(0)); err != nil {
			panic(fmt.Sprintf("tagalloc: munmap of a cached huge mapping failed: %v", err))
		}
	}
	return len(huge.cache) > 0
}

// uncacheLocked takes cached mapping i out of the cache (huge.mu held).
func uncacheLocked(i int) []byte {
	mem := huge.cache[i].mem
	huge.cache = append(huge.cache[:i], huge.cache[i+1:]...)
	a.hugeCached.Add(-uint64(len(mem)))
	return mem
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

// FreeHuge gives back the huge block at p, returning its usable size and
// tag (ok false, and nothing done, if p is not one): into the cache if the
// retain limit has room for it beside the free spans and the cache (the
// oldest cached mapping goes if the cache is full), else unmapped.
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
	n := uint64(len(b.mem))
	a.hugeLive.Add(-n)
	a.hugeCount.Add(-1)
	a.mu.Lock()
	now := int64(time.Since(a.start))
	limit := retainLimitLocked(now) // the heap shrank by the block: its mark's room has it
	huge.mu.Lock()
	var out []byte
	if a.dirtyBytes.Load()+a.hugeCached.Load()+n <= limit {
		if len(huge.cache) == hugeCacheMax { // the oldest goes
			out = uncacheLocked(0)
		}
		huge.cache = append(huge.cache, cachedMap{mem: b.mem, at: now})
		a.hugeCached.Add(n)
	} else {
		out = b.mem
	}
	huge.mu.Unlock()
	purgeLocked(false) // the heap shrank: its free memory may now be over the limit
	a.mu.Unlock()
	if out != nil {
		if err := osRelease(out); err != nil {
			panic(fmt.Sprintf("tagalloc: munmap of a huge block failed: %v", err))
		}
	}
	return uintptr(n), b.tag, true
}
