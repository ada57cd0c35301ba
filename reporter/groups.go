// Processes grouped by command: a run that starts a thousand processes
// (a test suite, a build) prints a line per command, not per process.

package reporter

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/dustin/go-humanize"

	"github.com/tagalloc/tagalloc/internal/termtext"
)

// CommandName is the name processes are grouped by: the base name of the
// program the process ran (its argv[0]), "?" if it has none. It comes
// from the measured program: escape it before printing it.
func (p Process) CommandName() string {
	if len(p.Command) == 0 || p.Command[0] == "" {
		return "?"
	}
	return filepath.Base(p.Command[0])
}

// Group is the processes of one command, with their totals.
type Group struct {
	Command string
	// Processes, most live bytes first (then by pid).
	Processes []Process
	// Sums over the processes (exact, as each process's books are).
	LiveBytes, LiveBlocks, AllocBytes uint64
	// PeakRSSBytes is the highest resident peak known among the
	// processes (PeakRSSPID's), nil if none is known; PeakRSSBound says
	// it is a lower bound (read before that process ended).
	PeakRSSBytes *uint64
	PeakRSSBound bool
	PeakRSSPID   int
}

// GroupByCommand groups ps by CommandName: the groups holding the most
// live bytes first, then the largest, then by name.
func GroupByCommand(ps []Process) []Group {
	at := map[string]int{}
	var gs []Group
	for _, p := range ps {
		name := p.CommandName()
		i, ok := at[name]
		if !ok {
			i = len(gs)
			at[name] = i
			gs = append(gs, Group{Command: name})
		}
		g := &gs[i]
		g.Processes = append(g.Processes, p)
		g.LiveBytes += p.Heap.LiveBytes
		g.LiveBlocks += p.Heap.LiveBlocks
		g.AllocBytes += p.Heap.AllocBytes
		if r := p.Resident; r != nil && r.PeakRSSBytes != nil && (g.PeakRSSBytes == nil || *r.PeakRSSBytes > *g.PeakRSSBytes) {
			v := *r.PeakRSSBytes
			g.PeakRSSBytes, g.PeakRSSBound, g.PeakRSSPID = &v, r.PeakIsBound(), p.PID
		}
	}
	for i := range gs {
		sort.SliceStable(gs[i].Processes, func(a, b int) bool {
			pa, pb := gs[i].Processes[a], gs[i].Processes[b]
			if pa.Heap.LiveBytes != pb.Heap.LiveBytes {
				return pa.Heap.LiveBytes > pb.Heap.LiveBytes
			}
			return pa.PID < pb.PID
		})
	}
	sort.SliceStable(gs, func(a, b int) bool {
		ga, gb := gs[a], gs[b]
		switch {
		case ga.LiveBytes != gb.LiveBytes:
			return ga.LiveBytes > gb.LiveBytes
		case len(ga.Processes) != len(gb.Processes):
			return len(ga.Processes) > len(gb.Processes)
		}
		return ga.Command < gb.Command
	})
	return gs
}

// Limits of the grouped listing.
const (
	groupsShown   = 15 // commands listed; the rest are summed in one line
	largestShown  = 3  // processes named per command
	commandWidth  = 32 // runes of a command's name shown
	groupsHintFmt = "tagalloc report FILE.json --command NAME shows one command's processes, --pid PID one process"
)

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return humanize.Comma(int64(n)) + " " + many
}

// forkedCopies counts the processes of ps[1:] that have the command
// line of their parent, itself in ps: forked without exec, most likely,
// and then they hold the blocks their parent held at the fork, counted
// in their books as allocated at their birth.
func forkedCopies(ps []Process) int {
	byPID := make(map[int]int, len(ps))
	for i, p := range ps {
		byPID[p.PID] = i
	}
	n := 0
	for _, p := range ps[1:] {
		if i, ok := byPID[p.PPID]; ok && p.PPID != 0 && p.PPID != p.PID && slices.Equal(ps[i].Command, p.Command) {
			n++
		}
	}
	return n
}

// writeGroups lists the processes of all but the first (all[0], shown as
// a tree) by command: how many, their live bytes, blocks and bytes
// allocated in all, the highest resident peak known, and the largest of
// each; then what the ALLOCATED column of forked copies holds.
func writeGroups(w io.Writer, all []Process) {
	ps := all[1:]
	gs := GroupByCommand(ps)
	resident := false
	for _, p := range ps {
		resident = resident || p.Resident != nil
	}
	fmt.Fprintf(w, "\n%s, %s (%s):\n", plural(len(ps), "other process", "other processes"), plural(len(gs), "command", "commands"), groupsHintFmt)
	rss := func(g Group) string {
		if !resident {
			return ""
		}
		switch {
		case g.PeakRSSBytes == nil:
			return fmt.Sprintf("  %10s", "unknown")
		case g.PeakRSSBound:
			return fmt.Sprintf("  %10s", "≥ "+humanize.IBytes(*g.PeakRSSBytes))
		}
		return fmt.Sprintf("  %10s", humanize.IBytes(*g.PeakRSSBytes))
	}
	head := ""
	if resident {
		head = fmt.Sprintf("  %10s", "PEAK RSS")
	}
	fmt.Fprintf(w, "  %9s %10s %12s %10s%s  %s\n", "PROCESSES", "LIVE", "BLOCKS", "ALLOCATED", head, "COMMAND (largest by live bytes)")
	for i, g := range gs {
		if i == groupsShown {
			var n int
			var live, blocks, alloc uint64
			for _, r := range gs[i:] {
				n += len(r.Processes)
				live += r.LiveBytes
				blocks += r.LiveBlocks
				alloc += r.AllocBytes
			}
			more := "1 more command"
			if len(gs)-i > 1 {
				more = humanize.Comma(int64(len(gs)-i)) + " more commands"
			}
			fmt.Fprintf(w, "  %9s %10s %12s %10s%s  (%s)\n", humanize.Comma(int64(n)), humanize.IBytes(live),
				humanize.Comma(int64(blocks)), humanize.IBytes(alloc), strings.Repeat(" ", len(head)), more)
			break
		}
		var largest []string
		for _, p := range g.Processes[:min(largestShown, len(g.Processes))] {
			if len(g.Processes) == 1 {
				largest = append(largest, fmt.Sprintf("pid %d", p.PID))
			} else {
				largest = append(largest, fmt.Sprintf("pid %d %s", p.PID, humanize.IBytes(p.Heap.LiveBytes)))
			}
		}
		more := ""
		if len(g.Processes) > largestShown {
			more = ", ..."
		}
		fmt.Fprintf(w, "  %9s %10s %12s %10s%s  %s (%s%s)\n", humanize.Comma(int64(len(g.Processes))), humanize.IBytes(g.LiveBytes),
			humanize.Comma(int64(g.LiveBlocks)), humanize.IBytes(g.AllocBytes), rss(g), termtext.Cut(g.Command, commandWidth), strings.Join(largest, ", "), more)
	}
	if n := forkedCopies(all); n > 0 {
		fmt.Fprintf(w, "  (%s the command line of a parent here: forked without exec, each holds, and counts as allocated, the blocks its parent held at the fork)\n",
			plural(n, "process has", "processes have"))
	}
}
