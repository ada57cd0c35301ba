//go:build !amd64

package tagtable

// prefetch does nothing here: Go has no portable prefetch, and loads in
// its place would wait for each miss (prefetch_amd64.go).
func prefetch(addrs []uintptr) {}
