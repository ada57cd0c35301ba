package reporter

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each figure is shown as what it is and when it was read: exact while
// the process ran, from the last reading (the peak a lower bound) once it
// ended, "unknown" with the reason where it could not be read, never 0.
func TestResidentTreeLines(t *testing.T) {
	mib := func(n uint64) *uint64 { return ptr(n << 20) }
	for _, tc := range []struct {
		name string
		r    *Resident
		want []string
	}{
		{"not recorded", nil, nil},
		{"running", &Resident{Measured: ResidentRunning, ReadAtUnixMS: 5, RSSBytes: mib(10), PeakRSSBytes: mib(12), AnonBytes: mib(6), UniqueBytes: mib(8), UniqueReadAtUnixMS: 4, Polls: 1}, []string{
			"10 MiB -- resident (VmRSS, read while it ran)",
			"12 MiB -- resident-peak (VmHWM: the peak so far)",
			"8.0 MiB -- resident-unique (private pages of smaps_rollup, read while it ran)",
			"6.0 MiB -- resident-anon (RssAnon)",
		}},
		{"last poll", &Resident{Measured: ResidentLastPoll, ReadAtUnixMS: 1000, EndedByUnixMS: 1025, RSSBytes: mib(10), PeakRSSBytes: mib(12), AnonBytes: mib(6), UniqueBytes: mib(8), UniqueReadAtUnixMS: 900, Polls: 3}, []string{
			"10 MiB -- resident (VmRSS, last read ≤ 25 ms before it ended)",
			"≥ 12 MiB -- resident-peak (VmHWM, a lower bound: the process ran on after the read)",
			"8.0 MiB -- resident-unique (private pages of smaps_rollup, last read ≤ 125 ms before it ended)",
			"6.0 MiB -- resident-anon (RssAnon)",
		}},
		{"long before", &Resident{Measured: ResidentLastPoll, ReadAtUnixMS: 1000, EndedByUnixMS: 91000, RSSBytes: mib(1), PeakRSSBytes: mib(1), AnonBytes: mib(1), UniqueBytes: mib(1), UniqueReadAtUnixMS: 1000}, []string{
			"1.0 MiB -- resident (VmRSS, last read ≤ 1m30s before it ended)",
			"≥ 1.0 MiB -- resident-peak (VmHWM, a lower bound: the process ran on after the read)",
			"1.0 MiB -- resident-unique (private pages of smaps_rollup, last read ≤ 1m30s before it ended)",
			"1.0 MiB -- resident-anon (RssAnon)",
		}},
		{"unique unreadable", &Resident{Measured: ResidentLastPoll, ReadAtUnixMS: 1000, EndedByUnixMS: 1010, RSSBytes: mib(10), PeakRSSBytes: mib(12), AnonBytes: mib(6),
			Error: "open /proc/7/smaps_rollup: permission denied\x1b[2J"}, []string{
			"10 MiB -- resident (VmRSS, last read ≤ 10 ms before it ended)",
			"≥ 12 MiB -- resident-peak (VmHWM, a lower bound: the process ran on after the read)",
			"unknown -- resident-unique (private pages of smaps_rollup; open /proc/7/smaps_rollup: permission denied?[2J)",
			"6.0 MiB -- resident-anon (RssAnon)",
		}},
		{"a read zero is a zero", &Resident{Measured: ResidentRunning, ReadAtUnixMS: 5, RSSBytes: ptr(uint64(0)), PeakRSSBytes: ptr(uint64(0)), AnonBytes: ptr(uint64(0))}, []string{
			"0 B -- resident (VmRSS, read while it ran)",
			"0 B -- resident-peak (VmHWM: the peak so far)",
			"unknown -- resident-unique (private pages of smaps_rollup; not read)",
			"0 B -- resident-anon (RssAnon)",
		}},
		{"never", &Resident{Measured: ResidentNever}, []string{
			"unknown -- resident, resident-peak, resident-unique, resident-anon (never read: the process ended before tagalloc's first look)",
		}},
		{"never, unreadable", &Resident{Measured: ResidentNever, Error: "open /proc/7/status: permission denied"}, []string{
			"unknown -- resident, resident-peak, resident-unique, resident-anon (open /proc/7/status: permission denied)",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.r.treeLines())
		})
	}
}

