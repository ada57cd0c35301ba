// The region writer: a Go program's books in the native layout (version
// 4, in a header of version 6's size: with a budgets table), so the
// readers above (and tagalloc run, top, snapshot) read a Go process the
// way they read a preloaded one.

package books

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/internal/layout"
	"github.com/tagalloc/tagalloc/sizeclass"
)

// The writer's layout constants; they match the native library's (so one
// process's two regions name tags alike) and are all recorded in the
// header, which is what readers go by.
const (
	MaxTags     = layout.MaxTags     // distinct tag names; more go to "overflow"
	MaxTagName  = layout.MaxTagName  // bytes in a tag name
	Untagged    = layout.Untagged    // the id of "untagged"
	OverflowTag = layout.OverflowTag // the id of "overflow"
	tagSlots    = layout.TagSlots    // untagged, MaxTags names, overflow
	ctrChunk    = layout.CtrChunk    // tags per counter chunk
	nChunks     = (tagSlots + ctrChunk - 1) / ctrChunk
	nameSize    = MaxTagName + 1
	cmdlineMax  = layout.BooksCmdline
	writerSize  = 64 << 20 // reserved, sparse
	threadBytes = (nChunks*8 + 8 + 8 + 8 + 63) &^ 63
)

// ErrBadTag is returned for a tag name that is empty, longer than
// MaxTagName bytes, holds a NUL, or is not a path: its '/' separate the
// levels of a tag tree, none of which may be empty, "." or "..".
var ErrBadTag = fmt.Errorf("tag names are 1 to %d bytes, without NUL, levels separated by one '/', none \".\" or \"..\"", MaxTagName)

// Counters are one tag's books as one writer (a thread record) keeps
// them, in the region: monotone, written by their owner only (Add, no
// read-modify-write), read by anyone. live = alloc - free, summed over
// every record.
type Counters struct {
	AllocBytes, AllocBlocks atomic.Uint64
	FreeBytes, FreeBlocks   atomic.Uint64
	AllocReq, FreeReq       atomic.Uint64
}

// Region is a books region this process writes. Its memory is a shared
// mapping outside the Go heap: a file DIR/PID.NAME.tagalloc when
// $TAGALLOC_DIR is set (tagalloc run sets it), else a memfd named
// "tagalloc-books", which procbooks.Read finds in /proc/PID/maps.
type Region struct {
	mem  []byte
	hdr  *header
	path string // the file, or "" for a memfd

	mu    sync.Mutex // registry and record allocation
	names map[string]uint32
}

// Create makes and formats a region. name tells this process's regions
// apart in the file name (the native library's is plain PID.tagalloc).
func Create(name string) (*Region, error) {
	mem, path, err := mapRegion(name)
	if err != nil {
		return nil, fmt.Errorf("books region: %w", err)
	}
	r := &Region{mem: mem, hdr: (*header)(unsafe.Pointer(&mem[0])), path: path, names: map[string]uint32{}}
	r.format()
	return r, nil
}

// Path is the region's file, or "" when it is a memfd.
func (r *Region) Path() string { return r.path }

// Close unmaps the region and removes its file: after Close the process
// has no books to read. (A region is normally kept for the life of the
// process, so that a launcher reads it after the process dies.)
func (r *Region) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil
	}
	if r.path != "" {
		os.Remove(r.path)
	}
	err := unmapRegion(r.mem)
	r.mem, r.hdr = nil, nil
	return err
}

func align64(n uint64) uint64 { return (n + 63) &^ 63 }

