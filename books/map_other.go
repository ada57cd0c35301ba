//go:build !linux

package books

// mapRegion, where there is no shared region to publish through: memory of
// the Go heap, so Region (and package alloc's books) still work in-process.
func mapRegion(name string) (mem []byte, path string, err error) {
	return make([]byte, writerSize), "", nil
}

func unmapRegion(mem []byte) error { return nil }
