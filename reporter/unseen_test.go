package reporter

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The programs a run saw without books survive a round trip through the
// JSON, end both trees (the run's summary leaves them to its caller),
// with their commands and reasons cleaned of control bytes, and a file
// whose entry has no pid or no reason is refused.
func TestWithoutBooks(t *testing.T) {
	r := sample()
	r.WithoutBooks = []WithoutBooks{
		{PID: 77, UID: 0, User: "root", Command: []string{"/usr/lib/chromium/chromium", "--type=renderer"}, Why: "its program defines malloc"},
		{PID: 78, UID: 1000, Command: []string{"evil\x1b[2J", "\x07"}, Why: "static\x1b]0;x\x07"},
	}
	var b bytes.Buffer
	require.NoError(t, r.WriteJSON(&b))
	back, err := Read(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	require.Equal(t, r.WithoutBooks, back.WithoutBooks)

	var tree bytes.Buffer
	require.NoError(t, back.WriteOverview(&tree))
	out := tree.String()
	require.Contains(t, out, "\n2 programs ran without tagalloc's books (their memory is not in this report):\n"+
		"  pid 77      root (uid 0): its program defines malloc\n    /usr/lib/chromium/chromium --type=renderer\n")
	require.Contains(t, out, "  pid 78      uid 1000: static?]0;x?\n    evil?[2J ?\n")
	require.NotContains(t, out, "\x1b")

	var sum bytes.Buffer
	require.NoError(t, back.WriteSummary(&sum))
	require.NotContains(t, sum.String(), "without tagalloc's books", "tagalloc run writes them after its own lines")
	sum.Reset()
	back.WriteWithoutBooks(&sum)
	require.True(t, strings.HasPrefix(sum.String(), "\n2 programs ran without"), sum.String())

	none := &Report{Schema: Schema, WithoutBooks: r.WithoutBooks[:1]}
	tree.Reset()
	require.NoError(t, none.WriteOverview(&tree))
	require.Equal(t, "tagalloc: no process wrote its books\n\n1 program ran without tagalloc's books (their memory is not in this report):\n"+
		"  pid 77      root (uid 0): its program defines malloc\n    /usr/lib/chromium/chromium --type=renderer\n", tree.String())

	for _, bad := range []string{
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":[{"pid":0,"uid":0,"command":["x"],"why":"static"}]}`,
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":[{"pid":5,"uid":0,"command":["x"],"why":""}]}`,
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":{"pid":5}}`,
	} {
		_, err := Read(strings.NewReader(bad))
		require.ErrorIs(t, err, ErrReport, bad)
	}
}
