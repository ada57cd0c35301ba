// Package alloc is tagalloc's Go API: memory off the Go heap, charged to
// tags, with exact books that tagalloc run, top and snapshot read like a
// preloaded program's (docs/ARCHITECTURE.md, D2 and D6).
//
//	b := alloc.Calloc(1<<20, "block-cache") // 1 MiB, zeroed, tag "block-cache"
//	defer alloc.Free(b)
//	for _, t := range alloc.TagStats() { fmt.Println(t.Name, t.LiveBytes) }
//
//	cache := alloc.MustTag("cache")          // hot paths: no name lookup
//	b = cache.Malloc(64)
//
// The memory comes from package arena (mmap'd, never scanned or counted by
// the GC), so it must not hold Go pointers, and it lives until Free. A
// slice has len and cap n; keep its start (Free and Realloc need the
// block's first byte and read the requested size from cap).
//
// Tags: "" is "untagged"; names are 1 to 63 bytes without NUL, levels
// separated by "/" (none empty, "." or ".."); after 4096 names, new ones
// are charged to "overflow". A block keeps its tag through
// Realloc and whichever goroutine frees it.
//
// Books: each shard (one per P, found by pinning the goroutine to its P
// for the fast path; P ids past 255 share a locked shard) writes its own
// counters per tag (made for 64 tags at a time, at the first use of one
// of them on the shard), in the books region (books.Create("go"): a file
// under $TAGALLOC_DIR, else a memfd that tagalloc top/snapshot find). A
// tag's live figure is the sum over shards of allocations minus frees, so
// a free on another goroutine debits its own shard. TagStats sums them:
// exact whenever no Malloc or Free is in flight. Peaks are sampled at slow
// paths and at TagStats, so PeakLiveBytes is a lower bound of the true
// peak. If the region cannot be made, alloc warns once on stderr and keeps
// the same counters privately.
//
// Tags cost counters, not spans: a shard's spans are per size class,
// shared by every tag. Each block's tag is kept out of line by the arena:
// in the span's descriptor while all of the span's blocks in use have one
// tag, else in a uint16 per block (the span is "mixed"); Free reads it to
// debit the right tag.
//
// The allocation path: class of n; pin to the P; pop from the shard's span
// for the class, noting the block's tag; add to the shard's counters for
// the tag; unpin. Slow paths (refills, new spans, large and huge blocks,
// first use of a chunk of tags on a shard) unpin before taking any lock.
//
// Budgets (budget.go, docs/budgets-go.md): SetBudget(tag, bytes, policy)
// limits the live bytes of tag and of every tag under it ("gfx" covers
// "gfx" and "gfx/webgl/textures"; budgets may nest, and each is checked).
// A budget keeps a charge, the usable bytes of the live blocks under it,
// moved by an atomic add at every allocation and free under it, so it is
// exact however many goroutines allocate. An allocation that would take
// the charge past the limit is, by the policy: BudgetFail, refused
// (Malloc and Calloc return nil, Realloc returns nil and leaves its block
// as it was; nothing is charged, the books do not change), with no
// overshoot under any race; BudgetNotify, let through, and the OnBudget
// callback runs once per crossing; BudgetObserve, let through and
// counted. Budgets reports the charges, crossings and refusals. A tag
// without a budget pays one load and branch per Malloc and Free.
//
// Errors: functions without an error result panic on misuse, with a
// message naming it: a negative or absurd size, a bad tag name (NewTag
// returns the error instead), Free or Realloc of memory alloc did not hand
// out or of a sub-slice not at a block's start, a double free (large and
// huge always; small when the span's count shows it; every one in debug
// mode), and out of memory. Malloc(0) returns an empty, non-nil slice
// that is no block (as dgraph's z.Calloc); Free ignores slices of cap 0.
//
// Debug mode (TAGALLOC_GO_DEBUG=1 in the environment, or SetDebug(true)
// before the first allocation) keeps a bitmap of blocks in use, so every
// double free panics, and poisons freed blocks, checking the poison when
// a block is reused (a write after free panics at the next allocation).
//
// Options (read once): TAGALLOC_GO_DEBUG, TAGALLOC_PURGE_DELAY_MS,
// TAGALLOC_RETAIN_MIN, TAGALLOC_HUGE_THRESHOLD (see options.go).
package alloc
