// Two more views of a report: the JSON Firefox's about:memory loads
// ("Load..." accepts memory-report.json and .json.gz), and the difference
// between two reports (about:memory's "Load and diff...").

package reporter

import (
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"
)

// The memory-report format's kinds and units (nsIMemoryReporter).
var (
	firefoxKind  = map[string]int{"nonheap": 0, "heap": 1, "other": 2}
	firefoxUnits = map[string]int{"bytes": 0, "count": 1, "count-cumulative": 2, "percentage": 3}
)

type firefoxReport struct {
	Process     string `json:"process"`
	Path        string `json:"path"`
	Kind        int    `json:"kind"`
	Units       int    `json:"units"`
	Amount      int64  `json:"amount"`
	Description string `json:"description"`
}

type firefoxFile struct {
	Version                int             `json:"version"`
	HasMozMallocUsableSize bool            `json:"hasMozMallocUsableSize"`
	Reports                []firefoxReport `json:"reports"`
}

// firefoxPath escapes what about:memory would take for a separator in a
// tag name: '/' becomes '\', as Firefox writes URLs in paths.
func firefoxPath(p string) string {
	if rest, ok := strings.CutPrefix(p, "explicit/heap/"); ok {
		return "explicit/heap/" + strings.ReplaceAll(rest, "/", `\`)
	}
	return p
}

// WriteFirefox writes the report as memory-report JSON: one about:memory
// process per process, its items as reports. heap-unclassified is ours
// (untagged blocks), so no heap-allocated report is written: about:memory
// would subtract again.
func (r *Report) WriteFirefox(w io.Writer) error {
	f := firefoxFile{Version: 1, HasMozMallocUsableSize: true, Reports: []firefoxReport{}}
	for _, p := range r.Processes {
		name := "unknown"
		if len(p.Command) > 0 {
			name = filepath.Base(p.Command[0])
		}
		proc := fmt.Sprintf("%s (pid %d)", name, p.PID)
		for _, it := range p.Reports {
			k, ok1 := firefoxKind[it.Kind]
			u, ok2 := firefoxUnits[it.Units]
			if !ok1 || !ok2 || it.Amount > math.MaxInt64 {
				return fmt.Errorf("report %s of pid %d: kind %q, units %q, amount %d have no memory-report form", it.Path, p.PID, it.Kind, it.Units, it.Amount)
			}
			desc := it.Description
			if desc == "" {
				desc = it.Path
			}
			f.Reports = append(f.Reports, firefoxReport{proc, firefoxPath(it.Path), k, u, int64(it.Amount), desc})
		}
	}
	return json.NewEncoder(w).Encode(f)
}

// WriteFirefoxGzip is WriteFirefox, gzipped (memory-report.json.gz).
func (r *Report) WriteFirefoxGzip(w io.Writer) error {
	z := gzip.NewWriter(w)
	if err := r.WriteFirefox(z); err != nil {
		return err
	}
	return z.Close()
}

// Diff is what changed from one report to another.
type Diff struct {
	Schema    string        `json:"schema"` // tagalloc.diff/v1
	Processes []ProcessDiff `json:"processes"`
}

// ProcessDiff is one process's change: matched by program name (then in
// pid order), or added (only in B) or removed (only in A).
type ProcessDiff struct {
	Command []string  `json:"command"`
	PIDA    int       `json:"pid_a,omitempty"`
	PIDB    int       `json:"pid_b,omitempty"`
	Status  string    `json:"status"` // changed, added, removed
	Tags    []TagDiff `json:"tags"`   // largest change in live bytes first
}

// TagDiff is B - A for one tag.
type TagDiff struct {
	Name        string `json:"name"`
	LiveBytes   int64  `json:"live_bytes"`
	LiveBlocks  int64  `json:"live_blocks"`
	AllocBytes  int64  `json:"alloc_bytes"`
	AllocBlocks int64  `json:"alloc_blocks"`
}

// DiffSchema names the diff's JSON.
const DiffSchema = "tagalloc.diff/v1"

func sub(b, a uint64) int64 { return int64(b) - int64(a) }

// Compare computes B - A.
func Compare(a, b *Report) *Diff {
	d := &Diff{Schema: DiffSchema, Processes: []ProcessDiff{}}
	key := func(p Process) string { // the program, as about:memory matches processes by name
		if len(p.Command) == 0 {
			return ""
		}
		return filepath.Base(p.Command[0])
	}
	byCmd := map[string][]Process{}
	for _, p := range a.Processes {
		byCmd[key(p)] = append(byCmd[key(p)], p)
	}
	for k := range byCmd {
		sort.Slice(byCmd[k], func(i, j int) bool { return byCmd[k][i].PID < byCmd[k][j].PID })
	}
	bs := append([]Process(nil), b.Processes...)
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].PID < bs[j].PID })
	for _, pb := range bs {
		pd := ProcessDiff{Command: pb.Command, PIDB: pb.PID, Status: "added"}
		var pa Process
		if l := byCmd[key(pb)]; len(l) > 0 {
			pa, byCmd[key(pb)] = l[0], l[1:]
			pd.PIDA, pd.Status = pa.PID, "changed"
		}
		pd.Tags = diffTags(pa.Tags, pb.Tags)
		d.Processes = append(d.Processes, pd)
	}
	var removed []Process
	for _, l := range byCmd {
		removed = append(removed, l...)
	}
	sort.Slice(removed, func(i, j int) bool { return removed[i].PID < removed[j].PID })
	for _, pa := range removed {
		d.Processes = append(d.Processes, ProcessDiff{Command: pa.Command, PIDA: pa.PID, Status: "removed", Tags: diffTags(pa.Tags, nil)})
	}
	return d
}

func diffTags(a, b []Tag) []TagDiff {
	old := map[string]Tag{}
	for _, t := range a {
		old[t.Name] = t
	}
	out := []TagDiff{}
	seen := map[string]bool{}
	add := func(ta, tb Tag, name string) {
		td := TagDiff{name, sub(tb.LiveBytes, ta.LiveBytes), sub(tb.LiveBlocks, ta.LiveBlocks),
			sub(tb.AllocBytes, ta.AllocBytes), sub(tb.AllocBlocks, ta.AllocBlocks)}
		if td != (TagDiff{Name: name}) {
			out = append(out, td)
		}
	}
	for _, tb := range b {
		seen[tb.Name] = true
		add(old[tb.Name], tb, tb.Name)
	}
	for _, ta := range a {
		if !seen[ta.Name] {
			add(ta, Tag{}, ta.Name)
		}
	}
	sort.SliceStable(out, func(i, j int) bool {
		x, y := abs(out[i].LiveBytes), abs(out[j].LiveBytes)
		if x != y {
			return x > y
		}
		return out[i].Name < out[j].Name
	})
	return out
}

func abs(v int64) int64 {
	if v < 0 {
		return -v
	}
	return v
}

// signed formats a byte change: +1.5 MiB, -200 KiB, 0 B.
func signed(v int64) string {
	switch {
	case v > 0:
		return "+" + humanize.IBytes(uint64(v))
	case v < 0:
		return "-" + humanize.IBytes(uint64(-v))
	}
	return "0 B"
}

// WriteText writes the diff as about:memory's compare view does.
func (d *Diff) WriteText(w io.Writer) error {
	var b strings.Builder
	for _, p := range d.Processes {
		fmt.Fprintf(&b, "%s -- ", strings.Join(p.Command, " "))
		switch p.Status {
		case "added":
			fmt.Fprintf(&b, "added (pid %d)\n", p.PIDB)
		case "removed":
			fmt.Fprintf(&b, "removed (pid %d)\n", p.PIDA)
		default:
			fmt.Fprintf(&b, "pid %d -> %d\n", p.PIDA, p.PIDB)
		}
		var total int64
		for _, t := range p.Tags {
			total += t.LiveBytes
		}
		fmt.Fprintf(&b, "%10s -- explicit\n", signed(total))
		for _, t := range p.Tags {
			path := "heap/" + t.Name
			if t.Name == DefaultTag {
				path = "heap-unclassified"
			}
			fmt.Fprintf(&b, "%10s ── %s  [%+d blocks; %s allocated in all]\n", signed(t.LiveBytes), path, t.LiveBlocks, signed(t.AllocBytes))
		}
		b.WriteString("\n")
	}
	if len(d.Processes) == 0 {
		b.WriteString("no processes in either report\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the diff as JSON.
func (d *Diff) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(d)
}
