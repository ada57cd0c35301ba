// OS memory, Linux: the only file of the Go side that calls mmap, mremap,
// madvise and munmap. Memory states: reserved (mapped read-write with
// MAP_NORESERVE, untouched: costs nothing) -> in use (touched: resident)
// -> purged (MADV_DONTNEED: not resident, reads as zero) -> released
// (munmap; huge blocks only).

//go:build linux

package arena

import (
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// osReserve maps size bytes of address space that cost memory only where
// touched, and names the mapping so /proc/PID/maps shows what it is.
func osReserve(size uintptr, name string) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_NORESERVE)
	if err != nil {
		return nil, err
	}
	osName(b, name)
	return b, nil
}

// osMap maps a huge block: its own mapping, so freeing it gives every
// byte back at once.
func osMap(size uintptr) ([]byte, error) {
	b, err := unix.Mmap(-1, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		return nil, err
	}
	osName(b, "tagalloc-go huge")
	return b, nil
}

// osRemap resizes a mapping from osMap, moving it if it must (mremap
// with MREMAP_MAYMOVE); the old slice must not be used again.
func osRemap(b []byte, size uintptr) ([]byte, error) {
	return unix.Mremap(b, int(size), unix.MREMAP_MAYMOVE)
}

// osRelease unmaps a mapping from osMap.
func osRelease(b []byte) error { return unix.Munmap(b) }

// osPurge gives a range's pages back to the OS; it stays mapped and reads
// as zero.
func osPurge(b []byte) { _ = unix.Madvise(b, unix.MADV_DONTNEED) }

// osName labels an anonymous mapping (Linux 5.17+; nothing before).
func osName(b []byte, name string) {
	n := append([]byte(name), 0)
	_ = unix.Prctl(unix.PR_SET_VMA, unix.PR_SET_VMA_ANON_NAME,
		uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&n[0])))
	runtime.KeepAlive(n)
}

// offHeap reports that memory from this file is outside the Go heap.
const offHeap = true

// reserveDefault is the address space reserved up front (untouched pages
// cost nothing).
const reserveDefault = 64 << 30
