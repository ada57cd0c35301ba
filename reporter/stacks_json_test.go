package reporter

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/growth"
)

// stacksReport has three records: two of one stack under two tags (sharing
// their frames' array, as FromProfile makes them) and one of another stack
// sharing a frame with the first.
func stacksReport() *Report {
	shared := []Frame{{PC: 0x10, Module: "prog", Offset: 0x10, Function: "leaf", File: "a.c", Line: 3},
		{PC: 0x20, Module: "prog", Offset: 0x20, Function: "main", File: "a.c", Line: 9}}
	other := []Frame{{PC: 0x30, Module: "libx.so", Offset: 0x30, Function: "helper", Inlined: true}, shared[1]}
	st := &Stacks{Mode: "full", SampleRate: 1, Samples: 3, Records: []StackRecord{
		{Tag: "a", Library: "prog", Frames: shared, Samples: 1, LiveBytes: 64, AllocBytes: 64, LiveBlocks: 1, AllocBlocks: 1},
		{Tag: "b", Library: "prog", Frames: shared, Samples: 1, LiveBytes: 32, AllocBytes: 32, LiveBlocks: 1, AllocBlocks: 1},
		{Tag: "a", Library: "libx.so", Frames: other, Samples: 1, AllocBytes: 16, AllocBlocks: 1},
		{Tag: "c", Library: "unknown"},
	}}
	return &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Stacks: st}}}
}

func TestStacksJSONTables(t *testing.T) {
	rep := stacksReport()
	var buf bytes.Buffer
	require.NoError(t, rep.WriteJSON(&buf))
	var raw struct {
		Processes []struct {
			Stacks struct {
				Records    []map[string]any `json:"records"`
				FrameTable []Frame          `json:"frame_table"`
				TraceTable [][]uint32       `json:"trace_table"`
			} `json:"stacks"`
		} `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(buf.Bytes(), &raw))
	st := raw.Processes[0].Stacks
	require.Len(t, st.FrameTable, 3, "each distinct frame once")
	require.Equal(t, [][]uint32{{0, 1}, {2, 1}}, st.TraceTable, "one trace per stack, frames by index")
	for i, want := range []float64{1, 1, 2} {
		require.NotContains(t, st.Records[i], "frames")
		require.Equal(t, want, st.Records[i]["trace"])
	}
	require.NotContains(t, st.Records[3], "trace", "a record without frames names no trace")

	back, err := Read(&buf)
	require.NoError(t, err)
	require.Equal(t, rep.Processes[0].Stacks.Records, back.Processes[0].Stacks.Records)
	require.Equal(t, "full", back.Processes[0].Stacks.Mode)
	r := back.Processes[0].Stacks.Records
	require.Same(t, &r[0].Frames[0], &r[1].Frames[0], "records of one trace share its frames")
}

// A report written before the tables (frames in every record) still reads.
func TestStacksJSONOldForm(t *testing.T) {
	old := `{"schema":"tagalloc.report/v1","processes":[{"pid":7,"command":["prog"],"tags":[],"stacks":{"mode":"sampled","sample_rate":524288,"samples":1,
		"records":[{"tag":"a","library":"prog","frames":[{"pc":16,"module":"prog","offset":16,"function":"leaf"}],"samples":1,"live_bytes":5,"live_requested_bytes":5,"live_blocks":1,"alloc_bytes":5,"alloc_blocks":1}],
		"libraries":[],"growth":[]}}]}`
	rep, err := Read(strings.NewReader(old))
	require.NoError(t, err)
	recs := rep.Processes[0].Stacks.Records
	require.Len(t, recs, 1)
	require.Equal(t, []Frame{{PC: 16, Module: "prog", Offset: 16, Function: "leaf"}}, recs[0].Frames)
}

func TestStacksJSONBadIndexes(t *testing.T) {
	for name, stacks := range map[string]string{
		"trace past the table": `{"records":[{"tag":"a","trace":2}],"frame_table":[{"pc":1}],"trace_table":[[0]]}`,
		"negative trace":       `{"records":[{"tag":"a","trace":-1}],"frame_table":[{"pc":1}],"trace_table":[[0]]}`,
		"frame past the table": `{"records":[{"tag":"a","trace":1}],"frame_table":[{"pc":1}],"trace_table":[[0,1]]}`,
	} {
		t.Run(name, func(t *testing.T) {
			doc := `{"schema":"tagalloc.report/v1","processes":[{"pid":7,"tags":[],"stacks":` + stacks + `}]}`
			_, err := Read(strings.NewReader(doc))
			require.ErrorIs(t, err, ErrReport)
			require.Contains(t, err.Error(), "stacks:")
		})
	}
}

// A v1 report (testdata/report-v1.json: stacks.growth in Go's field
// names) still reads, its growth findings whole, and is written again as
// v2, in snake_case.
func TestReadV1Report(t *testing.T) {
	rep, err := ReadFile(filepath.Join("testdata", "report-v1.json"))
	require.NoError(t, err)
	require.Equal(t, Schema, rep.Schema, "held as the current layout")
	st := rep.Processes[0].Stacks
	require.NotNil(t, st)
	require.Equal(t, []growth.Finding{
		{Site: growth.Site{Name: "list_resize", Library: "libpython3.11.so.1.0", Reallocs: 142, GrowSteps: 142, MeanRatio: 1.125811515469182,
			BytesCopied: 22676528, FinalBytes: 4096}, Verdict: "other"},
		{Site: growth.Site{Name: "append_bytes", Library: "python3", Reallocs: 9, GrowSteps: 9, MeanRatio: 1.01, BytesCopied: 1000},
			Verdict: "just-enough", Flagged: true, Fix: "append_bytes grows its buffer to just the size it needs."},
	}, st.Growth)
	require.Len(t, st.Records, 2)
	require.Equal(t, "list_resize", st.Records[0].Frames[0].Function)

	var b bytes.Buffer
	require.NoError(t, rep.WriteJSON(&b))
	out := b.String()
	require.Contains(t, out, `"schema": "tagalloc.report/v2"`)
	for _, goName := range []string{`"Name"`, `"Library"`, `"Reallocs"`, `"GrowSteps"`, `"MeanRatio"`, `"BytesCopied"`, `"FinalBytes"`} {
		require.NotContains(t, out, goName)
	}
	require.Contains(t, out, `"grow_steps": 142`)
	back, err := Read(&b)
	require.NoError(t, err)
	require.Equal(t, st.Growth, back.Processes[0].Stacks.Growth, "v2 round trip")

	_, err = Read(strings.NewReader(`{"schema":"tagalloc.report/v3","processes":[]}`))
	require.ErrorIs(t, err, ErrReport, "a later layout is refused")
}
