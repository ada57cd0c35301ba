// Tests of the module table: /proc/PID/maps parsing, build-id notes, load
// bias, ModuleOf, and the library roll-up.

package symbolizer

import (
	"debug/elf"
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseMaps(t *testing.T) {
	const maps = `55d0c0a00000-55d0c0a01000 r--p 00000000 08:01 1234                       /tmp/my dir/prog
55d0c0a01000-55d0c0a02000 r-xp 00001000 08:01 1234                       /tmp/my dir/prog
55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0                          [heap]
7f0000000000-7f0000001000 r-xp 00002000 08:01 99 /usr/lib/libgone.so (deleted)
7f0000100000-7f0000101000 rw-p 00000000 00:00 0
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
garbage line
7f00-7e00 r-xp 0 0 0 /bad/range
`
	got, err := parseMaps(strings.NewReader(maps))
	require.NoError(t, err)
	require.Len(t, got, 6)
	assert.Equal(t, mapping{0x55d0c0a01000, 0x55d0c0a02000, 0x1000, "r-xp", "/tmp/my dir/prog"}, got[1])
	assert.Equal(t, "/usr/lib/libgone.so (deleted)", got[3].path)
	assert.Equal(t, "", got[4].path)
	assert.Equal(t, "[vdso]", got[5].path)

	// Only executable mappings of files become modules; unreadable files
	// keep a module with the vaddr == offset bias.
	mods := modulesFromMaps(got, func(mapping) (*elf.File, error) { return nil, errors.New("not opened") })
	require.Len(t, mods, 2)
	assert.Equal(t, Module{Start: 0x55d0c0a01000, End: 0x55d0c0a02000, Offset: 0x1000, Bias: 0x55d0c0a00000, Path: "/tmp/my dir/prog"}, mods[0])
	assert.Equal(t, "/usr/lib/libgone.so", mods[1].Path)
	assert.Equal(t, "libgone.so", mods[1].Name())
}

func TestModuleOf(t *testing.T) {
	mods := []Module{{Start: 0x1000, End: 0x2000, Path: "/a"}, {Start: 0x2000, End: 0x3000, Path: "/b"}, {Start: 0x8000, End: 0x9000, Path: "/c"}}
	for _, c := range []struct {
		addr uint64
		want string
	}{{0, ""}, {0xfff, ""}, {0x1000, "/a"}, {0x1fff, "/a"}, {0x2000, "/b"}, {0x3000, ""}, {0x8fff, "/c"}, {0x9000, ""}, {^uint64(0), ""}} {
		m, ok := ModuleOf(mods, c.addr)
		if c.want == "" {
			assert.False(t, ok, "%#x", c.addr)
			continue
		}
		require.True(t, ok, "%#x", c.addr)
		assert.Equal(t, c.want, m.Path, "%#x", c.addr)
	}
	_, ok := ModuleOf(nil, 5)
	assert.False(t, ok)
}

func TestBuildIDNote(t *testing.T) {
	note := func(name string, typ uint32, desc []byte) []byte {
		b := binary.LittleEndian.AppendUint32(nil, uint32(len(name)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(desc)))
		b = binary.LittleEndian.AppendUint32(b, typ)
		b = append(b, name...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		b = append(b, desc...)
		for len(b)%4 != 0 {
			b = append(b, 0)
		}
		return b
	}
	abi := note("GNU\x00", 1, []byte{0, 0, 0, 0, 3, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0})
	id := note("GNU\x00", 3, []byte{0xde, 0xad, 0xbe, 0xef, 0x01})
	got, ok := findBuildIDNote(append(abi, id...), binary.LittleEndian, 4)
	require.True(t, ok)
	assert.Equal(t, "deadbeef01", got)
	_, ok = findBuildIDNote(abi, binary.LittleEndian, 4)
	assert.False(t, ok)
	_, ok = findBuildIDNote(note("Go\x00\x00", 3, []byte{1, 2}), binary.LittleEndian, 4)
	assert.False(t, ok, "another vendor's note")
	for n := range 12 + 4 + 5 { // cut anywhere before the descriptor's end

		_, ok = findBuildIDNote(id[:n], binary.LittleEndian, 4)
		assert.False(t, ok, "truncated to %d", n)
	}
}

func TestLibrary(t *testing.T) {
	for _, c := range []struct {
		name  string
		stack []string
		want  string
	}{
		{"libc-tagalloc-libfoo-main", []string{"/lib/x86_64-linux-gnu/libc.so.6", "/home/u/.cache/tagalloc/ab/libtagalloc.so", "/opt/x/libfoo.so", "/opt/x/main"}, "libfoo.so"},
		{"main itself", []string{"/usr/lib/libtagalloc.so", "/usr/bin/python3.11"}, "python3.11"},
		{"c++ runtime skipped", []string{"libtagalloc.so", "/usr/lib/x86_64-linux-gnu/libstdc++.so.6", "/usr/lib/x86_64-linux-gnu/libgcc_s.so.1", "/vendor/lib64/libGLESv2_adreno.so", "/system/bin/app"}, "libGLESv2_adreno.so"},
		{"loader, libm, libpthread", []string{"/lib64/ld-linux-x86-64.so.2", "/lib/x86_64-linux-gnu/libm.so.6", "/lib/x86_64-linux-gnu/libpthread.so.0", "/app"}, "app"},
		{"unknown frames passed over", []string{"", "/lib/libc.so.6", "", "/opt/libbar.so.1"}, "libbar.so.1"},
		{"all system: outermost", []string{"/usr/lib/libtagalloc.so", "/lib/libc.so.6", "/lib64/ld-linux-x86-64.so.2"}, "ld-linux-x86-64.so.2"},
		{"empty", nil, ""},
		{"deleted file", []string{"/opt/libfoo.so (deleted)"}, "libfoo.so"},
	} {
		t.Run(c.name, func(t *testing.T) {
			assert.Equal(t, c.want, Library(c.stack))
		})
	}

	r, err := NewRollup(append(DefaultSkip, "libfoo.so*")...)
	require.NoError(t, err)
	assert.Equal(t, "main", r.Library([]string{"/lib/libc.so.6", "/opt/libfoo.so", "/opt/main"}))
	assert.True(t, r.Skipped("/opt/libfoo.so"))
	r, err = NewRollup() // nothing skipped: the allocator's own frame names it
	require.NoError(t, err)
	assert.Equal(t, "libtagalloc.so", r.Library([]string{"/x/libtagalloc.so", "/opt/main"}))
	_, err = NewRollup("lib[")
	assert.Error(t, err)
}
