package symbolizer_test

import (
	"fmt"

	"github.com/tagalloc/tagalloc/symbolizer"
)

// A sampled allocation's stack, innermost first, as module paths: the
// allocator, libc, then the driver that asked for the memory.
func ExampleLibrary() {
	stack := []string{
		"/home/u/.cache/tagalloc/3f2a/libtagalloc.so",
		"/lib/x86_64-linux-gnu/libc.so.6",
		"/vendor/lib64/libGLESv2_adreno.so",
		"/usr/bin/app",
	}
	fmt.Println(symbolizer.Library(stack))
	// Output: libGLESv2_adreno.so
}
