/* books.c: the region that holds the books (docs/ARCHITECTURE.md, D6). Tag names and
 * the thread records with their per-tag counters live in one region. With $TAGALLOC_DIR set (tagalloc run sets
 * it) the region is a file DIR/PID.tagalloc mapped shared, so the launcher
 * reads the books while the program runs and after it dies, even of
 * SIGKILL; without it, it is private anonymous memory.
 *
 * Layout (version 6, TA_BOOKS_VERSION; the Go reader is books/region.go,
 * the header's fields and each version's size are internal/layout/mklayout/desc.go's,
 * generated into shared.h and books/header_gen.go): a header at
 * offset 0 (_ta_books_t: magic, version, sizes, the process, the offsets
 * of the arrays below and of the fields of the records readers follow),
 * the command line, the tag names, the fallback counters, the tag peaks,
 * the memory reports table and the reported bytes per tag (report.c) at
 * fixed offsets, then records bump-allocated up to `used`: thread records
 * and their counter chunks. Version 2 is version 1 plus the reports table;
 * version 3 adds the reported bytes per tag and the count of collections;
 * version 4 has no heap records (every count is a thread's, per tag: the
 * heap_* fields are 0) and says who wrote it (writer). Version 5 keeps
 * live bytes as high - headroom in each counter set (the field that was
 * free_bytes is the headroom, the spare word the high-water mark; freed
 * bytes are alloc_bytes - high + headroom) and adds two tables, per tag:
 * its holders and the upper bound of its peak (tags.c, "peaks"). Package
 * alloc's writer still writes version 4. Version 6 adds the budgets table
 * (budget.c): TA_BUDGETS_MAX slots of TA_BUDGET_SLOT bytes, budgets_count in use.
 * Records link to each other by address in the process; a reader turns an
 * address into an offset with `base` and checks it lies inside `used`.
 * Only the process writes the region; readers map it read-only. */

#include <fcntl.h>
#include <stdio.h> /* rename */
#include <sys/stat.h>

/* The header (_ta_books_t), its version (TA_BOOKS_VERSION), the tables'
 * sizes (TA_BOOKS_CMDLINE, TA_REPORTS_MAX, TA_REPORT_SLOT, TA_BUDGETS_MAX,
 * TA_BUDGET_SLOT) and the writers are shared.h's, generated from
 * internal/layout/mklayout/desc.go with the Go reader's. */
#define TA_BOOKS_SIZE (256 * TA_MiB) /* reserved; a sparse file */

static _ta_books_t *_ta_books;
/* The region's address, exported so a reader can find private books: it
 * looks this symbol up in the library's ELF file and reads the process's
 * memory (procbooks.Read). */
TA_EXPORT void *volatile tagalloc_books;
static bool _ta_books_shared;
static char _ta_books_dir[512];
static _Atomic(bool) _ta_books_full_warned;

static size_t _ta_books_put(uint64_t *off_field, size_t off, size_t bytes) {
  *off_field = off;
  return _ta_align_up(off + bytes, 64);
}

