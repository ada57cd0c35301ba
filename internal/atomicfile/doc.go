// Package atomicfile writes a file whole or not at all: into a temporary
// file beside it, renamed over it, so a reader never sees half of one
// (reports, the symbol cache). Files are the owner's only (0600). A
// path that is not a regular file (-o /dev/null, a pipe) is written in
// place, never replaced.
package atomicfile
