// The command line's conventions, shared by every command: usage from the
// command's own flags, flags before or after positional arguments, -o -
// for standard output, and the exit codes (docs/cli.md).

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"sort"
	"strconv"
	"strings"

	"github.com/tagalloc/tagalloc/cgo"
	"github.com/tagalloc/tagalloc/internal/termtext"
	"github.com/tagalloc/tagalloc/reporter"
)

// Exit codes: PROG's own status for run; these for everything else.
const (
	exitFailure = 1 // tagalloc could not do what was asked
	exitUsage   = 2 // the command line is wrong
)

// command is one of tagalloc's commands.
type command struct {
	name    string
	args    string // its positional arguments, as the synopsis shows them
	summary string // one line, for the general usage
	about   string // more, for its own usage
	run     func(args []string, stdout, stderr io.Writer) (int, error)
	// ordered: flags end at the first positional argument (run: the rest
	// is PROG's); otherwise they may come anywhere before --.
	ordered bool
}

var commands []*command

func init() {
	commands = []*command{
		{name: "run", args: "[--] PROG [ARGS...]", run: runCmd, ordered: true,
			summary: "run PROG with the library preloaded (children too), stacks sampled; print its per-tag tree when it ends and save its report",
			about: "Flags go before PROG: everything from PROG on is PROG's. tagalloc exits with PROG's status\n" +
				"(128+N if signal N ended it; 127 if PROG is not found, 126 if it cannot start).\n" +
				"Without -o the report is saved as tagalloc.PROG.PID.json in the current directory (never over an\n" +
				"existing file); the last line on standard error names it and how to open it."},
		{name: "report", args: "FILE.json", run: reportCmd,
			summary: "re-render a saved report (tree, json, dmd, dark-matter, pprof, about-memory)",
			about: "tree: the first process's tree, then the others grouped by command (how many, their totals, the largest);\n" +
				"--pid PID shows one process's tree, --command NAME every tree of one command (both keep those processes in any format).\n" +
				"pprof: every process with stacks, merged, each sample labelled with its pid (--pid keeps one).\n" +
				"The default sample type is inuse_space; when nothing sampled is live, peak_space (alloc_space in reports without a peak).\n" +
				"about-memory is gzipped when the -o FILE ends in .gz. --web serves pprof's web UI (a flame graph) instead."},
		{name: "diff", args: "A.json B.json", run: diffCmd,
			summary: "what changed from A to B (B - A), per process and tag, as about:memory's \"Load and diff\""},
		{name: "snapshot", args: "PID", run: snapshotCmd,
			summary: "the report of a running process (started by tagalloc run, or preloaded by hand)"},
		{name: "top", args: "PID", run: topCmd,
			summary: "a running process's tags, refreshed until interrupted (or -n times)"},
		{name: "serve", args: "PID", run: serveCmd,
			summary: "a running process's tags over time in a browser, with /metrics and /debug/pprof/",
			about:   "tagalloc run --serve ADDRESS serves the same for PROG and its children."},
		{name: "lib", run: libCmd,
			summary: "print the path of the preload library (building it if needed)"},
		{name: "version", run: versionCmd,
			summary: "print tagalloc's version, the Go version and the library's source hash"},
		{name: "help", args: "[COMMAND]", run: helpCmd,
			summary: "print the usage of tagalloc or of COMMAND"},
	}
}

