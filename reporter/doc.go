// Package reporter turns the books of one or more processes into reports:
// the JSON report (schema tagalloc.report/v2, docs/report-schema.md and
// docs/report.schema.json; v1 files are read too) and an about:memory-style
// tree. Rendering is deterministic: processes by pid
// (the launched one first), tags by live bytes then name; sizes are
// printed with go-humanize, percentages of the process's explicit total.
//
// In the tree, untagged memory is "heap-unclassified" (about:memory's name
// for heap that no reporter claims) and each tag is explicit/heap/NAME.
//
// With --stacks, a process's "stacks" section (stacks.go) holds DMD-style
// stack records, per-library totals, the growth diagnosis, the history's
// timeline and the dark matter. In the JSON a record names its frames by
// "trace" (1 + index in "trace_table", which lists indexes into
// "frame_table"), so frames shared by many stacks are written once
// (stacks_json.go); reports written with frames in each record still read.
// Reports over IndentLimit are written compact.
//
// memreport.go writes the memory-report JSON Firefox's about:memory loads
// (and checks one by about:memory's rules); diff.go is B - A of two
// reports, as about:memory's "Load and diff...".
package reporter
