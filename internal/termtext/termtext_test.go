package termtext

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestClean(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"python3", "python3"},
		{"caf\u00e9 \u4e2d", "caf\u00e9 \u4e2d"},
		{"\x1b[2Jx", "?[2Jx"},
		{"a\nb\tc\x7f", "a?b?c?"},
		{"\u0085c1", "?c1"},
		{"evil\u202egnp.exe", "evil?gnp.exe"},
		{"iso\u2066x\u2069", "iso?x?"},
		{"bad\xffutf8", "bad?utf8"},
	} {
		require.Equal(t, tc.want, Clean(tc.in), "%q", tc.in)
	}
}

func TestCut(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"a longer name", 10, "a longe..."},
		{"\u4e2d\u4e2d\u4e2d\u4e2d\u4e2d\u4e2d", 5, "\u4e2d\u4e2d..."},
		{"\x1b[31mred", 6, "?[3..."},
		{"abcdef", 2, ".."},
	} {
		require.Equal(t, tc.want, Cut(tc.in, tc.n), "%q %d", tc.in, tc.n)
	}
}
