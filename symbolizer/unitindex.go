// The unit index (part of the disk cache): for a build-id, its compile
// units' address ranges and, for the units indexed so far, what the frames
// at any address of the unit are made of, in files beside the frames of
// its addresses. An address the frames file does not hold, in a unit the
// index holds, is named without the object: a run of a sampled program
// meets a few addresses no run met before (sampling is random), and each
// of them made it read the whole object (libpython's DWARF, libc's
// compressed debug file: 30 to 500 ms after the program ended). A run
// that does read an object indexes more of it at Flush (indexMore).

package symbolizer

import (
	"cmp"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"sort"
	"strconv"
	"sync"
	"time"
)

// The magics of the unit index's files.
const (
	unitRangesMagic = "TAGRNGS\n"
	unitBlockMagic  = "TAGUNIT\n"
)

// The files, in the directory ab/cdef....units of the build-id:
//
//	ranges      the units' address ranges
//	UNIT        (the unit's offset in .debug_info, in hex) its block
//
// Each is
//
//	magic        unitRangesMagic or unitBlockMagic (8 bytes)
//	version      diskCacheVersion
//	build-id     length, bytes
//	fingerprint  length, bytes
//	payload
//	checksum     CRC-32 (IEEE) of all the bytes before it, 4 bytes
//	             little-endian
//
// with integers unsigned varints unless said otherwise ("signed": zig-zag
// varints). The payload of ranges: count, then each range by ascending
// start (the order the object's unit index sorts them in): start (the
// first; then the difference to the previous), length, unit. That of a
// block: the unit, then
//
//	strings    count, each one's length, then their bytes one after
//	           the other
//	chains     count, then each: depth (at least 1), then each scope,
//	           outermost first: name (string), call file (string), call
//	           line (signed)
//	intervals  count, start, then each: length (at least 1), kind (0: not
//	           the unit's: the object decides; 1: named), and when named:
//	           chain (1 + index; 0: none), symbol (1 + a string index; 0:
//	           none), the symbol's origin
//	rows       the unit's line table, in chunks of rowChunk rows: the
//	           count of rows, then each chunk's first address (the first;
//	           then the difference to the previous chunk's) and length in
//	           bytes, then the chunks, each row: the difference of its
//	           address to the previous row's (not for a chunk's first),
//	           file and end of sequence ((1 + a string index; 0: none) * 2
//	           + (0, 1)), line (signed)
//
// A lookup decodes the strings' lengths, the chains, the intervals and
// the chunks' table, and of the rows only the chunk it needs (libpython's
// unicodeobject.c has 71k rows: decoded whole, 10 ms). A block is
// written once (another writer writes the same bytes) and
// never changes; the ranges likewise.

// unitIndex is the index of one build-id: the ranges, and the blocks read
// or built so far.
type unitIndex struct {
	mu        sync.Mutex
	units     []indexRange // sorted as dwarfIndex.ranges; nil: none yet
	rangesNew bool         // units came from the object: Flush writes them
	blocks    map[uint64]*indexBlock
	busy      map[uint64]bool // blocks being built
	wanted    map[uint64]int  // units whose addresses loaded the object, and how many, since the last Flush
}

// indexBlock is one unit's block, as read or built.
type indexBlock struct {
	data  []byte     // encoded; nil: no usable block (no file, or a bad one)
	b     *unitBlock // decoded on first use
	bad   bool       // data did not decode
	saved bool       // data is in its file
}

// indexRange is one address range of a unit.
type indexRange struct{ lo, hi, unit uint64 }

// unitBlock is one unit's block, decoded but for its rows.
type unitBlock struct {
	strData   []byte
	strEnd    []int // string i is strData[strEnd[i-1]:strEnd[i]]
	chains    []int // chain i is scopes[chains[i]:chains[i+1]]
	scopes    []chainScope
	bounds    []uint64 // interval i is [bounds[i], bounds[i+1])
	intervals []interval
	nrows     int
	chunks    []rowSpan
	rowData   []byte
}

// rowSpan is where a chunk of rows starts: its first row's address, and
// its bytes in rowData.
type rowSpan struct {
	addr     uint64
	from, to int
}

// rowChunk is how many rows a chunk of a block's line table holds.
const rowChunk = 64

// chainScope is a scope of a chain: its function's name, and for an
// inlined call where it was called from.
type chainScope struct {
	name, callFile int32 // string indexes
	callLine       int
}

// interval is what the frames at the addresses of one interval are made
// of: the chain of scopes holding them (-1: none) and the symbol (-1:
// none); hole: the unit does not answer for them.
type interval struct {
	hole   bool
	chain  int32
	sym    int32
	origin Origin
}

