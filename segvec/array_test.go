package segvec

import (
	"errors"
	"os"
	"runtime"
	"strings"
	"testing"
)

// An Array is zeroed, holds what is written at every index, is off the
// Go heap on Linux (named in the process's map), and refuses pointers, a
// bad length and options that are not its own.
func TestArray(t *testing.T) {
	type ent struct {
		k uint64
		v uint32
	}
	for _, n := range []int{1, 1000, 1 << 18} { // the last is 4 MiB: huge pages asked
		a, err := NewArray[ent](n, Name("tagalloc test array"))
		if err != nil {
			t.Fatal(err)
		}
		s := a.S()
		if len(s) != n || a.Bytes() < n*16 {
			t.Fatalf("n %d: len %d, %d bytes", n, len(s), a.Bytes())
		}
		for i := range s {
			if s[i] != (ent{}) {
				t.Fatalf("n %d: element %d not zero", n, i)
			}
			s[i] = ent{uint64(i) + 1, uint32(i)}
		}
		for i := range s {
			if s[i].k != uint64(i)+1 || s[i].v != uint32(i) {
				t.Fatalf("n %d: element %d is %+v", n, i, s[i])
			}
		}
		if runtime.GOOS == "linux" && n == 1<<18 {
			maps, err := os.ReadFile("/proc/self/maps")
			if err == nil && strings.Contains(string(maps), "[anon:") && !strings.Contains(string(maps), "tagalloc test array") {
				t.Errorf("the array's mapping is not named in /proc/self/maps")
			}
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		if a.S() != nil || a.Close() != nil {
			t.Fatal("closed twice or still holding its slice")
		}
	}
	if _, err := NewArray[*int](4); !errors.Is(err, ErrHasPointers) {
		t.Errorf("pointers: err %v", err)
	}
	for _, n := range []int{0, -1, 1 << 62} {
		if _, err := NewArray[uint64](n); !errors.Is(err, ErrOption) {
			t.Errorf("n %d: err %v, want ErrOption", n, err)
		}
	}
	if _, err := NewArray[uint64](4, Limit(1<<20)); !errors.Is(err, ErrOption) {
		t.Errorf("Limit on an Array: err %v, want ErrOption", err)
	}
}
