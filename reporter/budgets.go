// Tag budgets in the report: the limits the native allocator keeps on
// the live bytes of a tag and the tags under it (tagalloc_set_budget,
// TAGALLOC_BUDGET; cgo/src/budget.c), as the books hold them
// (books.Budget), and how the text outputs print them.

package reporter

import (
	"fmt"
	"io"
	"math"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
	"github.com/tagalloc/tagalloc/tagtable"
)

// Budget is one tag budget of a process: a limit on the live bytes of the
// tag (or level) Tag and of every tag under it (docs/tag-trees.md).
type Budget struct {
	Tag        string `json:"tag"`
	LimitBytes uint64 `json:"limit_bytes"`
	// Policy is what the allocator does past the limit: "fail" (the
	// allocation returns NULL), "notify" (the program's callback runs once
	// per crossing) or "observe" (counted only).
	Policy string `json:"policy"`
	// ChargedBytes counts against the limit: the live bytes of the tags
	// under the budget plus what each thread's counter set of them has
	// reserved above its own live bytes (at most 64 KiB a thread; package
	// alloc charges live bytes exactly), so it
	// may run ahead of the tags' live bytes; never past LimitBytes under
	// fail.
	ChargedBytes uint64 `json:"charged_bytes"`
	// Crossings counts the times the charge went past the limit, each
	// once until it came back under (under fail, a refusal that found the
	// budget under counts one).
	Crossings uint64 `json:"crossings"`
	// Refused counts the allocations the fail policy returned NULL for.
	Refused uint64 `json:"refused"`
	// Over: the charge went past the limit (under fail: an allocation was
	// refused) and has not come back under since.
	Over bool `json:"over"`
}

// budgets are the report's budgets of a snapshot's, in the books' order
// (by tag); nil for none, so that the JSON leaves them out.
func budgets(s *tagtable.Snapshot) []Budget {
	var out []Budget
	for _, b := range s.Budgets {
		out = append(out, Budget{Tag: b.Tag, LimitBytes: b.Limit, Policy: b.Policy, ChargedBytes: b.Charged,
			Crossings: b.Crossings, Refused: b.Refused, Over: b.Over})
	}
	return out
}

// Text is the budget as the tree and top print it, without a line end:
//
//	budget gfx: 200 MiB of 256 MiB (fail), 3 refused, 1 crossing
//
// with ", OVER" at the end while the charge is past the limit (", OVER:
// refusing" under fail, whose charge stays at most the limit). The tag
// and policy come from the measured program (or a report file): they are
// made safe for a terminal (termtext.Clean), as the tree's tag names are.
func (b Budget) Text() string {
	crossings := "crossings"
	if b.Crossings == 1 {
		crossings = "crossing"
	}
	s := fmt.Sprintf("budget %s: %s of %s (%s), %s refused, %s %s", termtext.Clean(b.Tag),
		humanize.IBytes(b.ChargedBytes), humanize.IBytes(b.LimitBytes), termtext.Clean(b.Policy),
		humanize.Comma(int64(min(b.Refused, math.MaxInt64))), humanize.Comma(int64(min(b.Crossings, math.MaxInt64))), crossings)
	switch {
	case b.Over && b.Policy == "fail":
		s += ", OVER: refusing"
	case b.Over:
		s += ", OVER"
	}
	return s
}

// writeBudgets writes the tree's Budgets section: a heading saying what
// the charge is, then a line per budget. Nothing without budgets.
func (p Process) writeBudgets(w io.Writer) {
	if len(p.Budgets) == 0 {
		return
	}
	fmt.Fprintln(w, "Budgets (charged: live bytes of the tag and the tags under it, plus up to 64 KiB a thread reserved in native programs)")
	for _, b := range p.Budgets {
		fmt.Fprintln(w, b.Text())
	}
}