func (d *diskCache) unitsDir(id string) string {
	return filepath.Join(d.dir, id[:2], id[2:]+".units")
}

func (d *diskCache) rangesPath(id string) string { return filepath.Join(d.unitsDir(id), "ranges") }

func (d *diskCache) blockPath(id string, unit uint64) string {
	return filepath.Join(d.unitsDir(id), strconv.FormatUint(unit, 16))
}

// index returns r's unit index, reading its ranges the first time.
func (d *diskCache) index(r *diskRecord) *unitIndex {
	r.ixOnce.Do(func() {
		r.ix = &unitIndex{blocks: map[uint64]*indexBlock{}, busy: map[uint64]bool{}, wanted: map[uint64]int{}}
		d.load(r) // the fingerprint
		if p := d.readSealed(d.rangesPath(r.id), unitRangesMagic, r.id, r.fp); p != nil {
			r.ix.units, _ = decodeRanges(p) // nil if malformed
		}
		r.ixRead.Store(r.ix)
	})
	return r.ix
}

// readSealed returns the payload of the file at path if it is usable:
// whole, of this version, build-id and fingerprint; nil otherwise.
func (d *diskCache) readSealed(path, magic, id, fp string) []byte {
	data, err := readLimited(path, maxDiskFileBytes)
	if err != nil {
		return nil
	}
	f, err := unseal(data, magic)
	if err != nil || f.version != diskCacheVersion || f.buildID != id || f.fingerprint != fp {
		return nil
	}
	return f.payload
}

// sealedFile is a unit index file, its payload undecoded.
type sealedFile struct {
	version              uint64
	buildID, fingerprint string
	payload              []byte
}

// seal makes the bytes of a unit index file.
func seal(magic string, f *sealedFile) []byte {
	out := make([]byte, 0, len(magic)+len(f.buildID)+len(f.fingerprint)+len(f.payload)+32)
	out = append(out, magic...)
	out = binary.AppendUvarint(out, f.version)
	out = appendString(out, f.buildID)
	out = appendString(out, f.fingerprint)
	out = append(out, f.payload...)
	return binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(out))
}

// unseal checks a unit index file's magic and checksum and reads its
// header.
func unseal(data []byte, magic string) (*sealedFile, error) {
	if len(data) < len(magic)+4 || string(data[:len(magic)]) != magic {
		return nil, errUnitsFile
	}
	sum := binary.LittleEndian.Uint32(data[len(data)-4:])
	data = data[:len(data)-4]
	if crc32.ChecksumIEEE(data) != sum {
		return nil, errUnitsFile
	}
	d := diskDecoder{b: data[len(magic):]}
	f := &sealedFile{version: d.uvarint()}
	f.buildID = d.string()
	f.fingerprint = d.string()
	if d.err != nil {
		return nil, errUnitsFile
	}
	f.payload = d.b
	return f, nil
}

// encodeRanges encodes the ranges' payload.
func encodeRanges(units []indexRange) []byte {
	out := binary.AppendUvarint(nil, uint64(len(units)))
	prev := uint64(0)
	for i, r := range units {
		if i == 0 {
			out = binary.AppendUvarint(out, r.lo)
		} else {
			out = binary.AppendUvarint(out, r.lo-prev)
		}
		prev = r.lo
		out = binary.AppendUvarint(out, r.hi-r.lo)
		out = binary.AppendUvarint(out, r.unit)
	}
	return out
}

// decodeRanges decodes the ranges' payload: ascending starts, no empty
// range.
func decodeRanges(p []byte) ([]indexRange, error) {
	d := diskDecoder{b: p}
	units := make([]indexRange, d.count(3))
	lo := uint64(0)
	for i := range units {
		step, n, unit := d.uvarint(), d.uvarint(), d.uvarint()
		if lo+step < lo || lo+step+n < lo+step || n == 0 {
			return nil, errUnitsFile
		}
		lo += step
		units[i] = indexRange{lo, lo + n, unit}
	}
	if d.err != nil || len(d.b) != 0 || len(units) == 0 {
		return nil, errUnitsFile
	}
	return units, nil
}

// unitFor is dwarfIndex.unitFor on the index's units: the unit whose
// ranges hold pc.
func (ix *unitIndex) unitFor(pc uint64) (uint64, bool) {
	i := sort.Search(len(ix.units), func(i int) bool { return ix.units[i].lo > pc }) - 1
	for j := i; j >= 0 && j > i-maxOverlapScan; j-- {
		if pc < ix.units[j].hi {
			return ix.units[j].unit, true
		}
	}
	return 0, false
}

