// tagalloc diff A.json B.json: what changed between two saved reports
// (reporter.Compare), as about:memory's "Load and diff...".

package main

import (
	"fmt"
	"io"

	"github.com/tagalloc/tagalloc/reporter"
)

// diffCmd: usage errors exit 2; a report file that cannot be read (missing,
// not JSON, another schema) exits 1, as for tagalloc report.
func diffCmd(args []string, stdout, stderr io.Writer) (int, error) {
	fs := newFlags("diff")
	format := fs.String("format", "tree", "output `FORMAT`: tree or json")
	out := fs.String("o", "", "write to `FILE` instead of standard output (- for standard output)")
	files, err := parseN(fs, args, stdout, 2)
	if err == nil {
		*format, err = checkFormat("diff", *format, []string{"tree", "json"})
	}
	if err != nil {
		return usageExit(err)
	}
	var reps [2]*reporter.Report
	for i, f := range files {
		r, err := reporter.ReadFile(f)
		if err != nil {
			return exitFailure, fmt.Errorf("diff: %w", err)
		}
		reps[i] = r
	}
	d := reporter.Compare(reps[0], reps[1])
	write := d.WriteText
	if *format == "json" {
		write = d.WriteJSON
	}
	if err := writeOut(*out, stdout, write); err != nil {
		return exitFailure, fmt.Errorf("diff: %w", err)
	}
	return 0, nil
}
