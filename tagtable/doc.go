// Package tagtable is the sampled side of the books: it reads a process's
// events ring (events.go, events_linux.go: the records the stacks build of
// the native library writes, cgo/src/ring.c) and turns them into a
// Profile (profile.go): the live sampled blocks, per (stack, tag) records,
// the dark-matter marks of memory reporters (darkmatter.go) and the
// bounded history of events with its timeline (history.go). That is its one
// job; package drain follows a run's rings into it.
//
// The ring is written by a program that may be buggy, dying or hostile,
// so the reader never trusts it: a malformed record gives an error that
// wraps ErrFormat, never a panic (FuzzDrain).
//
// The books region itself (the exact per-tag counters, its reader and
// Go writer) is package books; books.go keeps its names here as aliases
// for callers not yet moved.
package tagtable
