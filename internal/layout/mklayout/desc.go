// The description: every fact below is written out as C and as Go by
// gen.go; change it here and run `go run ./internal/layout/mklayout`.

package main

// Const is a named number both sides use. Its C name is TA_ and C, its Go
// name Go.
type Const struct {
	C, Go string
	Value uint64
	Doc   string
}

// cTypes are the C types of the constants C casts to one (by C name).
var cTypes = map[string]string{"HOLDERS_MANY": "uint64_t"}

// Type is a header field's type.
type Type int

// Field types: the machine's (little-endian, naturally aligned).
const (
	U32 Type = iota
	U64
	Chars // char in C, byte in Go (arrays only: a magic)
)

// Field is one field of a header struct. Its C name is C; its Go name is
// Go, or the blank identifier if Go is "" (padding no one reads).
type Field struct {
	C, Go  string
	Type   Type
	N      int  // an array of N (0: one)
	Atomic bool // C: _Atomic (read while the process writes it)
	Since  int  // the layout version that added it (books)
	Doc    string
}

// Struct is a header: the same bytes in C and Go, with no padding the
// fields do not name (gen.go refuses a field that is not at an offset its
// alignment divides).
type Struct struct {
	C, CType  string // struct tag and typedef
	Go        string // the Go type's name
	GoPackage string // the package (and directory) of the Go type
	CPrefix   string // the prefix of its offset constants: TA_<prefix>_OFF_<FIELD>
	Doc       string
	Fields    []Field
}

// ---- the books region ------------------------------------------------------

// Books region facts (cgo/src/books.c writes the region, books/region.go
// reads it, books/writer.go writes Go's).
var Books = []Const{
	{"BOOKS_VERSION", "BooksVersion", 6, "the layout the native library writes (books.c); the reader reads 1 to it"},
	{"BOOKS_CMDLINE", "BooksCmdline", 2048, "bytes of the command line's table"},
	{"BOOKS_WRITER_NATIVE", "WriterNative", 1, "the header's writer: the preloaded library (cgo/src/books.c)"},
	{"BOOKS_WRITER_GO", "WriterGo", 2, "the header's writer: package alloc (books/writer.go)"},
	{"REPORTS_MAX", "MaxReports", 64, "slots of the memory reports table (version 2)"},
	{"REPORT_SLOT", "ReportSlot", 256, "bytes of a report slot: u8 kind, u8 units, 6 bytes pad, u64 amount, path, description"},
	{"REPORT_PATH", "ReportPath", 112, "bytes of a report's path, NUL-terminated"},
	{"REPORT_DESC", "ReportDesc", 128, "bytes of a report's description, NUL-terminated"},
	{"BUDGETS_MAX", "MaxBudgets", 64, "slots of the budgets table (version 6)"},
	{"BUDGET_SLOT", "BudgetSlotSize", 64, "bytes of a budget slot (cgo/src/budget.c, books.BudgetSlot)"},
	{"HOLDERS_MANY", "HoldersMany", 1, "a tag's entry in the holders table (version 5) when many counter sets hold it (else 0 or the only set's address)"},
}

// BooksMagic opens every books region.
const BooksMagic = "TAGALLOC"

