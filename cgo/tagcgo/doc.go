// Package tagcgo charges the C allocations a cgo program makes during a call
// to a tagalloc tag, so one tagalloc report covers the C heap of a cgo
// program by the parts of the program that allocated it (docs/ARCHITECTURE.md,
// Overview: the third way).
//
// Its one job:
//
//	err := tagcgo.Do("sqlite", func() { C.sqlite3_exec(db, q, nil, nil, nil) })
//
// locks the goroutine to its OS thread, makes "sqlite" the thread's tag in
// the native allocator (libtagalloc.so, preloaded by `tagalloc run`), runs
// fn, and restores the thread's previous tag. Every block malloc'd by that
// thread meanwhile (and by threads C code creates meanwhile, which inherit
// the tag) is charged to "sqlite" for life, whichever thread frees it.
//
// When the program runs without the library (not preloaded), Do still checks
// the name and runs fn, and does nothing else: there is no cost beyond a
// function call. The library's functions are looked up once, when the
// package is initialized, with dlsym(RTLD_DEFAULT, ...).
//
// What is not charged to the tag: memory of the Go heap (Go's allocator is
// not malloc), and allocations by goroutines fn starts (they run on other
// threads). The Go runtime does not malloc on the locked thread, and it
// creates its own threads from a template thread while a goroutine is
// locked, so runtime threads do not inherit the tag.
//
// Built without cgo (CGO_ENABLED=0) the package compiles to the same API,
// never loaded.
package tagcgo
