package growth

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

// The figures of "Please grow your buffers exponentially": a buffer grown
// one byte at a time from 1 byte to 1 MiB, counting the bytes of every
// buffer allocated on the way (what the chain commits, and about what it
// copies). Doubling starts at a 4 KiB page, as the article's allocator
// rounds a first allocation up to one.
func TestArticleFigures(t *testing.T) {
	const mib = 1 << 20
	require.Equal(t, int64(549_756_338_176), Simulate(JustEnough, mib, 1).BytesAllocated)
	require.Equal(t, int64(134_742_016), Simulate(RoundUp(4096), mib, 1).BytesAllocated)
	require.Equal(t, int64(2_093_056), Simulate(Exponential(2, 4096), mib, 1).BytesAllocated)
	// and the copies: quadratic, quadratic, linear
	require.Equal(t, int64(mib)*(mib-1)/2, Simulate(JustEnough, mib, 1).BytesCopied)
	require.Equal(t, 9, Simulate(Exponential(2, 4096), mib, 1).Reallocs)
	require.Less(t, Simulate(Exponential(2, 4096), mib, 1).BytesCopied, int64(mib))
}

func TestSizeClassPolicy(t *testing.T) {
	require.Equal(t, 16, Usable(1))
	require.Equal(t, 640<<10, Usable(600<<10), "whole 64 KiB pages past 512 KiB")
	require.Equal(t, 32<<20+4096, Usable(32<<20+1), "4 KiB pages from 32 MiB")
	c := Simulate(SizeClass, 1<<20, 1)
	j := Simulate(JustEnough, 1<<20, 1)
	require.Less(t, c.Reallocs*100, j.Reallocs, "growing into the class is free: far fewer reallocs")
}

func TestBuffer(t *testing.T) {
	var b Buffer
	want := []byte{}
	for i := 0; i < 10000; i++ {
		p := []byte{byte(i), byte(i >> 8)}
		b.Append(p)
		want = append(want, p...)
	}
	require.Equal(t, want, b.Bytes())
	require.Equal(t, 20000, b.Len())
	require.GreaterOrEqual(t, b.Cap(), 20000)
	require.LessOrEqual(t, b.Reallocs(), 10, "doubling from 64 B: log2(20000/64)+1")
	j := Buffer{Policy: JustEnough}
	for i := 0; i < 1000; i++ {
		j.Append([]byte{1})
	}
	require.Equal(t, 1000, j.Reallocs())
	require.Equal(t, int64(999*1000/2), j.BytesCopied())
	j.Reset()
	require.Zero(t, j.Len())
	j.Free()
	require.Zero(t, j.Cap())
	require.Panics(t, func() { j.Grow(-1) })
}

func TestDiagnose(t *testing.T) {
	f := Diagnose([]Site{
		{Name: "grow_doubling", GrowSteps: 16, MeanRatio: 2, BytesCopied: 1 << 20},
		{Name: "grow_just_enough", GrowSteps: 16000, MeanRatio: 1.0004, BytesCopied: 500 << 20},
		{Name: "few", GrowSteps: 3, MeanRatio: 1.01},
		{Name: "middling", GrowSteps: 40, MeanRatio: 1.15},
	})
	require.Len(t, f, 3, "too few steps to judge: left out")
	require.Equal(t, "grow_just_enough", f[0].Name)
	require.True(t, f[0].Flagged)
	require.Equal(t, JustEnoughGrowth, f[0].Verdict)
	require.Contains(t, f[0].Fix, "geometrically")
	require.Contains(t, f[0].Fix, "500 MiB")
	for _, x := range f[1:] {
		require.False(t, x.Flagged, x.Name)
	}
	require.Equal(t, ExponentialGrowth, f[1].Verdict)
	require.Equal(t, OtherGrowth, f[2].Verdict)
}

// The model over tagalloc's own size classes, for a 1 MiB buffer grown a
// byte at a time.
func ExampleSimulate() {
	var b bytes.Buffer
	for _, p := range []struct {
		name string
		p    Policy
	}{{"just-enough", JustEnough}, {"4 KiB pages", RoundUp(4096)}, {"size classes", SizeClass}, {"doubling", Exponential(2, 4096)}, {"1.5x", Exponential(1.5, 4096)}} {
		c := Simulate(p.p, 1<<20, 1)
		fmt.Fprintf(&b, "%-12s %8d reallocs %16d bytes copied\n", p.name, c.Reallocs, c.BytesCopied)
	}
	fmt.Print(b.String())
	// Output:
	// just-enough   1048576 reallocs     549755289600 bytes copied
	// 4 KiB pages       256 reallocs        133693440 bytes copied
	// size classes      112 reallocs         12057600 bytes copied
	// doubling            9 reallocs          1044480 bytes copied
	// 1.5x               15 reallocs          2383292 bytes copied
}

func BenchmarkAppend(b *testing.B) {
	for _, p := range []struct {
		name string
		p    Policy
	}{{"just-enough", JustEnough}, {"size-class", SizeClass}, {"doubling", Exponential(2, 64)}} {
		b.Run(p.name, func(b *testing.B) {
			chunk := make([]byte, 16)
			for i := 0; i < b.N; i++ {
				buf := Buffer{Policy: p.p}
				for k := 0; k < 4096; k++ {
					buf.Append(chunk)
				}
			}
		})
	}
}
