// pprof profiles of the stacks section, for `go tool pprof` and the
// continuous profilers that read its format (built with
// github.com/google/pprof/profile, the format's own package).

package reporter

import (
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/google/pprof/profile"
)

// Profile builds a pprof heap profile of process p's stacks: sample
// values alloc_objects, alloc_space, inuse_objects, inuse_space (the
// usual heap profile), one sample per record, labelled with its tag and
// library (so -tagfocus=tag=NAME works).
func (p Process) Profile() (*profile.Profile, error) {
	st := p.Stacks
	if st == nil {
		return nil, errors.New("no stacks in this process's report (tagalloc run --stacks sampled)")
	}
	prof := &profile.Profile{
		SampleType: []*profile.ValueType{
			{Type: "alloc_objects", Unit: "count"}, {Type: "alloc_space", Unit: "bytes"},
			{Type: "inuse_objects", Unit: "count"}, {Type: "inuse_space", Unit: "bytes"},
		},
		DefaultSampleType: "inuse_space",
		PeriodType:        &profile.ValueType{Type: "space", Unit: "bytes"},
		Period:            int64(st.SampleRate),
		Comments:          []string{fmt.Sprintf("tagalloc: process %d (%s), stacks %s", p.PID, strings.Join(p.Command, " "), st.Mode)},
	}
	mappings := map[string]*profile.Mapping{}
	funcs := map[string]*profile.Function{}
	locs := map[uint64]*profile.Location{}
	mappingOf := func(module string) *profile.Mapping {
		if module == "" {
			return nil
		}
		m := mappings[module]
		if m == nil {
			m = &profile.Mapping{ID: uint64(len(prof.Mapping) + 1), File: module, HasFunctions: true, HasFilenames: true, HasLineNumbers: true}
			mappings[module] = m
			prof.Mapping = append(prof.Mapping, m)
		}
		return m
	}
	// locationOf makes the location of one address from its frames
	// (several where calls were inlined: pprof's lines, innermost first).
	locationOf := func(fr []Frame) *profile.Location {
		f := fr[0]
		if l := locs[f.PC]; l != nil {
			return l
		}
		l := &profile.Location{ID: uint64(len(prof.Location) + 1), Address: f.PC, Mapping: mappingOf(f.Module)}
		for _, f := range fr {
			name := f.Function
			if name == "" {
				name = fmt.Sprintf("%s+0x%x", f.Module, f.Offset)
			}
			key := name + "\x00" + f.File
			fn := funcs[key]
			if fn == nil {
				fn = &profile.Function{ID: uint64(len(prof.Function) + 1), Name: name, SystemName: name, Filename: f.File}
				funcs[key] = fn
				prof.Function = append(prof.Function, fn)
			}
			l.Line = append(l.Line, profile.Line{Function: fn, Line: int64(f.Line)})
		}
		locs[f.PC] = l
		prof.Location = append(prof.Location, l)
		return l
	}
	for _, r := range st.Records {
		s := &profile.Sample{
			Value: []int64{int64(r.AllocBlocks), int64(r.AllocBytes), int64(r.LiveBlocks), int64(r.LiveBytes)},
			Label: map[string][]string{"tag": {r.Tag}, "library": {r.Library}},
		}
		for i := 0; i < len(r.Frames); {
			j := i + 1 // the frames of one address: inlined calls, then their function
			for r.Frames[j-1].Inlined && j < len(r.Frames) && r.Frames[j].PC == r.Frames[i].PC {
				j++
			}
			s.Location = append(s.Location, locationOf(r.Frames[i:j]))
			i = j
		}
		prof.Sample = append(prof.Sample, s)
	}
	if err := prof.CheckValid(); err != nil {
		return nil, fmt.Errorf("building the pprof profile: %w", err)
	}
	return prof, nil
}

// WritePprof writes the pprof profile (gzipped protobuf) of the report's
// process with stacks: the one given by pid, or the first if pid is 0.
func (r *Report) WritePprof(w io.Writer, pid int) error {
	for _, p := range r.Processes {
		if p.Stacks == nil || (pid != 0 && p.PID != pid) {
			continue
		}
		prof, err := p.Profile()
		if err != nil {
			return err
		}
		return prof.Write(w)
	}
	if pid != 0 {
		return fmt.Errorf("no process %d with stacks in this report", pid)
	}
	return errors.New("no stacks in this report: run with tagalloc run --stacks sampled (or full)")
}
