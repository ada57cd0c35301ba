package segvec

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// vmFlags returns the VmFlags of the mapping holding address a, from
// /proc/self/smaps.
func vmFlags(t *testing.T, a uintptr) []string {
	t.Helper()
	f, err := os.Open("/proc/self/smaps")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		var lo, hi uintptr
		if n, _ := fmt.Sscanf(line, "%x-%x", &lo, &hi); n == 2 && strings.Contains(line, " ") {
			in = lo <= a && a < hi
		} else if in && strings.HasPrefix(line, "VmFlags:") {
			return strings.Fields(line)[1:]
		}
	}
	t.Fatalf("no mapping holds %#x", a)
	return nil
}

// Huge pages are asked for (VmFlags "hg") where they pay: an Array of 2
// MiB or more, a Vec's segments after its first when 2 MiB or more, a
// history once it has written hugeFrom bytes; small ones stay in small
// pages.
func TestHugePageHints(t *testing.T) {
	small, err := NewArray[uint64](1024)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	big, err := NewArray[uint64](1 << 19) // 4 MiB
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	if slices.Contains(vmFlags(t, uintptr(unsafe.Pointer(&small.S()[0]))), "hg") {
		t.Error("an 8 KiB Array asked for huge pages")
	}
	if !slices.Contains(vmFlags(t, uintptr(unsafe.Pointer(&big.S()[0]))), "hg") {
		t.Error("a 4 MiB Array did not ask for huge pages")
	}

	v, err := New[uint64](SegmentBytes(2 << 20))
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	for v.Len() <= (2<<20)/8 { // into the second segment
		v.Append(1)
	}
	if slices.Contains(vmFlags(t, uintptr(v.segs[0])), "hg") {
		t.Error("a Vec's first segment asked for huge pages")
	}
	if !slices.Contains(vmFlags(t, uintptr(v.segs[1])), "hg") {
		t.Error("a Vec's second 2 MiB segment did not ask for huge pages")
	}

	c, err := NewChunked(Limit(32<<20), ChunkBytes(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ring := uintptr(unsafe.Pointer(&c.mapping[0]))
	entry := make([]byte, 1000)
	for c.tail < hugeFrom-2*uint64(len(entry)) {
		c.Append(entry)
	}
	if slices.Contains(vmFlags(t, ring), "hg") {
		t.Errorf("a history asked for huge pages after %d bytes", c.tail)
	}
	for c.tail < hugeFrom+uint64(len(entry)) {
		c.Append(entry)
	}
	if !slices.Contains(vmFlags(t, ring), "hg") {
		t.Errorf("a history did not ask for huge pages after %d bytes", c.tail)
	}
}