/* Fill the header of a fresh region at p. */
static void _ta_books_format(_ta_books_t *b) {
  memcpy(b->magic, TA_BOOKS_MAGIC, 8);
  b->version = TA_BOOKS_VERSION;
  b->header_size = sizeof(_ta_books_t);
  b->region_size = TA_BOOKS_SIZE;
  b->base = (uint64_t)(uintptr_t)b;
  b->tag_slots = TA_TAG_SLOTS;
  b->tag_overflow = TA_TAG_OVERFLOW;
  b->tag_name_size = TA_TAG_NAME_MAX + 1;
  b->nclasses = TA_NUM_CLASSES;
  b->ctr_chunk = TA_CTR_CHUNK;
  b->ctr_size = sizeof(_ta_ctr_t);
  b->thread_size = sizeof(_ta_thread_t);
  b->thread_ctr_off = offsetof(_ta_thread_t, ctr);
  b->thread_next_off = offsetof(_ta_thread_t, next);
  b->thread_live_off = offsetof(_ta_thread_t, live);
  b->requested = _ta_opt.requested ? 1 : 0;
  b->writer = TA_BOOKS_WRITER_NATIVE;
  size_t off = _ta_align_up(sizeof(_ta_books_t), 64);
  off = _ta_books_put(&b->cmdline_off, off, TA_BOOKS_CMDLINE);
  off = _ta_books_put(&b->names_off, off, (size_t)TA_TAG_SLOTS * (TA_TAG_NAME_MAX + 1));
  off = _ta_books_put(&b->fallback_off, off, (size_t)TA_TAG_SLOTS * sizeof(_ta_ctr_t));
  off = _ta_books_put(&b->peaks_off, off, (size_t)TA_TAG_SLOTS * sizeof(uint64_t));
  off = _ta_books_put(&b->class_sizes_off, off, TA_NUM_CLASSES * sizeof(uint32_t));
  uint64_t reports;
  off = _ta_books_put(&reports, off, (size_t)TA_REPORTS_MAX * TA_REPORT_SLOT);
  b->reports_off = (uint32_t)reports;
  off = _ta_books_put(&b->reported_off, off, (size_t)TA_TAG_SLOTS * sizeof(uint64_t));
  off = _ta_books_put(&b->holders_off, off, (size_t)TA_TAG_SLOTS * sizeof(uint64_t));
  off = _ta_books_put(&b->peak_upper_off, off, (size_t)TA_TAG_SLOTS * sizeof(uint64_t));
  off = _ta_books_put(&b->budgets_off, off, (size_t)TA_BUDGETS_MAX * TA_BUDGET_SLOT); /* budget.c */
  uint32_t *cs = (uint32_t *)((uint8_t *)b + b->class_sizes_off);
  for (unsigned c = 0; c < TA_NUM_CLASSES; c++) cs[c] = _ta_classes[c].size;
  atomic_store(&b->used, off);
}

static uint64_t _ta_realtime_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The clock when the process forked last, read by the fork's prepare
 * handler: the start of the child it made. (A call of clock_gettime in
 * the child faulted the vDSO's page in, in every child.) With the locks
 * (TA_LOCK), which the prepare handler writes too: after a fork every
 * page the parent writes again costs it a fault. */
static uint64_t TA_LOCK _ta_books_fork_ns;

/* Say whose books b are: this process's (ppid its parent's), started at
 * start_ns (CLOCK_REALTIME); _ta_books_identify reads its command line
 * too. */
static void _ta_books_identify_process(_ta_books_t *b, uint32_t ppid, uint64_t start_ns) {
  b->pid = (uint32_t)getpid();
  b->ppid = ppid;
  b->start_ns = start_ns;
  atomic_store(&b->state, 0);
}
/* A forked child's books b, a copy of its parent's: its parent is the
 * process these books were, and its command line the parent's, already
 * in them (fork and exit cost 45 us more than under glibc; the open and
 * read of /proc/self/cmdline were three system calls of it). */
static void _ta_books_identify_child(_ta_books_t *b) { _ta_books_identify_process(b, b->pid, _ta_books_fork_ns); }
static void _ta_books_identify(_ta_books_t *b) {
  _ta_books_identify_process(b, (uint32_t)getppid(), _ta_realtime_ns());
  char *cmd = (char *)b + b->cmdline_off;
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, cmd, TA_BOOKS_CMDLINE - 1) : 0;
  if (fd >= 0) close(fd);
  b->cmdline_len = n > 0 ? (uint32_t)n : 0;
}

/* Write "DIR/PID" and ext (".tagalloc", ".events") into out. */
static bool _ta_books_path(char *out, size_t cap, pid_t pid, const char *ext) {
  size_t n = strnlen(_ta_books_dir, sizeof(_ta_books_dir));
  char num[24];
  size_t k = _ta_fmt_u(num, (unsigned long long)pid, 10);
  size_t e = strlen(ext) + 1;
  if (n + 1 + k + e > cap) return false;
  memcpy(out, _ta_books_dir, n);
  out[n] = '/';
  memcpy(out + n + 1, num, k);
  memcpy(out + n + 1 + k, ext, e);
  return true;
}

/* Write all len bytes of buf at offset off of fd. */
static bool _ta_pwrite_all(int fd, const void *buf, size_t len, size_t off) {
  for (size_t done = 0; done < len;) {
    ssize_t w = pwrite(fd, (const uint8_t *)buf + done, len - done, (off_t)(off + done));
    if (w <= 0 && errno != EINTR) return false;
    if (w > 0) done += (size_t)w;
  }
  return true;
}

