package reporter

import (
	"bytes"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"
)

// twoProcesses is a report of two processes with the same stacks (a
// parent and its fork) and one without stacks.
func twoProcesses() *Report {
	p, names := sampleProfile()
	st := FromProfile(p, names, sampleSymbolize)
	return &Report{Schema: Schema, Processes: []Process{
		{PID: 10, Command: []string{"prog"}, Stacks: st},
		{PID: 11, Command: []string{"prog", "child"}, Stacks: st},
		{PID: 12, Command: []string{"sh"}},
	}}
}

// roundTrip writes the report's profile for pid and parses it back.
func roundTrip(t *testing.T, r *Report, pid int) *profile.Profile {
	t.Helper()
	var b bytes.Buffer
	require.NoError(t, r.WritePprof(&b, pid))
	prof, err := profile.Parse(&b)
	require.NoError(t, err)
	return prof
}

// pidsOf sums inuse_space by the samples' pid label.
func pidsOf(t *testing.T, prof *profile.Profile) map[int64]int64 {
	t.Helper()
	out := map[int64]int64{}
	for _, s := range prof.Sample {
		require.Len(t, s.NumLabel["pid"], 1, "every sample has one pid")
		out[s.NumLabel["pid"][0]] += s.Value[3]
	}
	return out
}

func TestPprofMergesProcessesWithPidLabel(t *testing.T) {
	r := twoProcesses()
	live := int64(0)
	for _, rec := range r.Processes[0].Stacks.Records {
		live += int64(rec.LiveBytes)
	}
	prof := roundTrip(t, r, 0)
	require.Equal(t, map[int64]int64{10: live, 11: live}, pidsOf(t, prof))
	require.Len(t, prof.Comments, 2, "one comment per process with stacks")

	one := roundTrip(t, r, 11)
	require.Equal(t, map[int64]int64{11: live}, pidsOf(t, one))

	for pid, msg := range map[int]string{12: "process 12 has no stacks", 99: "no process 99"} {
		_, err := r.Profile(pid)
		require.ErrorContains(t, err, msg)
	}
	_, err := (&Report{Schema: Schema, Processes: []Process{{PID: 1}}}).Profile(0)
	require.ErrorContains(t, err, "no stacks in this report")
}

func TestPprofMappingsAndFiles(t *testing.T) {
	prof := roundTrip(t, twoProcesses(), 0)
	byFile := map[string]*profile.Mapping{}
	for _, m := range prof.Mapping {
		byFile[m.File] = m
	}
	require.Len(t, prof.Mapping, 3, "the processes share their mappings: %v", prof.Mapping)
	prog := byFile["/usr/bin/prog"]
	require.NotNil(t, prog, "full paths: %v", prof.Mapping)
	require.Equal(t, [4]uint64{0x1000, 0x2000, 0x1000, 0}, [4]uint64{prog.Start, prog.Limit, prog.Offset, 0})
	require.Equal(t, "0a1b2c", prog.BuildID)
	require.NotNil(t, byFile["/usr/lib/libGLESv2.so.2"])
	for _, l := range prof.Location {
		require.NotNil(t, l.Mapping)
		require.True(t, l.Address >= l.Mapping.Start && l.Address < l.Mapping.Limit, "%#x in %s", l.Address, l.Mapping.File)
	}
	files := map[string]bool{}
	for _, f := range prof.Function {
		files[f.Filename] = true
	}
	require.True(t, files["/src/main.c"] && files["/src/util.h"], "full source paths: %v", files)
}

// A report saved before mappings were kept names its modules alone.
func TestPprofWithoutMappings(t *testing.T) {
	r := twoProcesses()
	st := *r.Processes[0].Stacks
	st.Mappings = nil
	r.Processes = []Process{{PID: 10, Stacks: &st}}
	prof := roundTrip(t, r, 0)
	var files []string
	for _, m := range prof.Mapping {
		files = append(files, m.File)
		require.Zero(t, m.Limit)
	}
	require.ElementsMatch(t, []string{"prog", "libGLESv2.so.2", "libc.so.6"}, files)
}

// The default sample type: inuse_space, unless nothing is live (a program
// that freed everything before it ended), then peak_space, or alloc_space
// without a peak either (a report made before peaks were kept); every
// type is there either way, and peak_space holds each record's share of
// the peak.
func TestPprofDefaultSampleType(t *testing.T) {
	r := twoProcesses()
	types := func(p *profile.Profile) []string {
		var out []string
		for _, st := range p.SampleType {
			out = append(out, st.Type)
		}
		return out
	}
	all := []string{"alloc_objects", AllocSpace, "inuse_objects", InuseSpace, "peak_objects", PeakSpace, "tag_peak_objects", TagPeakSpace}
	prof := roundTrip(t, r, 0)
	require.Equal(t, InuseSpace, prof.DefaultSampleType)
	require.Equal(t, all, types(prof))

	st := *r.Processes[0].Stacks
	st.Records = append([]StackRecord(nil), st.Records...)
	var peak int64
	for i := range st.Records {
		st.Records[i].PeakBytes, st.Records[i].PeakBlocks = st.Records[i].LiveBytes+100, st.Records[i].LiveBlocks+1
		peak += int64(st.Records[i].PeakBytes)
		st.Records[i].LiveBytes, st.Records[i].LiveBlocks = 0, 0
	}
	r.Processes = []Process{{PID: 10, Stacks: &st}}
	prof = roundTrip(t, r, 0)
	require.Equal(t, PeakSpace, prof.DefaultSampleType)
	require.Equal(t, all, types(prof))
	var sum int64
	for _, s := range prof.Sample {
		sum += s.Value[5]
	}
	require.Equal(t, peak, sum)

	for i := range st.Records {
		st.Records[i].PeakBytes, st.Records[i].PeakBlocks = 0, 0
	}
	prof = roundTrip(t, r, 0)
	require.Equal(t, AllocSpace, prof.DefaultSampleType)
}
