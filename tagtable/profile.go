// The live-block table and the per-stack books of a process's sampled
// allocations, built from its events (DESIGN.md D7).

package tagtable

import (
	"math"
	"sort"
)

// LiveBlock is a sampled block not yet freed.
type LiveBlock struct {
	Usable, Requested uint64
	Tag, Stack        uint32
	Weight            float64 // blocks it stands for (1/probability it was sampled)
}

// SiteKey names a record: one stack, one tag.
type SiteKey struct {
	Stack, Tag uint32
}

// Site is what the blocks sampled at one (stack, tag) hold and have held.
// Est* figures are unbiased estimates of the whole (each sample weighed
// by the inverse of its probability); Samples counts samples.
type Site struct {
	SiteKey
	Samples, LiveSamples          uint64
	EstAllocBytes, EstAllocBlocks float64
	EstLiveBytes, EstLiveBlocks   float64
	EstLiveRequested              float64
	Reallocs, Moves               uint64
	EstBytesCopied                float64
	// Growth of the sampled blocks' requested sizes by realloc: how many
	// reallocs asked for more, and the sum of log(new/old) over them.
	GrowSteps    uint64
	SumLogGrowth float64
}

// Profile is a process's sampled heap, as its events tell it.
type Profile struct {
	PID        int
	Mode       string // sampled or full
	SampleRate uint64
	Modules    []Module
	Stacks     map[uint32][]uint64 // return addresses, innermost first
	Live       map[uint64]*LiveBlock
	Sites      map[SiteKey]*Site
	// Dropped counts events the process could not write (a full ring),
	// DroppedBytes the usable bytes of the sampled blocks among them;
	// UnknownFrees the frees of blocks this profile never saw (sampled
	// before a fork, or in dropped events).
	Dropped, DroppedBytes, UnknownFrees uint64
	// Parent is set on a forked child's profile that could not start from
	// its parent's at the fork (the blocks it inherited are unknown).
	Parent int
	// Forks are copies of the profile where the process forked (FORK
	// events), by sequence number, until a child's profile takes its own.
	Forks map[uint64]*Profile
}

// NewProfile starts an empty profile for a ring's process.
func NewProfile(pid int, mode string, rate uint64) *Profile {
	return &Profile{PID: pid, Mode: mode, SampleRate: max(rate, 1),
		Stacks: map[uint32][]uint64{}, Live: map[uint64]*LiveBlock{}, Sites: map[SiteKey]*Site{}, Forks: map[uint64]*Profile{}}
}

// Fork keeps a copy of the profile as it is at the process's fork seq:
// the start of the child's (which inherits the heap, its sampled blocks,
// and the stack ids and modules).
func (p *Profile) Fork(seq uint64) { p.Forks[seq] = p.Clone() }

// Clone is a deep copy of the profile (without its fork copies).
func (p *Profile) Clone() *Profile {
	c := NewProfile(p.PID, p.Mode, p.SampleRate)
	c.Modules = append([]Module(nil), p.Modules...)
	for id, s := range p.Stacks {
		c.Stacks[id] = s // never modified once recorded
	}
	for a, b := range p.Live {
		v := *b
		c.Live[a] = &v
	}
	for k, s := range p.Sites {
		v := *s
		c.Sites[k] = &v
	}
	c.Dropped, c.DroppedBytes, c.UnknownFrees = p.Dropped, p.DroppedBytes, p.UnknownFrees
	return c
}

// Inherit fills in what a forked child's profile refers to but never saw:
// its parent's stacks and modules (the child keeps the parent's ids).
func (p *Profile) Inherit(parent *Profile) {
	for id, s := range parent.Stacks {
		if _, ok := p.Stacks[id]; !ok {
			p.Stacks[id] = s
		}
	}
	p.Modules = append(p.Modules, parent.Modules...)
}

// Weight is the number of blocks of requested size req that one sample
// stands for: sampling by bytes with mean rate R takes a block of size s
// with probability 1 - exp(-s/R) (tcmalloc's and heapprofd's estimator).
func (p *Profile) Weight(req uint64) float64 {
	if p.SampleRate <= 1 {
		return 1
	}
	q := -math.Expm1(-float64(max(req, 1)) / float64(p.SampleRate))
	if q <= 0 {
		return 1
	}
	return 1 / q
}

