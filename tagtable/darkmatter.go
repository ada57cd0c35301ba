// Report marks of sampled blocks, for the dark-matter report (DMD's
// dark-matter mode): which memory reporter measured each live sampled
// block (tagalloc_report_block) in the current collection, and from which
// stack. A block no reporter measured is dark matter (part of
// heap-unclassified); one measured twice is a reporter's bug.

package tagtable

// Collect starts collection seq: every block's marks lapse (a block's
// marks count only while they were made in the current collection, so
// this costs nothing per block).
func (p *Profile) Collect(seq uint64) {
	p.Collections++
	p.Collection = seq
}

// Report marks the sampled block at addr as measured from stack. A report
// of a block the profile does not hold (freed since, or sampled before a
// lost event) is counted, not marked.
func (p *Profile) Report(addr uint64, stack uint32) {
	b := p.block(addr)
	if b == nil {
		p.UnknownReports++
		return
	}
	if b.MarkedIn != p.Collection {
		b.MarkedIn, b.Reports = p.Collection, 0
	}
	if b.Reports < 2 {
		b.ReportStacks[b.Reports] = stack
	}
	b.Reports++
}

// Marks returns how often reporters measured b in the current collection
// (0 if no collection began) and the stacks of the first two measurements.
func (p *Profile) Marks(b *LiveBlock) (count uint32, stacks [2]uint32) {
	if p.Collections == 0 || b.MarkedIn != p.Collection {
		return 0, stacks
	}
	return b.Reports, b.ReportStacks
}
