package main

import (
	"bytes"
	"math/bits"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The files on disk must be what the generator writes now.
func TestGeneratedFilesUpToDate(t *testing.T) {
	for _, f := range Files() {
		t.Run(f.Path, func(t *testing.T) {
			got, err := os.ReadFile(filepath.Join("..", "..", "..", f.Path))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, f.Source) {
				t.Fatalf("%s is stale: run `go run ./internal/layout/mklayout`", f.Path)
			}
		})
	}
}

func constOf(t *testing.T, cs []Const, c string) uint64 {
	t.Helper()
	for _, x := range cs {
		if x.C == c {
			return x.Value
		}
	}
	t.Fatalf("no constant %s", c)
	return 0
}

// What the description says must hold together.
func TestDescription(t *testing.T) {
	max := constOf(t, Tags, "MAX_TAGS")
	if constOf(t, Tags, "TAG_OVERFLOW") != max+1 || constOf(t, Tags, "TAG_SLOTS") != max+2 {
		t.Errorf("the overflow tag is MAX_TAGS + 1 and the slots MAX_TAGS + 2")
	}
	if constOf(t, Tags, "TAG_SLOTS") > 0xffff {
		t.Errorf("tag ids are uint16 in the span's tag array (and 0xffff is TA_TAG_MIXED)")
	}
	if constOf(t, Books, "BOOKS_VERSION") != uint64(BooksHeader.versions()) {
		t.Errorf("BOOKS_VERSION %d, but the header's fields go to version %d", constOf(t, Books, "BOOKS_VERSION"), BooksHeader.versions())
	}
	if 16+constOf(t, Books, "REPORT_PATH")+constOf(t, Books, "REPORT_DESC") != constOf(t, Books, "REPORT_SLOT") {
		t.Errorf("a report slot is 16 bytes, a path and a description")
	}
	if got := EventsHeader.Size(); got != 256 {
		t.Errorf("the events header has %d bytes: head, tail and the drop counts are on lines of their own at 64, 128 and 192", got)
	}
	for _, s := range []Struct{BooksHeader, EventsHeader} {
		prev := uint64(0)
		for v := 1; v <= s.versions(); v++ {
			if n := s.SizeAt(v); n <= prev || n%8 != 0 {
				t.Errorf("%s: version %d's header has %d bytes after %d", s.C, v, n, prev)
			} else {
				prev = n
			}
		}
		names := map[string]bool{}
		for i, f := range s.Fields {
			if i > 0 && f.Since < s.Fields[i-1].Since {
				t.Errorf("%s.%s: version %d after a field of version %d (a version adds fields at the end)", s.C, f.C, f.Since, s.Fields[i-1].Since)
			}
			if f.Go != "" && names[f.Go] || names[f.C] {
				t.Errorf("%s: %s/%s named twice", s.C, f.C, f.Go)
			}
			names[f.Go], names[f.C] = f.Go != "", true
		}
	}
	types := map[uint64]bool{}
	for _, r := range Records {
		if types[r.Type] || r.Type == 0 {
			t.Errorf("record %s: type %d taken or 0", r.C, r.Type)
		}
		types[r.Type] = true
	}
	// the flags are single bits below the left-out count's field
	shift := constOf(t, ResizeFlags, "RESIZE_LEFT_OUT_SHIFT")
	seen := uint64(0)
	for _, f := range ResizeFlags {
		if strings.HasSuffix(f.C, "_SHIFT") || strings.HasSuffix(f.C, "_MAX") {
			continue
		}
		if bits.OnesCount64(f.Value) != 1 || f.Value >= 1<<shift || seen&f.Value != 0 {
			t.Errorf("RESIZE flag %s = %#x", f.C, f.Value)
		}
		seen |= f.Value
	}
	if lo := constOf(t, ResizeFlags, "RESIZE_LEFT_OUT_MAX"); shift+uint64(bits.Len64(lo)) != constOf(t, ResizeFlags, "RESIZE_GREW_SHIFT") {
		t.Errorf("the left-out count ends where the grew count starts")
	}
	opts := map[string]bool{}
	for _, o := range Options {
		if !strings.HasPrefix(o.Name, "TAGALLOC_") || opts[o.Name] {
			t.Errorf("option %s: not TAGALLOC_ or named twice", o.Name)
		}
		opts[o.Name] = true
		if o.Field != "" {
			_ = o.Value() // panics on a default that is not a size
		}
	}
}
