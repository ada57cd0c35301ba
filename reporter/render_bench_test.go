package reporter

import (
	"io"
	"math/rand/v2"
	"syscall"
	"testing"

	"github.com/tagalloc/tagalloc/tagtable"
)

// bigProfile is a process with 100k live sampled blocks from 10k stacks
// of 24 frames (from 30k call sites) in 20 modules (10k stack records), under 50 tags, with reporters' marks on
// some blocks (issue 6's rendering target).
func bigProfile() (*tagtable.Profile, map[uint32]string) {
	rng := rand.New(rand.NewPCG(1, 2))
	p := tagtable.NewProfile(1, "sampled", 512<<10)
	for m := uint64(0); m < 20; m++ {
		p.Module(tagtable.Module{Start: 0x10000000 * (m + 1), End: 0x10000000*(m+1) + 0x1000000, Path: "/usr/lib/libmod" + string(rune('a'+m)) + ".so"})
	}
	const stacks = 10000
	pool := make([]uint64, 30000) // call sites: stacks share them, as real ones do
	for i := range pool {
		pool[i] = 0x10000000*(rng.Uint64N(20)+1) + rng.Uint64N(0x1000000)
	}
	for id := uint32(1); id <= stacks; id++ {
		pcs := make([]uint64, 24)
		for i := range pcs {
			pcs[i] = pool[rng.IntN(len(pool))]
		}
		p.Stack(id, pcs)
	}
	names := map[uint32]string{0: DefaultTag}
	for t := uint32(1); t < 50; t++ {
		names[t] = "tag-" + string(rune('a'+t%26)) + string(rune('a'+t/26))
	}
	p.Collect(1)
	for i := uint64(0); i < 100000; i++ {
		addr := 0x7f0000000000 + i*4096
		size := 16 + rng.Uint64N(4000)
		stack := uint32(1 + rng.IntN(stacks))
		p.Alloc(addr, size, size, stack%50, stack) // a stack allocates under one tag: 10k records
		if i%3 == 0 {
			p.Report(addr, 1+stack%100) // a site's blocks are measured by one reporter
		}
	}
	return p, names
}

// BenchmarkRender100k: a process with 100k live sampled blocks and 10k
// stack records (issue 6's target: 200 ms), as tagalloc report renders
// it: the stacks section from the profile alone, then with the DMD text,
// the dark-matter text, the tree or the JSON file. Frames are named by module and
// offset (the symbolizer's own cost is benchmarked in package
// symbolizer). Besides wall time it reports the process's CPU time per
// op, which other jobs on the machine do not inflate.
func BenchmarkRender100k(b *testing.B) {
	p, names := bigProfile()
	defer p.Close()
	for _, c := range []struct {
		name  string
		write func(r *Report, w io.Writer) error
	}{
		{"stacks", func(*Report, io.Writer) error { return nil }},
		{"dmd", (*Report).WriteDMD},
		{"dark-matter", (*Report).WriteDarkMatter},
		{"tree", (*Report).WriteTree},
		{"json", (*Report).WriteJSON},
	} {
		b.Run(c.name, func(b *testing.B) {
			var n countWriter
			cpu0 := cpuTime()
			for b.Loop() {
				proc := Process{PID: 1, Command: []string{"big"}, Tags: []Tag{}, Stacks: FromProfile(p, names, nil)}
				if err := c.write(&Report{Schema: Schema, Processes: []Process{proc}}, &n); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime()-cpu0)/1e6/float64(b.N), "cpu-ms/op")
			b.ReportMetric(float64(n)/float64(b.N)/(1<<20), "MiB/op")
		})
	}
}

type countWriter int

func (c *countWriter) Write(b []byte) (int, error) { *c += countWriter(len(b)); return len(b), nil }

// cpuTime is the process's user and system CPU time so far, in ns.
func cpuTime() int64 {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
