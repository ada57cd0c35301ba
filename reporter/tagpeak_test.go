package reporter

import (
	"bytes"
	"fmt"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/tagtable"
)

// evilTag is a tag name a measured program could register: terminal
// escapes and a bidirectional override.
const evilTag = "\x1b[2Jevil\u202e"

// tagPeakProfile: tag gpu peaks at 10 ms (4,000 bytes from stack 1), tag
// evilTag at 40 ms (11,000 bytes from stacks 2 and 3), which is also the
// heap's peak (12,000 bytes), when gpu held only 1,000; gpu's stack 2
// starts after its peak.
func tagPeakProfile() (*tagtable.Profile, map[uint32]string) {
	p := tagtable.NewProfile(7, "full", 1)
	p.Module(tagtable.Module{Start: 0x1000, End: 0x2000, Path: "/usr/bin/prog"})
	p.Stack(1, []uint64{0x1010})
	p.Stack(2, []uint64{0x1020})
	p.Stack(3, []uint64{0x1030})
	p.SetClock(10)
	for i := uint64(0); i < 4; i++ {
		p.Alloc(0x10000+i*0x1000, 1000, 1000, 1, 1)
	}
	p.SetClock(20)
	p.Alloc(0x20000, 3000, 3000, 2, 2)
	p.Alloc(0x21000, 3000, 3000, 2, 2)
	p.SetClock(30)
	for i := uint64(1); i < 4; i++ {
		p.Free(0x10000 + i*0x1000)
	}
	p.SetClock(40)
	p.Alloc(0x30000, 5000, 5000, 2, 3)
	p.SetClock(50)
	p.Free(0x20000)
	p.Free(0x21000)
	p.Free(0x30000)
	p.Alloc(0x40000, 2000, 2000, 1, 2)
	return p, map[uint32]string{1: "gpu", 2: evilTag}
}