// indexed returns the frames at vaddr, as the object would give them, if
// the index of r holds its unit (its block is read the first time).
func (d *diskCache) indexed(r *diskRecord, vaddr uint64) ([]Frame, bool) {
	ix := d.index(r)
	ix.mu.Lock()
	u, ok := ix.unitFor(vaddr)
	if !ok {
		ix.mu.Unlock()
		return nil, false
	}
	st := ix.blocks[u]
	if st == nil {
		st = &indexBlock{saved: true}
		if p := d.readSealed(d.blockPath(r.id, u), unitBlockMagic, r.id, r.fp); p != nil {
			pd := diskDecoder{b: p}
			if pd.uvarint() == u && pd.err == nil {
				st.data = pd.b
			}
		}
		ix.blocks[u] = st
	}
	if st.b == nil && st.data != nil && !st.bad {
		var err error
		if st.b, err = decodeUnitBlock(st.data); err != nil {
			st.bad = true
		}
	}
	b := st.b
	ix.mu.Unlock()
	if b == nil {
		return nil, false
	}
	return b.frames(vaddr)
}

// want notes that vaddr, in o (the object of r's build-id, whose frames
// are kept), loaded the object: Flush builds the block of its unit
// (indexMore), not the lookup, which the report waits for.
func (d *diskCache) want(r *diskRecord, o *object, vaddr uint64) {
	if o.dw == nil {
		return
	}
	if u := o.dw.unitFor(vaddr); u != nil {
		ix := d.index(r)
		ix.mu.Lock()
		ix.wanted[uint64(u.entry.Offset)]++
		ix.mu.Unlock()
	}
}

// addBlock builds the block of unit u of o unless the index has it, and
// reports whether it did.
func (d *diskCache) addBlock(r *diskRecord, o *object, u *unit) bool {
	id := uint64(u.entry.Offset)
	ix := d.index(r)
	ix.mu.Lock()
	if st := ix.blocks[id]; st != nil && st.data != nil && !st.bad || ix.busy[id] {
		ix.mu.Unlock()
		return false
	}
	ix.busy[id] = true
	ix.mu.Unlock()
	data := o.encodeUnitBlock(u)
	ix.mu.Lock()
	defer ix.mu.Unlock()
	delete(ix.busy, id)
	if data == nil {
		return false
	}
	if ix.units == nil {
		ix.units, ix.rangesNew = o.dw.indexRanges(), true
	}
	ix.blocks[id] = &indexBlock{data: data} // over a bad one read
	return true
}

// blockFiles returns the units whose blocks the index of r has in its
// directory, by name (not read).
func (d *diskCache) blockFiles(r *diskRecord) map[uint64]bool {
	ents, _ := os.ReadDir(d.unitsDir(r.id))
	out := make(map[uint64]bool, len(ents))
	for _, e := range ents {
		if id, err := strconv.ParseUint(e.Name(), 16, 64); err == nil {
			out[id] = true
		}
	}
	return out
}

// indexRanges is the unit table of the index: x.ranges by unit offset.
func (x *dwarfIndex) indexRanges() []indexRange {
	out := make([]indexRange, len(x.ranges))
	for i, r := range x.ranges {
		out[i] = indexRange{r.lo, r.hi, uint64(r.u.entry.Offset)}
	}
	return out
}

// frames is object.frames at pc, from the block: false if the block does
// not answer for pc (the object must), or is malformed there.
func (b *unitBlock) frames(pc uint64) ([]Frame, bool) {
	k := sort.Search(len(b.bounds), func(i int) bool { return b.bounds[i] > pc }) - 1
	if k < 0 || k >= len(b.intervals) || b.intervals[k].hole {
		return nil, false
	}
	v := b.intervals[k]
	file, line, ok := b.line(pc)
	if !ok {
		return nil, false
	}
	if v.chain >= 0 {
		chain := b.scopes[b.chains[v.chain]:b.chains[v.chain+1]]
		return chainFrames(len(chain)-1, file, line,
			func(i int) string { return b.str(chain[i].name) },
			func(i int) (string, int) { return b.str(chain[i].callFile), chain[i].callLine },
			func() string {
				if v.sym >= 0 {
					return b.str(v.sym)
				}
				return ""
			}), true
	}
	if v.sym >= 0 {
		return []Frame{{Function: b.str(v.sym), File: file, Line: line, Origin: v.origin}}, true
	}
	if file != "" {
		return []Frame{{File: file, Line: line}}, true
	}
	return nil, true
}

// str is string i (checked by the decoder).
func (b *unitBlock) str(i int32) string {
	from := 0
	if i > 0 {
		from = b.strEnd[i-1]
	}
	return string(b.strData[from:b.strEnd[i]])
}