func lookup(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// generalUsage lists the commands and the exit codes.
func generalUsage(w io.Writer) {
	fmt.Fprint(w, "usage: tagalloc COMMAND [FLAGS] [ARGS]\n\ncommands:\n")
	for _, c := range commands {
		fmt.Fprintln(w, wrap(fmt.Sprintf("  %-25s %s", strings.TrimSpace(c.name+" "+c.args), c.summary), 28, 100))
	}
	fmt.Fprint(w, `
tagalloc help COMMAND (or tagalloc COMMAND -h) prints a command's flags.
Flags take one dash or two (-o, --format); they may come before or after the
arguments, up to --. -o - writes to standard output.

exit status:
  0  done
  1  tagalloc failed (a file or process it could not read, a file it could not write)
  2  usage error (unknown command or flag, missing or extra argument, bad value)
  run exits with PROG's status instead.
`)
}

// commandUsage prints c's synopsis and every flag of fs with its default.
func commandUsage(w io.Writer, c *command, fs *flag.FlagSet) {
	synopsis := "tagalloc " + c.name
	if hasFlags(fs) {
		synopsis += " [FLAGS]"
	}
	if c.args != "" {
		synopsis += " " + c.args
	}
	fmt.Fprintf(w, "usage: %s\n\n%s.\n", synopsis, upperFirst(c.summary))
	if c.about != "" {
		fmt.Fprintf(w, "%s\n", c.about)
	}
	if !hasFlags(fs) {
		return
	}
	fmt.Fprint(w, "\nflags:\n")
	fs.VisitAll(func(f *flag.Flag) { fmt.Fprintf(w, "%s\n", flagLine(f)) })
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// flagLine is one flag's line of usage: its name (one dash for a letter,
// two for a word), its value's name, what it does and its default.
func flagLine(f *flag.Flag) string {
	value, usage := flag.UnquoteUsage(f)
	name := "--" + f.Name
	if len(f.Name) == 1 {
		name = "-" + f.Name
	}
	if isBool(f) {
		value = ""
	}
	if value != "" {
		name += " " + value
	}
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
		usage += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	return wrap(fmt.Sprintf("  %-22s %s", name, usage), 25, 100)
}

// wrap breaks s into lines of at most width columns where it has spaces,
// indenting every line after the first by indent.
func wrap(s string, indent, width int) string {
	var b strings.Builder
	col := 0
	for i, word := range strings.Split(s, " ") {
		switch {
		case i == 0:
		case col+1+len(word) > width && col > indent:
			b.WriteString("\n" + strings.Repeat(" ", indent))
			col = indent
		default:
			b.WriteByte(' ')
			col++
		}
		b.WriteString(word)
		col += len(word)
	}
	return b.String()
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func isBool(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// errHelp: the command was asked for its usage, which is printed.
var errHelp = errors.New("help printed")

// newFlags makes the flag set of command name; parse reports its errors.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses args with fs, the flag set of the command of the same
// name, and returns its positional arguments. -h, -help and --help print
// the command's usage to stdout and return errHelp.
func parse(fs *flag.FlagSet, args []string, stdout io.Writer) ([]string, error) {
	c := lookup(fs.Name())
	flags, pos := splitArgs(fs, args, c.ordered)
	err := fs.Parse(flags)
	if errors.Is(err, flag.ErrHelp) {
		commandUsage(stdout, c, fs)
		return nil, errHelp
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w (tagalloc help %s)", c.name, err, c.name)
	}
	return pos, nil
}

// splitArgs separates flags (with their values) from positional arguments:
// everything after -- is positional, and with ordered so is everything
// from the first positional argument on.
func splitArgs(fs *flag.FlagSet, args []string, ordered bool) (flags, pos []string) {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return flags, append(pos, args[i+1:]...)
		case len(a) < 2 || a[0] != '-':
			if ordered {
				return flags, append(pos, args[i:]...)
			}
			pos = append(pos, a)
		default:
			flags = append(flags, a)
			if takesValue(fs, a) && i+1 < len(args) {
				i++
				flags = append(flags, args[i])
			}
		}
	}
	return flags, pos
}

// takesValue says whether flag argument a (-name, --name or -name=v) is
// followed by its value: a defined flag, not boolean, without =.
func takesValue(fs *flag.FlagSet, a string) bool {
	name := strings.TrimLeft(a, "-")
	if strings.Contains(name, "=") {
		return false
	}
	f := fs.Lookup(name)
	return f != nil && !isBool(f)
}

// usageExit maps a parse error to the command's result: 0 after help,
// else a usage error.
func usageExit(err error) (int, error) {
	if errors.Is(err, errHelp) {
		return 0, nil
	}
	return exitUsage, err
}

// usagef is a usage error of command cmd, pointing at its help.
func usagef(cmd, format string, args ...any) error {
	return fmt.Errorf("%s: %s (tagalloc help %s)", cmd, fmt.Sprintf(format, args...), cmd)
}

// parseN is parse for a command that takes exactly n positional
// arguments.
func parseN(fs *flag.FlagSet, args []string, stdout io.Writer, n int) ([]string, error) {
	pos, err := parse(fs, args, stdout)
	if err != nil {
		return nil, err
	}
	return pos, wantArgs(fs.Name(), pos, n)
}

// wantArgs checks the number of positional arguments, named by the
// command's synopsis.
func wantArgs(cmd string, pos []string, n int) error {
	c := lookup(cmd)
	switch {
	case len(pos) < n:
		return usagef(cmd, "missing %s", strings.Join(strings.Fields(c.args)[len(pos):], " "))
	case len(pos) > n:
		return usagef(cmd, "unexpected argument %q", pos[n])
	}
	return nil
}

// pidArgument parses a process id given as an argument.
func pidArgument(cmd, s string) (int, error) {
	pid, err := strconv.Atoi(s)
	if err != nil || pid <= 0 {
		return 0, usagef(cmd, "%q is not a process id", s)
	}
	return pid, nil
}

// writeOut writes through write to out: standard output for "" or "-",
// else the file (reporter.WriteFileAtomic: a regular file is replaced
// whole, a device or pipe written in place, a symlink followed).
func writeOut(out string, stdout io.Writer, write func(io.Writer) error) error {
	if out == "" || out == "-" {
		return write(stdout)
	}
	if err := reporter.WriteFileAtomic(out, write); err != nil {
		return fmt.Errorf("writing %s: %w", out, err)
	}
	return nil
}

func libCmd(args []string, stdout, stderr io.Writer) (int, error) {
	_, err := parseN(newFlags("lib"), args, stdout, 0)
	if err != nil {
		return usageExit(err)
	}
	p, err := cgo.Library()
	if err != nil {
		return exitFailure, err
	}
	fmt.Fprintln(stdout, p)
	return 0, nil
}

func helpCmd(args []string, stdout, stderr io.Writer) (int, error) {
	pos, err := parse(newFlags("help"), args, stdout)
	if err != nil {
		return usageExit(err)
	}
	switch {
	case len(pos) == 0:
		generalUsage(stdout)
		return 0, nil
	case len(pos) > 1:
		return exitUsage, usagef("help", "give one command (got %q)", pos)
	}
	c := lookup(pos[0])
	if c == nil {
		return exitUsage, fmt.Errorf("help: unknown command %q (tagalloc help)", pos[0])
	}
	return c.run([]string{"-h"}, stdout, stderr)
}

func versionCmd(args []string, stdout, stderr io.Writer) (int, error) {
	_, err := parseN(newFlags("version"), args, stdout, 0)
	if err != nil {
		return usageExit(err)
	}
	hash, err := cgo.HashFS(cgo.Sources, "", nil)
	if err != nil {
		return exitFailure, fmt.Errorf("version: hashing the library's sources: %w", err)
	}
	for _, l := range versionLines(hash) {
		fmt.Fprintln(stdout, l)
	}
	return 0, nil
}

// versionLines: the module's version (and the commit it was built from,
// when the build recorded one), the Go version, and the hash of the C
// sources the library is built from (cgo.HashFS, without the compiler).
func versionLines(libHash string) []string {
	version, module, vcs := "unknown", "github.com/tagalloc/tagalloc", map[string]string{}
	if bi, ok := debug.ReadBuildInfo(); ok {
		version, module = bi.Main.Version, bi.Main.Path
		for _, s := range bi.Settings {
			vcs[s.Key] = s.Value
		}
	}
	lines := []string{"tagalloc " + version + " (" + module + ")"}
	if rev := vcs["vcs.revision"]; rev != "" {
		if vcs["vcs.modified"] == "true" {
			rev += " (modified)"
		}
		lines = append(lines, "commit "+rev)
	}
	return append(lines, "go "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH, "library sources "+libHash)
}

// terminalText replaces what a terminal would act on rather than show
// (control characters, C1 codes, bidirectional overrides) with '?': names
// from a measured program must not move the cursor or hide text. The
// reporter's trees use the same (termtext.Clean).
func terminalText(s string) string { return termtext.Clean(s) }

// commandNames lists the commands, for messages.
func commandNames() string {
	var names []string
	for _, c := range commands {
		names = append(names, c.name)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}