// BooksHeader is the books region's header, version by version: a
// version's header is its fields and every earlier version's, in order.
var BooksHeader = Struct{
	C: "_ta_books_s", CType: "_ta_books_t", Go: "header", GoPackage: "books", CPrefix: "BOOKS",
	Doc: "The books region's header, at offset 0 (cgo/src/books.c writes it, books/region.go reads it). " +
		"Records link to each other by address in the process; a reader turns an address into an offset " +
		"with base and checks it lies inside used.",
	Fields: []Field{
		{"magic", "Magic", Chars, 8, false, 1, `"TAGALLOC"`},
		{"version", "Version", U32, 0, false, 1, "the layout's version"},
		{"header_size", "HeaderSize", U32, 0, false, 1, "bytes of this header (its version's)"},
		{"region_size", "RegionSize", U64, 0, false, 1, "bytes mapped"},
		{"base", "Base", U64, 0, false, 1, "the region's address in the process"},
		{"used", "Used", U64, 0, true, 1, "bytes in use from the start (bump)"},
		{"pid", "PID", U32, 0, false, 1, ""},
		{"ppid", "PPID", U32, 0, false, 1, ""},
		{"start_ns", "StartNS", U64, 0, false, 1, "CLOCK_REALTIME at start (or fork)"},
		{"state", "State", U32, 0, true, 1, "0 running, 1 exited through exit()"},
		{"tag_slots", "TagSlots", U32, 0, false, 1, "tag ids; ids >= tag_count are unused but overflow's"},
		{"tag_count", "TagCount", U32, 0, true, 1, "ids in use"},
		{"tag_overflow", "TagOverflow", U32, 0, false, 1, `the id of "overflow"`},
		{"tag_name_size", "TagNameSize", U32, 0, false, 1, "bytes per name slot"},
		{"nclasses", "NClasses", U32, 0, false, 1, "size classes"},
		{"ctr_chunk", "CtrChunk", U32, 0, false, 1, "tags per counter chunk"},
		{"cmdline_len", "CmdlineLen", U32, 0, false, 1, "bytes of NUL-separated arguments"},
		{"cmdline_off", "CmdlineOff", U64, 0, false, 1, "the tables' offsets"},
		{"names_off", "NamesOff", U64, 0, false, 1, ""},
		{"fallback_off", "FallbackOff", U64, 0, false, 1, ""},
		{"peaks_off", "PeaksOff", U64, 0, false, 1, ""},
		{"class_sizes_off", "ClassSizesOff", U64, 0, false, 1, ""},
		{"threads_head", "ThreadsHead", U64, 0, true, 1, "address of the newest thread record"},
		{"ctr_size", "CtrSize", U32, 0, false, 1, "record layouts, for readers"},
		{"thread_size", "ThreadSize", U32, 0, false, 1, ""},
		{"thread_ctr_off", "ThreadCtrOff", U32, 0, false, 1, ""},
		{"thread_heaps_off", "ThreadHeaps", U32, 0, false, 1, ""},
		{"thread_next_off", "ThreadNext", U32, 0, false, 1, ""},
		{"thread_live_off", "ThreadLive", U32, 0, false, 1, ""},
		{"heap_size", "HeapSize", U32, 0, false, 1, "heap records: before version 4 (then 0)"},
		{"heap_nalloc_off", "HeapNalloc", U32, 0, false, 1, ""},
		{"heap_nfree_off", "HeapNfree", U32, 0, false, 1, ""},
		{"heap_tag_off", "HeapTag", U32, 0, false, 1, ""},
		{"heap_tnext_off", "HeapTnext", U32, 0, false, 1, ""},
		{"heap_class_stride", "ClassStride", U32, 0, false, 1, "bytes from one class's counts to the next"},
		{"heap_areq_off", "HeapAreq", U32, 0, false, 1, "requested bytes, per class"},
		{"heap_freq_off", "HeapFreq", U32, 0, false, 1, ""},
		{"requested", "Requested", U32, 0, false, 1, "1: requested bytes are kept (TAGALLOC_REQUESTED)"},
		{"heap_req_stride", "ReqStride", U32, 0, false, 1, "bytes from one class's requested bytes to the next"},
		{"spans_in_use", "SpansInUse", U64, 0, true, 1, "the allocator's own figures, bytes, refreshed after every arena and huge-block operation: pages of spans holding blocks"},
		{"spans_free_resident", "SpansFreeResident", U64, 0, true, 1, "free pages not yet returned"},
		{"arena_touched", "ArenaTouched", U64, 0, true, 1, "pages ever handed out (top)"},
		{"huge_live", "HugeLive", U64, 0, true, 1, "mappings of huge blocks"},
		{"huge_cached", "HugeCached", U64, 0, true, 1, "freed huge mappings kept for reuse"},
		{"descriptors", "Descriptors", U64, 0, true, 1, "page descriptors of touched pages, side arrays carved, maps of units moved into and of spans emptied"},
		{"reports_off", "ReportsOff", U32, 0, false, 2, "memory reports (report.c): REPORTS_MAX slots of REPORT_SLOT bytes"},
		{"reports_count", "ReportsCount", U32, 0, true, 2, "slots valid, published last"},
		{"reported_off", "ReportedOff", U64, 0, false, 3, "tag_slots u64: heap bytes of each tag that reporters measured (tagalloc_report_block) in the last collection (0: none)"},
		{"collections", "Collections", U64, 0, true, 3, "tagalloc_collect_reports runs ended"},
		{"writer", "Writer", U32, 0, false, 4, "who wrote it: WRITER_NATIVE or WRITER_GO; version 4 has no heap records"},
		{"pad_", "", U32, 0, false, 4, ""},
		{"holders_off", "HoldersOff", U64, 0, false, 5, "tag_slots u64: 0, the sole counter set's address, or HOLDERS_MANY"},
		{"peak_upper_off", "PeakUpperOff", U64, 0, false, 5, "tag_slots u64: the upper bound of the peak, held by many"},
		{"budgets_off", "BudgetsOff", U64, 0, false, 6, "BUDGETS_MAX slots of BUDGET_SLOT bytes (budget.c); also in a version-4 header of version 6's size (package alloc's)"},
		{"budgets_count", "BudgetsCount", U32, 0, true, 6, "slots in use, published after each is filled"},
		{"pad6_", "", U32, 0, false, 6, ""},
	},
}