// about:memory gets resident, resident-peak and resident-unique as
// Firefox writes them (kind OTHER, units BYTES, single-name paths: Other
// Measurements), an unknown figure left out, and a program's own
// resident report kept in place of ours.
func TestResidentMemoryReport(t *testing.T) {
	find := func(f *MemReportFile, path string) []MemReport {
		var out []MemReport
		for _, r := range f.Reports {
			if r.Path == path {
				out = append(out, r)
			}
		}
		return out
	}
	r := sample()
	f, err := r.MemoryReport()
	require.NoError(t, err)
	for path, want := range map[string]int64{"resident": 130 << 20, "resident-peak": 140 << 20, "resident-unique": 120 << 20} {
		got := find(f, path)
		require.Len(t, got, 1, path)
		require.Equal(t, "app (pid 42)", got[0].Process)
		require.Equal(t, MemKindOther, got[0].Kind, path)
		require.Equal(t, MemUnitsBytes, got[0].Units, path)
		require.Equal(t, want, got[0].Amount, path)
	}
	require.Contains(t, find(f, "resident-peak")[0].Description, "lower bound")
	for _, rep := range f.Reports {
		if rep.Process == "helper (pid 43)" { // never read: no resident report at all
			require.False(t, strings.HasPrefix(rep.Path, "resident"), rep.Path)
		}
	}

	// unique unknown: resident alone (about:memory's headline falls back to it)
	r.Processes[0].Resident.UniqueBytes = nil
	f, err = r.MemoryReport()
	require.NoError(t, err)
	require.Empty(t, find(f, "resident-unique"))
	require.Len(t, find(f, "resident"), 1)

	// a program that reports its own resident keeps it; ours is not added
	p := &r.Processes[0]
	p.Reports = append(p.Reports, Item{Path: "resident", Kind: "other", Units: "bytes", Amount: 7, Description: "the program's own"})
	f, err = r.MemoryReport()
	require.NoError(t, err)
	got := find(f, "resident")
	require.Len(t, got, 1)
	require.Equal(t, int64(7), got[0].Amount)
}

// Unknown figures are null in JSON (not 0, not absent), and a report
// read back holds what was written; a measured value tagalloc does not
// write is refused.
func TestResidentJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, sample().WriteJSON(&b))
	var doc struct {
		Processes []struct {
			Resident map[string]any `json:"resident"`
		} `json:"processes"`
	}
	require.NoError(t, json.Unmarshal(b.Bytes(), &doc))
	never := doc.Processes[1].Resident
	for _, k := range []string{"rss_bytes", "peak_rss_bytes", "anon_bytes", "unique_bytes"} {
		v, ok := never[k]
		require.True(t, ok, "%s is written", k)
		require.Nil(t, v, "%s is null", k)
	}
	require.Equal(t, "never", never["measured"])

	bad := strings.Replace(b.String(), `"measured": "never"`, `"measured": "guessed"`, 1)
	_, err := Read(strings.NewReader(bad))
	require.ErrorContains(t, err, `resident measured "guessed"`)
	old := strings.Replace(b.String(), `"resident"`, `"resident_not"`, -1)
	r, err := Read(strings.NewReader(old))
	require.NoError(t, err, "a report without resident (older tagalloc) reads")
	require.Nil(t, r.Processes[0].Resident)
	var tree bytes.Buffer
	require.NoError(t, r.WriteTree(&tree))
	require.NotContains(t, tree.String(), "resident", "nothing recorded: nothing said")
}
