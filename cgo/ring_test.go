package cgo

import (
	"bufio"
	"debug/elf"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// The sampling build brings its events ring's pages in windows as
// writers reach them, in one madvise each, not a fault a page: a page
// first, then windows doubling up to 64 KiB (most rings hold a few KiB,
// and each page of the file costs). So what is resident of a shell's
// ring (smaps' Rss) is whole windows (a page, 2, 4, 8, 16, then 16 more
// at a time), never less than what it wrote; faults would leave the pages
// written, one by one.
func TestSampleRingPopulated(t *testing.T) {
	probe, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	require.NoError(t, err)
	supported := unix.Madvise(probe, unix.MADV_POPULATE_WRITE) == nil
	unix.Munmap(probe)
	if !supported {
		t.Skip("no MADV_POPULATE_WRITE (Linux 5.14+)")
	}
	dir := t.TempDir()
	// a few hundred allocations first (every one a record under full),
	// so that the ring holds more than a page
	r := runProg(t, time.Minute, []string{"LD_PRELOAD=" + strictLib(t, "sampling", SamplingFlags...), "TAGALLOC_DIR=" + dir, "TAGALLOC_STACKS=full"},
		"/bin/sh", "-c", `i=0; while [ $i -lt 300 ]; do x="$x $i"; i=$((i+1)); done; echo $$; cat /proc/$$/smaps`)
	require.NoError(t, r.err, r.stderr)
	rss, in, pid := -1, false, ""
	sc := bufio.NewScanner(strings.NewReader(r.stdout))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		switch {
		case pid == "" && len(f) == 1:
			pid = f[0]
		case len(f) >= 6 && strings.Contains(f[0], "-"):
			in = strings.HasSuffix(f[5], pid+".events")
		case in && len(f) == 3 && f[0] == "Rss:":
			rss, in = 0, false
			_, err := fmt.Sscan(f[1], &rss)
			require.NoError(t, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, pid+".events"))
	require.NoError(t, err)
	head := binary.LittleEndian.Uint64(b[64:]) // the header's head: bytes written (the ring never wrapped)
	written := (256 + int(head) + 4095) / 4096 * 4
	require.Greater(t, written, 8, "KiB of the shell's events file written: too few to tell windows from faults")
	t.Logf("%d KiB of the shell's events ring resident, %d KiB of it written", rss, written)
	windows := rss == 4 || rss == 8 || rss == 16 || rss == 32 || (rss > 0 && rss%64 == 0)
	require.True(t, windows && rss >= written, "%d KiB of the shell's events ring resident, %d KiB of it written:\n%s", rss, written, r.stdout)
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
