package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/books"
	"github.com/tagalloc/tagalloc/reporter"
	"github.com/tagalloc/tagalloc/tagtable"
)

// budgetTag is a hostile budget tag name: markup, a terminal escape, a
// bidi override, quotes and a newline (program data, as every tag name).
const budgetTag = "<img src=x onerror=alert(1)>\x1b[2J\u202e\"q\"\n"

// budgetReport is a report of two processes made from books as the
// reader gives them (reporter.FromSnapshot): pid 42 with three budgets (a
// fail budget that refused, a notify budget past its limit, an observe
// budget on a hostile name), pid 43 with none.
func budgetReport() *reporter.Report {
	a := reporter.FromSnapshot(&tagtable.Snapshot{PID: 42, Command: []string{"/bin/game", "-x"}, Tags: []tagtable.TagTotals{
		{Name: "gfx/webgl", LiveBytes: 190 << 20, LiveBlocks: 10, AllocBytes: 300 << 20, AllocBlocks: 20, PeakLiveBytes: 250 << 20},
		{Name: "net", LiveBytes: 300 << 20, LiveBlocks: 3, AllocBytes: 300 << 20, AllocBlocks: 3, PeakLiveBytes: 300 << 20},
		{Name: budgetTag, LiveBytes: 4000, LiveBlocks: 1, AllocBytes: 4000, AllocBlocks: 1, PeakLiveBytes: 4000},
	}, Budgets: []books.Budget{
		{Tag: budgetTag, Limit: 1 << 20, Policy: "observe", Charged: 4096},
		{Tag: "gfx", Limit: 256 << 20, Policy: "fail", Charged: 200 << 20, Crossings: 1, Refused: 3},
		{Tag: "net", Limit: 256 << 20, Policy: "notify", Charged: 300<<20 + 64<<10, Crossings: 2, Over: true},
	}})
	b := reporter.FromSnapshot(&tagtable.Snapshot{PID: 43, Command: []string{"helper"}})
	return &reporter.Report{Schema: reporter.Schema, Processes: []reporter.Process{a, b}}
}

