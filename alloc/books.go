// The books: tags, the per-shard counters in the books region, and the
// exact per-tag figures summed from them.

package alloc

import (
	"fmt"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/tagalloc/tagalloc/arena"
	"github.com/tagalloc/tagalloc/books"
)

const (
	tagSlots  = books.MaxTags + 2 // untagged, the names, overflow
	maxShards = 256               // P ids beyond this share one locked shard
)

// shard is one writer of the books and one cache of spans: a P's (while a
// goroutine is pinned to it) or the shared one (under its lock). Its
// spans are per size class, whatever the tags of their blocks (the arena
// keeps each block's tag out of line): a tag costs a shard counters, in
// chunks of ctrChunkTags tags made at the first use of one of them here.
type shard struct {
	cache  arena.Cache                   // in the shard: its spans are at an offset from it, not behind a pointer
	ctrs   [128]atomic.Pointer[ctrChunk] // per chunk of tag ids (id/ctrChunkTags; 128*64 > tagSlots, so id/64&127 needs no bounds check)
	thread *books.Thread                 // its record in the region (nil without one)
	shared bool
	mu     sync.Mutex // the shared shard's exclusivity
}

// ctrChunk is a shard's counters of ctrChunkTags consecutive tag ids,
// written by this shard only (a tag's figures are the sums over shards):
// the region thread record's chunk, which has this layout, or private
// ones without a region. The fast paths find a tag's counters by address
// arithmetic, without loading a pointer.
type ctrChunk [ctrChunkTags]books.Counters

const ctrChunkTags = 64

// counters are shard s's counters of tag id, or nil if their chunk is not
// made yet (prepare).
func (s *shard) counters(id uint32) *books.Counters {
	if ch := s.ctrs[id/ctrChunkTags&127].Load(); ch != nil {
		return &ch[id%ctrChunkTags]
	}
	return nil
}

var (
	shards [maxShards]atomic.Pointer[shard]
	// fast are the shards the fast paths use (pinned): shards', none in
	// debug mode (whose every allocation and free takes the slow paths,
	// so the fast paths need not test for it). The last stays nil.
	fast   [maxShards + 1]atomic.Pointer[shard]
	shared *shard

	state struct {
		once   sync.Once
		mu     sync.Mutex // tags and shard creation
		region *books.Region
		names  sync.Map // name -> *Tag
		byID   [tagSlots]atomic.Pointer[Tag]
		count  uint32                  // tag ids in use without a region (the region keeps its own)
		peaks  [tagSlots]atomic.Uint64 // without a region
	}
	debug bool // TAGALLOC_GO_DEBUG or SetDebug; fixed at first use
)

var setDebug atomic.Int32 // SetDebug before first use: 1 on, 2 off

// SetDebug turns debug mode on or off; it takes effect only if called
// before the first allocation (later calls are ignored; Debug tells).
// Debug mode catches every double free exactly and poisons freed blocks,
// checking the poison when the block is handed out again; it costs about
// 2x on the fast paths.
func SetDebug(on bool) {
	if on {
		setDebug.Store(1)
	} else {
		setDebug.Store(2)
	}
}

// Debug reports whether debug mode is on.
func Debug() bool { ensureInit(); return debug }

// ensureInit sets up the arena, the books region and the shared shard at
// first use.
func ensureInit() { state.once.Do(initAlloc) }

func initAlloc() {
	switch setDebug.Load() {
	case 1:
		debug = true
	case 0:
		debug = envInt("TAGALLOC_GO_DEBUG") == 1
	}
	if err := arena.Init(arena.Options{PurgeDelay: purgeDelay(), RetainBytes: retainMin(), HugeMin: hugeMin(), Debug: debug}); err != nil {
		panic(err) // nothing can be allocated
	}
	debug = arena.Debug() // the arena's first Init decides
	r, err := books.Create("go")
	if err != nil {
		fmt.Fprintf(os.Stderr, "tagalloc: alloc keeps its books privately (tagalloc top/snapshot will not see them): %v\n", err)
	} else {
		state.region = r
		startReports(r, time.Second)
	}
	untagged := &Tag{id: books.Untagged, name: "untagged"}
	state.byID[books.Untagged].Store(untagged)
	state.names.Store("untagged", untagged)
	state.byID[books.OverflowTag].Store(&Tag{id: books.OverflowTag, name: "overflow"})
	state.count = 1
	shared = newShard(maxShards)
	shared.shared = true
}

// newShard makes the shard for cache id (state.mu held, or at init).
func newShard(id int) *shard {
	s := new(shard)
	s.cache.Init(id)
	if state.region != nil {
		s.thread, _ = state.region.NewThread() // nil if the region is full: the counters are then private
	}
	return s
}

