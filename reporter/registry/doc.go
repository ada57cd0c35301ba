// Package registry holds a Go program's memory reporters (about:memory's
// nsIMemoryReporter, and the C side's tagalloc_register_reporter): a
// reporter says what a part of the program holds; Collect runs them all
// and checks what they say. That is its one job.
//
// Package alloc publishes what they say once a second into the process's
// books, next to its tags, so tagalloc run, snapshot, top and serve show
// it; the Go runtime's own memory is one such reporter (explicit/go/...).
// It is apart from package reporter so that a program that only wants
// off-heap memory (package alloc) links neither the symbolizer (debug/elf,
// debug/dwarf) nor pprof: alloc's dependency test checks that. Package
// reporter keeps these names as aliases.
package registry
