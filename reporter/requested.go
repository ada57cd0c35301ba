// Requested bytes estimated from the sampled stacks: a tag's books know
// its live usable bytes exactly, but its live requested bytes only when
// the process kept every block's requested size (TAGALLOC_REQUESTED=1).
// Every sampled block carries its requested size (the events ring's ALLOC
// and RESIZE records), so with stacks on the share requested/usable of a
// tag's live sampled blocks estimates the tag's.

package reporter

import (
	"fmt"
	"math"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/tagtable"
)

// requestedSums gather a tag's live sampled blocks: the weighted sums of
// their requested and usable bytes, and how many blocks (with a weight)
// they are.
type requestedSums struct {
	req, usable float64
	samples     uint64
}

// add counts one live sampled block. A block of weight 0 (a realloc chain
// not counted since its last realloc) stands for nothing.
func (s *requestedSums) add(b *tagtable.LiveBlock) {
	if b.Weight <= 0 {
		return
	}
	s.req += b.Weight * float64(b.Requested)
	s.usable += b.Weight * float64(b.Usable)
	s.samples++
}

// estimate is the tag's live requested bytes, given its exact live
// (usable) bytes: live × Σ w·requested / Σ w·usable over its live sampled
// blocks (a ratio estimator). ok is false without a sample to rest on.
//
// Why a ratio, not the plain weighted sum Σ w·requested (which is
// unbiased on its own): the weighted sum's error is that of the number of
// samples, about 1/√n of the figure (a small block of s bytes weighs
// about rate/s, so each sample adds about `rate` bytes whatever its
// size). In the ratio the number of samples cancels out: what is left is
// the spread of requested/usable between blocks, a fraction of 1 in a
// size-class allocator (slop is at most a class step), so its error is
// that spread over √n, several times smaller. It is also never more than
// the live bytes, and when every block is recorded (--stacks full) and
// the profile holds the tag's live bytes, Σ usable is the live bytes and
// the estimate is the exact sum of the requested sizes. Its bias is of
// order 1/n, below its error.
func (s requestedSums) estimate(live uint64) (uint64, bool) {
	if live == 0 {
		return 0, true // no live block: nothing was asked for
	}
	if s.samples == 0 || s.usable <= 0 {
		return 0, false
	}
	if s.usable == float64(live) { // every block recorded: the sum itself, no rounding of a product
		return min(round(s.req), live), true
	}
	return min(round(float64(live)*(s.req/s.usable)), live), true
}

// EstimateRequested fills in, for every tag of p whose requested bytes
// the books do not know, LiveRequestedBytesEstimate and
// LiveRequestedSamples from the live sampled blocks of prof (the
// process's profile; names are its tag names by id, a snapshot's
// TagNames). Tags whose requested bytes are exact are left alone. A tag
// without a live sampled block gets LiveRequestedSamples 0 and no
// estimate.
func (p *Process) EstimateRequested(prof *tagtable.Profile, names map[uint32]string) {
	if prof == nil {
		return
	}
	byName := map[string]*requestedSums{}
	for i := range p.Tags {
		if p.Tags[i].LiveRequestedBytes == nil {
			byName[p.Tags[i].Name] = &requestedSums{}
		}
	}
	if len(byName) == 0 {
		return
	}
	byID := make([]*requestedSums, 0, 64) // by tag id (a few thousand at most): no map lookup per block
	for id, name := range names {
		if s := byName[name]; s != nil && id < 1<<16 {
			if int(id) >= len(byID) {
				byID = append(byID, make([]*requestedSums, int(id)+1-len(byID))...)
			}
			byID[id] = s
		}
	}
	prof.EachLive(func(_ uint64, b *tagtable.LiveBlock) bool {
		if int(b.Tag) < len(byID) && byID[b.Tag] != nil {
			byID[b.Tag].add(b)
		}
		return true
	})
	for i := range p.Tags {
		t := &p.Tags[i]
		s := byName[t.Name]
		if t.LiveRequestedBytes != nil || s == nil {
			continue
		}
		n := s.samples
		t.LiveRequestedSamples = &n
		t.LiveRequestedBytesEstimate = nil
		if est, ok := s.estimate(t.LiveBytes); ok {
			t.LiveRequestedBytesEstimate = &est
		}
	}
}

// How a tag's requested bytes are known.
type requestedKind int

const (
	reqUnknown   requestedKind = iota
	reqExact                   // the books kept them (TAGALLOC_REQUESTED=1), or the tag has no live block
	reqRecorded                // --stacks full recorded every live block of the tag: the sum of their sizes
	reqEstimated               // from sampled blocks
)