// /metrics has, per budget, its limit (labelled with its policy), its
// charge, its crossings and its refusals, with the labels every tag series
// has, the tag's name escaped by the client; a process without budgets
// has no budget series.
func TestMetricsBudgets(t *testing.T) {
	s := &server{snap: func() (*reporter.Report, error) { return budgetReport(), nil }}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	m := string(get(t, ts.URL+"/metrics"))
	lbl := func(tag string) string { return `command="/bin/game",pid="42",tag="` + tag + `"` }
	hostile := `<img src=x onerror=alert(1)>` + "\x1b[2J\u202e" + `\"q\"\n`
	for _, want := range []string{
		"# HELP tagalloc_tag_budget_bytes The tag's budget: a limit on the live bytes of the tag and every tag under it",
		"# TYPE tagalloc_tag_budget_bytes gauge",
		"# TYPE tagalloc_tag_budget_charged_bytes gauge",
		"# TYPE tagalloc_tag_budget_exceeded_total counter",
		"# TYPE tagalloc_tag_budget_refused_total counter",
		`tagalloc_tag_budget_bytes{command="/bin/game",pid="42",policy="fail",tag="gfx"} 2.68435456e+08`,
		`tagalloc_tag_budget_bytes{command="/bin/game",pid="42",policy="notify",tag="net"} 2.68435456e+08`,
		`tagalloc_tag_budget_bytes{command="/bin/game",pid="42",policy="observe",tag="` + hostile + `"} 1.048576e+06`,
		`tagalloc_tag_budget_charged_bytes{` + lbl("gfx") + `} 2.097152e+08`,
		`tagalloc_tag_budget_charged_bytes{` + lbl("net") + `} 3.14638336e+08`,
		`tagalloc_tag_budget_charged_bytes{` + lbl(hostile) + `} 4096`,
		`tagalloc_tag_budget_exceeded_total{` + lbl("gfx") + `} 1`,
		`tagalloc_tag_budget_exceeded_total{` + lbl("net") + `} 2`,
		`tagalloc_tag_budget_exceeded_total{` + lbl(hostile) + `} 0`,
		`tagalloc_tag_budget_refused_total{` + lbl("gfx") + `} 3`,
		`tagalloc_tag_budget_refused_total{` + lbl("net") + `} 0`,
	} {
		if !strings.Contains(m, want+"\n") && !(strings.HasPrefix(want, "# HELP") && strings.Contains(m, want)) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
	require.NotContains(t, m, `pid="43",policy=`, "no budgets, no series")
	require.NotContains(t, m, `tagalloc_tag_budget_charged_bytes{command="helper"`)
	if t.Failed() {
		t.Logf("/metrics:\n%s", m)
	}
}

// /api/live has each process's budgets under the report's names ([] for a
// process without any), the tag's name as a JSON string.
func TestLiveBudgets(t *testing.T) {
	s := &server{snap: func() (*reporter.Report, error) { return budgetReport(), nil }}
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	raw := get(t, ts.URL+"/api/live")
	var v liveView
	require.NoError(t, json.Unmarshal(raw, &v))
	require.Len(t, v.Processes, 2)
	require.Equal(t, []liveBudget{
		{Tag: budgetTag, LimitBytes: 1 << 20, Policy: "observe", ChargedBytes: 4096},
		{Tag: "gfx", LimitBytes: 256 << 20, Policy: "fail", ChargedBytes: 200 << 20, Crossings: 1, Refused: 3},
		{Tag: "net", LimitBytes: 256 << 20, Policy: "notify", ChargedBytes: 300<<20 + 64<<10, Crossings: 2, Over: true},
	}, v.Processes[0].Budgets)
	require.Equal(t, []liveBudget{}, v.Processes[1].Budgets)
	var doc struct {
		Processes []map[string]json.RawMessage `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(raw, &doc))
	require.JSONEq(t, `{"tag":"gfx","limit_bytes":268435456,"policy":"fail","charged_bytes":209715200,"crossings":1,"refused":3,"over":false}`,
		string(must(json.Marshal(v.Processes[0].Budgets[1]))))
	require.Equal(t, "[]", string(doc.Processes[1]["budgets"]), "an array the page can walk, never null")
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The live page in headless Chromium: the Budgets table has a row per
// budget (pid/tag, charged, limit, share, policy, refused, crossings,
// now), the hostile name as text and no element of it; without budgets
// the section stays hidden.
func TestLivePageBudgetsInChromium(t *testing.T) {
	chromium := needChromium(t)
	s := &server{snap: func() (*reporter.Report, error) { return budgetReport(), nil }}
	s.sample() // the history's first point, as serve takes one before it listens
	ts := httptest.NewServer(s.handler())
	defer ts.Close()
	body := pageBody(t, dumpDOM(t, chromium, ts.URL+"/"))
	require.Contains(t, body, `<section id="budgets-section">`, "budgets: the section shows")
	for _, want := range []string{
		`<tr class="budget"><td class="name">42/gfx</td><td>200.0 MiB</td><td>256.0 MiB</td><td>78.1%</td><td class="name">fail</td><td>3</td><td>1</td><td class="name">under</td></tr>`,
		`<tr class="budget over"><td class="name">42/net</td><td>300.1 MiB</td><td>256.0 MiB</td><td>117.2%</td><td class="name">notify</td><td>0</td><td>2</td><td class="name">OVER</td></tr>`,
		`<tr class="budget"><td class="name">` + textEscape("42/"+budgetTag) + `</td><td>4.00 KiB</td><td>1.00 MiB</td><td>0.4%</td><td class="name">observe</td>`,
	} {
		require.Contains(t, body, want)
	}
	require.NotContains(t, body, "<img", "a tag name became an element")

	none := &server{snap: func() (*reporter.Report, error) {
		r := budgetReport()
		r.Processes = r.Processes[1:]
		return r, nil
	}}
	none.sample()
	ts2 := httptest.NewServer(none.handler())
	defer ts2.Close()
	require.Contains(t, pageBody(t, dumpDOM(t, chromium, ts2.URL+"/")), `<section id="budgets-section" hidden="">`, "no budgets: the section stays hidden")
}

// top prints a line per budget below its table, nested or flat, as the
// tree does, the name made safe for the terminal; none without budgets.
func TestTopBudgets(t *testing.T) {
	rep := budgetReport()
	want := "\n\nbudget <img src=x onerror=alert(1)>?[2J?\"q\"?: 4.0 KiB of 1.0 MiB (observe), 0 refused, 0 crossings\n" +
		"budget gfx: 200 MiB of 256 MiB (fail), 3 refused, 1 crossing\n" +
		"budget net: 300 MiB of 256 MiB (notify), 0 refused, 2 crossings, OVER\n"
	for name, write := range map[string]func(*bytes.Buffer, reporter.Process){
		"nested": func(b *bytes.Buffer, p reporter.Process) { writeTopTree(b, p) },
		"flat":   func(b *bytes.Buffer, p reporter.Process) { writeTop(b, p) },
	} {
		var b bytes.Buffer
		write(&b, rep.Processes[0])
		out := b.String()
		require.True(t, strings.HasSuffix(out, want), "%s: %q", name, out)
		require.NotContains(t, out, "\x1b", name)
		require.NotContains(t, out, "\u202e", name)
		b.Reset()
		write(&b, rep.Processes[1])
		require.NotContains(t, b.String(), "budget", name)
	}
}

// A report with budgets matches docs/report.schema.json (every object
// closed: a field the writer has and the schema lacks fails), and the
// schema holds a budget to its fields and policies.
func TestSchemaBudgets(t *testing.T) {
	sch := reportSchema(t)
	var b bytes.Buffer
	require.NoError(t, budgetReport().WriteJSON(&b))
	check := func(doc string) error {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		require.NoError(t, err)
		return sch.Validate(v)
	}
	require.NoError(t, check(b.String()))
	require.Contains(t, b.String(), `"budgets": [`)

	base := `{"schema":"tagalloc.report/v2","processes":[{"pid":1,"command":[],"ended":"exited","tags":[],"reports":[],` +
		`"heap":{"live_bytes":0,"live_blocks":0,"alloc_bytes":0,"alloc_blocks":0,"mapped_bytes":0,"free_cached_bytes":0,"span_free_bytes":0,"bookkeeping_bytes":0},` +
		`"budgets":[%s]}]}`
	budget := `{"tag":"gfx","limit_bytes":1,"policy":"%s","charged_bytes":0,"crossings":0,"refused":0,"over":false%s}`
	require.NoError(t, check(fmt.Sprintf(base, fmt.Sprintf(budget, "fail", ""))))
	require.Error(t, check(fmt.Sprintf(base, fmt.Sprintf(budget, "explode", ""))), "a policy the allocator has not")
	require.Error(t, check(fmt.Sprintf(base, fmt.Sprintf(budget, "fail", `,"limitBytes":1`))), "camelCase")
	require.Error(t, check(fmt.Sprintf(base, `{"tag":"gfx","limit_bytes":1,"policy":"fail"}`)), "every field is there")
}
