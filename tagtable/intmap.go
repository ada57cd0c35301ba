// intMap: uint64 keys -> uint32 values, for the profile's live blocks (by
// address) and its sites (by stack and tag).

package tagtable

import (
	"unsafe"

	"github.com/tagalloc/tagalloc/segvec"
)

// intMap maps uint64 keys to uint32 values: open addressing with linear
// probing over one array of key-value entries (a key and its value share
// a cache line), deleted entries removed by shifting their cluster back
// (no tombstones). The live-block table is under constant churn (every
// free deletes an address, every allocation adds a new one); a Go map kept
// probing through its deleted entries there, 400 ns a lookup with a
// million live blocks (BenchmarkDrainLive). The entries are in a
// segvec.Array, outside the Go heap and on huge pages once large; close
// releases it.
type intMap struct {
	arr   *segvec.Array[intEnt]
	ents  []intEnt // arr's; key 0: empty (key 0 lives in zero/hasZero)
	n     int      // entries in ents
	mask  uint64
	shift uint // 64 - log2(len(ents))

	hasZero bool // key 0 (address 0 only a hostile ring sends; site key 0 is stack 0, tag 0)
	zero    uint32
}

type intEnt struct {
	key uint64
	val uint32
}

// intMapMin is a new map's slots. Every process under --stacks has a
// profile with two of these maps, kept until the report after it exits:
// with 1024 slots (16 KB each, touched at random) a small profile held 38
// KB of memory, with 128 it holds 26 KB.
const intMapMin = 1 << 7

func newIntMap() *intMap {
	m := &intMap{}
	m.init(intMapMin)
	return m
}

func (m *intMap) init(size int) {
	arr, err := segvec.NewArray[intEnt](size, segvec.Name("tagalloc profile table"))
	if err != nil {
		panic(err) // out of memory, as a Go map would be
	}
	m.arr, m.ents = arr, arr.S()
	m.mask = uint64(size - 1)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	m.n = 0
}

// home is k's first slot, by Fibonacci hashing of the whole key (a block
// address's four low bits are zero, which costs this hash nothing: it
// works on the rest mod 2^60 alike).
func (m *intMap) home(k uint64) uint64 { return (k * 0x9E3779B97F4A7C15) >> m.shift }

// Len is the number of keys held.
func (m *intMap) Len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// Get returns k's value.
func (m *intMap) Get(k uint64) (uint32, bool) {
	if k == 0 {
		return m.zero, m.hasZero
	}
	for i := m.home(k); ; i = (i + 1) & m.mask {
		switch e := &m.ents[i]; e.key {
		case k:
			return e.val, true
		case 0:
			return 0, false
		}
	}
}

// lines appends the addresses of the cache line of k's home entry and of
// the next line (which Delete reads to the end of the cluster: about 2.4
// entries past a key at half load), for prefetching (Profile.ahead).
func (m *intMap) lines(k uint64, dst []uintptr) []uintptr {
	h := m.home(k)
	return append(dst, uintptr(unsafe.Pointer(&m.ents[h])), uintptr(unsafe.Pointer(&m.ents[(h+4)&m.mask]))) // 4 entries a line
}

// Put sets k's value.
func (m *intMap) Put(k uint64, v uint32) {
	if k == 0 {
		m.hasZero, m.zero = true, v
		return
	}
	if 2*(m.n+1) > len(m.ents) {
		m.grow()
	}
	i := m.home(k)
	for ; m.ents[i].key != 0; i = (i + 1) & m.mask {
		if m.ents[i].key == k {
			m.ents[i].val = v
			return
		}
	}
	m.ents[i] = intEnt{k, v}
	m.n++
}

func (m *intMap) grow() {
	arr, old := m.arr, m.ents
	defer arr.Close()
	m.init(2 * len(old))
	for _, e := range old {
		if e.key != 0 {
			j := m.home(e.key)
			for m.ents[j].key != 0 {
				j = (j + 1) & m.mask
			}
			m.ents[j] = e
			m.n++
		}
	}
}

// Delete removes k, and returns its value.
func (m *intMap) Delete(k uint64) (uint32, bool) {
	if k == 0 {
		v, ok := m.zero, m.hasZero
		m.hasZero, m.zero = false, 0
		return v, ok
	}
	i := m.home(k)
	for ; m.ents[i].key != k; i = (i + 1) & m.mask {
		if m.ents[i].key == 0 {
			return 0, false
		}
	}
	v := m.ents[i].val
	// Shift the rest of the cluster back over the hole: an entry moves
	// into it if the hole lies between its home and where it sits.
	for j := (i + 1) & m.mask; m.ents[j].key != 0; j = (j + 1) & m.mask {
		h := m.home(m.ents[j].key)
		if (j-h)&m.mask >= (j-i)&m.mask { // j's home is at or before the hole, cyclically
			m.ents[i] = m.ents[j]
			i = j
		}
	}
	m.ents[i] = intEnt{}
	m.n--
	return v, true
}

// Range calls f for every key and value until f returns false.
func (m *intMap) Range(f func(k uint64, v uint32) bool) {
	if m.hasZero && !f(0, m.zero) {
		return
	}
	for _, e := range m.ents {
		if e.key != 0 && !f(e.key, e.val) {
			return
		}
	}
}

// Clone copies m.
func (m *intMap) Clone() *intMap {
	c := *m
	c.init(len(m.ents))
	copy(c.ents, m.ents)
	c.n = m.n
	return &c
}

// close releases the entries; m must not be used afterwards (closing a
// nil map, or twice, does nothing).
func (m *intMap) close() {
	if m != nil && m.arr != nil {
		m.arr.Close()
		m.arr, m.ents = nil, nil
	}
}

// Bytes is the memory the entries hold.
func (m *intMap) Bytes() int {
	if m == nil || m.arr == nil {
		return 0
	}
	return m.arr.Bytes()
}