func (p *Profile) site(k SiteKey) *Site {
	s := p.Sites[k]
	if s == nil {
		s = &Site{SiteKey: k}
		p.Sites[k] = s
	}
	return s
}

// Module records a module.
func (p *Profile) Module(m Module) { p.Modules = append(p.Modules, m) }

// Stack records a stack.
func (p *Profile) Stack(id uint32, pcs []uint64) { p.Stacks[id] = pcs }

// Alloc records a sampled block.
func (p *Profile) Alloc(addr, usable, req uint64, tag, stack uint32) {
	if old := p.Live[addr]; old != nil { // its free was lost: end it
		p.Free(addr)
	}
	w := p.Weight(req)
	b := &LiveBlock{Usable: usable, Requested: req, Tag: tag, Stack: stack, Weight: w}
	p.Live[addr] = b
	s := p.site(SiteKey{stack, tag})
	s.Samples++
	s.LiveSamples++
	s.EstAllocBlocks += w
	s.EstAllocBytes += w * float64(usable)
	s.EstLiveBlocks += w
	s.EstLiveBytes += w * float64(usable)
	s.EstLiveRequested += w * float64(req)
}

// Free ends a sampled block.
func (p *Profile) Free(addr uint64) {
	b := p.Live[addr]
	if b == nil {
		p.UnknownFrees++
		return
	}
	delete(p.Live, addr)
	s := p.site(SiteKey{b.Stack, b.Tag})
	s.LiveSamples--
	s.EstLiveBlocks -= b.Weight
	s.EstLiveBytes -= b.Weight * float64(b.Usable)
	s.EstLiveRequested -= b.Weight * float64(b.Requested)
}

// Resize moves or resizes a sampled block (realloc); it stays charged to
// the stack and tag it was sampled at.
func (p *Profile) Resize(old, new, usable, req uint64) {
	b := p.Live[old]
	if b == nil {
		p.UnknownFrees++
		return
	}
	s := p.site(SiteKey{b.Stack, b.Tag})
	s.Reallocs++
	if req > b.Requested && b.Requested > 0 {
		s.GrowSteps++
		s.SumLogGrowth += math.Log(float64(req) / float64(b.Requested))
	}
	if new != old {
		s.Moves++
		s.EstBytesCopied += b.Weight * float64(min(b.Usable, usable))
		delete(p.Live, old)
		p.Live[new] = b
	}
	s.EstLiveBytes += b.Weight * (float64(usable) - float64(b.Usable))
	s.EstLiveRequested += b.Weight * (float64(req) - float64(b.Requested))
	if usable > b.Usable {
		s.EstAllocBytes += b.Weight * float64(usable-b.Usable)
	}
	b.Usable, b.Requested = usable, req
}

// LiveBlockAt returns the sampled block that starts at addr, if it is
// live.
func (p *Profile) LiveBlockAt(addr uint64) (LiveBlock, bool) {
	b := p.Live[addr]
	if b == nil {
		return LiveBlock{}, false
	}
	return *b, true
}

// EachLive calls f for every live sampled block, in no set order, until f
// returns false. f must not allocate, free or resize blocks of p; b is
// valid only during the call.
func (p *Profile) EachLive(f func(addr uint64, b *LiveBlock) bool) {
	for a, b := range p.Live {
		if !f(a, b) {
			return
		}
	}
}

// LiveCount is the number of live sampled blocks.
func (p *Profile) LiveCount() int { return len(p.Live) }

// SortedSites returns the sites, most live bytes first (then most
// allocated).
func (p *Profile) SortedSites() []*Site {
	out := make([]*Site, 0, len(p.Sites))
	for _, s := range p.Sites {
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.EstLiveBytes != b.EstLiveBytes {
			return a.EstLiveBytes > b.EstLiveBytes
		}
		if a.EstAllocBytes != b.EstAllocBytes {
			return a.EstAllocBytes > b.EstAllocBytes
		}
		return a.SiteKey.Stack < b.SiteKey.Stack || a.SiteKey.Stack == b.SiteKey.Stack && a.Tag < b.Tag
	})
	return out
}

// ModuleOf finds the module holding address pc.
func (p *Profile) ModuleOf(pc uint64) (*Module, bool) {
	for i := range p.Modules {
		if m := &p.Modules[i]; pc >= m.Start && pc < m.End {
			return m, true
		}
	}
	return nil, false
}