func (r *Region) format() {
	h := r.hdr
	h.Version = WriterVersion // counters as freed bytes, no holders or bounds
	h.HeaderSize = headerV6   // with the budgets table (HoldersOff, PeakUpperOff stay 0)
	h.RegionSize = writerSize
	h.Base = uint64(uintptr(unsafe.Pointer(&r.mem[0])))
	h.PID, h.PPID = uint32(os.Getpid()), uint32(os.Getppid())
	h.StartNS = uint64(time.Now().UnixNano())
	h.TagSlots, h.TagOverflow, h.TagNameSize = tagSlots, OverflowTag, nameSize
	h.NClasses = uint32(len(sizeclass.Classes))
	h.CtrChunk = ctrChunk
	h.CtrSize = uint32(unsafe.Sizeof(Counters{}))
	h.ThreadSize = threadBytes
	h.ThreadCtrOff, h.ThreadNext, h.ThreadLive = 0, nChunks*8+8, nChunks*8+16
	// No heap records (version 4): every count is in the thread records'
	// counters, and the heap fields are 0.
	h.Writer = WriterGo
	h.Requested = 1
	off := align64(uint64(h.HeaderSize))
	put := func(field *uint64, n uint64) { *field = off; off = align64(off + n) }
	put(&h.CmdlineOff, cmdlineMax)
	put(&h.NamesOff, tagSlots*nameSize)
	put(&h.FallbackOff, tagSlots*uint64(h.CtrSize))
	put(&h.PeaksOff, tagSlots*8)
	put(&h.ClassSizesOff, uint64(h.NClasses)*4)
	var rep uint64
	put(&rep, MaxReports*reportSize)
	h.ReportsOff = uint32(rep)
	put(&h.BudgetsOff, MaxBudgets*budgetSize) // BudgetsCount 0: none yet
	for c, cl := range sizeclass.Classes {
		*(*uint32)(unsafe.Pointer(&r.mem[h.ClassSizesOff+uint64(c)*4])) = uint32(cl.Size)
	}
	if cmd, err := os.ReadFile("/proc/self/cmdline"); err == nil {
		n := copy(r.mem[h.CmdlineOff:h.CmdlineOff+cmdlineMax-1], cmd)
		h.CmdlineLen = uint32(n)
	}
	r.setName(Untagged, "untagged")
	r.setName(OverflowTag, "overflow")
	atomic.StoreUint32(&h.TagCount, 1)
	atomic.StoreUint64(&h.Used, off)
	copy(h.Magic[:], Magic) // last: a reader sees a whole header or none
}

func (r *Region) setName(id uint32, name string) {
	off := r.hdr.NamesOff + uint64(id)*nameSize
	copy(r.mem[off:off+nameSize-1], name)
}

// ValidTag reports whether name can be a tag.
func ValidTag(name string) error {
	if len(name) == 0 || len(name) > MaxTagName {
		return fmt.Errorf("%w: %q has %d bytes", ErrBadTag, name, len(name))
	}
	for i := 0; i < len(name); i++ {
		if name[i] == 0 {
			return fmt.Errorf("%w: %q", ErrBadTag, name)
		}
	}
	for _, level := range strings.Split(name, "/") {
		if level == "" || level == "." || level == ".." {
			return fmt.Errorf("%w: %q has a level %q", ErrBadTag, name, level)
		}
	}
	return nil
}

// Tag returns the id of a tag name, registering it the first time.
// "untagged" is id 0; past MaxTags names, every new name gets the id of
// "overflow" (and overflowed reports true, once per name).
func (r *Region) Tag(name string) (id uint32, overflowed bool, err error) {
	if err := ValidTag(name); err != nil {
		return 0, false, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if id, ok := r.names[name]; ok {
		return id, false, nil
	}
	if name == "untagged" {
		return Untagged, false, nil
	}
	n := atomic.LoadUint32(&r.hdr.TagCount)
	if n > MaxTags {
		return OverflowTag, true, nil
	}
	r.setName(n, name)
	atomic.StoreUint32(&r.hdr.TagCount, n+1) // after the name: readers check count
	r.names[name] = n
	return n, false, nil
}

// Name is the name of tag id.
func (r *Region) Name(id uint32) string {
	if id >= tagSlots {
		return ""
	}
	off := r.hdr.NamesOff + uint64(id)*nameSize
	b := r.mem[off : off+nameSize]
	for i, c := range b {
		if c == 0 {
			return string(b[:i])
		}
	}
	return string(b)
}

// TagCount is the number of ids in use (0 .. TagCount-1, and the overflow
// id).
func (r *Region) TagCount() uint32 { return atomic.LoadUint32(&r.hdr.TagCount) }

// alloc bump-allocates zeroed record memory (r.mu held), returning its
// offset.
func (r *Region) alloc(n uint64) (uint64, error) {
	used := atomic.LoadUint64(&r.hdr.Used)
	n = align64(n)
	if used+n > writerSize {
		return 0, fmt.Errorf("the books region is full (%d MiB)", writerSize>>20)
	}
	atomic.StoreUint64(&r.hdr.Used, used+n)
	return used, nil
}

// u64 is the word at offset off.
func (r *Region) u64(off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&r.mem[off])) }

// Thread is a thread record: the counters of one writer (a shard of the
// Go allocator), per tag, in chunks allocated as tags are first used.
type Thread struct {
	r   *Region
	off uint64
}

