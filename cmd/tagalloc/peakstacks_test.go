package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/pprof/profile"
	"github.com/stretchr/testify/require"

	"github.com/tagalloc/tagalloc/reporter"
)

// Stacks at the peak (issue 21, item 2): the program holds its textures,
// then takes and frees 32 MiB under tag "scratch". Under --stacks full the
// peak's records say so exactly: scratch_phase held all it allocated, the
// textures all they hold now, and the records' shares add up to the peak;
// the DMD text has a Peak section and pprof a peak_space sample type. A
// sampled run estimates the same.
func TestRunStacksAtPeak(t *testing.T) {
	prog := buildStacksProg(t)
	bin, err := tagallocBin()
	require.NoError(t, err)
	for _, mode := range []string{"full", "sampled"} {
		t.Run(mode, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "report.json")
			cmd := exec.Command(bin, "run", "-q", "--stacks", mode, "-o", out, "--", prog, "peak")
			// sampled: one sample in 64 KiB, so 32 MiB of 8 KiB blocks give ~4000 samples
			cmd.Env = append(os.Environ(), "TAGALLOC_SAMPLE_RATE=65536")
			var so, se bytes.Buffer
			cmd.Stdout, cmd.Stderr = &so, &se
			require.NoError(t, cmd.Run(), se.String())
			books := parseBooks(t, so.String())
			rep, err := reporter.ReadFile(out)
			require.NoError(t, err)
			require.Len(t, rep.Processes, 1)
			st := rep.Processes[0].Stacks
			require.NotNil(t, st)
			require.NotNil(t, st.Peak)

			var scratchPeak, scratchLive, gpuPeak, sum uint64
			for _, r := range st.Records {
				sum += r.PeakBytes
				switch r.Tag {
				case "scratch":
					require.Equal(t, "scratch_phase", r.Frames[0].Function, "%+v", r.Frames)
					scratchPeak += r.PeakBytes
					scratchLive += r.LiveBytes
				case "gpu":
					gpuPeak += r.PeakBytes
				}
			}
			require.Zero(t, scratchLive, "all freed")
			if mode == "full" {
				require.Zero(t, st.Dropped)
				require.Equal(t, st.Peak.LiveBytes, sum, "the records' shares make the peak")
				require.Equal(t, books["scratch"][2], scratchPeak, "scratch held all it allocated at the peak")
				require.Equal(t, books["gpu"][0], gpuPeak, "the textures were all live at the peak")
				h := rep.Processes[0].Heap
				require.Equal(t, st.Peak.LiveBytes, h.PeakLiveBytes, "the heap's peak is exact")
				require.NotNil(t, h.PeakLiveBytesUpper)
				require.Equal(t, st.Peak.LiveBytes, *h.PeakLiveBytesUpper)
			} else {
				require.InEpsilon(t, float64(st.Peak.LiveBytes), float64(sum), 0.01)
				require.InEpsilon(t, float64(books["scratch"][2]), float64(scratchPeak), 0.25, "an estimate")
			}

			var dmd bytes.Buffer
			require.NoError(t, rep.WriteDMD(&dmd))
			require.Contains(t, dmd.String(), "# Peak records: ")
			require.Contains(t, dmd.String(), "# what was live at the ")
			peak := dmd.String()[strings.Index(dmd.String(), "# Peak records: "):]
			peak = peak[:strings.Index(peak, "# Cumulative records")]
			require.Contains(t, peak, "scratch_phase", "scratch is in the peak section")

			prof, err := rep.Profile(0)
			require.NoError(t, err)
			idx := -1
			for i, v := range prof.SampleType {
				if v.Type == reporter.PeakSpace {
					idx = i
				}
			}
			require.GreaterOrEqual(t, idx, 0)
			var ps int64
			for _, s := range prof.Sample {
				ps += s.Value[idx]
			}
			require.Equal(t, int64(sum), ps)
			var buf bytes.Buffer
			require.NoError(t, prof.Write(&buf))
			_, err = profile.Parse(&buf)
			require.NoError(t, err)
		})
	}
}
