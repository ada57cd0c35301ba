// tagalloc diff A.json B.json: what changed between two saved reports
// (reporter.Compare), as about:memory's "Load and diff...".

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/tagalloc/tagalloc/reporter"
)

// diffCmd: usage errors exit 2; a report file that cannot be read (missing,
// not JSON, another schema) exits 1, as for tagalloc report.
func diffCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := flag.NewFlagSet("diff", flag.ContinueOnError)
	fs.SetOutput(stderr)
	format := fs.String("format", "tree", "tree or json")
	out := fs.String("o", "", "write to `FILE` instead of standard output")
	var files []string
	rest := args
	for len(rest) > 0 && len(files) < 2 && !strings.HasPrefix(rest[0], "-") {
		files, rest = append(files, rest[0]), rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return 2, err
	}
	files = append(files, fs.Args()...)
	if len(files) != 2 {
		return 2, errors.New("diff: give two report files (tagalloc diff A.json B.json [--format tree|json] [-o OUT])")
	}
	if *format != "tree" && *format != "json" {
		return 2, fmt.Errorf("diff: unknown format %q (tree or json)", *format)
	}
	var reps [2]*reporter.Report
	for i, f := range files {
		r, err := reporter.ReadFile(f)
		if err != nil {
			return 1, fmt.Errorf("diff: %w", err)
		}
		reps[i] = r
	}
	d := reporter.Compare(reps[0], reps[1])
	write := d.WriteText
	if *format == "json" {
		write = d.WriteJSON
	}
	if *out == "" {
		return 0, write(stdout)
	}
	if err := reporter.WriteFileAtomic(*out, write); err != nil {
		return 1, fmt.Errorf("diff: writing %s: %w", *out, err)
	}
	return 0, nil
}
