// Package procbooks reads the books of a running process, by its pid:
// that is its one job. It finds them in the process's memory map (the
// region files of tagalloc run, the memfd of a Go program's books) or,
// for a program preloaded by hand, through the native library's
// tagalloc_books symbol (read from its ELF file) and /proc/PID/mem;
// package books parses and merges them.
//
// It is apart from books so that books, and package alloc above
// it, do not link debug/elf and debug/dwarf.
package procbooks