// Each tag's own peak in the stacks section: in JSON (tag_peaks, and each
// record's tag_peak_bytes/blocks), in the DMD text (a Tag peak section,
// tag by tag, names made safe, ~ when sampled) and in pprof
// (tag_peak_space, by the tag label); a report without tag peaks has no
// such section.
func TestTagPeaks(t *testing.T) {
	p, names := tagPeakProfile()
	defer p.Close()
	st := FromProfile(p, names, nil)
	require.Equal(t, &StacksPeak{LiveBytes: 12000, Ms: 40}, st.Peak)
	require.Equal(t, []StacksTagPeak{{Tag: evilTag, LiveBytes: 11000, Ms: 40}, {Tag: "gpu", LiveBytes: 4000, Ms: 10}}, st.TagPeaks)
	type figs struct{ peak, peakBlocks, tagPeak, tagPeakBlocks, live uint64 }
	got := map[string]figs{}
	for _, r := range st.Records {
		got[fmt.Sprintf("%s@%#x", r.Tag, r.Frames[0].PC)] = figs{r.PeakBytes, r.PeakBlocks, r.TagPeakBytes, r.TagPeakBlocks, r.LiveBytes}
	}
	require.Equal(t, map[string]figs{
		"gpu@0x1010":        {1000, 1, 4000, 4, 1000}, // held 4,000 at its tag's peak, 1,000 at the heap's
		"gpu@0x1020":        {0, 0, 0, 0, 2000},       // began after both
		evilTag + "@0x1020": {6000, 2, 6000, 2, 0},
		evilTag + "@0x1030": {5000, 1, 5000, 1, 0},
	}, got)

	// JSON: written and read back
	rep := &Report{Schema: Schema, Processes: []Process{{PID: 7, Command: []string{"prog"}, Stacks: st}}}
	var js bytes.Buffer
	require.NoError(t, rep.WriteJSON(&js))
	require.Contains(t, js.String(), `"tag_peaks"`)
	require.Contains(t, js.String(), `"tag_peak_bytes": 4000`)
	back, err := Read(bytes.NewReader(js.Bytes()))
	require.NoError(t, err)
	bst := back.Processes[0].Stacks
	require.Equal(t, st.TagPeaks, bst.TagPeaks)
	for i, r := range bst.Records {
		require.Equal(t, st.Records[i].TagPeakBytes, r.TagPeakBytes)
		require.Equal(t, st.Records[i].TagPeakBlocks, r.TagPeakBlocks)
	}

	// DMD, from the report read back
	var b bytes.Buffer
	require.NoError(t, back.WriteDMD(&b))
	out := b.String()
	for _, bad := range []string{"\x1b", "\u202e"} {
		require.NotContains(t, out, bad, "the program's tag names are data")
	}
	start := strings.Index(out, "# Tag peak records: 3\n# what each tag held at its own peak, tag by tag\n\n")
	require.GreaterOrEqual(t, start, 0, out)
	require.Less(t, strings.Index(out, "# Peak records: "), start, "beside the heap's peak, after it")
	sec := out[start:strings.Index(out, "# Cumulative records")]
	evil := strings.Index(sec, "# tag ?[2Jevil?: 11,000 bytes at its peak, at 40 ms; 2 records in 3 blocks\n")
	gpu := strings.Index(sec, "# tag gpu: 4,000 bytes at its peak, at 10 ms; 1 record in 4 blocks\n")
	require.True(t, evil >= 0 && gpu > evil, "largest peak first:\n%s", sec)
	require.Contains(t, sec[evil:gpu], "Tag peak {\n  2 blocks in heap block record 1 of 2 (tag ?[2Jevil?)\n  6,000 bytes\n  54.55% of the tag's peak (54.55% cumulative)\n")
	require.Contains(t, sec[evil:gpu], "  1 block in heap block record 2 of 2 (tag ?[2Jevil?)\n  5,000 bytes\n  45.45% of the tag's peak (100.00% cumulative)\n")
	require.Contains(t, sec[gpu:], "Tag peak {\n  4 blocks in heap block record 1 of 1 (tag gpu)\n  4,000 bytes\n  100.00% of the tag's peak (100.00% cumulative)\n")
	require.Equal(t, 3, strings.Count(sec, "Tag peak {"), "gpu's record begun after its peak has none")

	// sampled: estimates, marked
	sampled := *bst
	sampled.Mode, sampled.SampleRate = "sampled", 4096
	b.Reset()
	require.NoError(t, (&Report{Processes: []Process{{PID: 7, Stacks: &sampled}}}).WriteDMD(&b))
	require.Contains(t, b.String(), "# what each tag held at the peak of its sampled blocks' estimate, tag by tag\n")
	require.Contains(t, b.String(), "# tag gpu: ~4,000 bytes at its peak, at 10 ms; 1 record in ~4 blocks\n")
	require.Contains(t, b.String(), "  ~4 blocks in heap block record 1 of 1 (tag gpu)\n  ~4,000 bytes\n")

	// pprof: tag_peak_space by tag is each tag's peak
	prof := roundTrip(t, back, 0)
	idx := map[string]int{}
	for i, v := range prof.SampleType {
		idx[v.Type] = i
	}
	byTag, objects := map[string]int64{}, map[string]int64{}
	for _, s := range prof.Sample {
		byTag[s.Label["tag"][0]] += s.Value[idx[TagPeakSpace]]
		objects[s.Label["tag"][0]] += s.Value[idx["tag_peak_objects"]]
	}
	require.Equal(t, map[string]int64{"gpu": 4000, evilTag: 11000}, byTag)
	require.Equal(t, map[string]int64{"gpu": 4, evilTag: 3}, objects)
	require.Len(t, prof.Comments, 1)
	require.Contains(t, prof.Comments[0], "tag_peak_space: what each stack held at its own tag's peak (exact;")
	var pb bytes.Buffer
	require.NoError(t, prof.Write(&pb))
	_, err = profile.Parse(&pb)
	require.NoError(t, err)

	// a report made before tag peaks were kept: no section, no claim
	old := *bst
	old.TagPeaks = nil
	b.Reset()
	require.NoError(t, (&Report{Processes: []Process{{PID: 7, Stacks: &old}}}).WriteDMD(&b))
	require.NotContains(t, b.String(), "Tag peak")
	prof, err = (&Report{Processes: []Process{{PID: 7, Stacks: &old}}}).Profile(0)
	require.NoError(t, err)
	require.NotContains(t, prof.Comments[0], TagPeakSpace)
}
