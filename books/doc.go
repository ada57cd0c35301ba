// Package books is the books region (docs/ARCHITECTURE.md, D6), read and
// written: that is its one job. It reads the books a
// tagalloc-preloaded process keeps in its region (the C side is
// cgo/src/books.c), the tag names and, summed over every thread record and
// heap, each tag's exact live and cumulative bytes and blocks; and it
// writes regions of the same layout for Go programs (Region, used by
// package alloc), so one reader serves both and a cgo program's two
// regions merge into one process. Kept reads the regions of a run's
// processes that have ended while the run goes on, and removes their
// files.
//
// The region is written by a program that may be buggy, dying or hostile,
// so the reader never trusts it: every offset, address, count and name is
// checked against the mapped bytes before use, lists are followed at most as
// many steps as could fit, and a region that fails a check gives an error
// naming what is wrong (never a panic or a hang). FuzzParse exercises this.
//
// Layout (version 6 from the native library, region.go's Version; 4 from
// writer.go, WriterVersion, with the 312-byte header that carries the
// budgets table; docs/ARCHITECTURE.md, "The books region"): a header at offset 0 (magic "TAGALLOC", version, sizes,
// pid, ppid, start time, state, the offsets of the arrays and the field
// offsets of the records, see header in region.go), then the command
// line, the tag names (tag_slots slots of tag_name_size bytes,
// NUL-padded), the fallback counters and tag peaks (one per slot), the
// class sizes, the reports table and the reported bytes per tag, the
// holders and peak upper bounds per tag (version 5 on), the budgets table
// (version 6, and version 4 with a 312-byte header), and the
// records (thread records with their per-tag counter chunks) up to
// `used`. Records refer to each other by their address in the process;
// base is the region's address there. Versions 1 to 3 also had heap
// records with per-class counts; the reader still reads them.
package books
