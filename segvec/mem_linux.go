// OS memory, Linux: the only file of segvec that calls mmap, madvise and
// munmap. States: mapped (anonymous, private; untouched pages cost
// nothing) -> in use (touched: resident) -> purged (MADV_DONTNEED: not
// resident, reads as zero) -> released (munmap).

//go:build linux

package segvec

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// osMap maps size bytes of zeroed memory outside the Go heap. With
// noReserve the kernel does not count it against overcommit until
// touched (the history ring: its whole limit is mapped up front). The
// mapping is named so /proc/PID/maps shows what it holds. With huge, a
// mapping of 2 MiB or more asks for transparent huge pages (the kernel
// places such mappings on a 2 MiB boundary): a table read at random
// addresses (a large Vec, an Array) then misses the TLB far less, which
// BenchmarkDrainLive measured at 4.1 -> 4.9M events/s. (Its first touch
// then makes a whole 2 MiB resident: callers ask only for tables already
// that large.)
func osMap(size int, name string, noReserve, huge bool) ([]byte, error) {
	flags := unix.MAP_PRIVATE | unix.MAP_ANON
	if noReserve {
		flags |= unix.MAP_NORESERVE
	}
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, flags)
	if err != nil {
		return nil, err
	}
	osName(b, name)
	if huge {
		osHuge(b)
	}
	return b, nil
}

// osHuge asks for transparent huge pages for a mapping of 2 MiB or more
// (for the pages faulted in from now on): a hint, refused it costs only
// speed.
func osHuge(b []byte) {
	if len(b) >= hugePage {
		_ = unix.Madvise(b, unix.MADV_HUGEPAGE)
	}
}

const hugePage = 2 << 20

// osUnmap releases a mapping from osMap.
func osUnmap(b []byte) error { return unix.Munmap(b) }

// osPurge gives a range's pages back to the OS; it stays mapped and reads
// as zero.
func osPurge(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// osPopulate makes the pages of b resident and writable now
// (MADV_POPULATE_WRITE, Linux 5.14+; before, they fault in as written).
// b need not be page-aligned: the pages it touches are populated.
func osPopulate(b []byte) {
	if len(b) == 0 {
		return
	}
	p := unsafe.Pointer(&b[0])
	off := int(uintptr(p) & uintptr(pageSize-1)) // back to the page's start: still in the mapping
	_ = unix.Madvise(unsafe.Slice((*byte)(unsafe.Add(p, -off)), off+len(b)), unix.MADV_POPULATE_WRITE)
}

// osName labels an anonymous mapping (Linux 5.17+; nothing before).
func osName(b []byte, name string) {
	n := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME,
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&n[0])))
	runtime.KeepAlive(n)
}

// offHeap reports that memory from this file is outside the Go heap.
const offHeap = true