// ---- tags ------------------------------------------------------------------

const maxTags = 4096

// Tags are the tag limits: the books' tables are sized by them, and every
// side checks names against them.
var Tags = []Const{
	{"MAX_TAGS", "MaxTags", maxTags, "distinct tags a program may name; more go to overflow"},
	{"TAG_NAME_MAX", "MaxTagName", 63, "bytes in a tag name (1 to this)"},
	{"TAG_UNTAGGED", "Untagged", 0, `the id of "untagged", or TAGALLOC_TAG's name`},
	{"TAG_OVERFLOW", "OverflowTag", maxTags + 1, "the id of the tags past the limit (MAX_TAGS + 1)"},
	{"TAG_SLOTS", "TagSlots", maxTags + 2, "tag ids: untagged, MAX_TAGS names, overflow"},
	{"TAG_STACK", "TagStack", 32, "nesting depth of tagalloc_push_tag (and tagcgo.Do)"},
	{"CTR_CHUNK", "CtrChunk", 64, "tags per chunk of a thread record's counters"},
}

// ---- the events ring ---------------------------------------------------------

// EventsMagic opens every events file.
const EventsMagic = "TAEVENTS"

// Events are the ring's facts (cgo/src/ring.c writes it, tagtable
// reads it).
var Events = []Const{
	{"EV_VERSION", "EventsVersion", 1, "the ring's layout"},
	{"STACK_MAX", "StackMax", 64, "frames in a STACK record at most"},
}

// Record is one type of the ring's records. Records are multiples of 8
// bytes; their first word is len | type << 32, and they may wrap around
// the end of the ring (the first word never does). Body is what follows
// the first word.
type Record struct {
	C, Go string // TA_EV_<C>, Ev<Go>
	Type  uint64
	Body  string
}

