package reporter

import (
	"bytes"
	"strconv"
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

	// Processes of one program with one reason share a line: Chromium's.
	many := &Report{Schema: Schema}
	for pid := 100; pid < 115; pid++ {
		cmd := []string{"/usr/lib/chromium/chromium --type=renderer --lang=" + strconv.Itoa(pid)} // rewritten by the process: one word
		if pid == 100 {
			cmd = []string{"/usr/lib/chromium/chromium", "--type=renderer"}
		}
		many.WithoutBooks = append(many.WithoutBooks, WithoutBooks{PID: 214 - pid, User: "root", Program: "/usr/lib/chromium/chromium", Command: cmd, Why: "own malloc"})
	}
	many.WithoutBooks = append(many.WithoutBooks, WithoutBooks{PID: 200, UID: 7, Command: []string{"/usr/lib/chromium/chromium"}, Why: "own malloc"})
	tree.Reset()
	many.WriteWithoutBooks(&tree)
	require.Equal(t, "\n16 programs ran without tagalloc's books (their memory is not in this report):\n"+
		"  15 processes of /usr/lib/chromium/chromium, root (uid 0): own malloc\n"+
		"    pids 100 101 102 103 104 105 106 107 108 109 110 111 and 3 more\n"+
		"    e.g. /usr/lib/chromium/chromium --type=renderer --lang=114\n"+
		"  pid 200     uid 7: own malloc\n    /usr/lib/chromium/chromium\n", tree.String(), "another user's process is a line of its own")

	for _, bad := range []string{
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":[{"pid":0,"uid":0,"command":["x"],"why":"static"}]}`,
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":[{"pid":5,"uid":0,"command":["x"],"why":""}]}`,
		`{"schema":"tagalloc.report/v2","processes":[],"without_books":{"pid":5}}`,
	} {
		_, err := Read(strings.NewReader(bad))
		require.ErrorIs(t, err, ErrReport, bad)
	}
}
