// Package layout is every fact the native library (cgo/src, C) and the Go
// packages share, apart from the size classes (package sizeclass): the
// books region's header, its fields' offsets and its version; the events
// ring's header, record types and RESIZE flags; the tag limits; the
// library's options, their defaults and the builds that read them.
//
// Nothing here is written by hand but this file. The one description is
// mklayout/desc.go; the command writes it out
//
//	go run ./internal/layout/mklayout
//
// as C (cgo/src/shared.h, included by types.h: the constants, the two
// headers' structs with a static assertion of each field's offset, the
// options as the X-macro options.c builds its table from) and as Go
// (layout.go here: the constants and the options table, whose types
// are written by hand in options.go;
// books/header_gen.go and tagtable/evheader_gen.go: the two headers'
// structs, field for field). mklayout's test regenerates every file in
// memory and compares it byte for byte with the one on disk, as
// sizeclass's does. This package imports nothing: programs that link
// package alloc link it.
package layout

//go:generate go run ./mklayout