// Records are the ring's record types, by number.
var Records = []Record{
	{"MODULE", "Module", 1, "u64 start, end, file offset, bias; u32 build-id len, path len; bytes: an executable mapping of a loaded object"},
	{"STACK", "Stack", 2, "u32 id, depth; u64 pc[depth] (return addresses, innermost first)"},
	{"ALLOC", "Alloc", 3, "u64 addr, usable, requested; u32 tag, stack: a sampled block"},
	{"FREE", "Free", 4, "u64 addr: a sampled block freed"},
	{"RESIZE", "Resize", 5, "u64 old addr, new addr, usable, requested, flags[, prior]: a realloc of a sampled block, which stays sampled, in place or moved " +
		"(flags: RESIZE_*; prior, in a catch-up or when some were left out: the requested size last reported for the block)"},
	{"FORK", "Fork", 6, "u64 seq: the process is forking; the child's ring header names this parent and seq, so the reader starts the child's profile " +
		"from the parent's at this point (its inherited blocks), and the child goes on with the parent's stack ids and modules"},
	{"COLLECT", "Collect", 7, "u64 seq: tagalloc_collect_reports began: every sampled block's report marks are cleared (report.c)"},
	{"REPORT", "Report", 8, "u64 addr; u32 stack, 0: a memory reporter measured the sampled block at addr (tagalloc_report_block) from that stack"},
}

// ResizeFlags are the bits of a RESIZE record's flags word, in order.
var ResizeFlags = []Const{
	{"RESIZE_SELECTED", "ResizeSelected", 1 << 0, "the countdown crossed zero in what the realloc counted"},
	{"RESIZE_CATCHUP", "ResizeCatchUp", 1 << 1, "a catch-up: the last of the in-place reallocs left out (thinning), written before another record of the block"},
	{"RESIZE_GROWN", "ResizeGrown", 1 << 2, "the block grew (or kept its size) without a copy, counted by its growth; it stays weighed if it was"},
	{"RESIZE_KEPT", "ResizeKept", 1 << 3, "a small block resized within its size class: counted as nothing, weighed as it was"},
	{"RESIZE_LEFT_OUT_SHIFT", "ResizeLeftOutShift", 8, "bits 8-31: the in-place reallocs of the block left out before this one"},
	{"RESIZE_LEFT_OUT_MAX", "ResizeLeftOutMax", 0xFFFFFF, "left out at most (24 bits)"},
	{"RESIZE_GREW_SHIFT", "ResizeGrewShift", 32, "bits 32-63: how many of those and this one grew"},
}

// EventsHeader is the events file's header; the ring follows it.
var EventsHeader = Struct{
	C: "_ta_ev_hdr_s", CType: "_ta_ev_hdr_t", Go: "evHeader", GoPackage: "tagtable", CPrefix: "EV",
	Doc: "The events file's header (cgo/src/ring.c writes it, tagtable reads it); the ring follows it. " +
		"head, tail and the drop counts have cache lines of their own.",
	Fields: []Field{
		{"magic", "Magic", Chars, 8, false, 1, `"TAEVENTS"`},
		{"version", "Version", U32, 0, false, 1, "EV_VERSION"},
		{"header_size", "HeaderSize", U32, 0, false, 1, "sizeof: the ring starts here"},
		{"ring_size", "RingSize", U64, 0, false, 1, "bytes, a power of two"},
		{"pid", "PID", U32, 0, false, 1, ""},
		{"mode", "Mode", U32, 0, false, 1, "1 sampled, 2 full"},
		{"sample_rate", "SampleRate", U64, 0, false, 1, "mean bytes between samples (1: every block)"},
		{"fork_ppid", "ForkPPID", U32, 0, false, 1, "forked without exec: the parent, whose ring"},
		{"pad0", "", U32, 0, false, 1, ""},
		{"fork_seq", "ForkSeq", U64, 0, false, 1, "holds FORK fork_seq where this child's heap began"},
		{"pad0b", "", U64, 0, false, 1, ""},
		{"head", "Head", U64, 0, true, 1, "bytes reserved by writers (own cache line)"},
		{"pad1", "", U64, 7, false, 1, ""},
		{"tail", "Tail", U64, 0, true, 1, "bytes consumed: written by the reader"},
		{"pad2", "", U64, 7, false, 1, ""},
		{"dropped", "Dropped", U64, 0, true, 1, "events lost to a full ring"},
		{"dropped_bytes", "DroppedBytes", U64, 0, true, 1, "usable bytes of the ALLOC events lost"},
		{"pad3", "", U64, 6, false, 1, "the first word was a count of ALLOC events: one more line every sample wrote, and the reader counts them"},
	},
}

