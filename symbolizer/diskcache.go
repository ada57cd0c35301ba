// The disk cache (WithDiskCache): the frames found at each ELF virtual
// address of a build, kept in a file per build-id between runs, so a later
// run that needs only addresses already named never opens the object (and
// never decompresses its DWARF again).

package symbolizer

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tagalloc/tagalloc/internal/atomicfile"
)

// diskCacheVersion is the format version written in every cache file.
// Bump it whenever the frames the symbolizer gives for an address would
// change (a fix in object.go, dwarf.go or symtab.go, another demangler
// version or option, a new Frame field kept on disk) as well as when the
// encoding changes, here or in the unit index (unitindex.go): files of
// another version are ignored and rewritten.
const diskCacheVersion = 2 // 2: relative DWARF 5 file names joined with DW_AT_comp_dir

// diskCacheMagic opens every cache file.
const diskCacheMagic = "TAGSYMS\n"

const (
	// maxDiskEntries bounds the addresses a build-id's file holds; beyond
	// it nothing is added.
	maxDiskEntries = 1 << 20
	// maxDiskFileBytes bounds the size of a cache file read (or written):
	// every count in it is bounded by the bytes left, so what a file makes
	// the decoder allocate is bounded by this too.
	maxDiskFileBytes = 64 << 20
	// minFrameBytes is the fewest bytes one frame takes in a file.
	minFrameBytes = 4
)

// DiskCacheEnv names the environment variable DiskCacheFromEnv reads.
const DiskCacheEnv = "TAGALLOC_SYMBOL_CACHE"

// WithDiskCache keeps the frames found for modules with a build-id in
// files under dir (dir/ab/cdef....frames, one per build-id), read the
// first time a build-id is looked up and written by Flush. Off by default;
// an empty dir leaves it off.
func WithDiskCache(dir string) Option { return func(c *config) { c.diskDir = dir } }

// DefaultDiskCacheDir is the user's cache directory's tagalloc/symbols
// ($XDG_CACHE_HOME or ~/.cache on Linux).
func DefaultDiskCacheDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(d, "tagalloc", "symbols"), nil
}

// DiskCacheFromEnv says which disk cache directory to use, from
// $TAGALLOC_SYMBOL_CACHE: "off" or "0" is none (ok false), another
// non-empty value is that directory, and unset or empty is
// DefaultDiskCacheDir (none if there is no user cache directory).
func DiskCacheFromEnv() (dir string, ok bool) {
	switch v := os.Getenv(DiskCacheEnv); v {
	case "off", "0":
		return "", false
	case "":
		d, err := DefaultDiskCacheDir()
		return d, err == nil
	default:
		return v, true
	}
}

// Flush writes the cache file of every build-id that gained frames since
// it was read or last written, merged with what the file holds by then
// (another process may have written it meanwhile), through a temporary
// file renamed over it. Before, for each object loaded since, it indexes
// units of it (the unit index: those whose addresses made it load the
// object first) for about as long as the load took, and writes their
// files and the new ranges files. It does nothing without WithDiskCache
// or when nothing was added. Frames may be called meanwhile.
func (s *Symbolizer) Flush() error {
	if s.disk == nil {
		return nil
	}
	s.indexMore()
	return s.disk.flush()
}

// diskCache is a Symbolizer's view of its cache directory.
type diskCache struct {
	dir         string
	limit       int                         // maxDiskEntries; lowered by tests
	minBudget   time.Duration               // the least indexMore spends on an object; raised by tests
	maxBlocks   int                         // maxBlocksPerFlush; raised by tests
	fingerprint func(buildID string) string // of what the symbolizer would give for this build-id now

	mu   sync.Mutex
	byID map[string]*diskRecord

	flushMu sync.Mutex // one Flush at a time
}

// diskRecord is one build-id's frames: those its file held when read,
// and those found since.
type diskRecord struct {
	id   string
	once sync.Once
	fp   string // the fingerprint when the file was read: the one the frames found since go with

	ixOnce sync.Once
	ix     *unitIndex                // read on the first address frames does not hold (index)
	ixRead atomic.Pointer[unitIndex] // ix once read (for Flush)

	mu     sync.RWMutex
	frames map[uint64][]Frame // by ELF virtual address; Module unset, Function "" kept as the object gave it
	gen    uint64             // frames added so far
	saved  uint64             // gen as of the last write
}

// diskFile is a decoded cache file.
type diskFile struct {
	version     uint64
	buildID     string
	fingerprint string
	frames      map[uint64][]Frame
}

func newDiskCache(dir string, fingerprint func(string) string) *diskCache {
	return &diskCache{dir: dir, limit: maxDiskEntries, maxBlocks: maxBlocksPerFlush, fingerprint: fingerprint, byID: map[string]*diskRecord{}}
}

