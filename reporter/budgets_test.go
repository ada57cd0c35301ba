package reporter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/tagtable"
)

// budgetSnapshot is a process's books with three budgets as the books
// reader gives them (by tag): a fail budget that refused, a notify
// budget past its limit, and an observe budget on a hostile name.
func budgetSnapshot() *tagtable.Snapshot {
	return &tagtable.Snapshot{PID: 7, Command: []string{"game"}, Tags: []tagtable.TagTotals{
		{Name: "gfx/webgl", LiveBytes: 190 << 20, LiveBlocks: 10, AllocBytes: 300 << 20, AllocBlocks: 20, PeakLiveBytes: 250 << 20},
		{Name: "net", LiveBytes: 300 << 20, LiveBlocks: 3, AllocBytes: 300 << 20, AllocBlocks: 3, PeakLiveBytes: 300 << 20},
	}, Budgets: []books.Budget{
		{Tag: "\x1b[2Jevil\u202e", Limit: 1 << 20, Policy: "observe", Charged: 4096},
		{Tag: "gfx", Limit: 256 << 20, Policy: "fail", Charged: 200 << 20, Crossings: 1, Refused: 3},
		{Tag: "net", Limit: 256 << 20, Policy: "notify", Charged: 300<<20 + 64<<10, Crossings: 2, Over: true},
	}}
}

// FromSnapshot keeps every budget, in the books' order, with every field
// under its snake_case name in the JSON; a process without budgets has
// no "budgets" key; Read takes the budgets back.
func TestBudgetsJSON(t *testing.T) {
	p := FromSnapshot(budgetSnapshot())
	require.Equal(t, []Budget{
		{Tag: "\x1b[2Jevil\u202e", LimitBytes: 1 << 20, Policy: "observe", ChargedBytes: 4096},
		{Tag: "gfx", LimitBytes: 256 << 20, Policy: "fail", ChargedBytes: 200 << 20, Crossings: 1, Refused: 3},
		{Tag: "net", LimitBytes: 256 << 20, Policy: "notify", ChargedBytes: 300<<20 + 64<<10, Crossings: 2, Over: true},
	}, p.Budgets)

	var b bytes.Buffer
	r := &Report{Schema: Schema, Processes: []Process{p, FromSnapshot(&tagtable.Snapshot{PID: 8})}}
	require.NoError(t, r.WriteJSON(&b))
	var doc struct {
		Processes []map[string]json.RawMessage `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	var got []map[string]any
	require.NoError(t, json.Unmarshal(doc.Processes[0]["budgets"], &got))
	require.Equal(t, map[string]any{"tag": "gfx", "limit_bytes": float64(256 << 20), "policy": "fail",
		"charged_bytes": float64(200 << 20), "crossings": float64(1), "refused": float64(3), "over": false}, got[1])
	require.Equal(t, true, got[2]["over"])
	require.NotContains(t, doc.Processes[1], "budgets", "no budgets, no key")

	back, err := Read(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	require.Equal(t, p.Budgets, back.Processes[0].Budgets)
	require.Nil(t, back.Processes[1].Budgets)

	// a budget names a tag: Read refuses a nameless one, as a nameless tag
	bad := strings.Replace(b.String(), `"tag": "gfx"`, `"tag": ""`, 1)
	require.NotEqual(t, b.String(), bad)
	_, err = Read(strings.NewReader(bad))
	require.ErrorIs(t, err, ErrReport)
}

// The tree has a Budgets section after the explicit tree, a line per
// budget with its charge, limit, policy, refusals and crossings, OVER on
// the budgets past their limits, and the tag names made safe for a
// terminal; a process without budgets has no section.
func TestBudgetsTree(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, FromSnapshot(budgetSnapshot()).WriteTree(&b))
	tree := b.String()
	want := "── bookkeeping\n" +
		"Budgets (charged: live bytes of the tag and the tags under it, plus up to 64 KiB a thread reserved in native programs)\n" +
		"budget ?[2Jevil?: 4.0 KiB of 1.0 MiB (observe), 0 refused, 0 crossings\n" +
		"budget gfx: 200 MiB of 256 MiB (fail), 3 refused, 1 crossing\n" +
		"budget net: 300 MiB of 256 MiB (notify), 0 refused, 2 crossings, OVER\n" +
		"Other Measurements\n"
	require.Contains(t, tree, want)
	require.NotContains(t, tree, "\x1b")
	require.NotContains(t, tree, "\u202e")

	// under fail the charge stays at the limit: OVER says it refuses
	require.Equal(t, "budget gfx: 256 MiB of 256 MiB (fail), 4 refused, 2 crossings, OVER: refusing",
		Budget{Tag: "gfx", LimitBytes: 256 << 20, Policy: "fail", ChargedBytes: 256 << 20, Crossings: 2, Refused: 4, Over: true}.Text())

	b.Reset()
	require.NoError(t, sample().WriteTree(&b))
	require.NotContains(t, b.String(), "Budgets")
	require.NotContains(t, b.String(), "budget ")
}
