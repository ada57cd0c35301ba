//go:build !unix

package symbolizer

import "errors"

// mapFile does not map on this system: files are read by debug/elf.
func mapFile(path string) ([]byte, error) { return nil, errors.New("symbolizer: no mmap") }

func unmap(b []byte) error { return nil }