/* A new file DIR/PID<ext> of size bytes, mapped shared at want (or
 * anywhere if NULL); NULL on failure, with nothing left behind. fill(fd,
 * arg), if given, writes its first contents before it is mapped, with
 * pwrite: through the mapping, a fault on a hole of a fresh file reads
 * ahead (and zeroes) the pages after it too (the books of a shell's
 * forked child: 7 ms; an events file's header: 0.8 ms). ready(p), if
 * given, finishes it through the mapping. The file is made whole under a
 * temporary name and renamed into place, never truncated: a reader that
 * has the previous file of this pid open (the process exec'd) keeps
 * reading that one, and a file under its name always says whose it is (a
 * process killed just after it exec'd left its books file all zeros,
 * which tagalloc run could not read: 2 of the processes of CPython's
 * test_subprocess and test_signal; a forked child's said its parent's
 * pid until it was renamed, and a reader merged it into the parent's). */
static void *_ta_file_make(const char *ext, size_t size, void *want, bool (*fill)(int fd, const void *arg), const void *arg,
                           void (*ready)(void *p), struct stat *made) {
  char path[600], tmp[620];
  if (!_ta_books_path(path, sizeof path, getpid(), ext)) return NULL;
  size_t n = strlen(path);
  memcpy(tmp, path, n);
  memcpy(tmp + n, ".new", 5);
  /* A file of that name (left by a process of this pid that died, or
   * planted by another user of a run's shared books directory) is
   * removed, and ours made new (O_EXCL): never one somebody else can
   * write. If one is planted again in between, the books stay private. */
  (void)unlink(tmp);
  int fd = open(tmp, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return NULL;
  void *p = MAP_FAILED;
  if (ftruncate(fd, (off_t)size) == 0 && (!fill || fill(fd, arg)) && (!made || fstat(fd, made) == 0))
    p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | (want ? MAP_FIXED : 0), fd, 0);
  close(fd);
  if (p != MAP_FAILED && ready) ready(p);
  if (p != MAP_FAILED && rename(tmp, path) != 0) {
    if (!want) munmap(p, size);
    p = MAP_FAILED;
  }
  if (p == MAP_FAILED) {
    int e = errno;
    unlink(tmp);
    errno = e;
    return NULL;
  }
  return p;
}

static bool _ta_books_snap_put(int fd, const void *unused);

/* A books file's readiness (_ta_file_make): no readahead on faults (the
 * file is sparse, and a fault on a hole would otherwise fill, and zero,
 * the pages around it too), then the header of a new process's books, or
 * a forked child's pid in the copy of its parent's. */
static void _ta_books_no_readahead(void *p) { (void)madvise(p, TA_BOOKS_SIZE, MADV_RANDOM); }
static void _ta_books_ready_new(void *p) {
  _ta_books_no_readahead(p);
  _ta_books_format(p);
  _ta_books_identify(p);
}
static void _ta_books_ready_forked(void *p) {
  _ta_books_no_readahead(p);
  _ta_books_identify_child(p);
}

/* The books file mapped (its device and inode), to know it again by its
 * name (_ta_books_data_pages). */
static dev_t _ta_books_file_dev;
static ino_t _ta_books_file_ino;

/* A new books file for this process, mapped at want (or anywhere if
 * NULL), its header written; in a forked child, filled from the fork's
 * copy (fill). */
static void *_ta_books_map_file(void *want, bool fill) {
  struct stat st;
  void *p = _ta_file_make(".tagalloc", TA_BOOKS_SIZE, want, fill ? _ta_books_snap_put : NULL, NULL,
                          fill ? _ta_books_ready_forked : _ta_books_ready_new, &st);
  if (p) _ta_books_file_dev = st.st_dev, _ta_books_file_ino = st.st_ino;
  return p;
}

/* Set up the region: file-backed if $TAGALLOC_DIR names a directory. */
static bool _ta_books_init(void) {
  const char *dir = getenv(TA_ENV_DIR);
  void *p = NULL;
  if (dir && *dir) {
    size_t n = strnlen(dir, sizeof(_ta_books_dir));
    if (n < sizeof(_ta_books_dir) - 32) {
      memcpy(_ta_books_dir, dir, n);
      _ta_books_dir[n] = 0;
      p = _ta_books_map_file(NULL, false);
    }
    if (!p) _ta_warn("cannot create the books in TAGALLOC_DIR=%s (errno %d): keeping them private", dir, errno);
    else _ta_books_shared = true;
  }
  if (!p) {
    p = _ta_os_reserve(TA_BOOKS_SIZE, TA_OS_PAGE);
    if (!p) return false;
    _ta_books_format(p);
    _ta_books_identify(p);
  }
  _ta_os_name(p, TA_BOOKS_SIZE, "tagalloc books");
  _ta_books = p;
  tagalloc_books = p;
  return true;
}

