package growth

import (
	"fmt"
	"math"
	"sort"

	"github.com/dustin/go-humanize"
)

// Site is what a profile says of the realloc chains started at one call
// site: the growth steps of its sampled blocks (reallocs that asked for
// more), their geometric mean ratio new/old (requested sizes), and what
// moving them copied.
// The JSON names are the report's (docs/report-schema.md, stacks.growth).
type Site struct {
	Name        string  `json:"name"`         // the call site: function, or module+offset
	Library     string  `json:"library"`      // where it lives
	Reallocs    uint64  `json:"reallocs"`     // reallocs of the sampled blocks
	GrowSteps   uint64  `json:"grow_steps"`   // of them, growth
	MeanRatio   float64 `json:"mean_ratio"`   // geometric mean of new/old over the growth steps
	BytesCopied uint64  `json:"bytes_copied"` // estimated, by moves
	FinalBytes  uint64  `json:"final_bytes"`  // live bytes of the site's blocks now
}

// Verdicts.
const (
	JustEnoughGrowth  = "just-enough"
	ExponentialGrowth = "exponential"
	OtherGrowth       = "other"
)

// Finding is the diagnosis of one site.
type Finding struct {
	Site
	Verdict string `json:"verdict"`
	Flagged bool   `json:"flagged"` // worth fixing: just-enough growth
	Fix     string `json:"fix,omitempty"`
}

// MinSteps is how many growth steps a site needs before it is judged.
const MinSteps = 8

// Diagnose judges the sites with enough growth steps: geometric mean
// ratios under 1.10 per step are just-enough (linear) growth and are
// flagged; 1.25 and up is exponential; between, other. Flagged findings
// come first, most bytes copied first.
func Diagnose(sites []Site) []Finding {
	out := []Finding{}
	for _, s := range sites {
		if s.GrowSteps < MinSteps {
			continue
		}
		f := Finding{Site: s}
		switch {
		case s.MeanRatio < 1.10:
			f.Verdict, f.Flagged = JustEnoughGrowth, true
			doubling := int(math.Ceil(math.Log2(math.Max(2, math.Pow(s.MeanRatio, float64(s.GrowSteps))))))
			f.Fix = fmt.Sprintf("%s grows its buffer to just the size it needs: %d growth reallocs of %.3fx each, copying ~%s. "+
				"Grow the capacity geometrically instead (new = max(need, 2*cap), or 1.5x), with the length kept apart: "+
				"about %d reallocs for the same growth, and copying linear in the final size.",
				s.Name, s.GrowSteps, s.MeanRatio, humanize.IBytes(s.BytesCopied), doubling)
		case s.MeanRatio >= 1.25:
			f.Verdict = ExponentialGrowth
		default:
			f.Verdict = OtherGrowth
		}
		out = append(out, f)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Flagged != out[j].Flagged {
			return out[i].Flagged
		}
		return out[i].BytesCopied > out[j].BytesCopied
	})
	return out
}
