// The programs of a run that ran without books.

package reporter

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// WithoutBooks is a program tagalloc run saw run without books (one exec
// of a process): its memory is in no process of the report, and Why says
// why, as far as its memory map and its program file told.
type WithoutBooks struct {
	PID     int      `json:"pid"`
	UID     int      `json:"uid"`               // its effective user id
	User    string   `json:"user,omitempty"`    // that user's name, if it has one
	Program string   `json:"program,omitempty"` // its program file, if it could be read
	Command []string `json:"command"`
	Why     string   `json:"why"`
}

// MaxWithoutBooksShown is how many lines of them the tree lists.
const MaxWithoutBooksShown = 20

// maxPIDsShown is how many pids a line of several processes lists.
const maxPIDsShown = 12

// UserLabel is how a report names a user: "name (uid N)", or "uid N"
// for an id with no name. The name may come from a file: hostile.
func UserLabel(name string, uid int) string {
	if name == "" {
		return fmt.Sprintf("uid %d", uid)
	}
	return fmt.Sprintf("%s (uid %d)", termtext.Cut(name, 32), uid)
}

// WriteWithoutBooks lists the programs of the run that ran without books.
// Processes of one program file (Program, else the command's first word:
// Chromium's processes rewrite their command lines) with one reason and
// one user share a line, by pid (Chromium's browser, zygotes and
// renderers are a dozen processes of one program, each with a malloc of
// its own), the lines in the order the first of each came. Their
// commands and reasons are read from a file: hostile.
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
	type key struct {
		prog, why, user string
		uid             int
	}
	var order []key
	groups := map[key][]WithoutBooks{}
	for _, p := range progs {
		k := key{prog: p.Program, why: p.Why, user: p.User, uid: p.UID}
		if k.prog == "" && len(p.Command) > 0 {
			k.prog = p.Command[0]
		}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], p)
	}
	for i, k := range order {
		if i == MaxWithoutBooksShown {
			rest := 0
			for _, k := range order[i:] {
				rest += len(groups[k])
			}
			fmt.Fprintf(w, "  ... and %d more\n", rest)
			break
		}
		g := groups[k]
		who := UserLabel(k.user, k.uid)
		why := termtext.Cut(k.why, 200)
		if len(g) == 1 {
			fmt.Fprintf(w, "  pid %-7d %s: %s\n    %s\n", g[0].PID, who, why, termtext.Cut(strings.Join(g[0].Command, " "), 70))
			continue
		}
		slices.SortFunc(g, func(a, b WithoutBooks) int { return a.PID - b.PID })
		pids := make([]string, 0, min(len(g), maxPIDsShown)+1)
		for j, p := range g {
			if j == maxPIDsShown {
				pids = append(pids, fmt.Sprintf("and %d more", len(g)-j))
				break
			}
			pids = append(pids, strconv.Itoa(p.PID))
		}
		fmt.Fprintf(w, "  %d processes of %s, %s: %s\n    pids %s\n    e.g. %s\n", len(g), termtext.Cut(k.prog, 60), who, why,
			strings.Join(pids, " "), termtext.Cut(strings.Join(g[0].Command, " "), 70))
	}
}
