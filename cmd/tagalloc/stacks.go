// The launcher's sizes and its one symbolizer.

package main

import (
	"fmt"
	"os"
	"sync"

	"github.com/tagalloc/tagalloc/internal/size"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/symbolizer"
)

// parseSize reads a byte count of at most 64 TiB (internal/size: 65536,
// 512K, 64MiB, 1G).
func parseSize(s string) (int, error) {
	v, err := size.Parse(s, 1<<46)
	return int(v), err
}

// newSymbolizer names frames from the modules' ELF and DWARF tables; one
// symbolizer serves every report of the run (the live view's too), so
// each object file is read once.
func newSymbolizer() reporter.Symbolize { return reporter.SymbolizeWith(sharedSymbolizer()) }

// sharedSymbolizer keeps the frames it finds in a disk cache by build-id
// (~/.cache/tagalloc/symbols; TAGALLOC_SYMBOL_CACHE=DIR or off), so later
// runs need not read the objects' DWARF again.
var sharedSymbolizer = sync.OnceValue(func() *symbolizer.Symbolizer {
	var opts []symbolizer.Option
	if dir, ok := symbolizer.DiskCacheFromEnv(); ok {
		opts = append(opts, symbolizer.WithDiskCache(dir))
	}
	return symbolizer.New(opts...)
})

// flushSymbols writes the frames found since the symbolizer's disk cache
// was read (or last flushed) to it; a failure is printed and otherwise
// ignored.
func flushSymbols() {
	if err := sharedSymbolizer().Flush(); err != nil {
		fmt.Fprintf(os.Stderr, "tagalloc: symbol cache: %v\n", err)
	}
}