// line is unit.line on the block's rows: the row at pc is the last whose
// address is at most pc, in the last chunk that starts at most at pc. It
// decodes that chunk; ok is false if it is malformed.
func (b *unitBlock) line(pc uint64) (file string, line int, ok bool) {
	k := sort.Search(len(b.chunks), func(i int) bool { return b.chunks[i].addr > pc }) - 1
	if k < 0 {
		return "", 0, true
	}
	c := b.chunks[k]
	d := diskDecoder{b: b.rowData[c.from:c.to]}
	n := min(rowChunk, b.nrows-k*rowChunk)
	addr := c.addr
	var f uint64
	var l int64
	for i := range n {
		if i > 0 {
			step := d.uvarint()
			if addr+step < addr {
				return "", 0, false
			}
			if addr+step > pc {
				break
			}
			addr += step
		}
		f, l = d.uvarint(), d.varint()
	}
	if d.err != nil || f>>1 > uint64(len(b.strEnd)) || l != int64(int32(l)) {
		return "", 0, false
	}
	if f&1 != 0 { // the end of a sequence: no code
		return "", 0, true
	}
	if f>>1 == 0 {
		return "", int(l), true
	}
	return b.str(int32(f>>1) - 1), int(l), true
}

// encodeUnitBlock builds and encodes the block of unit u: its line table,
// and the addresses of its ranges cut where anything object.frames looks
// at changes (a scope's range, a symbol's, another unit's), each interval
// with the chain of scopes and the symbol at its start, which hold to its
// end. nil if the unit does not load, or the walk failed (a malformed
// object panics in any of the steps).
func (o *object) encodeUnitBlock(u *unit) (data []byte) {
	defer func() {
		if recover() != nil {
			data = nil
		}
	}()
	if o.dw.load(u) != nil {
		return nil
	}
	lo, hi, ok := o.dw.unitSpan(u)
	if !ok {
		return nil
	}
	bounds := o.blockBounds(u, lo, hi)
	e := blockEncoder{index: map[string]uint64{}, chainIDs: map[chainKey]int{}}
	e.intervals(o, u, bounds) // interns strings before rows does: their order is the table's
	e.rows(u)
	return e.bytes()
}

// unitSpan is the lowest and the highest address of u's ranges: the
// block answers for addresses between them. ok is false if u has no
// range.
func (x *dwarfIndex) unitSpan(u *unit) (lo, hi uint64, ok bool) {
	for _, r := range x.ranges {
		if r.u == u {
			if !ok || r.lo < lo {
				lo = r.lo
			}
			if !ok || r.hi > hi {
				hi = r.hi
			}
			ok = true
		}
	}
	return lo, hi, ok
}

// blockBounds is where, within [lo, hi], anything object.frames looks at
// may change: lo and hi, the ends of every unit's ranges (another unit's
// addresses are not u's to answer for), of the ranges of u's scopes
// (top-level, nested and all of them, as lookups meet them) and of the
// symbols over [lo, hi]; sorted, each once. The block's intervals are cut
// at each.
func (o *object) blockBounds(u *unit, lo, hi uint64) []uint64 {
	x := o.dw
	c := boundsCollector{lo: lo, hi: hi, seen: map[*scope]bool{},
		bounds: make([]uint64, 0, 2*len(u.lines)/4+64)}
	c.add(lo, hi)
	for _, r := range x.ranges {
		c.add(r.lo, r.hi)
	}
	for _, t := range u.top {
		c.add(t.lo, t.hi)
		_ = x.loadTree(t.s)
		c.walk(t.s, 0)
		for _, n := range t.s.lazy.nested {
			c.add(n.lo, n.hi)
			c.walk(n.s, 0)
		}
	}
	_ = x.loadAll(u)
	for _, a := range u.all {
		c.add(a.lo, a.hi)
		c.walk(a.s, 0)
	}
	for i := range o.syms {
		if s := &o.syms[i]; s.hi > lo && s.lo < hi {
			c.add(s.lo, s.hi)
		}
	}
	slices.Sort(c.bounds)
	return slices.Compact(c.bounds)
}

// boundsCollector gathers blockBounds' addresses: those within [lo, hi].
type boundsCollector struct {
	lo, hi uint64
	bounds []uint64
	seen   map[*scope]bool // scopes walked (a malformed tree may loop)
}

// add adds the ends of a range, each if it lies within [lo, hi].
func (c *boundsCollector) add(a, b uint64) {
	if a >= c.lo && a <= c.hi {
		c.bounds = append(c.bounds, a)
	}
	if b >= c.lo && b <= c.hi {
		c.bounds = append(c.bounds, b)
	}
}

