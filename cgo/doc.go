// Package cgo holds tagalloc's native allocator, the library that is preloaded
// into unmodified programs (docs/ARCHITECTURE.md, D1), and builds it.
//
// The C sources live in src/ and the public header in include/tagalloc.h;
// they are embedded into the Go binary, so `tagalloc lib` can compile them
// with the system C compiler into a per-user cache keyed by a hash of the
// sources, the compiler and the flags. Nothing here uses cgo itself: the Go
// side only writes files and runs the compiler.
//
// The C side is documented in src/types.h (glossary, alloc and free paths,
// error and out-of-memory policy); tags and their books in src/tags.c; the
// region that carries the books to tagalloc run in src/books.c.
package cgo
