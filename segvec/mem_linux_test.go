package segvec

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
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

// resident counts the resident pages of b (mincore).
func resident(t *testing.T, b []byte) int {
	t.Helper()
	vec := make([]byte, (len(b)+pageSize-1)/pageSize)
	if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
		t.Fatal(e)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// A history brings its pages in populateBytes at a time as it is
// written (one call, not a fault a page), the first lap after each
// purge; a later lap writes pages already there.
func TestChunkedPopulates(t *testing.T) {
	probe, err := osMap(pageSize, "probe", false, false)
	if err != nil {
		t.Fatal(err)
	}
	if unix.Madvise(probe, unix.MADV_POPULATE_WRITE) != nil {
		osUnmap(probe)
		t.Skip("no MADV_POPULATE_WRITE (Linux 5.14+)")
	}
	osUnmap(probe)
	c, err := NewChunked(ChunkBytes(256<<10), Limit(1<<20))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	window := populateBytes / pageSize
	expect := func(what string, want int) {
		t.Helper()
		if n := resident(t, c.mapping); n != want {
			t.Fatalf("%s: %d pages resident, want %d", what, n, want)
		}
	}
	add := func(size int) {
		if _, err := c.Append(make([]byte, size)); err != nil {
			t.Fatal(err)
		}
	}
	expect("before a write", 0)
	add(100)
	expect("one entry", window)
	for c.tail-c.curStart <= populateBytes { // just into the second window
		add(1000)
	}
	expect("past the first window", 2*window)
	for c.Bytes() < 2*int(c.cb) { // into the second chunk
		add(1000)
	}
	expect("a chunk and an entry", int(c.cb)/pageSize+window)
	c.Reset()
	expect("after Reset", 0)
	add(100)
	expect("after Reset, one entry", window)
}
