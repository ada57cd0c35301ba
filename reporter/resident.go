// A process's resident memory, as Linux reported it to the launcher: the
// type, its lines in the tree and its about:memory measurements.

package reporter

import (
	"fmt"
	"strings"
	"time"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// How a process's resident figures were measured (Resident.Measured).
const (
	// ResidentRunning: read while the process ran, when the report was
	// taken (a snapshot, the live view, a child still running when the
	// run ended). The figures are its own at that moment.
	ResidentRunning = "running"
	// ResidentLastPoll: the process has ended; the figures are from the
	// launcher's last reading before it ended (ReadAtUnixMS), not from its
	// end. The peak is then a lower bound of the process's peak.
	ResidentLastPoll = "last-poll"
	// ResidentNever: no reading succeeded (the process ended before the
	// launcher's first look, or /proc could not be read): every figure
	// is unknown.
	ResidentNever = "never"
)

// Resident is a process's resident memory as Linux reports it, from
// /proc/PID/status (VmRSS, VmHWM, RssAnon) and /proc/PID/smaps_rollup
// (Private_Clean + Private_Dirty). A figure that could not be read is nil
// (null in JSON, "unknown" in text), never 0. Bytes.
type Resident struct {
	Measured string `json:"measured"`
	// ReadAtUnixMS: when the status figures (RSS, peak, anon) were read.
	ReadAtUnixMS int64 `json:"read_at_unix_ms,omitempty"`
	// EndedByUnixMS (last-poll): the process had ended by then (the
	// launcher saw it gone, or reaped it); it ended between ReadAtUnixMS
	// and this.
	EndedByUnixMS int64 `json:"ended_by_unix_ms,omitempty"`
	// RSSBytes: VmRSS, resident then.
	RSSBytes *uint64 `json:"rss_bytes"`
	// PeakRSSBytes: VmHWM, the highest VmRSS of the process's program
	// image until then (Linux resets it at exec).
	PeakRSSBytes *uint64 `json:"peak_rss_bytes"`
	// AnonBytes: RssAnon, the anonymous part of RSSBytes.
	AnonBytes *uint64 `json:"anon_bytes"`
	// UniqueBytes: resident pages no other process maps (Private_Clean +
	// Private_Dirty of smaps_rollup), Firefox's resident-unique. Read
	// less often than the rest (it walks the page tables): at
	// UniqueReadAtUnixMS.
	UniqueBytes        *uint64 `json:"unique_bytes"`
	UniqueReadAtUnixMS int64   `json:"unique_read_at_unix_ms,omitempty"`
	// Polls counts the launcher's successful readings of the status.
	Polls int `json:"polls"`
	// Error says why a figure is unknown, when a file could not be read.
	Error string `json:"error,omitempty"`
}

// PeakIsBound says whether PeakRSSBytes is a lower bound of the process's
// peak rather than its peak so far: the process ran on after the reading.
func (r *Resident) PeakIsBound() bool { return r.Measured != ResidentRunning }

// before says how long before the process ended a reading at ms was
// taken, at most: "≤ 12 ms before it ended".
func (r *Resident) before(ms int64) string {
	if r.EndedByUnixMS == 0 || ms == 0 || r.EndedByUnixMS < ms {
		return "before it ended"
	}
	d := r.EndedByUnixMS - ms
	if d < 10_000 {
		return fmt.Sprintf("≤ %d ms before it ended", d)
	}
	return fmt.Sprintf("≤ %v before it ended", time.Duration(d)*time.Millisecond)
}

// when says when a figure read at ms was taken ("" if it never was).
func (r *Resident) when(ms int64) string {
	switch {
	case ms == 0:
		return ""
	case r.Measured == ResidentRunning:
		return "read while it ran"
	}
	return "last read " + r.before(ms)
}

// treeLines are the tree's lines: one per figure, each saying what it is
// and when it was read, or "unknown" and why.
func (r *Resident) treeLines() []string {
	if r == nil {
		return nil
	}
	why := "not read"
	switch {
	case r.Error != "":
		why = termtext.Cut(r.Error, 120)
	case r.Measured == ResidentNever:
		why = "never read: the process ended before tagalloc's first look"
	}
	if r.RSSBytes == nil && r.PeakRSSBytes == nil && r.UniqueBytes == nil && r.AnonBytes == nil {
		return []string{fmt.Sprintf("unknown -- resident, resident-peak, resident-unique, resident-anon (%s)", why)}
	}
	line := func(path string, v *uint64, bound bool, what string, at int64) string {
		if v == nil {
			what, _, _ = strings.Cut(what, ",")
			return fmt.Sprintf("unknown -- %s (%s; %s)", path, what, why)
		}
		fig := humanize.IBytes(*v)
		if bound {
			fig = "≥ " + fig
		}
		if w := r.when(at); w != "" {
			what += ", " + w
		}
		return fmt.Sprintf("%s -- %s (%s)", fig, path, what)
	}
	peak := "VmHWM: the peak so far"
	if r.PeakIsBound() {
		peak = "VmHWM, a lower bound: the process ran on after the read"
	}
	return []string{
		line("resident", r.RSSBytes, false, "VmRSS", r.ReadAtUnixMS),
		line("resident-peak", r.PeakRSSBytes, r.PeakIsBound(), peak, 0),
		line("resident-unique", r.UniqueBytes, false, "private pages of smaps_rollup", r.UniqueReadAtUnixMS),
		line("resident-anon", r.AnonBytes, false, "RssAnon", 0),
	}
}

// memResident are about:memory's resident, resident-peak and
// resident-unique measurements (kind OTHER, units BYTES, as Firefox's own
// reporters write them; its headline "Total resident memory" sums each
// process's resident-unique, or resident where that is missing). An
// unknown figure is left out, never written as 0.
func (r *Resident) memReports() []MemReport {
	if r == nil {
		return nil
	}
	var out []MemReport
	add := func(path string, v *uint64, desc string) {
		if v != nil {
			out = append(out, MemReport{Path: path, Kind: MemKindOther, Units: MemUnitsBytes, Amount: int64(min(*v, maxExact)), Description: desc})
		}
	}
	add("resident", r.RSSBytes, "Memory mapped by the process that is present in physical memory (VmRSS of /proc/PID/status), "+r.when(r.ReadAtUnixMS)+".")
	peak := "The highest resident memory of the process's program image (VmHWM of /proc/PID/status), " + r.when(r.ReadAtUnixMS) + "."
	if r.PeakIsBound() {
		peak += " A lower bound: the process ran on after the read."
	}
	add("resident-peak", r.PeakRSSBytes, peak)
	add("resident-unique", r.UniqueBytes, "Memory mapped by the process that is present in physical memory and not shared with any other process (Private_Clean + Private_Dirty of /proc/PID/smaps_rollup), "+r.when(r.UniqueReadAtUnixMS)+".")
	return out
}
