package reporter

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// memSample is sample() with what a Go program's reporters add and a tag
// whose name holds a '/'.
func memSample() *Report {
	r := sample()
	p := &r.Processes[0]
	p.Tags = append(p.Tags, Tag{Name: "img/decode", LiveBytes: 4096, LiveBlocks: 1, AllocBytes: 8192, AllocBlocks: 2, PeakLiveBytes: 8192})
	p.Heap = Heap{LiveBytes: p.Heap.LiveBytes + 4096, LiveBlocks: p.Heap.LiveBlocks + 1, AllocBytes: p.Heap.AllocBytes + 8192, AllocBlocks: p.Heap.AllocBlocks + 2,
		MappedBytes: 128 << 20, FreeCachedBytes: 6 << 20, SpanFreeBytes: 9 << 20, BookkeepingBytes: 1 << 20}
	p.Reports = append(items(*p),
		Item{Path: "explicit/go/heap/objects", Kind: "nonheap", Units: "bytes", Amount: 3 << 20, Description: "Go heap: live objects and dead ones not yet swept."},
		Item{Path: "go/total", Kind: "other", Units: "bytes", Amount: 12 << 20, Description: "All memory the Go runtime mapped."})
	return r
}

func TestMemoryReportGolden(t *testing.T) {
	var plain, gz bytes.Buffer
	require.NoError(t, memSample().WriteMemoryReport(&plain))
	golden(t, "memory-report.golden.json", plain.Bytes())
	require.NoError(t, memSample().WriteMemoryReportGzip(&gz))
	z, err := gzip.NewReader(bytes.NewReader(gz.Bytes()))
	require.NoError(t, err)
	unz, err := io.ReadAll(z)
	require.NoError(t, err)
	require.Equal(t, plain.String(), string(unz), ".gz holds the same JSON")
	require.NoError(t, CheckMemoryReport(gz.Bytes()))
}

// The file, read the way aboutMemory.js reads it: the top-level
// properties, every report's six fields and their JSON types, the kinds
// and units it knows, and the trees it builds from the paths.
func TestMemoryReportAsAboutMemoryReadsIt(t *testing.T) {
	r := memSample()
	var buf bytes.Buffer
	require.NoError(t, r.WriteMemoryReport(&buf))

	var top map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &top))
	require.Equal(t, float64(1), top["version"], "aObj.version === gCurrentFileFormatVersion")
	require.Equal(t, true, top["hasMozMallocUsableSize"])
	reports, ok := top["reports"].([]any)
	require.True(t, ok, "reports is an array")

	type node struct{ heapAllocated, heapTotal, explicit float64 }
	procs := map[string]*node{}
	trees := map[string]map[string]float64{} // process -> tree -> sum
	units := map[string]float64{}            // process + tree -> units
	leaves := map[string]bool{}
	for _, x := range reports {
		rep, ok := x.(map[string]any)
		require.True(t, ok)
		require.Len(t, rep, 6, "process, path, kind, units, amount, description: %v", rep)
		proc, path, desc := rep["process"].(string), rep["path"].(string), rep["description"].(string)
		kind, unit, amount := rep["kind"].(float64), rep["units"].(float64), rep["amount"].(float64)
		require.NotEmpty(t, proc)
		require.NotEmpty(t, desc, path)
		require.Contains(t, []float64{0, 1, 2}, kind, path)
		require.Contains(t, []float64{0, 1, 2, 3}, unit, path)
		require.GreaterOrEqual(t, amount, float64(0), path)
		require.NotContains(t, strings.Split(path, "/"), "", path)
		if procs[proc] == nil {
			procs[proc], trees[proc] = &node{}, map[string]float64{}
		}
		p := procs[proc]
		if strings.HasPrefix(path, "explicit/") {
			require.Contains(t, []float64{0, 1}, kind, "bad explicit kind: %s", path)
			require.Equal(t, float64(0), unit, "bad explicit units: %s", path)
			p.explicit += amount
			if kind == 1 {
				p.heapTotal += amount
			}
		}
		if path == "heap-allocated" {
			require.Equal(t, float64(2), kind)
			p.heapAllocated += amount
		}
		if i := strings.IndexByte(path, '/'); i > 0 {
			tree := path[:i]
			trees[proc][tree] += amount
			if u, ok := units[proc+" "+tree]; ok {
				require.Equal(t, u, unit, "units within a tree are inconsistent: %s", path)
			}
			units[proc+" "+tree] = unit
			leaves[proc+" "+path] = true
		}
	}
	for l := range leaves {
		for m := range leaves {
			require.False(t, strings.HasPrefix(m, l+"/"), "%s is a report and a node above %s", l, m)
		}
	}

	app := procs["app (pid 42)"]
	require.NotNil(t, app, "processes are named as Firefox names them: %v", procs)
	require.NotNil(t, procs["helper (pid 43)"])
	// about:memory adds heap-unclassified = heap-allocated - the explicit
	// heap reports: here that is exactly the untagged bytes.
	unclassified := app.heapAllocated - app.heapTotal
	require.Equal(t, float64(15<<20), unclassified)
	p := r.Processes[0]
	require.Equal(t, float64(p.Heap.LiveBytes), app.heapAllocated)
	require.Equal(t, float64(p.Heap.LiveBytes+p.Heap.FreeCachedBytes+p.Heap.BookkeepingBytes+3<<20), app.explicit+unclassified,
		"explicit: every tag, the heap overhead, the Go runtime's explicit reports")
	require.Equal(t, float64(p.Heap.LiveBlocks), trees["app (pid 42)"]["tagalloc-live-blocks"])
	require.Equal(t, float64(p.Heap.AllocBytes), trees["app (pid 42)"]["tagalloc-alloc-bytes"])
	require.Equal(t, float64(1024), procs["helper (pid 43)"].heapAllocated)
	require.Zero(t, procs["helper (pid 43)"].heapTotal, "all of the helper is unclassified")

	require.True(t, leaves["app (pid 42) explicit/heap/img/decode"], "a tag's path nests: img/decode is decode under img")
	require.True(t, leaves["app (pid 42) explicit/go/heap/objects"], "the reporters' items as they are")
	require.False(t, leaves["app (pid 42) explicit/heap-unclassified"], "about:memory computes it")
	require.True(t, leaves["app (pid 42) tagalloc-requested-bytes/webgl-contexts"])
	require.False(t, leaves["app (pid 42) tagalloc-requested-bytes/decoder"], "unknown requested bytes are left out")

	f, err := ReadMemoryReport(buf.Bytes())
	require.NoError(t, err)
	require.NoError(t, f.Check())
}