/* Bump-allocate zeroed record memory in the region (under _ta_meta_lock);
 * NULL when the region is full (the caller falls back to private memory,
 * and readers miss those records: warned once). */
static void *_ta_books_alloc_locked(size_t size) {
  if (!_ta_books) return NULL;
  size = _ta_align_up(size, 64);
  uint64_t used = atomic_load_explicit(&_ta_books->used, memory_order_relaxed);
  if (used + size > TA_BOOKS_SIZE) {
    bool f = false;
    if (atomic_compare_exchange_strong(&_ta_books_full_warned, &f, true))
      _ta_warn("the books region is full (%zu MiB): later records are private", (size_t)(TA_BOOKS_SIZE / TA_MiB));
    return NULL;
  }
  atomic_store_explicit(&_ta_books->used, used + size, memory_order_release);
  return (uint8_t *)_ta_books + used;
}

/* fork, with the region in a shared file: the child must not write the
 * parent's file, so it gets a file of its own at the same address, filled
 * from a copy taken before the fork (in the parent, with every lock held,
 * so every list in it is whole). Copying after the fork instead would race
 * with the parent, which goes on writing the shared file. Counts that
 * other threads changed between the copy and the fork are brought back in
 * line by the child (_ta_books_resync).
 *
 * The copy holds only the pages with anything in them, and the child
 * writes them into its file with pwrite: the tag tables are sized for
 * TA_MAX_TAGS, so a region is mostly zeros (a shell's: 10 pages of 136 in
 * use). Copying every page, comparing it with zeros again in the child and
 * writing it through the mapping (a fault and a readahead of zeros per
 * page) cost a shell about 7 ms per fork on a VM. */
#define TA_BOOKS_PAGES (TA_BOOKS_SIZE / TA_OS_PAGE)
TA_COLD_BSS static uint64_t _ta_books_snap_map[TA_BOOKS_PAGES / 64]; /* bit i: page i is in the copy */
static uint8_t *_ta_books_snap;                           /* those pages, in order */
static size_t _ta_books_snap_pages;                       /* pages of the region looked at (and reserved) */
static const uint64_t _ta_zero_page[TA_OS_PAGE / 8];

static bool _ta_books_snap_has(size_t i) { return _ta_books_snap_map[i / 64] >> (i % 64) & 1; }

/* Mark in _ta_books_snap_map the pages of the region's first npages that
 * may hold anything: those in the file's data (SEEK_DATA, through a
 * descriptor of it opened by name and checked to be the file mapped), or
 * every one if that cannot be had. A page in a hole was never written,
 * and reading it through the mapping would make it: on a memory
 * filesystem a page of memory each, until the run ends (a forking shell's
 * books file: 668 KiB for 7 pages of data), on a disk's a page of zeros
 * in its cache. */
static void _ta_books_data_pages(size_t npages) {
  int saved = errno;
  memset(_ta_books_snap_map, 0, (npages + 63) / 64 * sizeof(uint64_t));
  char path[600];
  struct stat st;
  int fd = _ta_books_path(path, sizeof path, getpid(), ".tagalloc") ? open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW) : -1;
  bool ok = fd >= 0 && fstat(fd, &st) == 0 && st.st_dev == _ta_books_file_dev && st.st_ino == _ta_books_file_ino;
  off_t end = (off_t)(npages * TA_OS_PAGE);
  for (off_t off = 0; ok && off < end;) {
    off_t d = lseek(fd, off, SEEK_DATA);
    if (d < 0) {
      ok = errno == ENXIO; /* no data past off; else SEEK_DATA is not to be had */
      break;
    }
    off_t h = d < end ? lseek(fd, d, SEEK_HOLE) : end;
    if (h < 0) ok = false;
    for (size_t i = (size_t)d / TA_OS_PAGE; ok && i < npages && (off_t)(i * TA_OS_PAGE) < h; i++)
      _ta_books_snap_map[i / 64] |= (uint64_t)1 << (i % 64);
    off = h;
  }
  if (fd >= 0) close(fd);
  if (!ok)
    for (size_t i = 0; i < npages; i++) _ta_books_snap_map[i / 64] |= (uint64_t)1 << (i % 64);
  errno = saved;
}

