// pprof profiles of the stacks section, for `go tool pprof` and the
// continuous profilers that read its format (built with
// github.com/google/pprof/profile, the format's own package).

package reporter

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/google/pprof/profile"
)

// Sample types of the profiles, in the order Go's heap profiles use.
const (
	AllocSpace = "alloc_space"
	InuseSpace = "inuse_space"
	PeakSpace  = "peak_space" // held at the heap's peak (StackRecord.PeakBytes)
	// TagPeakSpace is what each record held at its own tag's peak
	// (StackRecord.TagPeakBytes): with -tagfocus=tag=NAME, what NAME held
	// at its peak.
	TagPeakSpace = "tag_peak_space"
)

// Profile builds a pprof heap profile of process p's stacks (see
// Report.Profile).
func (p Process) Profile() (*profile.Profile, error) {
	if p.Stacks == nil {
		return nil, errors.New("no stacks in this process's report (tagalloc run --stacks sampled)")
	}
	b := newPprofBuilder()
	b.add(p)
	return b.finish()
}

// Profile builds a pprof heap profile of the stacks of the process pid,
// or of every process with stacks merged if pid is 0. Sample values are
// alloc_objects, alloc_space, inuse_objects, inuse_space (Go's heap
// profile), then peak_objects and peak_space (what each record held at
// its process's heap peak: -sample_index=peak_space; merged processes'
// peaks are each their own moment), then tag_peak_objects and
// tag_peak_space (what each record held at its own tag's peak, each tag's
// its own moment: -sample_index=tag_peak_space -tagfocus=tag=NAME shows
// what NAME held at its peak; without a focus the tags' peaks are added
// up, a total no moment had); one sample per record, labelled with
// its tag and library (-tagfocus=tag=NAME) and with the number label pid
// (-tagfocus=pid=N). The default sample type is inuse_space, or
// peak_space when nothing sampled is live (a program that freed
// everything before it ended), or alloc_space when there is no peak
// either.
func (r *Report) Profile(pid int) (*profile.Profile, error) {
	b := newPprofBuilder()
	for _, p := range r.Processes {
		if p.Stacks != nil && (pid == 0 || p.PID == pid) {
			b.add(p)
		}
	}
	if b.processes == 0 {
		return nil, r.noStacks(pid)
	}
	return b.finish()
}

// noStacks says why the report has no profile for pid (0: for any process).
func (r *Report) noStacks(pid int) error {
	if pid == 0 {
		return errors.New("no stacks in this report: run with tagalloc run --stacks sampled (or full)")
	}
	for _, p := range r.Processes {
		if p.PID == pid {
			return fmt.Errorf("process %d has no stacks in this report", pid)
		}
	}
	return fmt.Errorf("no process %d in this report", pid)
}

// WritePprof writes Profile(pid) as pprof's gzipped protobuf.
func (r *Report) WritePprof(w io.Writer, pid int) error {
	prof, err := r.Profile(pid)
	if err != nil {
		return err
	}
	return prof.Write(w)
}

// pprofBuilder assembles one profile from the records of one or more
// processes, sharing mappings and functions between them.
type pprofBuilder struct {
	prof      *profile.Profile
	mappings  map[Mapping]*profile.Mapping
	funcs     map[[2]string]*profile.Function // name, file
	locs      map[[2]uint64]*profile.Location // pid, pc
	live      bool                            // some sample has live bytes
	peak      bool                            // some sample has peak bytes
	processes int                             // added
}

func newPprofBuilder() *pprofBuilder {
	return &pprofBuilder{
		prof: &profile.Profile{
			SampleType: []*profile.ValueType{
				{Type: "alloc_objects", Unit: "count"}, {Type: AllocSpace, Unit: "bytes"},
				{Type: "inuse_objects", Unit: "count"}, {Type: InuseSpace, Unit: "bytes"},
				{Type: "peak_objects", Unit: "count"}, {Type: PeakSpace, Unit: "bytes"},
				{Type: "tag_peak_objects", Unit: "count"}, {Type: TagPeakSpace, Unit: "bytes"},
			},
			PeriodType: &profile.ValueType{Type: "space", Unit: "bytes"},
		},
		mappings: map[Mapping]*profile.Mapping{},
		funcs:    map[[2]string]*profile.Function{},
		locs:     map[[2]uint64]*profile.Location{},
	}
}

