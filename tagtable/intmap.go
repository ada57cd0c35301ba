// addrMap: block address -> slot, for the profile's live blocks.

package tagtable

// addrMap maps block addresses to slots: open addressing with linear
// probing, deleted entries removed by shifting their cluster back (no
// tombstones). The live-block table is under constant churn (every free
// deletes an address, every allocation adds a new one); a Go map kept
// probing through its deleted entries there, 400 ns a lookup with a
// million live blocks (BenchmarkDrainLive). Keys and values are in slices
// of plain integers, which the garbage collector does not scan.
type addrMap struct {
	keys  []uint64 // 0: empty (address 0 lives in zero/hasZero)
	vals  []uint32
	n     int // entries in keys
	mask  uint64
	shift uint // 64 - log2(len(keys))

	hasZero bool // address 0 (only a hostile ring sends it)
	zero    uint32
}

const addrMapMin = 1 << 10

func newAddrMap() *addrMap {
	m := &addrMap{}
	m.init(addrMapMin)
	return m
}

func (m *addrMap) init(size int) {
	m.keys = make([]uint64, size)
	m.vals = make([]uint32, size)
	m.mask = uint64(size - 1)
	m.shift = 64
	for s := size; s > 1; s >>= 1 {
		m.shift--
	}
	m.n = 0
}

// home is a's first slot: blocks are 16-aligned, so the low bits carry
// nothing; Fibonacci hashing spreads the rest.
func (m *addrMap) home(a uint64) uint64 { return ((a >> 4) * 0x9E3779B97F4A7C15) >> m.shift }

// Len is the number of addresses held.
func (m *addrMap) Len() int {
	if m.hasZero {
		return m.n + 1
	}
	return m.n
}

// Get returns a's slot.
func (m *addrMap) Get(a uint64) (uint32, bool) {
	if a == 0 {
		return m.zero, m.hasZero
	}
	for i := m.home(a); ; i = (i + 1) & m.mask {
		switch m.keys[i] {
		case a:
			return m.vals[i], true
		case 0:
			return 0, false
		}
	}
}

// Put sets a's slot.
func (m *addrMap) Put(a uint64, v uint32) {
	if a == 0 {
		m.hasZero, m.zero = true, v
		return
	}
	if 2*(m.n+1) > len(m.keys) {
		m.grow()
	}
	i := m.home(a)
	for ; m.keys[i] != 0; i = (i + 1) & m.mask {
		if m.keys[i] == a {
			m.vals[i] = v
			return
		}
	}
	m.keys[i], m.vals[i] = a, v
	m.n++
}

func (m *addrMap) grow() {
	keys, vals := m.keys, m.vals
	m.init(2 * len(keys))
	for i, k := range keys {
		if k != 0 {
			j := m.home(k)
			for m.keys[j] != 0 {
				j = (j + 1) & m.mask
			}
			m.keys[j], m.vals[j] = k, vals[i]
			m.n++
		}
	}
}

// Delete removes a, and returns its slot.
func (m *addrMap) Delete(a uint64) (uint32, bool) {
	if a == 0 {
		v, ok := m.zero, m.hasZero
		m.hasZero, m.zero = false, 0
		return v, ok
	}
	i := m.home(a)
	for ; m.keys[i] != a; i = (i + 1) & m.mask {
		if m.keys[i] == 0 {
			return 0, false
		}
	}
	v := m.vals[i]
	// Shift the rest of the cluster back over the hole: an entry moves
	// into it if the hole lies between its home and where it sits.
	for j := (i + 1) & m.mask; m.keys[j] != 0; j = (j + 1) & m.mask {
		h := m.home(m.keys[j])
		if (j-h)&m.mask >= (j-i)&m.mask { // j's home is at or before the hole, cyclically
			m.keys[i], m.vals[i] = m.keys[j], m.vals[j]
			i = j
		}
	}
	m.keys[i], m.vals[i] = 0, 0
	m.n--
	return v, true
}

// Range calls f for every address and slot until f returns false.
func (m *addrMap) Range(f func(a uint64, v uint32) bool) {
	if m.hasZero && !f(0, m.zero) {
		return
	}
	for i, k := range m.keys {
		if k != 0 && !f(k, m.vals[i]) {
			return
		}
	}
}

// Clone copies m.
func (m *addrMap) Clone() *addrMap {
	c := *m
	c.keys = append([]uint64(nil), m.keys...)
	c.vals = append([]uint32(nil), m.vals...)
	return &c
}
