package segvec

import (
	"os"
	"strings"
	"testing"
)

// TestCheckersCatchCorruption: each structure's checker notices a broken
// invariant (so the tests that run it after every step mean something).
func TestCheckersCatchCorruption(t *testing.T) {
	vecCases := map[string]func(v *Vec[rec16]){
		"cap":       func(v *Vec[rec16]) { v.cap++ },
		"length":    func(v *Vec[rec16]) { v.n = v.cap + 1 },
		"published": func(v *Vec[rec16]) { v.pubLen.Store(int64(v.n) + 1) },
		"segment":   func(v *Vec[rec16]) { v.segs[0], v.segs[1] = v.segs[1], v.segs[0] },
	}
	for name, corrupt := range vecCases {
		t.Run("Vec/"+name, func(t *testing.T) {
			v := MustNew[rec16](SegmentBytes(1024))
			defer v.Close()
			for range 100 {
				v.Append(rec16{})
			}
			v.Publish()
			if err := v.check(); err != nil {
				t.Fatal(err)
			}
			corrupt(v)
			if err := v.check(); err == nil {
				t.Error("check passed a corrupt Vec")
			}
		})
	}
	chunkedCases := map[string]func(c *Chunked){
		"entries":  func(c *Chunked) { c.meta[c.curSlot].entries++ },
		"bytes":    func(c *Chunked) { c.meta[c.curSlot].bytes++ },
		"used":     func(c *Chunked) { c.meta[c.curSlot].used-- },
		"oldest":   func(c *Chunked) { c.oldest++ },
		"live":     func(c *Chunked) { c.head-- },
		"firstSeq": func(c *Chunked) { c.meta[c.curSlot].firstSeq++ },
		"prefix":   func(c *Chunked) { c.ring[c.meta[c.curSlot].first-c.curStart+c.curBase]++ },
	}
	for name, corrupt := range chunkedCases {
		t.Run("Chunked/"+name, func(t *testing.T) {
			c, err := NewChunked(ChunkBytes(64), Limit(256))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			for i := range 40 {
				c.Append(payload(uint64(i), uint64(i%20)))
			}
			if err := c.check(); err != nil {
				t.Fatal(err)
			}
			corrupt(c)
			func() {
				defer func() { recover() }() // a corrupt prefix may panic in Range: also a catch
				if err := c.check(); err == nil {
					t.Error("check passed a corrupt Chunked")
				}
			}()
		})
	}
}

// TestMappingsNamed: /proc/self/maps names the mappings (kernels before
// 5.17 cannot: skipped).
func TestMappingsNamed(t *testing.T) {
	if !offHeap {
		t.Skip("no mappings in the fallback")
	}
	v := MustNew[rec16]()
	defer v.Close()
	v.Append(rec16{})
	c, err := NewChunked(Limit(1<<20), Name("segvec test history"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Skip(err)
	}
	if !strings.Contains(string(maps), "[anon:tagalloc segvec]") {
		t.Skip("the kernel does not name anonymous mappings")
	}
	if !strings.Contains(string(maps), "[anon:segvec test history]") {
		t.Error("the Chunked mapping does not carry its Name")
	}
}