// walk adds the ends of the ranges of s and of the scopes below it, each
// scope once and no deeper than maxScopeDepth.
func (c *boundsCollector) walk(s *scope, depth int) {
	if c.seen[s] || depth > maxScopeDepth {
		return
	}
	c.seen[s] = true
	for _, r := range s.ranges {
		c.add(r[0], r[1])
	}
	for _, ch := range s.children {
		c.walk(ch, depth+1)
	}
}

// blockEncoder encodes a block: it interns the block's strings (numbered
// in the order the encoding first meets them) and its chains, and holds
// each part of the payload until bytes puts them together.
type blockEncoder struct {
	index map[string]uint64
	strs  []string

	chainIDs   map[chainKey]int
	chainBytes []byte // the chains, each encoded once

	start uint64 // the first interval's start
	ivs   []byte // the intervals
	nIvs  int

	nrows      int
	chunkTable []byte // each chunk's first address and length
	rowBytes   []byte // the chunks
}

// chainKey names a chain of scopes: its innermost scope and its depth
// (the scopes outside the innermost follow from it).
type chainKey struct {
	inner *scope
	n     int
}

func (e *blockEncoder) str(s string) uint64 {
	i, ok := e.index[s]
	if !ok {
		i = uint64(len(e.strs))
		e.index[s] = i
		e.strs = append(e.strs, s)
	}
	return i
}

// intervals encodes the intervals between bounds, each as what the frames
// at its start are made of (intervalAt). An interval that encodes as the
// one before it is merged into it: the frames over both are the same, and
// a block has one interval where a unit has many scopes' edges that change
// nothing. Intervals of no encoding do not occur: every bound but the last
// starts one.
func (e *blockEncoder) intervals(o *object, u *unit, bounds []uint64) {
	e.ivs = make([]byte, 0, 4*len(bounds))
	var encBuf, prevBuf [4 * binary.MaxVarintLen64]byte
	var prev []byte // the last interval's encoding
	e.start = bounds[0]
	last := bounds[0]
	flush := func(end uint64) { // ends the last interval at end
		if prev != nil && end > last {
			e.ivs = binary.AppendUvarint(e.ivs, end-last)
			e.ivs = append(e.ivs, prev...)
			e.nIvs++
		}
		last = end
	}
	for i := 0; i+1 < len(bounds); i++ {
		pc := bounds[i]
		enc := e.intervalAt(encBuf[:0], o, u, pc)
		if prev != nil && string(enc) == string(prev) {
			continue // the same as the interval before: one interval
		}
		flush(pc)
		prev = append(prevBuf[:0], enc...)
	}
	flush(bounds[len(bounds)-1])
}

// intervalAt appends to enc the kind of the interval starting at pc and,
// when named, what its frames are made of: 0 if pc is not u's (the object
// decides); else 1, the chain of scopes at pc (1 + its number; 0: none),
// and the symbol at pc (1 + its string; 0: none) and its origin.
func (e *blockEncoder) intervalAt(enc []byte, o *object, u *unit, pc uint64) []byte {
	x := o.dw
	if x.unitFor(pc) != u {
		return append(enc, 0)
	}
	enc = append(enc, 1)
	if chain := x.scopes(u, pc); len(chain) == 0 {
		enc = append(enc, 0)
	} else {
		enc = binary.AppendUvarint(enc, e.chain(o, u, chain)+1)
	}
	if s, ok := o.syms.lookup(pc); ok {
		enc = binary.AppendUvarint(enc, e.str(o.demangled(s.name))+1)
		enc = binary.AppendUvarint(enc, uint64(s.origin))
	} else {
		enc = append(enc, 0, 0)
	}
	return enc
}

// chain is the number of a chain of scopes (outermost first), encoding it
// the first time it is met: its depth, then each scope's name, call file
// and call line. Intervals share chains: many cut by a symbol's edge or
// another scope's lie in the same one.
func (e *blockEncoder) chain(o *object, u *unit, chain []*scope) uint64 {
	k := chainKey{chain[len(chain)-1], len(chain)}
	if id, ok := e.chainIDs[k]; ok {
		return uint64(id)
	}
	id := len(e.chainIDs)
	e.chainIDs[k] = id
	e.chainBytes = binary.AppendUvarint(e.chainBytes, uint64(len(chain)))
	for _, s := range chain {
		e.chainBytes = binary.AppendUvarint(e.chainBytes, e.str(o.dw.name(s.die, o.demangled)))
		e.chainBytes = binary.AppendUvarint(e.chainBytes, e.str(u.fileName(s.callFile)))
		e.chainBytes = binary.AppendVarint(e.chainBytes, int64(s.callLine))
	}
	return uint64(id)
}