/* _ta_books_snap is NULL here: the parent and child handlers leave it so
 * (the parent's also after a fork that failed). */
static void _ta_books_fork_prepare(void) {
  if (!_ta_books) return;
  _ta_books_fork_ns = _ta_realtime_ns();
  if (!_ta_books_shared) return;
  size_t used = (size_t)atomic_load(&_ta_books->used);
  size_t npages = (used + TA_OS_PAGE - 1) / TA_OS_PAGE;
  _ta_books_snap = _ta_os_reserve(npages * TA_OS_PAGE, TA_OS_PAGE); /* the worst case; untouched pages cost nothing */
  if (!_ta_books_snap) return;
  _ta_books_snap_pages = npages;
  _ta_books_data_pages(npages);
  uint8_t *to = _ta_books_snap;
  for (size_t i = 0; i < npages; i++) {
    if (!_ta_books_snap_has(i)) continue; /* a hole: zeros, never read */
    const uint8_t *pg = (const uint8_t *)_ta_books + i * TA_OS_PAGE;
    size_t n = used - i * TA_OS_PAGE < TA_OS_PAGE ? used - i * TA_OS_PAGE : TA_OS_PAGE;
    if (memcmp(pg, _ta_zero_page, n) == 0) {
      _ta_books_snap_map[i / 64] &= ~((uint64_t)1 << (i % 64));
    } else {
      memcpy(to, pg, n);
      to += TA_OS_PAGE;
    }
  }
}

static void _ta_books_fork_parent(void) {
  if (_ta_books_snap) { /* only then a store: one is a copy-on-write fault in the parent at every fork */
    _ta_os_release(_ta_books_snap, _ta_books_snap_pages * TA_OS_PAGE);
    _ta_books_snap = NULL;
  }
}

/* Put the copy's pages in place: with pwrite into fd, each run of
 * consecutive pages at once, or (fd < 0) into the region itself. */
static bool _ta_books_snap_put(int fd, const void *unused) {
  (void)unused;
  const uint8_t *from = _ta_books_snap;
  for (size_t i = 0; i < _ta_books_snap_pages;) {
    if (!_ta_books_snap_has(i)) {
      i++;
      continue;
    }
    size_t j = i + 1;
    while (j < _ta_books_snap_pages && _ta_books_snap_has(j)) j++;
    size_t len = (j - i) * TA_OS_PAGE, off = i * TA_OS_PAGE;
    if (fd < 0) memcpy((uint8_t *)_ta_books + off, from, len);
    else if (!_ta_pwrite_all(fd, from, len, off)) return false;
    from += len;
    i = j;
  }
  return true;
}

/* In a forked child, before anything else runs; true if its books must
 * be resynchronized with its heap. */
static bool _ta_books_fork_child(void) {
  if (!_ta_books) return false;
  bool resync = false;
  if (_ta_books_shared) {
    if (!_ta_books_snap || !_ta_books_map_file(_ta_books, true)) {
      /* keep going with a private copy rather than write the parent's */
      if (_ta_books_snap) _ta_warn("fork: cannot make the books file of pid %d in %s (errno %d): its books stay private", (int)getpid(), _ta_books_dir, errno);
      void *priv = mmap(_ta_books, TA_BOOKS_SIZE, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
      if (priv == MAP_FAILED) _ta_fatal("fork: cannot make the child's books");
      _ta_books_shared = false;
      if (_ta_books_snap) _ta_books_snap_put(-1, NULL);
    }
    if (_ta_books_snap) {
      _ta_os_release(_ta_books_snap, _ta_books_snap_pages * TA_OS_PAGE);
      _ta_books_snap = NULL;
      resync = true;
    } else {
      _ta_warn("fork: no memory to copy the books: the child's may be off");
    }
  }
  /* A file made here says whose it is already (_ta_books_ready_forked,
   * before its name); private books, the copy fork made, say it now. */
  if (!_ta_books_shared) _ta_books_identify_child(_ta_books);
  return resync;
}

/* At exit() (not at a crash or kill): say so. */
__attribute__((destructor)) static void _ta_books_exit(void) {
  if (_ta_books) atomic_store(&_ta_books->state, 1);
}
