package tagtable

import (
	"runtime"
	"sync/atomic"
	"testing"
)

// Close must not race the cleanup that closes a dropped profile's store:
// once Close has read p.store, p may be unreachable, and a collection
// then could run the cleanup under Close (the race detector caught it in
// CI). Collections run without pause beside profiles closed as soon as
// they are made; run under -race this fails without Close's Stop.
func TestCloseRacesNoCleanup(t *testing.T) {
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for !stop.Load() {
			runtime.GC()
		}
	}()
	n := 3000
	if testing.Short() {
		n = 1000
	}
	for i := range n {
		p := NewProfile(1, "full", 1)
		p.Alloc(uint64(i+1)<<12, 64, 64, 1, 1)
		p.Fork(1)
		p.Close()
	}
	stop.Store(true)
	<-done
}
