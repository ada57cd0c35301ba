// The processes of a run that left no books, as the report says them.

package main

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/tagalloc/tagalloc/reporter"
)

// withoutBooks keeps, of the programs the watch saw without books, those
// that ran without the library (as far as their maps said: why) and that
// the report has no books of: no process with their pid and command (a
// short program may make its books after the watch's last look, and the
// books of a pid are its last program's). A program that loaded the
// library but made no books file either could not make it in the run's
// directory (it kept its books in its memory, where the watch read them:
// listed), has a malloc of its own (listed), or allocated nothing (not
// listed).
func withoutBooks(seen []*progImage, rep *reporter.Report) []reporter.WithoutBooks {
	have := map[int][]string{}
	for _, p := range rep.Processes {
		have[p.PID] = p.Command
	}
	var out []reporter.WithoutBooks
	listed := map[string]bool{}
	for _, img := range seen {
		if img.books || img.lib && !img.private && !img.ownMalloc || img.why() == "" {
			continue
		}
		if c, ok := have[img.pid]; ok && sameCommand(c, img.command) {
			continue
		}
		key := fmt.Sprint(img.pid, "\x00", strings.Join(img.command, "\x00"))
		if listed[key] {
			continue
		}
		listed[key] = true
		cmd := img.command
		if len(cmd) == 0 {
			cmd = []string{img.comm}
		}
		out = append(out, reporter.WithoutBooks{PID: img.pid, UID: img.uids[1], User: userLogin(img.uids[1]), Program: img.exe, Command: cmd, Why: img.why()})
	}
	return out
}

// sameCommand says whether books hold the command line cmd: as the
// library keeps it (2047 bytes at most) and the reader cleans it.
func sameCommand(books, cmd []string) bool {
	raw := strings.Join(cmd, "\x00")
	if len(raw) > 2047 {
		raw = raw[:2047]
	}
	args := strings.Split(strings.TrimRight(raw, "\x00"), "\x00")
	if len(args) != len(books) {
		return false
	}
	for i, a := range args {
		if cleanArg(a) != books[i] {
			return false
		}
	}
	return true
}

// cleanArg is an argument as tagtable's reader makes it printable: each
// invalid byte and control character becomes '?'.
func cleanArg(s string) string {
	var b strings.Builder
	for len(s) > 0 {
		r, n := utf8.DecodeRuneInString(s)
		if r == utf8.RuneError || r < 0x20 || (r >= 0x7f && r < 0xa0) {
			b.WriteByte('?')
		} else {
			b.WriteString(s[:n])
		}
		s = s[n:]
	}
	return b.String()
}

// why says why a program without books ran without the library, as far
// as its map and its ELF headers told; "" when they cannot tell: a
// program looked at between its exec and the loading of the library (the
// loader maps the preloaded libraries before the others, so another shared
// object in the map without the library says the preload failed).
func (img *progImage) why() string {
	switch {
	case img.uids[0] != img.uids[1]:
		return "set-user-ID: the loader ignores LD_PRELOAD"
	case img.private:
		return "the library could not make its books in the run's directory (it kept them in its memory)"
	case img.mapErr != nil:
		return "not looked at: tagalloc cannot read its memory map"
	case img.static:
		return "no dynamic loader (a static program): LD_PRELOAD does not reach it"
	case img.ownMalloc:
		return "its program defines malloc (an allocator of its own, as Chromium's): the library is loaded but never called"
	case img.loader && (img.others || img.misses >= 2):
		return "the library was not loaded (LD_PRELOAD removed, or the library unreadable for its user)"
	}
	return ""
}