// NewThread adds a thread record to the region's list.
func (r *Region) NewThread() (*Thread, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	off, err := r.alloc(threadBytes)
	if err != nil {
		return nil, err
	}
	*r.u64(off + nChunks*8 + 8) = atomic.LoadUint64(&r.hdr.ThreadsHead)
	*r.u64(off + nChunks*8 + 16) = 1                       // live
	atomic.StoreUint64(&r.hdr.ThreadsHead, r.hdr.Base+off) // after the record is whole
	return &Thread{r: r, off: off}, nil
}

// Counters returns the record's counters for tag id, allocating their
// chunk on first use. The pointer stays valid while the region is open.
func (t *Thread) Counters(id uint32) (*Counters, error) {
	if id >= tagSlots {
		return nil, fmt.Errorf("tag id %d out of range", id)
	}
	r := t.r
	slot := r.u64(t.off + uint64(id/ctrChunk)*8) // the chunk's address in the process
	chunk := atomic.LoadUint64(slot)
	if chunk == 0 {
		r.mu.Lock()
		if chunk = atomic.LoadUint64(slot); chunk == 0 {
			off, err := r.alloc(ctrChunk * uint64(unsafe.Sizeof(Counters{})))
			if err != nil {
				r.mu.Unlock()
				return nil, err
			}
			chunk = r.hdr.Base + off
			atomic.StoreUint64(slot, chunk)
		}
		r.mu.Unlock()
	}
	off := chunk - r.hdr.Base + uint64(id%ctrChunk)*uint64(unsafe.Sizeof(Counters{}))
	return (*Counters)(unsafe.Pointer(&r.mem[off])), nil
}

// NotePeak raises tag id's recorded peak of live bytes to at least live.
func (r *Region) NotePeak(id uint32, live uint64) {
	if id >= tagSlots {
		return
	}
	p := r.u64(r.hdr.PeaksOff + uint64(id)*8)
	for {
		old := atomic.LoadUint64(p)
		if live <= old || atomic.CompareAndSwapUint64(p, old, live) {
			return
		}
	}
}

// Peak is tag id's recorded peak of live bytes.
func (r *Region) Peak(id uint32) uint64 {
	if id >= tagSlots {
		return 0
	}
	return atomic.LoadUint64(r.u64(r.hdr.PeaksOff + uint64(id)*8))
}

// SetAllocator publishes the allocator's own figures (bytes).
func (r *Region) SetAllocator(a Allocator) {
	h := r.hdr
	atomic.StoreUint64(&h.SpansInUse, a.SpansInUse)
	atomic.StoreUint64(&h.SpansFreeResident, a.SpansFreeResident)
	atomic.StoreUint64(&h.ArenaTouched, a.ArenaTouched)
	atomic.StoreUint64(&h.HugeLive, a.HugeLive)
	atomic.StoreUint64(&h.HugeCached, a.HugeCached)
	atomic.StoreUint64(&h.Descriptors, a.Bookkeeping)
}

// Snapshot parses a copy of the region, as an outside reader would.
func (r *Region) Snapshot() (*Snapshot, error) {
	r.mu.Lock()
	if r.mem == nil {
		r.mu.Unlock()
		return nil, errors.New("the books region is closed")
	}
	used := atomic.LoadUint64(&r.hdr.Used)
	b := make([]byte, used)
	copy(b, r.mem[:used]) // counters race with their writers: word loads, Torn catches the rest
	r.mu.Unlock()
	return Parse(b)
}

// SetReports publishes the process's memory reports (at most MaxReports;
// paths and descriptions cut to fit). A reader copying the table while it
// changes may see a mix of two sets, as with any counter.
func (r *Region) SetReports(reps []Report) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return
	}
	n := min(len(reps), MaxReports)
	for i, rep := range reps[:n] {
		slot := r.mem[uint64(r.hdr.ReportsOff)+uint64(i)*reportSize:][:reportSize]
		clear(slot)
		slot[0], slot[1] = rep.Kind, rep.Units
		*(*uint64)(unsafe.Pointer(&slot[8])) = rep.Amount
		copy(slot[16:16+reportPathMax], clean(rep.Path))
		copy(slot[16+reportPathMax+1:16+reportPathMax+1+reportDescMax], clean(rep.Description))
	}
	atomic.StoreUint32(&r.hdr.ReportsCount, uint32(n))
}

