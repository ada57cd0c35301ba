// Package size reads byte counts as every tagalloc command and the
// preloaded library's TAGALLOC_ options take them: digits, then
// optionally K, M or G (powers of 1024, either case), then optionally
// "i" after the unit, then optionally "B": 65536, 100B, 512K, 512kb,
// 64MiB, 1G. The library's C parser (cgo/src/options.c) takes the same
// forms; testdata/sizes.txt lists cases both are tested against.
package size
