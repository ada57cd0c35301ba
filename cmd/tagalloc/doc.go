// Command tagalloc runs programs under the tagalloc allocator and prints the
// path of its preload library.
//
//	tagalloc lib                 print the path of libtagalloc.so (built if needed)
//	tagalloc run -- PROG ARGS    run PROG with the library preloaded; exit with its status
//
// main only wires flags to packages: the library is built by package cgo.
package main
