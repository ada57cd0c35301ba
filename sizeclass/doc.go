// Package sizeclass is the single source of truth for tagalloc's size
// classes (docs/ARCHITECTURE.md, D3). The generator in gen.go computes the table; the
// command mkclasses writes it as Go (classes.go) for the pure-Go arena and as
// C (cgo/src/sizeclasses.h) for the preloaded allocator. A test regenerates
// both in memory and byte-compares them with the files on disk.
//
// Glossary (sizes fixed here, used by both sides):
//
//	page       64 KiB (PageShift 16), the unit the arena hands out.
//	span       a run of pages; a small span holds blocks of one class.
//	size class a block size; 16 B steps up to 128 B, then 8 classes per
//	           doubling up to 512 KiB, so a request never wastes more than
//	           1/8 of its block beyond 128 B (below, at most 15 B).
//	large      above MaxSmall: whole pages (64 KiB granules), waste ≤ 1/8.
//
// Every class is a multiple of 16 (so every block is 16-byte aligned), and a
// span's pages are chosen so the tail a span cannot use is ≤ 1/8 of it.
package sizeclass

//go:generate go run ./mkclasses
