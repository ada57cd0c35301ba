// Package termtext makes text from a measured program safe to print on a
// terminal (docs/ARCHITECTURE.md, D11: program strings are data).
package termtext

import (
	"strings"
	"unicode/utf8"
)

// Clean replaces what a terminal would act on rather than show (control
// characters, C1 codes, bidirectional overrides and isolates, invalid
// UTF-8) with '?': names from a measured program must not move the
// cursor or hide text.
func Clean(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r < 0x20, r >= 0x7f && r < 0xa0, r >= 0x202a && r <= 0x202e, r >= 0x2066 && r <= 0x2069, r == utf8.RuneError:
			return '?'
		}
		return r
	}, s)
}

// Cut is Clean(s) cut to at most n runes, the cut marked with "...".
func Cut(s string, n int) string {
	s = Clean(s)
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	if n <= 3 {
		return strings.Repeat(".", max(n, 0))
	}
	i, k := 0, 0
	for i = range s {
		if k == n-3 {
			break
		}
		k++
	}
	return s[:i] + "..."
}
