// Command tagalloc runs programs under the tagalloc allocator and reports
// who holds their memory, by tag.
//
//	tagalloc lib                                 print the path of libtagalloc.so (built if needed)
//	tagalloc run [-o FILE.json] [-q] -- PROG ARGS run PROG preloaded; print its tree; exit with its status
//	tagalloc run [--stacks off|sampled|full] ...  the same, with who allocated it (DMD, pprof)
//	tagalloc report FILE.json [--format tree|json|dmd|pprof|firefox] [-o OUT]
//	tagalloc diff A.json B.json [--format tree|json] [-o OUT]
//	tagalloc snapshot PID [-o FILE.json] [--format json|tree]
//	tagalloc top [-n N] [-interval D] PID
//
// main only wires flags to packages: the library is built by package cgo,
// the books are read by tagtable and rendered by reporter. Errors print as
// "tagalloc: ..." with a non-zero exit; files are written atomically.
//
// For tagalloc's own developers, TAGALLOC_CPUPROFILE=FILE writes a CPU
// profile of tagalloc itself (not of PROG) for go tool pprof.
package main
