// goprog is a cgo program with memory on both sides, for the CLI's tests:
// Go-side blocks from package alloc (tags "go-cache", "go-buffers") and
// C-side blocks mallocked inside tagcgo.Do ("c-side"). It prints each tag's
// books as it sees them ("NAME LIVE_BYTES LIVE_BLOCKS ALLOC_BYTES
// ALLOC_BLOCKS"); with "wait" it then prints "ready PID" and holds its
// memory until its stdin closes. A budget of 16 KiB observes "go-cache"
// (which ends past it, with 9 x 4096 bytes: one crossing).
package main

/*
#include <stdlib.h>
static void *volatile blocks[8];
static void c_alloc(void) { // c-side: 4 x 4096 + 2 x 65536, one 4096 freed
	for (int i = 0; i < 4; i++) blocks[i] = malloc(4096);
	for (int i = 4; i < 6; i++) blocks[i] = malloc(65536);
	free(blocks[0]), blocks[0] = NULL;
}
*/
import "C"

import (
	"fmt"
	"io"
	"os"

	"github.com/tagalloc/tagalloc/alloc"
	"github.com/tagalloc/tagalloc/cgo/tagcgo"
	"github.com/tagalloc/tagalloc/reporter"
)

func main() {
	if err := alloc.SetBudget("go-cache", 16<<10, alloc.BudgetObserve); err != nil {
		fmt.Fprintln(os.Stderr, "goprog:", err)
		os.Exit(1)
	}
	var keep [][]byte
	for i := 0; i < 10; i++ {
		keep = append(keep, alloc.Malloc(4096, "go-cache"))
	}
	alloc.Free(keep[0])
	// a memory reporter of the program's own: its cache, in the tree
	if err := reporter.Register("go-cache", func(report func(reporter.Measurement)) {
		report(reporter.Measurement{Path: "explicit/go-cache/entries", Kind: reporter.KindNonheap, Amount: 9 * 4096,
			Description: "The cache's entries (off the Go heap, from alloc)."})
		report(reporter.Measurement{Path: "go-cache-entries", Kind: reporter.KindOther, Units: reporter.UnitsCount, Amount: 9})
	}); err != nil {
		fmt.Fprintln(os.Stderr, "goprog:", err)
		os.Exit(1)
	}
	big := alloc.Calloc(1<<20, "go-buffers")
	big = alloc.Realloc(big, 2<<20) // keeps its tag
	if err := tagcgo.Do("c-side", func() { C.c_alloc() }); err != nil {
		fmt.Fprintln(os.Stderr, "goprog:", err)
		os.Exit(1)
	}
	for _, s := range alloc.TagStats() {
		if s.Name == "go-cache" || s.Name == "go-buffers" {
			fmt.Println(s.Name, s.LiveBytes, s.LiveBlocks, s.AllocBytes, s.AllocBlocks)
		}
	}
	if s, ok := tagcgo.Stats("c-side"); ok {
		fmt.Println("c-side", s.LiveBytes, s.LiveBlocks, s.AllocBytes, s.AllocBlocks)
	}
	alloc.PublishReports() // the reporters' figures before a short life ends
	if len(os.Args) > 1 && os.Args[1] == "wait" {
		fmt.Println("ready", os.Getpid())
		io.Copy(io.Discard, os.Stdin)
	}
	_ = big
}
