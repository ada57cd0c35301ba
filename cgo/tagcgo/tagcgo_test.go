package tagcgo

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNotPreloaded(t *testing.T) {
	if Loaded() {
		t.Skip("this test process runs with libtagalloc preloaded")
	}
	var order []string
	err := Do("outer", func() {
		order = append(order, "outer")
		require.NoError(t, Do("inner", func() { order = append(order, "inner") }))
	})
	require.NoError(t, err)
	require.Equal(t, []string{"outer", "inner"}, order)
	_, ok := Stats("outer")
	require.False(t, ok)
}

// TestLoaded runs in this test binary re-run under `tagalloc run` by
// TestPreloadedProgram, which sets TAGCGO_WANT_LOADED=1.
func TestLoaded(t *testing.T) {
	if os.Getenv("TAGCGO_WANT_LOADED") != "1" {
		t.Skip("run by TestPreloadedProgram under tagalloc run")
	}
	require.True(t, Loaded())
	_, ok := Stats("tagcgo-test-unused")
	require.False(t, ok, "a tag never set has no stats")
	ran := 0
	require.NoError(t, Do("tagcgo-test", func() {
		ran++
		require.NoError(t, Do("tagcgo-test-inner", func() { ran++ }))
	}))
	require.Equal(t, 2, ran)
	for _, tag := range []string{"tagcgo-test", "tagcgo-test-inner"} {
		s, ok := Stats(tag) // registered by the push, whatever it holds
		require.True(t, ok, tag)
		require.GreaterOrEqual(t, s.AllocBytes, s.LiveBytes, tag)
	}
}

// Checked in Go, so the same with or without the library.
func TestBadTagsDoNotRunFn(t *testing.T) {
	for _, tag := range []string{"", strings.Repeat("x", MaxTagLen+1), strings.Repeat("y", 4000), "a\x00b", "\x00"} {
		ran := false
		err := Do(tag, func() { ran = true })
		require.ErrorIs(t, err, ErrBadTag, "%q", tag)
		require.False(t, ran, "%q", tag)
		require.Contains(t, err.Error(), "1 to 63 bytes")
		_, ok := Stats(tag)
		require.False(t, ok)
	}
	ran := false
	require.NoError(t, Do(strings.Repeat("z", MaxTagLen), func() { ran = true }))
	require.True(t, ran)
}

func TestPanicInFnPropagates(t *testing.T) {
	for range 3 { // the tag stack and thread lock must be unwound each time
		require.PanicsWithValue(t, "boom", func() {
			_ = Do("panics", func() { panic("boom") })
		})
	}
	ran := false
	require.NoError(t, Do("after", func() { ran = true }))
	require.True(t, ran)
}

func TestConcurrentDo(t *testing.T) {
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			var err error
			for range 1000 {
				if err = Do([]string{"a", "b"}[i%2], func() {}); err != nil {
					break
				}
			}
			errs <- err
		}()
	}
	for range 8 {
		require.NoError(t, <-errs)
	}
}

// BenchmarkDo measures Do with an empty fn. Without the library it is a name
// check and a call; preloaded it adds LockOSThread and two cgo calls (push,
// pop). To measure it preloaded:
//
//	go test -c -o /tmp/tagcgo.test ./cgo/tagcgo
//	go run ./cmd/tagalloc run -q -- /tmp/tagcgo.test -test.run '^$' -test.bench Do
func BenchmarkDo(b *testing.B) {
	name := "not-loaded"
	if Loaded() {
		name = "loaded"
	}
	fn := func() {}
	b.Run(name, func(b *testing.B) {
		for b.Loop() {
			if err := Do("bench", fn); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(name+"/nested", func(b *testing.B) {
		inner := func() { _ = Do("bench-inner", fn) }
		for b.Loop() {
			if err := Do("bench", inner); err != nil {
				b.Fatal(err)
			}
		}
	})
	if !Loaded() {
		return
	}
	b.Run("stats", func(b *testing.B) {
		for b.Loop() {
			if _, ok := Stats("bench"); !ok {
				b.Fatal("no stats")
			}
		}
	})
}
