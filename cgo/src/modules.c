/* modules.c: the executable objects loaded (TA_SAMPLING builds): each
 * announced once in a MODULE record (ring.c), before the first stack that
 * needs it, so that the reader can name its addresses; and our own code's
 * range, whose frames stacks leave out (stacks.c, unwind.c). */

#if TA_SAMPLING

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#define TA_MOD_MAX 4096
typedef struct { uintptr_t start, end; } _ta_range_t;
static _ta_range_t _ta_mods[TA_MOD_MAX]; /* executable ranges announced */
static size_t _ta_nmods;
static _ta_range_t _ta_self; /* our own code: frames in it are skipped */

static bool _ta_mod_known(uintptr_t pc) {
  for (size_t i = 0; i < _ta_nmods; i++)
    if (pc >= _ta_mods[i].start && pc < _ta_mods[i].end) return true;
  return false;
}

/* The GNU build-id of a loaded object, from its notes in memory. */
static size_t _ta_build_id(struct dl_phdr_info *info, const uint8_t **out) {
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_NOTE) continue;
    const uint8_t *p = (const uint8_t *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
    while (p + sizeof(ElfW(Nhdr)) <= end) {
      const ElfW(Nhdr) *n = (const ElfW(Nhdr) *)p;
      const uint8_t *name = p + sizeof(*n), *desc = name + ((n->n_namesz + 3) & ~3u);
      if (desc + n->n_descsz > end) break;
      if (n->n_type == NT_GNU_BUILD_ID && n->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
        *out = desc;
        return n->n_descsz;
      }
      p = desc + ((n->n_descsz + 3) & ~3u);
    }
  }
  return 0;
}

static int _ta_mod_visit(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  bool self = arg != NULL;
  const char *path = info->dlpi_name;
  char exe[512];
  if (!path || !*path) { /* the main program */
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    exe[n > 0 ? n : 0] = 0;
    path = exe;
  }
  const uint8_t *bid = NULL;
  size_t bidlen = 0;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X)) continue;
    uintptr_t start = info->dlpi_addr + ph->p_vaddr, end = start + ph->p_memsz;
    if (self) {
      if ((uintptr_t)&_ta_mod_visit >= start && (uintptr_t)&_ta_mod_visit < end) _ta_self = (_ta_range_t){start, end};
      continue;
    }
    if (_ta_mod_known(start) || _ta_nmods == TA_MOD_MAX) continue;
    _ta_mods[_ta_nmods++] = (_ta_range_t){start, end};
    if (!bid) bidlen = _ta_build_id(info, &bid);
    size_t plen = strnlen(path, 4096);
    uint8_t rec[4096 + 64 + 48];
    uint64_t f[4] = {start, end, ph->p_offset, info->dlpi_addr};
    uint32_t lens[2] = {(uint32_t)bidlen, (uint32_t)plen};
    size_t n = 0;
    memcpy(rec + n, f, sizeof f), n += sizeof f;
    memcpy(rec + n, lens, sizeof lens), n += sizeof lens;
    if (bidlen > 64) bidlen = 64;
    memcpy(rec + n, bid, bidlen), n += bidlen;
    memcpy(rec + n, path, plen), n += plen;
    size_t len = _ta_align_up(n + 8, 8);
    memset(rec + n, 0, len - 8 - n);
    _ta_ev_write(TA_EV_MODULE, rec, len);
  }
  return 0;
}

/* Announce the objects loaded since the last look (sample lock held). */
static void _ta_mods_scan(void) { dl_iterate_phdr(_ta_mod_visit, NULL); }

#endif