// rows encodes u's line table in chunks of rowChunk rows, and the chunks'
// table (each chunk's first address and length in bytes), so that a
// lookup decodes only the chunk it needs (unitBlock.line). A chunk's
// first row's address is in the table, each other row's is the step from
// the row before.
func (e *blockEncoder) rows(u *unit) {
	e.nrows = len(u.lines)
	rows := make([]byte, 0, 5*len(u.lines))
	prevAddr, prevChunk := uint64(0), uint64(0)
	chunkStart := 0
	for i, r := range u.lines {
		if i%rowChunk == 0 {
			if i > 0 {
				e.chunkTable = binary.AppendUvarint(e.chunkTable, uint64(len(rows)-chunkStart))
			}
			chunkStart = len(rows)
			e.chunkTable = binary.AppendUvarint(e.chunkTable, r.addr-prevChunk)
			prevChunk = r.addr
		} else {
			rows = binary.AppendUvarint(rows, r.addr-prevAddr)
		}
		prevAddr = r.addr
		rows = binary.AppendUvarint(rows, e.rowFile(u, r))
		rows = binary.AppendVarint(rows, int64(r.line))
	}
	if len(u.lines) > 0 {
		e.chunkTable = binary.AppendUvarint(e.chunkTable, uint64(len(rows)-chunkStart))
	}
	e.rowBytes = rows
}

// rowFile is a row's file and end of sequence as a block holds them:
// (1 + the file's string; 0: none) * 2, plus 1 at the end of a sequence.
func (e *blockEncoder) rowFile(u *unit, r lineRow) uint64 {
	file := uint64(0)
	if r.file >= 0 && int(r.file) < len(u.files) {
		file = e.str(u.files[r.file]) + 1
	}
	file <<= 1
	if r.end {
		file |= 1
	}
	return file
}

// bytes is the block's payload but for its unit: the strings (their
// count, their lengths, their bytes), the chains, the intervals and the
// rows, each after its count.
func (e *blockEncoder) bytes() []byte {
	size := len(e.rowBytes) + len(e.chunkTable) + len(e.chainBytes) + len(e.ivs) + 32
	for _, s := range e.strs {
		size += len(s) + 2
	}
	out := binary.AppendUvarint(make([]byte, 0, size), uint64(len(e.strs)))
	for _, s := range e.strs {
		out = binary.AppendUvarint(out, uint64(len(s)))
	}
	for _, s := range e.strs {
		out = append(out, s...)
	}
	out = binary.AppendUvarint(out, uint64(len(e.chainIDs)))
	out = append(out, e.chainBytes...)
	out = binary.AppendUvarint(out, uint64(e.nIvs))
	out = binary.AppendUvarint(out, e.start)
	out = append(out, e.ivs...)
	out = binary.AppendUvarint(out, uint64(e.nrows))
	out = append(out, e.chunkTable...)
	return append(out, e.rowBytes...)
}

var errUnitsFile = errors.New("symbolizer: malformed unit index file")

// decodeUnitBlock decodes a block but for its rows (line decodes a chunk
// at a time), checking every count, index and step: its strings, its
// chains, its intervals, and its rows' table of chunks.
func decodeUnitBlock(data []byte) (*unitBlock, error) {
	d := diskDecoder{b: data}
	b := &unitBlock{}
	if !b.decodeStrings(&d) || !b.decodeChains(&d) || !b.decodeIntervals(&d) || !b.decodeChunks(&d) {
		return nil, errUnitsFile
	}
	return b, nil
}

// decodeStrings reads the strings' count and lengths into strEnd, and
// keeps their bytes as strData (a slice of the block: a string is made
// only when a frame needs it).
func (b *unitBlock) decodeStrings(d *diskDecoder) bool {
	b.strEnd = make([]int, d.count(1))
	total := 0
	for i := range b.strEnd {
		n := d.uvarint()
		if n > uint64(len(d.b)) || total+int(n) > len(d.b) {
			return false
		}
		total += int(n)
		b.strEnd[i] = total
	}
	if d.err != nil {
		return false
	}
	b.strData, d.b = d.b[:total:total], d.b[total:]
	return true
}

// decodeChains reads the chains, each at least one scope, each scope's
// strings one of the block's and its line an int32's.
func (b *unitBlock) decodeChains(d *diskDecoder) bool {
	nstr := uint64(len(b.strEnd))
	nchains := d.count(1)
	b.chains = make([]int, 0, nchains+1)
	for range nchains {
		b.chains = append(b.chains, len(b.scopes))
		n := d.count(3)
		if n == 0 {
			return false
		}
		for range n {
			name, file, line := d.uvarint(), d.uvarint(), d.varint()
			if name >= nstr || file >= nstr || line != int64(int32(line)) {
				return false
			}
			b.scopes = append(b.scopes, chainScope{name: int32(name), callFile: int32(file), callLine: int(line)})
		}
	}
	b.chains = append(b.chains, len(b.scopes))
	return true
}