func TestCheckMemoryReport(t *testing.T) {
	rep := func(path string, kind, units int, amount int64) string {
		b, _ := json.Marshal(MemReport{"app (pid 1)", path, kind, units, amount, "d"})
		return string(b)
	}
	file := func(reports ...string) string {
		return `{"version": 1, "hasMozMallocUsableSize": true, "reports": [` + strings.Join(reports, ",") + `]}`
	}
	ok := []string{rep("heap-allocated", 2, 0, 100), rep("explicit/heap/a", 1, 0, 60), rep("explicit/heap-overhead/x", 0, 0, 7)}
	for _, tc := range []struct{ name, data, err string }{
		{"good", file(ok...), ""},
		{"duplicates are summed", file(append(ok, rep("explicit/heap/a", 1, 0, 40))...), ""},
		{"heap-unclassified given", file(rep("explicit/heap-unclassified", 1, 0, 5), rep("explicit/heap/a", 1, 0, 10), rep("heap-allocated", 2, 0, 1)), ""},
		{"no explicit tree", file(rep("heap-mapped", 2, 0, 5), rep("tree/a", 2, 1, 1)), ""},
		{"not JSON", `{"version": 1,`, "unexpected end"},
		{"version", `{"version": 2, "hasMozMallocUsableSize": true, "reports": []}`, "version"},
		{"version string", `{"version": "1", "hasMozMallocUsableSize": true, "reports": []}`, "version"},
		{"no hasMozMallocUsableSize", `{"version": 1, "reports": []}`, "hasMozMallocUsableSize"},
		{"hasMozMallocUsableSize false", `{"version": 1, "hasMozMallocUsableSize": false, "reports": []}`, "hasMozMallocUsableSize is false"},
		{"reports not an array", `{"version": 1, "hasMozMallocUsableSize": true, "reports": {}}`, "non-array 'reports'"},
		{"no reports", `{"version": 1, "hasMozMallocUsableSize": true}`, "non-array 'reports'"},
		{"a field missing", file(`{"process": "p", "path": "a/b", "kind": 2, "units": 0, "amount": 1}`), "has no description"},
		{"kind a string", file(`{"process": "p", "path": "a/b", "kind": "heap", "units": 0, "amount": 1, "description": "d"}`), "kind"},
		{"amount not integral", file(`{"process": "p", "path": "a/b", "kind": 2, "units": 0, "amount": 1.5, "description": "d"}`), "amount"},
		{"no process", file(`{"process": "", "path": "a/b", "kind": 2, "units": 0, "amount": 1, "description": "d"}`), "no process name"},
		{"kind unknown", file(rep("a/b", 3, 0, 1)), "kind 3"},
		{"units unknown", file(rep("a/b", 2, 4, 1)), "bad units 4"},
		{"no description", file(`{"process": "p", "path": "a/b", "kind": 2, "units": 0, "amount": 1, "description": ""}`), "no description"},
		{"negative", file(rep("a/b", 2, 0, -1)), "negative"},
		{"beyond 2^53", file(rep("a/b", 2, 0, 1<<53+1)), "too large"},
		{"empty name", file(rep("a//b", 2, 0, 1)), "empty name"},
		{"trailing slash", file(rep("a/b/", 2, 0, 1)), "empty name"},
		{"explicit other", file(append(ok, rep("explicit/x", 2, 0, 1))...), "bad explicit kind"},
		{"explicit count", file(append(ok, rep("explicit/x", 0, 1, 1))...), "bad explicit units"},
		{"leaf and node", file(append(ok, rep("explicit/heap/a/b", 1, 0, 1))...), "a report and also a node"},
		{"units in a tree", file(rep("tree/a", 2, 1, 1), rep("tree/b/c", 2, 0, 1)), "inconsistent"},
		{"no heap-allocated", file(rep("explicit/heap/a", 1, 0, 1)), "no heap-allocated"},
		{"heap-allocated in counts", file(rep("heap-allocated", 2, 1, 1)), "not in bytes"},
		{"negative heap-unclassified", file(rep("heap-allocated", 2, 0, 10), rep("explicit/heap/a", 1, 0, 11)), "negative heap-unclassified"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckMemoryReport([]byte(tc.data))
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrMemReport)
			require.ErrorContains(t, err, tc.err)
		})
	}
}

