//go:build !linux

package tagtable

import "os"

// openRegionFile opens a region file (see open_linux.go).
func openRegionFile(path string) (*os.File, error) { return os.Open(path) }
