package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// reportSchema compiles docs/report.schema.json (draft 2020-12) with
// every object that lists its properties closed (additionalProperties
// false): the file lets readers meet fields added later, but a field the
// writer has and the schema does not name is a schema out of date.
func reportSchema(t *testing.T) *jsonschema.Schema {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "docs", "report.schema.json"))
	require.NoError(t, err)
	defer f.Close()
	doc, err := jsonschema.UnmarshalJSON(f)
	require.NoError(t, err)
	var closeObjects func(v any)
	closeObjects = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if _, ok := v["properties"]; ok {
				if _, set := v["additionalProperties"]; !set {
					v["additionalProperties"] = false
				}
			}
			for _, e := range v {
				closeObjects(e)
			}
		case []any:
			for _, e := range v {
				closeObjects(e)
			}
		}
	}
	closeObjects(doc)
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	const url = "https://github.com/tagalloc/tagalloc/docs/report.schema.json"
	require.NoError(t, c.AddResource(url, doc))
	sch, err := c.Compile(url)
	require.NoError(t, err)
	return sch
}

// validReport checks the report file path against the schema, and that
// tagalloc reads it, and returns what it read.
func validReport(t *testing.T, sch *jsonschema.Schema, path string) *reporter.Report {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	require.NoError(t, err)
	require.NoError(t, sch.Validate(doc), "%s against docs/report.schema.json", path)
	rep, err := reporter.ReadFile(path)
	require.NoError(t, err)
	return rep
}

// Real reports of tagalloc run match docs/report.schema.json: the
// default run's (stacks sampled, saved under its own name; python grows
// lists by realloc, so growth findings are there), --stacks off's, and
// --stacks full's with memory reporters (dark matter, history).
func TestReportsMatchSchema(t *testing.T) {
	if _, err := exec.LookPath("python3"); err != nil {
		t.Skip("no python3")
	}
	sch := reportSchema(t)
	stacksSeen := map[string]bool{}
	note := func(rep *reporter.Report) {
		for _, p := range rep.Processes {
			if st := p.Stacks; st != nil {
				stacksSeen["stacks"] = true
				stacksSeen["growth"] = stacksSeen["growth"] || len(st.Growth) > 0
				stacksSeen["history"] = stacksSeen["history"] || st.History != nil
				stacksSeen["dark_matter"] = stacksSeen["dark_matter"] || st.DarkMatter != nil
				stacksSeen["mappings"] = stacksSeen["mappings"] || len(st.Mappings) > 0
			}
		}
	}

	t.Run("default", func(t *testing.T) {
		dir := t.TempDir()
		bin, err := tagallocBin()
		require.NoError(t, err)
		cmd := exec.Command(bin, "run", "-q", "--", "python3", "-c",
			"import json\nx = []\nfor i in range(300000): x.append({'k': i})\nprint(len(json.dumps(x)))")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "TAGALLOC_SAMPLE_RATE=16K")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		saved, err := filepath.Glob(filepath.Join(dir, "tagalloc.python3.*.json"))
		require.NoError(t, err)
		require.Len(t, saved, 1, "%s", out)
		rep := validReport(t, sch, saved[0])
		require.True(t, hasStacks(rep), "stacks are on by default")
		note(rep)
	})
	t.Run("stacks-off", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "off.json")
		_, se, code := cli(t, "run", "-q", "--stacks", "off", "-o", out, "--", "python3", "-c", "print(1)")
		require.Equal(t, 0, code, se)
		rep := validReport(t, sch, out)
		require.False(t, hasStacks(rep))
	})
	t.Run("full-with-reporters", func(t *testing.T) {
		_, _, out := runReporters(t, "-q", "--stacks", "full")
		note(validReport(t, sch, out))
	})
	for _, part := range []string{"stacks", "growth", "history", "dark_matter", "mappings"} {
		require.True(t, stacksSeen[part], "no report had %s: the schema's part for it went untested", part)
	}
}

// The schema says what the writer writes, and only that: the golden
// report matches it; a v1 report's Go-named growth fields do not, nor does
// a key in another style anywhere.
func TestReportSchemaRejects(t *testing.T) {
	sch := reportSchema(t)
	validReport(t, sch, filepath.Join("..", "..", "reporter", "testdata", "report.golden.json"))

	check := func(doc string) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(doc)))
		require.NoError(t, err)
		return sch.Validate(v)
	}
	v1, err := os.ReadFile(filepath.Join("..", "..", "reporter", "testdata", "report-v1.json"))
	require.NoError(t, err)
	require.Error(t, check(string(v1)), "v1 is not v2")
	var m map[string]any
	require.NoError(t, json.Unmarshal(v1, &m))
	m["schema"] = reporter.Schema
	b, err := json.Marshal(m)
	require.NoError(t, err)
	require.ErrorContains(t, check(string(b)), "GrowSteps", "Go's field names are not the schema's")

	base := `{"schema":"tagalloc.report/v2","processes":[{"pid":1,"command":[],"ended":"exited","tags":[],"reports":[],` +
		`"heap":{"live_bytes":0,"live_blocks":0,"alloc_bytes":0,"alloc_blocks":0,"mapped_bytes":0,"free_cached_bytes":0,"span_free_bytes":0,"bookkeeping_bytes":0}%s}]}`
	require.NoError(t, check(fmt.Sprintf(base, "")))
	require.Error(t, check(fmt.Sprintf(base, `,"exitCode":0`)), "camelCase")
	require.Error(t, check(fmt.Sprintf(base, `,"torn":"yes"`)), "a wrong type")
	require.Error(t, check(`{"schema":"tagalloc.report/v2"}`), "processes is required")
}