// requested says what p knows of tag t's live requested bytes: the
// figure, how it is known, and the samples an estimate rests on.
// Estimates from --stacks full count as recorded (exact) only when no
// event was lost and the stacks' live bytes of the tag equal its books'
// (every live block of the tag is in the profile).
func (p *Process) requested(t *Tag) (uint64, requestedKind, uint64) {
	switch {
	case t.LiveRequestedBytes != nil:
		return *t.LiveRequestedBytes, reqExact, 0
	case t.LiveBytes == 0:
		return 0, reqExact, 0
	case t.LiveRequestedBytesEstimate == nil || t.LiveRequestedSamples == nil:
		return 0, reqUnknown, 0
	}
	est, n := *t.LiveRequestedBytesEstimate, *t.LiveRequestedSamples
	if st := p.Stacks; st != nil && st.Mode == "full" && st.Dropped == 0 && st.UnknownFrees == 0 {
		var live uint64
		for i := range st.Records {
			if st.Records[i].Tag == t.Name {
				live += st.Records[i].LiveBytes
			}
		}
		if live == t.LiveBytes {
			return est, reqRecorded, n
		}
	}
	return est, reqEstimated, n
}

// requestedText is how requested bytes read in text: "X requested" when
// exact, "X requested (from N recorded blocks)" when every block was
// recorded, "~X requested (estimated from N samples)" when estimated.
func requestedText(bytes uint64, kind requestedKind, samples uint64) string {
	switch kind {
	case reqRecorded:
		return fmt.Sprintf("%s requested (from %s)", humanize.IBytes(bytes), plural(int(min(samples, math.MaxInt64)), "recorded block", "recorded blocks"))
	case reqEstimated:
		return fmt.Sprintf("~%s requested (estimated from %s)", humanize.IBytes(bytes), plural(int(min(samples, math.MaxInt64)), "sample", "samples"))
	}
	return humanize.IBytes(bytes) + " requested"
}

// requestedNote is a tag's requested bytes in its tree line: ", " and
// requestedText, or "" when unknown (the tree then says why, once:
// requestedUnknown).
func (p *Process) requestedNote(t *Tag) string {
	b, kind, n := p.requested(t)
	if kind == reqUnknown || t.LiveBytes == 0 && t.LiveRequestedBytes == nil { // nothing live: nothing to say
		return ""
	}
	return ", " + requestedText(b, kind, n)
}

// requestedUnknown is the tree's line saying why requested bytes are
// unknown for the tags with live bytes that have neither the exact figure
// nor an estimate; "" if there are none.
func (p *Process) requestedUnknown() string {
	var n, unsampled, withLive int
	for i := range p.Tags {
		t := &p.Tags[i]
		if t.LiveBytes > 0 {
			withLive++
		}
		if _, kind, _ := p.requested(t); kind != reqUnknown {
			continue
		}
		n++
		if t.LiveRequestedSamples != nil {
			unsampled++
		}
	}
	if n == 0 {
		return ""
	}
	tags := "of " + plural(n, "tag", "tags") + " (those whose line shows none)"
	if n == withLive {
		tags = "of every tag"
	}
	if unsampled == n {
		return "unknown -- requested bytes " + tags + ": none of their live blocks was sampled (a lower TAGALLOC_SAMPLE_RATE samples more; TAGALLOC_REQUESTED=1 gives them exact)"
	}
	return "unknown -- requested bytes " + tags + ": run with --stacks sampled for an estimate, or TAGALLOC_REQUESTED=1 for exact"
}

// requestedSum adds up the requested bytes of a level's tags.
type requestedSum struct {
	bytes, samples uint64
	kind           requestedKind // the weakest of the tags': unknown < estimated < recorded < exact
	some           bool
}

func (s *requestedSum) add(p *Process, t *Tag) {
	if t.LiveBytes == 0 && t.LiveRequestedBytes == nil { // nothing live: adds nothing
		return
	}
	b, kind, n := p.requested(t)
	if !s.some || weaker(kind, s.kind) {
		s.kind = kind
	}
	s.some = true
	s.bytes = addSat64(s.bytes, b)
	s.samples = addSat64(s.samples, n)
}

// weaker says whether a is known less well than b.
func weaker(a, b requestedKind) bool {
	rank := func(k requestedKind) int {
		switch k {
		case reqExact:
			return 3
		case reqRecorded:
			return 2
		case reqEstimated:
			return 1
		}
		return 0
	}
	return rank(a) < rank(b)
}

// note is the level's requested bytes in its tree line, as
// requestedNote's: "" if some tag's are unknown.
func (s requestedSum) note() string {
	if !s.some || s.kind == reqUnknown {
		return ""
	}
	return ", " + requestedText(s.bytes, s.kind, s.samples)
}
