// OS memory elsewhere: a fallback backed by the Go heap, so the packages
// build and work on every platform. The memory is then on the Go heap
// (the GC counts it, though it never scans it: it holds no pointers), and
// purging only zeroes it.

//go:build !linux

package arena

// osReserve allocates the reservation from the Go heap; the arena is
// smaller here (reserveDefault below), since every byte of it is real.
func osReserve(size uintptr, name string) ([]byte, error) { return make([]byte, size), nil }

func osMap(size uintptr) ([]byte, error) { return make([]byte, size), nil }

// osRemap copies: there is no mremap here.
func osRemap(b []byte, size uintptr) ([]byte, error) {
	n := make([]byte, size)
	copy(n, b)
	return n, nil
}

func osRelease(b []byte) error { return nil }

// osPurge zeroes the range, keeping the "purged memory reads as zero"
// contract the span flags rely on.
func osPurge(b []byte) { clear(b) }

const offHeap = false

// reserveDefault is small here: every byte of it is allocated.
const reserveDefault = 256 << 20