// add adds process p's records (p.Stacks is not nil).
func (b *pprofBuilder) add(p Process) {
	st := p.Stacks
	b.processes++
	if b.prof.Period == 0 {
		b.prof.Period = int64(st.SampleRate) // pprof has one period; each process's is in its comment
	}
	comment := fmt.Sprintf("tagalloc: process %d (%s), stacks %s, one sample in %d bytes",
		p.PID, strings.Join(p.Command, " "), st.Mode, st.SampleRate)
	if st.TagPeaks != nil {
		how := "exact"
		if st.Mode != "full" {
			how = "estimates"
		}
		comment += fmt.Sprintf("; %s: what each stack held at its own tag's peak (%s; -tagfocus=tag=NAME for one tag's)", TagPeakSpace, how)
	}
	b.prof.Comments = append(b.prof.Comments, comment)
	for _, r := range st.Records {
		s := &profile.Sample{
			Value: []int64{int64(r.AllocBlocks), int64(r.AllocBytes), int64(r.LiveBlocks), int64(r.LiveBytes),
				int64(r.PeakBlocks), int64(r.PeakBytes), int64(r.TagPeakBlocks), int64(r.TagPeakBytes)},
			Label:    map[string][]string{"tag": {r.Tag}, "library": {r.Library}},
			NumLabel: map[string][]int64{"pid": {int64(p.PID)}},
		}
		b.live = b.live || r.LiveBytes > 0
		b.peak = b.peak || r.PeakBytes > 0
		for i := 0; i < len(r.Frames); {
			j := i + 1 // the frames of one address: inlined calls, then their function
			for r.Frames[j-1].Inlined && j < len(r.Frames) && r.Frames[j].PC == r.Frames[i].PC {
				j++
			}
			s.Location = append(s.Location, b.location(p.PID, st.Mappings, r.Frames[i:j]))
			i = j
		}
		b.prof.Sample = append(b.prof.Sample, s)
	}
}

// location makes the location of one address of process pid from its
// frames (several where calls were inlined: pprof's lines, innermost
// first).
func (b *pprofBuilder) location(pid int, maps []Mapping, fr []Frame) *profile.Location {
	key := [2]uint64{uint64(pid), fr[0].PC}
	if l := b.locs[key]; l != nil {
		return l
	}
	l := &profile.Location{ID: uint64(len(b.prof.Location) + 1), Address: fr[0].PC, Mapping: b.mapping(maps, fr[0])}
	for _, f := range fr {
		name := f.Function
		if name == "" {
			name = fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
		}
		l.Line = append(l.Line, profile.Line{Function: b.function(name, f.File), Line: int64(f.Line)})
	}
	b.locs[key] = l
	b.prof.Location = append(b.prof.Location, l)
	return l
}

// mapping is the mapping of f's address: the one of maps that holds it,
// or (a report without mappings) one named by f's module alone.
func (b *pprofBuilder) mapping(maps []Mapping, f Frame) *profile.Mapping {
	i := sort.Search(len(maps), func(i int) bool { return maps[i].End > f.PC })
	var key Mapping
	switch {
	case i < len(maps) && maps[i].Start <= f.PC:
		key = maps[i]
	case f.Module != "":
		key = Mapping{Path: f.Module}
	default:
		return nil
	}
	m := b.mappings[key]
	if m == nil {
		m = &profile.Mapping{ID: uint64(len(b.prof.Mapping) + 1), File: key.Path, Start: key.Start, Limit: key.End,
			Offset: key.Offset, BuildID: key.BuildID, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
		b.mappings[key] = m
		b.prof.Mapping = append(b.prof.Mapping, m)
	}
	return m
}

func (b *pprofBuilder) function(name, file string) *profile.Function {
	key := [2]string{name, file}
	fn := b.funcs[key]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.prof.Function) + 1), Name: name, SystemName: name, Filename: file}
		b.funcs[key] = fn
		b.prof.Function = append(b.prof.Function, fn)
	}
	return fn
}

// finish picks the default sample type and checks the profile.
func (b *pprofBuilder) finish() (*profile.Profile, error) {
	switch {
	case b.live:
		b.prof.DefaultSampleType = InuseSpace
	case b.peak:
		b.prof.DefaultSampleType = PeakSpace
	default:
		b.prof.DefaultSampleType = AllocSpace
	}
	if err := b.prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("building the pprof profile: %w", err)
	}
	return b.prof, nil
}
