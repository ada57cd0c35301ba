// Command tagalloc runs programs under the tagalloc allocator and reports
// who holds their memory, by tag.
//
//	tagalloc run [FLAGS] [--] PROG [ARGS...]   run PROG preloaded, stacks sampled; print its tree, save its report; exit with its status
//	tagalloc report [FLAGS] FILE.json         re-render a saved report (tree, json, dmd, dark-matter, pprof, about-memory)
//	tagalloc diff [FLAGS] A.json B.json       what changed from A to B
//	tagalloc snapshot [FLAGS] PID             the report of a running process
//	tagalloc top [FLAGS] PID                  its tags, refreshed
//	tagalloc serve [FLAGS] PID                its tags in a browser, /metrics, /debug/pprof/
//	tagalloc lib | version | help [COMMAND]
//
// tagalloc help COMMAND (or COMMAND -h) prints a command's flags; the
// table of commands is in cli.go, and docs/cli/ has a page for each (docs/cli.md indexes them). Exit
// codes: 2 for a usage error, 1 when tagalloc fails, PROG's status for run.
//
// main only wires flags to packages: the library is built by package cgo,
// the books are read by books and procbooks, the stacks drained by drain
// into tagtable's profiles, and all rendered by reporter. Errors print as
// "tagalloc: ..." on one line.
//
// For tagalloc's own developers, TAGALLOC_CPUPROFILE=FILE writes a CPU
// profile of tagalloc itself (not of PROG) for go tool pprof.
package main
