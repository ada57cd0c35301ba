// Package drain follows the events rings of a run while its programs
// run and turns them into one sampled profile per process: that is its
// one job. tagalloc run starts a Drainer on the run's books directory
// (Start), the live view reads the profiles under its lock (With), and
// the report takes them when the run has ended (Finish).
//
// A Drainer finds each PID.events file as it appears (an inotify watch,
// package internal/dirwatch; else by reading the directory), opens it
// again when a process that exec'd replaces it, paces its passes by how
// fast the fullest ring fills, drains a ring only when it must (and marks
// where the writer was otherwise, so records keep the time of the pass
// that saw them), and starts a child forked without exec from a copy of
// its parent's profile at the fork. In the background, at nice 19, a
// warmer symbolizes new stacks' return addresses so the report at exit
// finds them named (docs/ARCHITECTURE.md, "The drainer").
package drain
