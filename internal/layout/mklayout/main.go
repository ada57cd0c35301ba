// Command mklayout writes the facts C and Go share (desc.go, the one
// description) as C and Go (gen.go):
//
//	go run ./internal/layout/mklayout   (anywhere in the module)
//
// Its test (gen_test.go) fails while a written file differs from what
// it writes now.
package main

import (
	"fmt"
	"os"
	"path/filepath"
)

func main() {
	root, err := moduleRoot()
	if err != nil {
		fmt.Fprintf(os.Stderr, "mklayout: %v\n", err)
		os.Exit(1)
	}
	for _, f := range Files() {
		if err := os.WriteFile(filepath.Join(root, f.Path), f.Source, 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "mklayout: %v\n", err)
			os.Exit(1)
		}
	}
}

// moduleRoot is the directory holding go.mod, from the working directory up.
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", fmt.Errorf("no go.mod above the working directory")
		}
		dir = up
	}
}
