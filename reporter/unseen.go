// The programs of a run that ran without books.

package reporter

import (
	"fmt"
	"io"
	"strings"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// WithoutBooks is a program tagalloc run saw run without books (one exec
// of a process): its memory is in no process of the report, and Why says
// why, as far as its memory map and its program file told.
type WithoutBooks struct {
	PID     int      `json:"pid"`
	UID     int      `json:"uid"`            // its effective user id
	User    string   `json:"user,omitempty"` // that user's name, if it has one
	Command []string `json:"command"`
	Why     string   `json:"why"`
}

// MaxWithoutBooksShown is how many of them the tree lists.
const MaxWithoutBooksShown = 20

// WriteWithoutBooks lists the programs of the run that ran without books.
// Their commands and reasons are read from a file: hostile.
func (r *Report) WriteWithoutBooks(w io.Writer) {
	progs := r.WithoutBooks
	if len(progs) == 0 {
		return
	}
	noun := "programs"
	if len(progs) == 1 {
		noun = "program"
	}
	fmt.Fprintf(w, "\n%d %s ran without tagalloc's books (their memory is not in this report):\n", len(progs), noun)
	for i, p := range progs {
		if i == MaxWithoutBooksShown {
			fmt.Fprintf(w, "  ... and %d more\n", len(progs)-i)
			break
		}
		who := fmt.Sprintf("uid %d", p.UID)
		if p.User != "" {
			who = fmt.Sprintf("%s (uid %d)", termtext.Cut(p.User, 32), p.UID)
		}
		fmt.Fprintf(w, "  pid %-7d %s: %s\n    %s\n", p.PID, who, termtext.Cut(p.Why, 200), termtext.Cut(strings.Join(p.Command, " "), 70))
	}
}
