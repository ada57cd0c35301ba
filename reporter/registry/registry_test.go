package registry

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRegistry(t *testing.T) {
	t.Cleanup(func() {
		for _, n := range []string{"a", "b", "bad", "panics"} {
			Unregister(n)
		}
	})
	require.ErrorIs(t, Register("", func(func(Measurement)) {}), ErrReporter)
	require.ErrorIs(t, Register("x", nil), ErrReporter)
	require.NoError(t, Register("b", func(r func(Measurement)) {
		r(Measurement{Path: "explicit/b", Kind: KindHeap, Amount: 2})
	}))
	require.NoError(t, Register("a", func(r func(Measurement)) {
		r(Measurement{Path: "explicit/a", Amount: 1})
		r(Measurement{Path: "a-count", Kind: KindOther, Units: UnitsCount, Amount: 3})
	}))
	ms, err := Collect()
	require.NoError(t, err)
	require.Equal(t, []Measurement{ // in name order
		{Path: "explicit/a", Amount: 1},
		{Path: "a-count", Kind: KindOther, Units: UnitsCount, Amount: 3},
		{Path: "explicit/b", Kind: KindHeap, Amount: 2},
	}, ms)

	// bad items are left out and named; the good ones stay
	require.NoError(t, Register("bad", func(r func(Measurement)) {
		r(Measurement{Path: ""})
		r(Measurement{Path: strings.Repeat("p", MaxPath+1)})
		r(Measurement{Path: "explicit/count", Units: UnitsCount})
		r(Measurement{Path: "explicit/heap/mine", Amount: 1})
		r(Measurement{Path: "odd", Kind: 7})
		r(Measurement{Path: "explicit/a", Amount: 1}) // a's
		r(Measurement{Path: "bad\nline"})
	}))
	require.NoError(t, Register("panics", func(r func(Measurement)) { panic("boom") }))
	ms, err = Collect()
	require.Len(t, ms, 3)
	require.ErrorIs(t, err, ErrReporter)
	for _, want := range []string{`"bad": path ""`, "1 to 111 bytes", "explicit/count: an explicit item", "allocator's own path",
		"odd: kind 7", "explicit/a reported twice", "control character", `"panics" panicked: boom`} {
		require.Contains(t, err.Error(), want)
	}
	require.True(t, Unregister("bad"))
	require.False(t, Unregister("bad"))
}
