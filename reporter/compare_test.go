package reporter

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func twoReports() (*Report, *Report) {
	u := func(n uint64) *uint64 { return &n }
	a := &Report{Schema: Schema, Processes: []Process{
		{PID: 10, Command: []string{"/usr/bin/app", "-x"}, Tags: []Tag{{Name: "cache", LiveBytes: 1000, LiveBlocks: 10, AllocBytes: 5000, AllocBlocks: 50}, {Name: "untagged", LiveBytes: 64, LiveBlocks: 1, AllocBytes: 64, AllocBlocks: 1}}},
		{PID: 11, Command: []string{"/usr/bin/gone"}, Tags: []Tag{{Name: "x", LiveBytes: 16, LiveBlocks: 1, AllocBytes: 16, AllocBlocks: 1}}},
	}}
	b := &Report{Schema: Schema, Processes: []Process{
		{PID: 20, Command: []string{"/usr/bin/app", "-x"}, Tags: []Tag{{Name: "cache", LiveBytes: 3000, LiveBlocks: 30, AllocBytes: 9000, AllocBlocks: 90}, {Name: "a/b", LiveBytes: 48, LiveRequestedBytes: u(40), LiveBlocks: 1, AllocBytes: 48, AllocBlocks: 1}, {Name: "untagged", LiveBytes: 64, LiveBlocks: 1, AllocBytes: 64, AllocBlocks: 1}}},
		{PID: 21, Command: []string{"/usr/bin/new"}, Tags: []Tag{}},
	}}
	for _, r := range []*Report{a, b} {
		for i := range r.Processes {
			r.Processes[i].Reports = items(r.Processes[i])
		}
	}
	return a, b
}

func TestCompare(t *testing.T) {
	a, b := twoReports()
	d := Compare(a, b)
	require.Len(t, d.Processes, 3)
	app := d.Processes[0]
	require.Equal(t, "changed", app.Status)
	require.Equal(t, 10, app.PIDA)
	require.Equal(t, 20, app.PIDB)
	require.Equal(t, []TagDiff{{"cache", 2000, 20, 4000, 40}, {"a/b", 48, 1, 48, 1}}, app.Tags, "unchanged tags are left out")
	require.Equal(t, "added", d.Processes[1].Status)
	require.Equal(t, "removed", d.Processes[2].Status)
	require.Equal(t, []TagDiff{{"x", -16, -1, -16, -1}}, d.Processes[2].Tags)
	var txt bytes.Buffer
	require.NoError(t, d.WriteText(&txt))
	require.Contains(t, txt.String(), "/usr/bin/app -x -- pid 10 -> 20")
	require.Contains(t, txt.String(), "+2.0 KiB ── heap/cache  [+20 blocks; +3.9 KiB allocated in all]")
	require.Contains(t, txt.String(), "/usr/bin/gone -- removed (pid 11)")
}

func TestWriteFirefox(t *testing.T) {
	_, b := twoReports()
	var buf bytes.Buffer
	require.NoError(t, b.WriteFirefoxGzip(&buf))
	z, err := gzip.NewReader(&buf)
	require.NoError(t, err)
	var f struct {
		Version                int  `json:"version"`
		HasMozMallocUsableSize bool `json:"hasMozMallocUsableSize"`
		Reports                []map[string]any
	}
	require.NoError(t, json.NewDecoder(z).Decode(&f))
	require.Equal(t, 1, f.Version)
	// what about:memory checks of every report
	paths := map[string]bool{}
	for _, r := range f.Reports {
		require.Len(t, r, 6, "%v", r)
		require.IsType(t, "", r["process"])
		path := r["path"].(string)
		require.NotEmpty(t, r["description"])
		kind, units := r["kind"].(float64), r["units"].(float64)
		require.Contains(t, []float64{0, 1, 2}, kind)
		require.Contains(t, []float64{0, 1, 2, 3}, units)
		if strings.HasPrefix(path, "explicit/") {
			require.Equal(t, float64(0), units, "explicit is bytes: %s", path)
		}
		paths[r["process"].(string)+" "+path] = true
	}
	require.True(t, paths["app (pid 20) explicit/heap/cache"])
	require.True(t, paths[`app (pid 20) explicit/heap/a\b`], "a / in a tag name is escaped: %v", paths)
	require.True(t, paths["app (pid 20) explicit/heap-unclassified"])
	// no path is both a leaf and an inner node
	for p := range paths {
		for q := range paths {
			require.False(t, strings.HasPrefix(q, p+"/"), "%s is a leaf and a node", p)
		}
	}
}