// What the process's reporters published must fit around tagalloc's own
// measurements, or there is no file (never one about:memory refuses).
func TestMemoryReportRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		item Item
		err  string
	}{
		{"our path", Item{Path: "heap-allocated", Kind: "other", Units: "bytes", Amount: 1, Description: "d"}, "one of tagalloc's own"},
		{"heap-unclassified", Item{Path: "explicit/heap-unclassified", Kind: "heap", Units: "bytes", Amount: 1, Description: "d"}, "one of tagalloc's own"},
		{"leaf above ours", Item{Path: "explicit/heap-overhead", Kind: "nonheap", Units: "bytes", Amount: 1, Description: "d"}, "a report and also a node"},
		{"units", Item{Path: "tagalloc-live-blocks/x/y", Kind: "other", Units: "bytes", Amount: 1, Description: "d"}, "inconsistent"},
		{"explicit count", Item{Path: "explicit/go/n", Kind: "other", Units: "count", Amount: 1, Description: "d"}, "bad explicit kind"},
		{"heap beyond the heap", Item{Path: "explicit/go/heap", Kind: "heap", Units: "bytes", Amount: 1 << 40, Description: "d"}, "negative heap-unclassified"},
		{"kind unknown", Item{Path: "x/y", Kind: "mapped", Units: "bytes", Amount: 1, Description: "d"}, "no memory-report form"},
		{"too large", Item{Path: "x/y", Kind: "other", Units: "bytes", Amount: 1 << 63, Description: "d"}, "out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := sample()
			p := &r.Processes[1]
			p.Tags[0].Name = "main" // as under TAGALLOC_TAG=main: no untagged, no heap-unclassified of ours
			p.Reports = append(items(*p), tc.item)
			var buf bytes.Buffer
			err := r.WriteMemoryReport(&buf)
			require.ErrorContains(t, err, tc.err)
			require.Zero(t, buf.Len(), "nothing written")
		})
	}
	// A reporter's item without a description gets its path as one.
	r := sample()
	r.Processes[1].Reports = append(r.Processes[1].Reports, Item{Path: "go/x", Kind: "other", Units: "count", Amount: 1})
	f, err := r.MemoryReport()
	require.NoError(t, err)
	require.Equal(t, "go/x", f.Reports[len(f.Reports)-1].Description)
	// A process with no command is "unknown".
	r.Processes[1].Command = nil
	f, err = r.MemoryReport()
	require.NoError(t, err)
	require.Equal(t, "unknown (pid 43)", f.Reports[len(f.Reports)-1].Process)
}

// Whatever report Read accepts converts to a file about:memory loads, or
// to an error when its reporters' items do not fit; never to a bad file.
func FuzzMemoryReport(f *testing.F) {
	var b bytes.Buffer
	_ = memSample().WriteJSON(&b)
	f.Add(b.Bytes())
	f.Add([]byte(`{"schema":"tagalloc.report/v1","processes":[{"pid":1,"tags":[{"name":"a/b","live_bytes":1,"alloc_bytes":1}]}]}`))
	f.Add([]byte(`{"version": 1, "hasMozMallocUsableSize": true, "reports": [{"process": "p", "path": "a/b", "kind": 2, "units": 0, "amount": 1, "description": "d"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		_ = CheckMemoryReport(data) // never panics
		r, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		if err := r.WriteMemoryReport(&out); err != nil {
			return
		}
		require.NoError(t, CheckMemoryReport(out.Bytes()), "%s", out.Bytes())
	})
}