// pinned is the shard of P pid (the caller is pinned to it), or nil if it
// has none yet, pid is past maxShards, or in debug mode: the fast paths'
// acquire.
func pinned(pid int) *shard {
	return fast[min(uint(pid), maxShards)].Load() // fast[maxShards] stays nil: no branch
}

// acquire returns the caller's shard, held exclusively: pinned to its P
// (fast), or the shared shard's lock. release gives it up.
func acquire() *shard {
	pid := procPin()
	if uint(pid) < maxShards {
		if s := shards[pid].Load(); s != nil {
			raceAcquire(unsafe.Pointer(s))
			return s
		}
	}
	procUnpin()
	return acquireSlow(pid)
}

func acquireSlow(pid int) *shard {
	if pid >= maxShards {
		shared.mu.Lock()
		return shared
	}
	state.mu.Lock()
	if shards[pid].Load() == nil {
		s := newShard(pid)
		shards[pid].Store(s)
		if !debug {
			fast[pid].Store(s)
		}
	}
	state.mu.Unlock()
	return acquire()
}

func (s *shard) release() {
	if s.shared {
		s.mu.Unlock()
		return
	}
	raceRelease(unsafe.Pointer(s))
	procUnpin()
}

// acquireFor returns the caller's shard, held, with its counters of tag
// id. (They are made outside exclusivity: the region's lock and Go
// allocation are not allowed while pinned.)
func acquireFor(id uint32) (*shard, *books.Counters) {
	for {
		s := acquire()
		if ctr := s.counters(id); ctr != nil {
			return s, ctr
		}
		s.release()
		s.prepare(id)
	}
}

// prepare makes shard s's counters of tag id's chunk. It needs no
// exclusivity over s (the chunk is published by a store, under state.mu
// so two goroutines cannot both make it), but the region's lock and Go
// allocation are not allowed while pinned, so callers come here
// unpinned.
func (s *shard) prepare(id uint32) {
	state.mu.Lock()
	defer state.mu.Unlock()
	k := id / ctrChunkTags
	if s.ctrs[k].Load() != nil {
		return
	}
	var ch *ctrChunk
	if s.thread != nil {
		// The record's chunk: the counters of its first and last tag
		// (past tagSlots, the tail of the last chunk is never charged)
		// must be where the layout puts them.
		first, err1 := s.thread.Counters(k * ctrChunkTags)
		last, err2 := s.thread.Counters(min(k*ctrChunkTags+ctrChunkTags-1, tagSlots-1))
		if err1 == nil && err2 == nil {
			ch = (*ctrChunk)(unsafe.Pointer(first))
			if i := min(ctrChunkTags-1, tagSlots-1-k*ctrChunkTags); &ch[i] != last {
				panic("alloc: the books region's counter chunks are not laid out as alloc expects")
			}
		}
	}
	if ch == nil {
		ch = new(ctrChunk) // no region, or it is full: private, summed by TagStats all the same
	}
	s.ctrs[k].Store(ch)
}

// Tag is a handle on a tag name: the fast way to allocate under it.
type Tag struct {
	id   uint32
	name string
	// budgets are the budgets covering the tag, innermost first, or nil
	// (the allocation paths' one check): budget.go. Stored under
	// state.mu, loaded without a lock.
	budgets atomic.Pointer[[]*budget]
}

// NewTag returns the handle of tag name (the same handle every time).
// name is 1 to 63 bytes without NUL (else an error wrapping
// books.ErrBadTag); "untagged" is the tag of untagged memory. Past
// 4096 distinct names, new names share the tag "overflow" (the handle's
// Name says so).
func NewTag(name string) (*Tag, error) {
	if t, ok := state.names.Load(name); ok {
		return t.(*Tag), nil
	}
	if err := books.ValidTag(name); err != nil {
		return nil, err
	}
	ensureInit()
	state.mu.Lock()
	defer state.mu.Unlock()
	if t, ok := state.names.Load(name); ok {
		return t.(*Tag), nil
	}
	var id uint32
	if r := state.region; r != nil {
		var err error
		if id, _, err = r.Tag(name); err != nil {
			return nil, err
		}
	} else if state.count > books.MaxTags {
		id = books.OverflowTag
	} else {
		id = state.count
		state.count++
	}
	t := state.byID[id].Load()
	if t == nil {
		t = &Tag{id: id, name: name}
		t.budgets.Store(budgetsOfLocked(name)) // a budget set before the tag's first use
		state.byID[id].Store(t)
	}
	state.names.Store(name, t)
	return t, nil
}