// diskFingerprint describes the configuration the frames of build-id id
// depend on: the demangling mode and, for each debug directory, whether
// it holds a debug file of id (its size and modification time): a cache
// written without a debug file is not used once one is installed.
func (c *config) diskFingerprint(id string) string {
	fp := fmt.Sprintf("demangle=%d\n", c.demangle)
	for _, dir := range c.debugDirs {
		p := filepath.Join(dir, ".build-id", id[:2], id[2:]+".debug")
		if fi, err := os.Stat(p); err == nil {
			fp += fmt.Sprintf("%s %d %d\n", p, fi.Size(), fi.ModTime().UnixNano())
		} else {
			fp += fmt.Sprintf("%s none\n", p)
		}
	}
	return fp
}

// validBuildID: lower-case hex of a sane length, so that it can name a
// file (a module table read from a report is not trusted).
func validBuildID(id string) bool {
	if len(id) < 4 || len(id) > 256 {
		return false
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

func (d *diskCache) path(id string) string {
	return filepath.Join(d.dir, id[:2], id[2:]+".frames")
}

// record returns build-id id's record, reading its file on first use; nil
// for an id that cannot name a file.
func (d *diskCache) record(id string) *diskRecord {
	if !validBuildID(id) {
		return nil
	}
	d.mu.Lock()
	r := d.byID[id]
	if r == nil {
		r = &diskRecord{id: id}
		d.byID[id] = r
	}
	d.mu.Unlock()
	d.load(r)
	return r
}

// load reads r's file, once.
func (d *diskCache) load(r *diskRecord) {
	r.once.Do(func() {
		r.fp = d.fingerprint(r.id)
		r.frames = map[uint64][]Frame{}
		if f := d.read(r.id, r.fp); f != nil {
			r.frames = f.frames
		}
	})
}

// read returns the file of id if it is usable: whole, of this version,
// build-id and fingerprint; nil otherwise.
func (d *diskCache) read(id, fp string) *diskFile {
	data, err := readLimited(d.path(id), maxDiskFileBytes)
	if err != nil {
		return nil
	}
	f, err := decodeDiskFile(data)
	if err != nil || f.version != diskCacheVersion || f.buildID != id || f.fingerprint != fp {
		return nil
	}
	return f
}

// get returns a copy of the frames kept for vaddr.
func (r *diskRecord) get(vaddr uint64) ([]Frame, bool) {
	r.mu.RLock()
	fr, ok := r.frames[vaddr]
	r.mu.RUnlock()
	return slices.Clone(fr), ok
}

// put keeps fr (as the object gave it) for vaddr, up to limit addresses.
func (r *diskRecord) put(vaddr uint64, fr []Frame, limit int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.frames[vaddr]; ok || len(r.frames) >= limit {
		return
	}
	r.frames[vaddr] = slices.Clip(slices.Clone(fr))
	r.gen++
}

func (d *diskCache) flush() error {
	d.flushMu.Lock()
	defer d.flushMu.Unlock()
	d.mu.Lock()
	recs := make([]*diskRecord, 0, len(d.byID))
	for _, r := range d.byID {
		recs = append(recs, r)
	}
	d.mu.Unlock()
	var errs []error
	for _, r := range recs {
		d.load(r) // or wait for the read in progress
		if err := d.flushRecord(r); err != nil {
			errs = append(errs, err)
		}
		if err := d.flushUnits(r); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// flushRecord writes r's file if r gained frames since its last write.
func (d *diskCache) flushRecord(r *diskRecord) error {
	r.mu.RLock()
	gen := r.gen
	var frames map[uint64][]Frame
	if gen != r.saved {
		frames = make(map[uint64][]Frame, len(r.frames))
		for a, fr := range r.frames {
			frames[a] = fr // never changed once kept
		}
	}
	r.mu.RUnlock()
	if frames == nil {
		return nil
	}
	done := func() {
		r.mu.Lock()
		r.saved = max(r.saved, gen)
		r.mu.Unlock()
	}
	if d.fingerprint(r.id) != r.fp {
		// A debug file came or went since the file was read: the frames
		// found meanwhile may not be what the symbolizer gives now.
		done()
		return nil
	}
	if f := d.read(r.id, r.fp); f != nil {
		for a, fr := range f.frames {
			if _, ok := frames[a]; !ok && len(frames) < d.limit {
				frames[a] = fr
			}
		}
	}
	data := encodeDiskFile(&diskFile{version: diskCacheVersion, buildID: r.id, fingerprint: r.fp, frames: frames})
	if err := writeAtomic(d.path(r.id), data); err != nil {
		return err
	}
	done()
	return nil
}

// readLimited reads the file at p, failing if it holds more than limit
// bytes.
func readLimited(p string, limit int64) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%s: over %d bytes", p, limit)
	}
	return data, nil
}

// writeAtomic writes data to p (directories made 0700, the file 0600,
// whole or not at all).
func writeAtomic(p string, data []byte) error {
	if len(data) > maxDiskFileBytes {
		return fmt.Errorf("%s: %d bytes, over the %d a cache file may hold", p, len(data), maxDiskFileBytes)
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return atomicfile.Write(p, func(w io.Writer) error { _, err := w.Write(data); return err })
}

// The file format. Integers are unsigned varints unless said otherwise.
//
//	magic       diskCacheMagic (8 bytes)
//	version     diskCacheVersion
//	build-id    length, bytes
//	fingerprint length, bytes
//	strings     count, then each: length, bytes (every function and file name once)
//	entries     count, then each, by ascending address:
//	              address (the first one; then the difference to the previous, at least 1)
//	              frames: count, then each: function (string index), file (string index),
//	                      line, flags (bit 0 Inlined, bits 1-2 Origin)
//	checksum    CRC-32 (IEEE) of all the bytes before it, 4 bytes little-endian

// encodeDiskFile encodes f.
func encodeDiskFile(f *diskFile) []byte {
	addrs := make([]uint64, 0, len(f.frames))
	for a := range f.frames {
		addrs = append(addrs, a)
	}
	slices.Sort(addrs)
	index := map[string]uint64{}
	var strs []string
	intern := func(s string) uint64 {
		i, ok := index[s]
		if !ok {
			i = uint64(len(strs))
			index[s] = i
			strs = append(strs, s)
		}
		return i
	}
	var body []byte
	body = binary.AppendUvarint(body, uint64(len(addrs)))
	prev := uint64(0)
	for n, a := range addrs {
		if n == 0 {
			body = binary.AppendUvarint(body, a)
		} else {
			body = binary.AppendUvarint(body, a-prev)
		}
		prev = a
		fr := f.frames[a]
		body = binary.AppendUvarint(body, uint64(len(fr)))
		for _, x := range fr {
			flags := uint64(x.Origin) << 1
			if x.Inlined {
				flags |= 1
			}
			body = binary.AppendUvarint(body, intern(x.Function))
			body = binary.AppendUvarint(body, intern(x.File))
			body = binary.AppendUvarint(body, uint64(max(x.Line, 0)))
			body = binary.AppendUvarint(body, flags)
		}
	}
	out := []byte(diskCacheMagic)
	out = binary.AppendUvarint(out, f.version)
	out = appendString(out, f.buildID)
	out = appendString(out, f.fingerprint)
	out = binary.AppendUvarint(out, uint64(len(strs)))
	for _, s := range strs {
		out = appendString(out, s)
	}
	out = append(out, body...)
	return binary.LittleEndian.AppendUint32(out, crc32.ChecksumIEEE(out))
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

var errDiskFile = errors.New("symbolizer: malformed symbol cache file")

// decodeDiskFile decodes a cache file, checking its magic, checksum and
// every count and index; each count is bounded by the bytes left, so a
// malformed file cannot make it allocate more than a few times its size.
func decodeDiskFile(data []byte) (*diskFile, error) {
	if len(data) < len(diskCacheMagic)+4 || string(data[:len(diskCacheMagic)]) != diskCacheMagic {
		return nil, errDiskFile
	}
	sum := binary.LittleEndian.Uint32(data[len(data)-4:])
	data = data[:len(data)-4]
	if crc32.ChecksumIEEE(data) != sum {
		return nil, errDiskFile
	}
	d := diskDecoder{b: data[len(diskCacheMagic):]}
	f := &diskFile{version: d.uvarint()}
	f.buildID = d.string()
	f.fingerprint = d.string()
	strs := make([]string, d.count(1))
	for i := range strs {
		strs[i] = d.string()
	}
	n := d.count(1)
	if n > maxDiskEntries {
		return nil, errDiskFile
	}
	f.frames = make(map[uint64][]Frame, n)
	addr := uint64(0)
	for i := 0; i < n && d.err == nil; i++ {
		step := d.uvarint()
		if i > 0 && (step == 0 || addr+step < addr) {
			return nil, errDiskFile
		}
		addr += step
		fr := make([]Frame, d.count(minFrameBytes))
		for j := range fr {
			fn, file, line, flags := d.uvarint(), d.uvarint(), d.uvarint(), d.uvarint()
			if fn >= uint64(len(strs)) || file >= uint64(len(strs)) || line > math.MaxInt32 ||
				flags>>1 > uint64(OriginDynsym) {
				return nil, errDiskFile
			}
			fr[j] = Frame{Function: strs[fn], File: strs[file], Line: int(line), Inlined: flags&1 != 0, Origin: Origin(flags >> 1)}
		}
		f.frames[addr] = fr
	}
	if d.err != nil || len(d.b) != 0 {
		return nil, errDiskFile
	}
	return f, nil
}

// diskDecoder reads varints and strings, remembering the first error
// (after which every read gives zero).
type diskDecoder struct {
	b   []byte
	err error
}

func (d *diskDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errDiskFile
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a count of items each at least minBytes long, failing if
// the bytes left cannot hold them.
func (d *diskDecoder) count(minBytes int) int {
	v := d.uvarint()
	if v > uint64(len(d.b)/minBytes) {
		d.err = errDiskFile
		return 0
	}
	return int(v)
}

func (d *diskDecoder) string() string { return string(d.bytes()) }

// bytes reads a length and that many bytes (a slice of the input).
func (d *diskDecoder) bytes() []byte {
	n := d.count(1)
	b := d.b[:n:n]
	d.b = d.b[n:]
	return b
}

// varint reads a signed (zig-zag) varint.
func (d *diskDecoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errDiskFile
		return 0
	}
	d.b = d.b[n:]
	return v
}
