// Command mkclasses writes the size-class table as Go and C:
//
//	go run ./sizeclass/mkclasses   (from the module root)
package main

import (
	"fmt"
	"os"

	"github.com/tagalloc/tagalloc/sizeclass"
)

func main() {
	for path, src := range map[string][]byte{
		"sizeclass/classes.go":  sizeclass.GoSource(),
		"cgo/src/sizeclasses.h": sizeclass.CSource(),
	} {
		if err := os.WriteFile(path, src, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "mkclasses: %v (run from the module root)\n", err)
			os.Exit(1)
		}
	}
}
