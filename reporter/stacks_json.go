// The stacks section's JSON: records name their frames by trace.

package reporter

import (
	"encoding/json"
	"fmt"

	"github.com/tagalloc/tagalloc/growth"
)

// In the JSON, the records of a stacks section do not carry their frames:
// each names a trace (1 + its index in trace_table), a trace lists frame
// indexes (into frame_table, innermost first), and every distinct frame is
// written once. Records share most of their frames (every Python stack
// goes through the same dozens of interpreter frames), so a --stacks full
// run of Python wrote 199 MB with frames in every record and about 14 MB
// this way. Reading takes both forms (reports written before this carry
// "frames" in each record); in Go, StackRecord.Frames is always filled.

// stackRecordJSON is StackRecord as written: Frames out, Trace in.
type stackRecordJSON struct {
	StackRecord
	Frames []Frame `json:"frames,omitempty"` // the old form (read only)
	Trace  int     `json:"trace,omitempty"`  // 1 + index in trace_table
}

type stacksAlias Stacks // Stacks without its methods

type stacksJSON struct {
	*stacksAlias
	Records    []stackRecordJSON `json:"records"`
	FrameTable []Frame           `json:"frame_table,omitempty"`
	TraceTable [][]uint32        `json:"trace_table,omitempty"`
}

// MarshalJSON writes s with its records' frames in the two tables.
func (s *Stacks) MarshalJSON() ([]byte, error) {
	out := stacksJSON{stacksAlias: (*stacksAlias)(s), Records: make([]stackRecordJSON, len(s.Records))}
	if s.Records == nil {
		out.Records = nil
	}
	// Frames are found by PC, then compared: a PC has one frame, or a few
	// (the calls inlined there), and comparing them is cheaper than hashing
	// their strings (python's full report has 1.4M frames in its traces).
	type frameRef struct {
		f  Frame
		id uint32
	}
	byPC := map[uint64][]frameRef{}
	frameID := func(f Frame) uint32 {
		refs := byPC[f.PC]
		for _, r := range refs {
			if r.f == f {
				return r.id
			}
		}
		id := uint32(len(out.FrameTable))
		out.FrameTable = append(out.FrameTable, f)
		byPC[f.PC] = append(refs, frameRef{f, id})
		return id
	}
	type traceKey struct {
		first *Frame
		n     int
	}
	traceIdx := map[traceKey]int{} // records of one stack share their frames' array
	for i, r := range s.Records {
		out.Records[i].StackRecord = r
		out.Records[i].StackRecord.Frames = nil
		if len(r.Frames) == 0 {
			continue
		}
		k := traceKey{&r.Frames[0], len(r.Frames)}
		t, ok := traceIdx[k]
		if !ok {
			ids := make([]uint32, len(r.Frames))
			for j, f := range r.Frames {
				ids[j] = frameID(f)
			}
			out.TraceTable = append(out.TraceTable, ids)
			t = len(out.TraceTable)
			traceIdx[k] = t
		}
		out.Records[i].Trace = t
	}
	return json.Marshal(out)
}

// findingJSON reads a growth finding as v2 writes it (snake_case) or as
// v1 wrote it (Go's field names: Name, GrowSteps, ...). Name, Library and
// Reallocs match their v2 names without regard to case.
type findingJSON struct {
	growth.Finding
	V1GrowSteps   *uint64  `json:"GrowSteps"`
	V1MeanRatio   *float64 `json:"MeanRatio"`
	V1BytesCopied *uint64  `json:"BytesCopied"`
	V1FinalBytes  *uint64  `json:"FinalBytes"`
}

func (f findingJSON) finding() growth.Finding {
	out := f.Finding
	if f.V1GrowSteps != nil {
		out.GrowSteps = *f.V1GrowSteps
	}
	if f.V1MeanRatio != nil {
		out.MeanRatio = *f.V1MeanRatio
	}
	if f.V1BytesCopied != nil {
		out.BytesCopied = *f.V1BytesCopied
	}
	if f.V1FinalBytes != nil {
		out.FinalBytes = *f.V1FinalBytes
	}
	return out
}

// stacksInJSON is stacksJSON as read: growth in either schema's names.
type stacksInJSON struct {
	stacksJSON
	Growth []findingJSON `json:"growth"`
}

// UnmarshalJSON reads either form, checking every index.
func (s *Stacks) UnmarshalJSON(b []byte) error {
	all := stacksInJSON{stacksJSON: stacksJSON{stacksAlias: (*stacksAlias)(s)}}
	if err := json.Unmarshal(b, &all); err != nil {
		return err
	}
	in := all.stacksJSON
	s.Growth = nil
	if all.Growth != nil {
		s.Growth = make([]growth.Finding, len(all.Growth))
		for i, f := range all.Growth {
			s.Growth[i] = f.finding()
		}
	}
	traces := make([][]Frame, len(in.TraceTable))
	for t, ids := range in.TraceTable {
		fr := make([]Frame, len(ids))
		for j, id := range ids {
			if int64(id) >= int64(len(in.FrameTable)) {
				return fmt.Errorf("stacks: trace %d names frame %d of %d", t+1, id, len(in.FrameTable))
			}
			fr[j] = in.FrameTable[id]
		}
		traces[t] = fr
	}
	s.Records = nil
	if in.Records != nil {
		s.Records = make([]StackRecord, len(in.Records))
	}
	for i, r := range in.Records {
		s.Records[i] = r.StackRecord
		switch {
		case r.Trace < 0 || r.Trace > len(traces):
			return fmt.Errorf("stacks: record %d names trace %d of %d", i, r.Trace, len(traces))
		case r.Trace > 0:
			s.Records[i].Frames = traces[r.Trace-1] // shared, as when the report was made
		default:
			s.Records[i].Frames = r.Frames
		}
	}
	return nil
}
