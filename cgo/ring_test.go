package cgo

import (
	"bufio"
	"debug/elf"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The sampling build brings its events ring's pages in a window (64 KiB)
// at a time as writers reach them, in one madvise, not a fault a page: a
// shell's few records (a few KiB) leave the whole first window resident
// in its mapping (smaps' Rss), where faults left a page or two.
func TestSampleRingPopulated(t *testing.T) {
	probe, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	require.NoError(t, err)
	supported := unix.Madvise(probe, unix.MADV_POPULATE_WRITE) == nil
	unix.Munmap(probe)
	if !supported {
		t.Skip("no MADV_POPULATE_WRITE (Linux 5.14+)")
	}
	r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + strictLib(t, "sampling", SamplingFlags...), "TAGALLOC_DIR=" + t.TempDir(), "TAGALLOC_STACKS=full"},
		"/bin/sh", "-c", "cat /proc/$$/smaps")
	require.NoError(t, r.err, r.stderr)
	rss, in := -1, false
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case len(f) >= 6 && strings.Contains(f[0], "-"):
			in = strings.HasSuffix(f[5], ".events")
		case in && len(f) == 3 && f[0] == "Rss:":
			rss, in = 0, false
			_, err := fmt.Sscan(f[1], &rss)
			require.NoError(t, err)
		}
	}
	require.GreaterOrEqual(t, rss, 64, "KiB of the shell's events ring resident:\n%s", r.stdout)
}

// The stacks build needs no library beyond the C library (its unwinder
// linked in, not libgcc_s.so.1, which every process would load), and
// exports none of the unwinder's symbols (a program's exceptions keep
// their own).
func TestStacksLibraryNeedsNoUnwinderLibrary(t *testing.T) {
	f, err := elf.Open(strictLib(t, "sampling", SamplingFlags...))
	require.NoError(t, err)
	defer f.Close()
	needed, err := f.ImportedLibraries()
	require.NoError(t, err)
	for _, n := range needed {
		require.True(t, strings.HasPrefix(n, "libc.so") || strings.HasPrefix(n, "ld-linux"), "needs %s (all: %v)", n, needed)
	}
	syms, err := f.DynamicSymbols()
	require.NoError(t, err)
	for _, s := range syms {
		if s.Section != elf.SHN_UNDEF {
			require.False(t, strings.HasPrefix(s.Name, "_Unwind_") || strings.HasPrefix(s.Name, "__register_frame"), "exports %s", s.Name)
		}
	}
}