// decodeIntervals reads the intervals and their bounds: each at least one
// address long, not past the end of the address space, and when named
// with a chain, a string and an origin that exist.
func (b *unitBlock) decodeIntervals(d *diskDecoder) bool {
	nstr := uint64(len(b.strEnd))
	nchains := uint64(len(b.chains) - 1)
	n := d.count(2)
	b.intervals = make([]interval, n)
	b.bounds = make([]uint64, 0, n+1)
	at := d.uvarint()
	b.bounds = append(b.bounds, at)
	for i := range b.intervals {
		step := d.uvarint()
		if step == 0 || at+step < at {
			return false
		}
		at += step
		b.bounds = append(b.bounds, at)
		switch d.uvarint() {
		case 0:
			b.intervals[i] = interval{hole: true}
		case 1:
			chain, sym, origin := d.uvarint(), d.uvarint(), d.uvarint()
			if chain > nchains || sym > nstr || origin > uint64(OriginDynsym) {
				return false
			}
			b.intervals[i] = interval{chain: int32(chain) - 1, sym: int32(sym) - 1, origin: Origin(origin)}
		default:
			return false
		}
	}
	return true
}

// decodeChunks reads the count of rows and the table of their chunks, and
// keeps the chunks' bytes, the rest of the block, as rowData: the chunks
// must cover it exactly.
func (b *unitBlock) decodeChunks(d *diskDecoder) bool {
	b.nrows = d.count(2)
	nchunks := (b.nrows + rowChunk - 1) / rowChunk
	if nchunks > len(d.b)/2 {
		return false
	}
	b.chunks = make([]rowSpan, nchunks)
	addr, off := uint64(0), 0
	for i := range b.chunks {
		step, n := d.uvarint(), d.uvarint()
		if addr+step < addr || n > uint64(len(d.b)) {
			return false
		}
		addr += step
		b.chunks[i] = rowSpan{addr: addr, from: off, to: off + int(n)}
		off += int(n)
	}
	if d.err != nil || off != len(d.b) {
		return false
	}
	b.rowData = d.b
	return true
}

// flushUnits writes the ranges and the blocks of r's unit index that
// were built since it was read or last written, each in a file of its
// own.
func (d *diskCache) flushUnits(r *diskRecord) error {
	ix := r.ixRead.Load()
	if ix == nil {
		return nil
	}
	type pending struct {
		id   uint64
		data []byte
		st   *indexBlock
	}
	ix.mu.Lock()
	var ranges []indexRange
	if ix.rangesNew {
		ranges = ix.units
	}
	var blocks []pending
	for id, st := range ix.blocks {
		if st.data != nil && !st.saved {
			blocks = append(blocks, pending{id, st.data, st})
		}
	}
	ix.mu.Unlock()
	if ranges == nil && len(blocks) == 0 {
		return nil
	}
	done := func(rangesDone bool, p []pending) {
		ix.mu.Lock()
		if rangesDone {
			ix.rangesNew = false
		}
		for _, b := range p {
			b.st.saved = true
		}
		ix.mu.Unlock()
	}
	if d.fingerprint(r.id) != r.fp {
		done(true, blocks) // as flushRecord: not what the symbolizer would give now
		return nil
	}
	hdr := func(payload []byte) *sealedFile {
		return &sealedFile{version: diskCacheVersion, buildID: r.id, fingerprint: r.fp, payload: payload}
	}
	if ranges != nil {
		if err := writeAtomic(d.rangesPath(r.id), seal(unitRangesMagic, hdr(encodeRanges(ranges)))); err != nil {
			return err
		}
		done(true, nil)
	}
	var errs []error
	for _, b := range blocks {
		payload := binary.AppendUvarint(make([]byte, 0, len(b.data)+binary.MaxVarintLen64), b.id)
		if err := writeAtomic(d.blockPath(r.id, b.id), seal(unitBlockMagic, hdr(append(payload, b.data...)))); err != nil {
			errs = append(errs, err)
			continue
		}
		done(false, []pending{b})
	}
	return errors.Join(errs...)
}

// indexMore builds blocks of the indexes of the objects loaded (and
// kept), for about as long as loading each took (at least minBudget), at
// most maxBlocksPerFlush: first those of the units whose addresses loaded
// it (want), then, once an object, those of the units its cached
// addresses lie in (the most first), the units sampled stacks run
// through, then the others, the biggest first. Each unit left out costs a
// later run that meets an address in it a load of the object: with a
// block for each unit a miss met only, a short python program still met
// one or two new units of libpython's 142 a run after sixteen runs, each
// a load of libpython (30 ms) or libc (160 ms); this way a run that loads
// an object indexes about as much again, and the loads stop coming. (A
// first run with nothing cached took 0.7 s longer building the blocks of
// every unit its misses met.)
func (s *Symbolizer) indexMore() {
	if s.disk == nil {
		return
	}
	jobs := s.indexJobs()
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	for _, j := range jobs {
		s.indexObject(j)
	}
}

