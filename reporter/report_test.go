package reporter

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/tagtable"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func sample() *Report {
	code := 0
	req := uint64(79 << 20)
	a := FromSnapshot(&tagtable.Snapshot{PID: 42, Command: []string{"app", "--serve"}, Exited: true, Tags: []tagtable.TagTotals{
		{Name: "webgl-contexts", LiveBytes: 80 << 20, LiveRequestedBytes: &req, LiveBlocks: 12, AllocBytes: 96 << 20, AllocBlocks: 20, PeakLiveBytes: 90 << 20},
		{Name: "untagged", LiveBytes: 15 << 20, LiveBlocks: 3000, AllocBytes: 200 << 20, AllocBlocks: 90000, PeakLiveBytes: 40 << 20},
		{Name: "decoder", LiveBytes: 5 << 20, LiveBlocks: 7, AllocBytes: 5 << 20, AllocBlocks: 7, PeakLiveBytes: 5 << 20},
	}})
	a.ExitCode = &code
	a.Resident = &Resident{Measured: ResidentLastPoll, ReadAtUnixMS: 1_700_000_000_000, EndedByUnixMS: 1_700_000_000_018,
		RSSBytes: ptr(uint64(130 << 20)), PeakRSSBytes: ptr(uint64(140 << 20)), AnonBytes: ptr(uint64(110 << 20)),
		UniqueBytes: ptr(uint64(120 << 20)), UniqueReadAtUnixMS: 1_700_000_000_000 - 80, Polls: 40}
	b := FromSnapshot(&tagtable.Snapshot{PID: 43, PPID: 42, Command: []string{"helper"}, Tags: []tagtable.TagTotals{
		{Name: "untagged", LiveBytes: 1024, LiveBlocks: 1, AllocBytes: 1024, AllocBlocks: 1, PeakLiveBytes: 1024}}})
	b.Resident = &Resident{Measured: ResidentNever}
	r := &Report{Schema: Schema, Processes: []Process{b, a}}
	r.Sort(42)
	return r
}

func ptr[T any](v T) *T { return &v }

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run go test ./reporter -update to create it")
	require.Equal(t, string(want), string(got))
}

func TestTreeGolden(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sample().WriteTree(&b))
	golden(t, "tree.golden", b.Bytes())
	b.Reset()
	require.NoError(t, sample().WriteSummary(&b))
	golden(t, "summary.golden", b.Bytes())
}

func TestJSONRoundTrip(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sample().WriteJSON(&b))
	golden(t, "report.golden.json", b.Bytes())
	r, err := Read(bytes.NewReader(b.Bytes()))
	require.NoError(t, err)
	require.Equal(t, sample(), r)
	require.Equal(t, 42, r.Processes[0].PID, "the launched process comes first")
	// sum over tags == heap
	var sum uint64
	for _, tg := range r.Processes[0].Tags {
		sum += tg.LiveBytes
	}
	require.Equal(t, sum, r.Processes[0].Heap.LiveBytes)
}

func FuzzRead(f *testing.F) {
	var b bytes.Buffer
	_ = sample().WriteJSON(&b)
	f.Add(b.Bytes())
	f.Add([]byte(`{"schema":"tagalloc.report/v1","processes":[{"pid":1}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := Read(bytes.NewReader(data))
		if err != nil {
			return
		}
		var out bytes.Buffer
		require.NoError(t, r.WriteTree(&out)) // anything Read accepts renders
	})
}

// The heap's peak: exact when one tag held it with an exact peak; else
// between the largest tag's peak (or live now) and the sum of the tags'
// upper bounds; a lower bound alone when a tag has no upper bound.
func TestHeapPeakBounds(t *testing.T) {
	exact := func(name string, live, peak uint64) Tag {
		return Tag{Name: name, LiveBytes: live, AllocBlocks: 1, PeakLiveBytes: peak, PeakLiveBytesUpper: ptr(peak)}
	}
	for _, tc := range []struct {
		name string
		tags []Tag
		live uint64
		lo   uint64
		up   *uint64
		text string
	}{
		{"one exact tag", []Tag{exact("untagged", 10, 9000)}, 10, 9000, ptr(uint64(9000)), "8.8 KiB"},
		{"two exact tags", []Tag{exact("a", 0, 4096), exact("b", 0, 1024)}, 0, 4096, ptr(uint64(5120)), "4.0 KiB (+1.0 KiB)"},
		{"a tag never used", []Tag{exact("a", 0, 4096), {Name: "b"}}, 0, 4096, ptr(uint64(4096)), "4.0 KiB"},
		{"a tag without an upper bound", []Tag{exact("a", 0, 4096), {Name: "go", AllocBlocks: 3, PeakLiveBytes: 8192}}, 0, 8192, nil, "≥ 8.0 KiB"},
		{"live above every tag's noted peak", []Tag{exact("a", 5000, 4096)}, 5000, 5000, ptr(uint64(5000)), "4.9 KiB"},
	} {
		h := Heap{LiveBytes: tc.live}
		h.notePeaks(tc.tags)
		require.Equal(t, tc.lo, h.PeakLiveBytes, tc.name)
		require.Equal(t, tc.up, h.PeakLiveBytesUpper, tc.name)
		require.Equal(t, tc.text, h.Peak(), tc.name)
	}
}

// The heap's peak is taken from stacks that recorded every block, and
// only then: not when sampled, when an event was lost, or when the stacks
// disagree with the books (live bytes now, or a peak outside the bounds).
func TestPeakFromStacks(t *testing.T) {
	up := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name  string
		st    Stacks
		live  uint64
		exact bool
		upper *uint64
	}{
		{"full", Stacks{Mode: "full", Peak: &StacksPeak{LiveBytes: 150}}, 100, true, up(200)},
		{"no upper bound", Stacks{Mode: "full", Peak: &StacksPeak{LiveBytes: 150}}, 100, true, nil},
		{"sampled", Stacks{Mode: "sampled", Peak: &StacksPeak{LiveBytes: 150}}, 100, false, up(200)},
		{"dropped", Stacks{Mode: "full", Dropped: 1, Peak: &StacksPeak{LiveBytes: 150}}, 100, false, up(200)},
		{"unknown frees", Stacks{Mode: "full", UnknownFrees: 1, Peak: &StacksPeak{LiveBytes: 150}}, 100, false, up(200)},
		{"live differs", Stacks{Mode: "full", Peak: &StacksPeak{LiveBytes: 150}}, 99, false, up(200)},
		{"over the bound", Stacks{Mode: "full", Peak: &StacksPeak{LiveBytes: 250}}, 100, false, up(200)},
		{"under the lower bound", Stacks{Mode: "full", Peak: &StacksPeak{LiveBytes: 110}}, 100, false, up(200)},
		{"no peak", Stacks{Mode: "full"}, 100, false, up(200)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := tc.st
			st.Records = []StackRecord{{LiveBytes: 60}, {LiveBytes: 40}}
			p := Process{Stacks: &st, Heap: Heap{LiveBytes: tc.live, PeakLiveBytes: 120, PeakLiveBytesUpper: tc.upper}}
			p.PeakFromStacks()
			if tc.exact {
				require.Equal(t, st.Peak.LiveBytes, p.Heap.PeakLiveBytes)
				require.Equal(t, st.Peak.LiveBytes, *p.Heap.PeakLiveBytesUpper)
			} else {
				require.Equal(t, uint64(120), p.Heap.PeakLiveBytes)
				require.Equal(t, tc.upper, p.Heap.PeakLiveBytesUpper)
			}
		})
	}
}