// MustTag is NewTag for names known to be good: it panics on a bad one.
func MustTag(name string) *Tag {
	t, err := NewTag(name)
	if err != nil {
		panic(err)
	}
	return t
}

// Name is the tag's name ("overflow" for a name past the limit).
func (t *Tag) Name() string { return t.name }

// tagOf is the handle for Malloc's tag string; "" is untagged. A bad
// name panics (Malloc returns no error).
func tagOf(name string) *Tag {
	if name == "" {
		name = "untagged"
	}
	if t, ok := state.names.Load(name); ok {
		return t.(*Tag)
	}
	t, err := NewTag(name)
	if err != nil {
		panic(fmt.Errorf("alloc: tag %w", err))
	}
	return t
}

// TagStat is one tag's books. Bytes are usable bytes (the size class of a
// small block, whole pages of a large one, the mapping of a huge one)
// unless named Requested.
type TagStat struct {
	Name          string
	LiveBytes     uint64 // held now
	LiveBlocks    uint64
	AllocBytes    uint64 // ever allocated (Realloc in place counts no new block)
	AllocBlocks   uint64
	PeakLiveBytes uint64 // a lower bound: live bytes are sampled at slow paths and at TagStats
	// LiveRequestedBytes is what the program asked for, of the live
	// blocks (taken from cap(b) at Free: exact unless the program
	// shrank a slice's capacity with a full slice expression).
	LiveRequestedBytes uint64
}

// sum adds up tag id's counters over every shard.
func sum(id uint32) (t TagStat) {
	var fb, fn, ar, fr uint64
	add := func(s *shard) {
		if s == nil {
			return
		}
		if c := s.counters(id); c != nil {
			t.AllocBytes += c.AllocBytes.Load()
			t.AllocBlocks += c.AllocBlocks.Load()
			fb += c.FreeBytes.Load()
			fn += c.FreeBlocks.Load()
			ar += c.AllocReq.Load()
			fr += c.FreeReq.Load()
		}
	}
	for i := range shards {
		add(shards[i].Load())
	}
	add(shared)
	t.LiveBytes, t.LiveBlocks, t.LiveRequestedBytes = t.AllocBytes-fb, t.AllocBlocks-fn, ar-fr
	return t
}

// notePeak samples tag id's live bytes into its peak.
func notePeak(id uint32, live uint64) uint64 {
	if r := state.region; r != nil {
		r.NotePeak(id, live)
		return r.Peak(id)
	}
	p := &state.peaks[id]
	for {
		old := p.Load()
		if live <= old || p.CompareAndSwap(old, live) {
			return max(old, live)
		}
	}
}

// samplePeak is the slow paths' sampling of a tag's peak.
func samplePeak(id uint32) { notePeak(id, sum(id).LiveBytes) }

// publish writes the arena's figures into the region.
func publish() {
	if r := state.region; r != nil {
		st := arena.ReadStats()
		r.SetAllocator(books.Allocator{SpansInUse: st.SpansInUse, SpansFreeResident: st.FreeResident,
			ArenaTouched: st.Touched, HugeLive: st.HugeLive, HugeCached: st.HugeCached, Bookkeeping: st.Bookkeeping})
	}
}

// TagStats returns every tag that has allocated, most live bytes first
// (then by name), each figure exact if no allocation or free runs
// meanwhile. "untagged" holds Malloc(n, "")'s blocks; "overflow" those of
// names past the 4096th.
func TagStats() []TagStat {
	ensureInit()
	var out []TagStat
	for id := uint32(0); id < tagSlots; id++ {
		t := state.byID[id].Load()
		if t == nil {
			continue
		}
		st := sum(id)
		if st.AllocBlocks == 0 {
			continue
		}
		st.Name = t.name
		if id == books.OverflowTag {
			st.Name = "overflow"
		}
		st.PeakLiveBytes = notePeak(id, st.LiveBytes)
		out = append(out, st)
	}
	publish()
	sort.Slice(out, func(i, j int) bool {
		if out[i].LiveBytes != out[j].LiveBytes {
			return out[i].LiveBytes > out[j].LiveBytes
		}
		return out[i].Name < out[j].Name
	})
	return out
}

// Stats returns the tag's books (exact as TagStats's).
func (t *Tag) Stats() TagStat {
	st := sum(t.id)
	st.Name = t.name
	st.PeakLiveBytes = notePeak(t.id, st.LiveBytes)
	return st
}

// Region is the books region alloc writes (nil if it could not make
// one), for tools and tests that read it back.
func Region() *books.Region { ensureInit(); return state.region }