// indexJob is an object indexMore may add blocks to: first if this is
// the first indexMore that sees it (its cached addresses' units, and the
// others, are then built too).
type indexJob struct {
	id    string
	e     *entry
	first bool
}

// indexJobs lists the objects loaded and kept, marking each seen by
// indexMore (so that only the first indexMore of an object builds more
// than its wanted units).
func (s *Symbolizer) indexJobs() []indexJob {
	var jobs []indexJob
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, e := range s.byID {
		if e.keep {
			jobs = append(jobs, indexJob{id, e, !e.indexedMore})
			e.indexedMore = true
		}
	}
	return jobs
}

// indexObject builds blocks of j's object's index: of the units rankUnits
// puts first, for about as long as loading the object took (buildBlocks),
// after setting the index's ranges if it has none yet. After its first
// indexMore an object gains only blocks of units whose addresses loaded
// it since the last one (wanted): none if there were none.
func (s *Symbolizer) indexObject(j indexJob) {
	rec := s.disk.record(j.id)
	if rec == nil || j.e.obj.dw == nil {
		return
	}
	x := j.e.obj.dw
	ix := s.disk.index(rec)
	ix.mu.Lock()
	wanted := ix.wanted
	ix.wanted = map[uint64]int{}
	ix.mu.Unlock()
	if len(wanted) == 0 && !j.first {
		return
	}
	units, rank := rankUnits(x, rec, wanted, j.first)
	ix.mu.Lock()
	if ix.units == nil { // none read: those of the object (written by Flush)
		ix.units, ix.rangesNew = x.indexRanges(), true
	}
	ix.mu.Unlock()
	s.buildBlocks(rec, j.e, units, rank)
}

// wantedRank is the rank of a unit whose addresses loaded the object
// (plus how many did): above any count of cached addresses.
const wantedRank = 1 << 40

// rankUnits is the units of x to build blocks of, in order, and each
// one's rank: those whose addresses loaded the object (wanted, by unit
// offset), the most first; then, when first, the units of the addresses
// rec caches, the most first, then the others; at equal rank the
// biggest (in bytes of code) first, then by offset.
func rankUnits(x *dwarfIndex, rec *diskRecord, wanted map[uint64]int, first bool) ([]*unit, map[*unit]int) {
	rank := map[*unit]int{}
	size := map[*unit]uint64{}
	for _, r := range x.ranges {
		size[r.u] += r.hi - r.lo
		if n := wanted[uint64(r.u.entry.Offset)]; n > 0 {
			rank[r.u] = wantedRank + n
		}
	}
	if first {
		rec.mu.RLock()
		for a := range rec.frames {
			if u := x.unitFor(a); u != nil && rank[u] < wantedRank {
				rank[u]++
			}
		}
		rec.mu.RUnlock()
	}
	units := make([]*unit, 0, len(size))
	for u := range size {
		if first || rank[u] > 0 {
			units = append(units, u)
		}
	}
	slices.SortFunc(units, func(a, b *unit) int {
		if rank[a] != rank[b] {
			return cmp.Compare(rank[b], rank[a])
		}
		if size[a] != size[b] {
			return cmp.Compare(size[b], size[a])
		}
		return cmp.Compare(a.entry.Offset, b.entry.Offset)
	})
	return units, rank
}

// buildBlocks builds the blocks of units in turn, for about as long as
// loading e's object took (at least minBudget) and at most maxBlocks: a
// unit whose addresses loaded the object is built again whatever its file
// holds (the lookup did not use it), another only if it has no file.
func (s *Symbolizer) buildBlocks(rec *diskRecord, e *entry, units []*unit, rank map[*unit]int) {
	budget := max(e.loadTime, s.disk.minBudget)
	start := time.Now()
	files := s.disk.blockFiles(rec)
	built := 0
	for _, u := range units {
		if time.Since(start) >= budget || built >= s.disk.maxBlocks {
			break
		}
		if (rank[u] >= wantedRank || !files[uint64(u.entry.Offset)]) && s.disk.addBlock(rec, e.obj, u) {
			built++
		}
	}
}

// maxBlocksPerFlush bounds the blocks an object's index gains at a Flush,
// each a file to write (libc has 1937 units, most of them small).
const maxBlocksPerFlush = 256
