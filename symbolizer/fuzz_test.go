// Fuzz targets for the readers of untrusted bytes: ELF files (build-id
// notes, load bias, symbol tables, DWARF) and /proc/PID/maps text.

package symbolizer

import (
	"bytes"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzELF feeds bytes to the object loader the Symbolizer uses (through
// an io.ReaderAt: elf.NewFile on a bytes.Reader) and looks up addresses
// in what loads: errors are fine, panics and hangs are not.
func FuzzELF(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x7fELF\x02\x01\x01\x00"))
	if _, err := exec.LookPath("gcc"); err == nil {
		dir := f.TempDir()
		src := filepath.Join(dir, "t.c")
		if os.WriteFile(src, []byte("static int g(int x) { return x * 3; }\nint main(int c, char **v) { return g(c); }\n"), 0o644) == nil {
			for i, flags := range [][]string{{"-g", "-O1"}, {"-s", "-O1"}} {
				out := filepath.Join(dir, "t"+string(rune('0'+i)))
				args := append(flags, "-Wl,--build-id", "-o", out, src)
				if exec.Command("gcc", args...).Run() == nil {
					if data, err := os.ReadFile(out); err == nil {
						f.Add(data)
						f.Add(data[:len(data)/2])
					}
				}
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ef, err := safeNewFile(data)
		if err != nil {
			return
		}
		buildIDOf(ef)
		pcs := []uint64{0, 1, 0x1000, 0x1139, ^uint64(0)}
		for _, p := range ef.Progs {
			loadBias(ef, 0x7f0000000000, 0x7f0000000000+p.Memsz, p.Off)
			pcs = append(pcs, p.Vaddr, p.Vaddr+p.Memsz/2, p.Vaddr+p.Memsz-1)
		}
		// The image as if mapped: DWARF sliced from data (retained: it
		// is not a mapping to unmap).
		o, err := newObject(&image{File: ef, m: &fileMap{data: data, retained: true}}, nil, strings.ToUpper)
		if err != nil {
			return
		}
		for _, s := range o.syms {
			pcs = append(pcs, s.lo, s.hi-1)
		}
		for _, pc := range pcs[:min(len(pcs), 64)] {
			o.frames(pc)
		}
	})
}

func safeNewFile(data []byte) (f *elf.File, err error) {
	defer recoverInto(&err)
	return elf.NewFile(bytes.NewReader(data))
}

// FuzzMaps feeds text to the /proc/PID/maps parser.
func FuzzMaps(f *testing.F) {
	f.Add("55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234   /tmp/my dir/prog\n7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0 [vdso]\n")
	f.Add("0-1 x 0 0 0 /a (deleted)\n")
	f.Fuzz(func(t *testing.T, text string) {
		maps, err := parseMaps(strings.NewReader(text))
		if err != nil {
			return
		}
		mods := modulesFromMaps(maps, func(mapping) (*elf.File, error) { return nil, os.ErrNotExist })
		for _, m := range mods {
			if m.End <= m.Start || !strings.HasPrefix(m.Path, "/") {
				t.Fatalf("bad module %+v", m)
			}
			ModuleOf(mods, m.Start)
		}
	})
}
