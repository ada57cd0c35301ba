// Text tables: aligned columns for the terminal, nothing else.

package bench

import (
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// Table is a titled grid of cells. The first column is left-aligned (row
// names), the rest right-aligned (numbers). Footer rows follow a rule.
type Table struct {
	Title  string
	Header []string
	Rows   [][]string
	Footer [][]string
}

// Render writes t to w.
func (t *Table) Render(w io.Writer) error {
	all := append(append([][]string{t.Header}, t.Rows...), t.Footer...)
	var width []int
	for _, row := range all {
		for i, c := range row {
			if i >= len(width) {
				width = append(width, 0)
			}
			width[i] = max(width[i], utf8.RuneCountInString(c))
		}
	}
	total := 0
	for i, wd := range width {
		if i > 0 {
			total += 2
		}
		total += wd
	}
	var b strings.Builder
	if t.Title != "" {
		b.WriteString(t.Title + "\n")
	}
	line := func(row []string) {
		var l strings.Builder
		for i, c := range row {
			pad := strings.Repeat(" ", width[i]-utf8.RuneCountInString(c))
			switch {
			case i == 0:
				l.WriteString(c + pad)
			default:
				l.WriteString("  " + pad + c)
			}
		}
		b.WriteString(strings.TrimRight(l.String(), " ") + "\n")
	}
	rule := strings.Repeat("-", total) + "\n"
	line(t.Header)
	b.WriteString(rule)
	for _, r := range t.Rows {
		line(r)
	}
	if len(t.Footer) > 0 {
		b.WriteString(rule)
		for _, r := range t.Footer {
			line(r)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// fmtNum formats x with the given verb, or "-" when it is missing (NaN).
func fmtNum(format string, x float64) string {
	if x != x {
		return "-"
	}
	return fmt.Sprintf(format, x)
}
