// cgoprog is the cgo program tagcgo's tests run under `tagalloc run`: its C
// side mallocs blocks of exact size-class sizes inside tagcgo.Do, nested and
// from two threads at once, and it prints what tagcgo.Stats says of each tag
// ("stats NAME LIVE_BYTES LIVE_BLOCKS ALLOC_BYTES ALLOC_BLOCKS PEAK") for the
// test to compare with the report and with the figures it expects.
//
// Every tagged malloc happens inside one C function called once in the
// tagged region, so no Go code runs on the thread between mallocs.
package main

/*
#include <stdlib.h>

// volatile: the compiler may not drop a malloc whose block is never used.
static void *volatile outer[12], *volatile inner[5], *volatile worker[10], *volatile misc[64];
static int nmisc;

static void outer_alloc(void) { // c-side
	for (int i = 0; i < 3; i++) outer[i] = malloc(4096);
	for (int i = 3; i < 5; i++) outer[i] = malloc(65536);
	for (int i = 5; i < 10; i++) outer[i] = malloc(48);
	free(outer[0]), outer[0] = NULL;
	free(outer[5]), outer[5] = NULL;
}
static void outer_after_inner(void) { // c-side again, once inner has popped
	outer[10] = malloc(1024);
	outer[11] = malloc(1024);
}
static void outer_free_untagged(void) { free(outer[3]), outer[3] = NULL; }
static void inner_alloc(void) { // inner
	for (int i = 0; i < 3; i++) inner[i] = malloc(256);
	inner[3] = malloc(262144);
	inner[4] = malloc(1 << 20);
	free(inner[2]), inner[2] = NULL;
}
static void worker_alloc(void) { // worker, on another thread, while c-side is set on main's
	for (int i = 0; i < 10; i++) worker[i] = malloc(2048);
}
static void one(size_t n) { if (nmisc < 64) misc[nmisc++] = malloc(n); }
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"syscall"

	"github.com/tagalloc/tagalloc/cgo/tagcgo"
)

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "cgoprog:", err)
		os.Exit(1)
	}
}

// nest runs Do("deep") 40 deep, each level mallocing 16 bytes; levels past
// 32 get EOVERFLOW but still run under the enclosing "deep".
func nest(level int, errs *int) {
	if level == 40 {
		return
	}
	err := tagcgo.Do("deep", func() {
		C.one(16)
		nest(level+1, errs)
	})
	if err != nil {
		if !errors.Is(err, syscall.EOVERFLOW) {
			must(err)
		}
		*errs++
	}
}

func main() {
	fmt.Println("loaded", tagcgo.Loaded())

	var wg sync.WaitGroup
	started, release := make(chan struct{}), make(chan struct{})
	ran := 0
	must(tagcgo.Do("c-side", func() {
		ran++
		wg.Add(1)
		go func() {
			defer wg.Done()
			must(tagcgo.Do("worker", func() {
				C.worker_alloc()
				close(started)
				<-release // c-side is still set on main's thread meanwhile
			}))
		}()
		<-started
		C.outer_alloc()
		must(tagcgo.Do("inner", func() { ran++; C.inner_alloc() }))
		C.outer_after_inner()
		close(release)
	}))
	wg.Wait()
	C.outer_free_untagged() // untagged thread: still debits c-side
	C.one(4096)             // untagged

	// A panic in fn pops the tag: "panicky" keeps one block only.
	func() {
		defer func() { _ = recover() }()
		_ = tagcgo.Do("panicky", func() { C.one(4096); panic("in fn") })
	}()
	C.one(4096) // untagged again

	errs := 0
	nest(0, &errs)
	C.one(16) // untagged
	fmt.Println("deep-errors", errs)

	if err := tagcgo.Do("", func() { ran += 100 }); !errors.Is(err, tagcgo.ErrBadTag) {
		must(fmt.Errorf("Do(\"\") = %v", err))
	}
	fmt.Println("ran", ran)

	for _, tag := range []string{"c-side", "inner", "worker", "panicky", "deep", "never-used"} {
		if s, ok := tagcgo.Stats(tag); ok {
			fmt.Println("stats", tag, s.LiveBytes, s.LiveBlocks, s.AllocBytes, s.AllocBlocks, s.PeakLiveBytes)
		}
	}
}