// ---- options -------------------------------------------------------------------

// Build is the builds of the library that read an option.
type Build int

// The builds (cgo/src/options.c's TA_OPT_*; layout.Build).
const (
	BuildAll    Build = iota // every build
	BuildCheck               // the checking build (TA_CHECK, tagalloc run --check)
	BuildStacks              // the stacks build (TA_SAMPLING, tagalloc run --stacks)
)

// Option is one of the native library's environment variables. A size
// option (Field set) is one of options.c's table: parsed once with the
// size syntax (internal/size), its default Default; the others are
// strings the library reads where it uses them, unset by default.
type Option struct {
	Name    string // the environment variable
	Field   string // the _ta_options_t field a size option sets ("": a string)
	Default string // a size ("64G", "200"), or "(unset)", or a string option's value
	Builds  Build
	Doc     string
}

// Options are the native library's environment variables; the size
// options in the order TAGALLOC_VERBOSE prints them.
var Options = []Option{
	{"TAGALLOC_ARENA_RESERVE", "arena_reserve", "64G", BuildAll, "address space reserved per arena (halved until the OS accepts it)"},
	{"TAGALLOC_HUGE_THRESHOLD", "huge_threshold", "256M", BuildAll, "blocks this large or larger get their own mapping"},
	{"TAGALLOC_PURGE_DELAY_MS", "purge_delay_ms", "200", BuildAll, "free memory is returned to the OS after this many milliseconds"},
	{"TAGALLOC_RETAIN_MIN", "retain_min", "8M", BuildAll, "free memory always allowed to stay resident: the retain limit's floor (beyond it, free memory stays only under the heap's high-water mark)"},
	{"TAGALLOC_PURGER", "purger", "1", BuildAll, "0: no purger thread; free memory goes back to the OS only within the program's own calls (for a program that must stay single-threaded)"},
	{"TAGALLOC_VERBOSE", "verbose", "0", BuildAll, "1: print the options in effect to stderr at start"},
	{"TAGALLOC_REQUESTED", "requested", "0", BuildAll, "1: keep each block's requested size, so reports give live requested bytes (costs a little time)"},
	{"TAGALLOC_SAMPLE_RATE", "sample_rate", "512K", BuildStacks, "with stacks: mean bytes allocated between two sampled blocks (Poisson)"},
	{"TAGALLOC_UNWIND", "unwind", "0", BuildStacks, "with stacks: 0 cached CFI rules (libgcc where they do not reach), 1 libgcc only, 2 both, aborting if they differ"},
	{"TAGALLOC_CHECK", "check", "7", BuildCheck, "checking build (tagalloc run --check): a sum of 1 canaries after each block (overruns, found at free " +
		"and realloc), 2 poison in freed blocks (writes after free, found at reuse), 4 delayed reuse (quarantine)"},
	{"TAGALLOC_CHECK_QUARANTINE", "check_quarantine", "4M", BuildCheck, "checking build: bytes of freed blocks held back from reuse, oldest released first (a block over a " +
		"quarter of it is not held)"},
	{"TAGALLOC_FAULT_EVERY", "fault_every", "0", BuildAll, "testing: every Nth request for memory (a span, a mapping) fails as if memory were exhausted"},
	{"TAGALLOC_FAULT_COUNT", "fault_count", "0", BuildAll, "testing: stop injecting after this many failures (0: never stop), as if memory came back"},
	{"TAGALLOC_TAG", "", "(unset)", BuildAll, "untagged threads are charged to this name instead of \"untagged\" (tags.c)"},
	{"TAGALLOC_BUDGET", "", "(unset)", BuildAll, "budgets, TAG=SIZE[:fail|notify|observe] separated by commas (budget.c)"},
	{"TAGALLOC_STACKS", "", "off", BuildStacks, "off, sampled or full (tagalloc run --stacks sets it)"},
	{"TAGALLOC_DIR", "", "(unset)", BuildAll, "where the books file PID.tagalloc and events file PID.events go (tagalloc run sets it); unset: the books stay in the process's memory"},
}