// clean drops the bytes a report may not hold.
func clean(s string) string {
	b := []byte(s)
	out := b[:0]
	for _, c := range b {
		if c >= 0x20 && c != 0x7f {
			out = append(out, c)
		}
	}
	return string(out)
}

// BudgetSlot is a budget's slot in the region's budgets table, laid out
// as the native library's (cgo/src/budget.c) and read as Budget: tag id,
// policy (1 fail, 2 notify, 3 observe; 0 an unused slot), limit, charge
// (signed in the layout; package alloc's is never below 0), crossings,
// refusals, a parent the readers ignore (0), over (1 while the budget is
// past its limit, or under fail refusing) and 16 spare bytes. Its owner
// stores the counters with atomic stores (Charged.Store ...); readers in
// other processes read them meanwhile.
type BudgetSlot struct {
	tag, policy                 atomic.Uint32
	limit                       atomic.Uint64
	Charged, Crossings, Refused atomic.Uint64
	parent                      uint32
	Over                        atomic.Uint32
	_                           [2]uint64
}

// BudgetCounts are a budget's counters, as NewBudget publishes them.
type BudgetCounts struct {
	Charged, Crossings, Refused uint64
	Over                        bool
}

// ErrBudgetTableFull is NewBudget's error once every slot of the budgets
// table has been taken (slots are not reused: Drop); NewBudgetTable makes
// a new table.
var ErrBudgetTableFull = errors.New("the books region's budgets table is full")

// NewBudget publishes a budget in the next unused slot of the budgets
// table: tag id, policy (1 to 3), limit and counters, stored before
// BudgetsCount counts the slot, so a reader sees it whole or not at all.
// The slot stays the budget's until Drop (or NewBudgetTable).
func (r *Region) NewBudget(tag, policy uint32, limit uint64, c BudgetCounts) (*BudgetSlot, error) {
	if tag >= tagSlots || policy < 1 || policy > 3 {
		return nil, fmt.Errorf("books: a budget of tag %d, policy %d", tag, policy)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return nil, errors.New("the books region is closed")
	}
	n := atomic.LoadUint32(&r.hdr.BudgetsCount)
	if n >= MaxBudgets {
		return nil, ErrBudgetTableFull
	}
	s := r.budgetSlot(n)
	s.tag.Store(tag)
	s.limit.Store(limit)
	s.Charged.Store(c.Charged)
	s.Crossings.Store(c.Crossings)
	s.Refused.Store(c.Refused)
	over := uint32(0)
	if c.Over {
		over = 1
	}
	s.Over.Store(over)
	s.policy.Store(policy)
	atomic.StoreUint32(&r.hdr.BudgetsCount, n+1) // after the slot is whole
	return s, nil
}

// budgetSlot is slot i of the current budgets table.
func (r *Region) budgetSlot(i uint32) *BudgetSlot {
	return (*BudgetSlot)(unsafe.Pointer(&r.mem[atomic.LoadUint64(&r.hdr.BudgetsOff)+uint64(i)*budgetSize]))
}

// Set changes a published budget's policy (1 to 3) and limit; its
// counters stay. (A reader may see the new limit with the old policy.)
func (s *BudgetSlot) Set(policy uint32, limit uint64) {
	s.limit.Store(limit)
	s.policy.Store(policy)
}

// Drop unpublishes a budget: its slot's policy becomes 0, which readers
// skip. The slot is not reused (a write to it that was under way, by an
// allocation still holding the budget, lands where no reader looks);
// NewBudgetTable leaves the dropped slots behind.
func (s *BudgetSlot) Drop() { s.policy.Store(0) }

// NewBudgetTable gives the region a new, empty budgets table (its slots
// all unused), for when NewBudget finds the table full: the caller then
// publishes its live budgets again, in the new table. The old table is
// no longer read; writes to its slots that were under way land there
// harmlessly. A reader copying the header as it changes may pair the new
// table with the old count: the new table's slots past those filled are
// zero, unused. Each table takes 4 KiB of the region.
func (r *Region) NewBudgetTable() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.mem == nil {
		return errors.New("the books region is closed")
	}
	off, err := r.alloc(MaxBudgets * budgetSize)
	if err != nil {
		return err
	}
	atomic.StoreUint32(&r.hdr.BudgetsCount, 0)
	atomic.StoreUint64(&r.hdr.BudgetsOff, off)
	return nil
}
