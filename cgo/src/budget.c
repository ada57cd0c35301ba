/* budget.c: tag budgets (tagalloc_set_budget, TAGALLOC_BUDGET). A budget
 * limits the live bytes of a tag and of every tag under it (a name that
 * is the budget's path or starts with it and "/"), with a policy past the
 * limit: fail (the allocation returns NULL, ENOMEM, and is not charged),
 * notify (a callback runs once per crossing) or observe (counted only).
 *
 * What is charged is reservations, not blocks: every counter set of a
 * budgeted tag is held as one of many (tags.c, "peaks"), so its live bytes
 * stay under its high-water mark and pass it only out of line, where the
 * mark rises to live + TA_PEAK_SLACK (_ta_ctr_rise_many) and comes down
 * again past TA_PEAK_CAP of headroom (_ta_ctr_lower). A budget's charge is
 * the sum of the marks of its tags' sets (the shared fallback set counts
 * its live bytes), moved by exactly those rises and lowerings, so:
 *   - the fast paths do nothing more, budget or not: a tag without one
 *     pays nothing at all, and one with one pays a compare-and-swap per
 *     rise, one every 32 KiB a thread allocates under it;
 *   - live bytes <= charge, so under fail live bytes never pass the limit,
 *     however many threads race (each rise is one CAS that checks);
 *   - a refusal may come early by what the other threads' sets reserved
 *     above their live bytes: at most TA_PEAK_CAP (64 KiB) each, once they
 *     have passed a slow path since their last free.
 * A rise that cannot have its slack takes only what the allocation needs
 * before it is refused. Nested budgets (gfx and gfx/webgl) are a chain,
 * innermost first: a rise is charged to each, and refused if any fail
 * budget would pass its limit.
 *
 * The table lives in the books region (books.c, version 6), where tagalloc
 * reads each budget's charge, crossings and refusals. Setting a budget
 * takes the tags lock; a budget set while threads allocate under its tags
 * reads their marks once, and a rise racing with that read may be counted
 * twice (a charge too high by at most one slack per racing thread) or not
 * at all (too low by one allocation). Budgets set before the tags are used
 * (TAGALLOC_BUDGET, read at start) are exact. */

#include "../include/tagalloc.h"

#define TA_BUDGET_FAIL 1u
#define TA_BUDGET_NOTIFY 2u
#define TA_BUDGET_OBSERVE 3u

typedef struct _ta_budget_s {
  uint32_t tag;               /* the tag or level it covers (an interned name) */
  uint32_t policy;            /* TA_BUDGET_* */
  uint64_t limit;             /* bytes */
  _Atomic(int64_t) charged;   /* what counts against the limit (above) */
  _Atomic(uint64_t) crossings, refused;
  uint32_t parent;            /* index + 1 of the next budget out, 0: none */
  _Atomic(uint32_t) over;     /* 1 while charged > limit (a crossing counted) */
  uint64_t spare[2];
} _ta_budget_t;
_Static_assert(sizeof(_ta_budget_t) == TA_BUDGET_SLOT, "books/region.go reads budget slots of this size (books.c sizes the table)");

static _ta_budget_t *_ta_budgets;                    /* TA_BUDGETS_MAX, in the books region */
TA_COLD_BSS static uint8_t _ta_tag_budget_of[TA_TAG_SLOTS]; /* index + 1 of a tag's innermost budget, 0: none */
static _Atomic(tagalloc_budget_fn) _ta_budget_fn;
static void *_ta_budget_arg;

/* tag's innermost budget (index + 1), 0 if none. A byte a rise reads. */
static inline unsigned _ta_budget_of(uint32_t tag) {
  /* Until the first budget, not even a read of the array: its pages stay
   * untouched (a read of a zeroed page maps one here). The count only
   * grows, and is stored before any entry of the array. */
  if (atomic_load_explicit(&_ta_books->budgets_count, memory_order_acquire) == 0) return 0;
  return tag < TA_TAG_SLOTS ? __atomic_load_n(&_ta_tag_budget_of[tag], __ATOMIC_ACQUIRE) : 0;
}

/* Does the name of tag lie under path (p bytes): the path itself or a
 * level below it? */
static bool _ta_budget_covers(const char *path, size_t p, uint32_t tag) {
  const char *name = _ta_tag_names[tag].name;
  return strncmp(name, path, p) == 0 && (name[p] == 0 || name[p] == '/');
}

/* The innermost budget covering tag (index + 1), 0 if none (tags lock:
 * the table only grows under it). */
static unsigned _ta_budget_find_locked(uint32_t tag) {
  unsigned best = 0;
  size_t best_len = 0;
  uint32_t n = atomic_load_explicit(&_ta_books->budgets_count, memory_order_relaxed);
  for (uint32_t i = 0; i < n; i++) {
    const char *path = _ta_tag_names[_ta_budgets[i].tag].name;
    size_t p = strlen(path);
    if (p >= best_len && _ta_budget_covers(path, p, tag)) best = i + 1, best_len = p;
  }
  return best;
}

/* A new tag (tags lock held): its budget, if a budget covers it. Called
 * before the tag's id is published, so its first set registers under it. */
static void _ta_budget_tag_new_locked(uint32_t tag) {
  if (_ta_budgets && atomic_load_explicit(&_ta_books->budgets_count, memory_order_relaxed))
    __atomic_store_n(&_ta_tag_budget_of[tag], (uint8_t)_ta_budget_find_locked(tag), __ATOMIC_RELEASE);
}

/* Add d to budget b's charge and to every budget out from it (d may be
 * negative: nothing is refused then); a charge that comes back to its
 * limit re-arms its crossing. */
static void _ta_budget_add(unsigned b, int64_t d) {
  for (; b; b = _ta_budgets[b - 1].parent) {
    _ta_budget_t *bu = &_ta_budgets[b - 1];
    int64_t now = atomic_fetch_add_explicit(&bu->charged, d, memory_order_relaxed) + d;
    if (d < 0 && now <= (int64_t)bu->limit && atomic_load_explicit(&bu->over, memory_order_relaxed))
      atomic_store_explicit(&bu->over, 0, memory_order_relaxed);
  }
}

/* Charge x bytes to budget b0 and those out from it. Each is checked and
 * charged with a compare-and-swap, so a fail budget never passes its
 * limit; if one would (or, strict, if any would), those already charged
 * are given back and the charge is refused (false; *crossed: the budget
 * that refused, index + 1). Otherwise notify and observe budgets take it
 * past their limits, and *crossed gets the outermost one this took past
 * its limit for the first time since it was last under (0: none). */
static bool _ta_budget_try(unsigned b0, int64_t x, bool strict, unsigned *crossed) {
  *crossed = 0;
  for (unsigned b = b0; b; b = _ta_budgets[b - 1].parent) {
    _ta_budget_t *bu = &_ta_budgets[b - 1];
    int64_t c = atomic_load_explicit(&bu->charged, memory_order_relaxed);
    for (;;) {
      if ((strict || bu->policy == TA_BUDGET_FAIL) && c + x > (int64_t)bu->limit) {
        for (unsigned u = b0; u != b; u = _ta_budgets[u - 1].parent) /* give back the inner ones */
          atomic_fetch_sub_explicit(&_ta_budgets[u - 1].charged, x, memory_order_relaxed);
        *crossed = b;
        return false;
      }
      if (atomic_compare_exchange_weak_explicit(&bu->charged, &c, c + x, memory_order_relaxed, memory_order_relaxed)) break;
    }
    if (c + x > (int64_t)bu->limit) {
      uint32_t no = 0;
      if (atomic_compare_exchange_strong_explicit(&bu->over, &no, 1, memory_order_relaxed, memory_order_relaxed)) {
        atomic_fetch_add_explicit(&bu->crossings, 1, memory_order_relaxed);
        *crossed = b;
      }
    }
  }
  return true;
}

/* A crossing of budget b: its callback, if it notifies and one is set.
 * Called from the allocation that crossed, holding no lock of ours. */
static void _ta_budget_notify(unsigned b) {
  _ta_budget_t *bu = &_ta_budgets[b - 1];
  tagalloc_budget_fn fn = atomic_load_explicit(&_ta_budget_fn, memory_order_acquire);
  if (bu->policy == TA_BUDGET_NOTIFY && fn)
    fn(_ta_tag_names[bu->tag].name, bu->limit, (uint64_t)atomic_load_explicit(&bu->charged, memory_order_relaxed),
       _ta_budget_arg);
}

/* A set of a budgeted tag (b: its innermost budget) rises: its live
 * bytes passed its mark by need bytes, and it would raise the mark by
 * *x (need and the slack). Charges the raise if every budget has room
 * for it; else need alone (*x becomes need), which a notify or observe
 * budget takes past its limit (a crossing: the callback runs) and a fail
 * budget refuses: false, nothing charged (the caller undoes the
 * allocation), the refusal and the crossing counted. */
static bool _ta_budget_rise(unsigned b, uint64_t need, uint64_t *x) {
  unsigned crossed;
  if (_ta_budget_try(b, (int64_t)*x, true, &crossed)) return true;
  *x = need;
  if (!_ta_budget_try(b, (int64_t)need, false, &crossed)) {
    _ta_budget_t *bu = &_ta_budgets[crossed - 1];
    atomic_fetch_add_explicit(&bu->refused, 1, memory_order_relaxed);
    uint32_t no = 0;
    if (atomic_compare_exchange_strong_explicit(&bu->over, &no, 1, memory_order_relaxed, memory_order_relaxed))
      atomic_fetch_add_explicit(&bu->crossings, 1, memory_order_relaxed);
    return false;
  }
  if (crossed) _ta_budget_notify(crossed);
  return true;
}

/* Budget b's charge from scratch: the marks of its tags' counter sets,
 * the live bytes of their fallback sets. */
static int64_t _ta_budget_sum(unsigned b) {
  _ta_budget_t *bu = &_ta_budgets[b - 1];
  const char *path = _ta_tag_names[bu->tag].name;
  size_t p = strlen(path);
  int64_t sum = 0;
  uint32_t n = atomic_load(&_ta_books->tag_count);
  for (uint32_t id = 0; id < TA_TAG_SLOTS; id++) {
    if ((id >= n && id != TA_TAG_OVERFLOW) || !_ta_budget_covers(path, p, id)) continue;
    _ta_ctr_t *f = &_ta_ctr_fallback[id];
    TA_FOR_EACH_CTR(id, c, {
      int64_t live, high;
      _ta_ctr_read(c, &live, &high);
      sum += c == f ? live : high;
    });
  }
  return sum;
}

/* Count every budget's charge again (a fork child, after its books were
 * brought in line with its heap). */
static void _ta_budgets_recount(void) {
  if (!_ta_budgets) return;
  uint32_t n = atomic_load(&_ta_books->budgets_count);
  for (uint32_t i = 0; i < n; i++) {
    int64_t s = _ta_budget_sum(i + 1);
    atomic_store(&_ta_budgets[i].charged, s);
    atomic_store(&_ta_budgets[i].over, s > (int64_t)_ta_budgets[i].limit ? 1u : 0u);
  }
}

/* Set (or change) the budget on name (n bytes, valid). Tags lock held. */
static int _ta_budget_set_locked(const char *name, size_t n, uint64_t limit, uint32_t policy) {
  int32_t id = _ta_tag_intern_locked(name, n, _ta_tag_hashof(name, n)); /* a level no tag has used yet is registered */
  if (id < 0) return ENOSPC;
  uint32_t tag = (uint32_t)id;
  uint32_t count = atomic_load_explicit(&_ta_books->budgets_count, memory_order_relaxed);
  for (uint32_t i = 0; i < count; i++) {
    if (_ta_budgets[i].tag == tag) { /* a new limit or policy: the charge stays */
      _ta_budgets[i].limit = limit;
      _ta_budgets[i].policy = policy;
      return 0;
    }
  }
  if (count == TA_BUDGETS_MAX) return ENOSPC;
  _ta_budget_t *bu = &_ta_budgets[count];
  memset(bu, 0, sizeof *bu);
  bu->tag = tag, bu->limit = limit, bu->policy = policy;
  bu->parent = _ta_budget_find_locked(tag); /* the innermost one out from it, before it counts */
  atomic_store_explicit(&_ta_books->budgets_count, count + 1, memory_order_release);
  unsigned me = count + 1;
  /* Budgets inside this one now have it as their parent if it is the
   * nearest; tags under it take it if it is now their innermost. */
  for (uint32_t i = 0; i < count; i++)
    if (_ta_budgets[i].parent == bu->parent && _ta_budget_covers(name, n, _ta_budgets[i].tag)) _ta_budgets[i].parent = me;
  uint32_t ntags = atomic_load_explicit(&_ta_books->tag_count, memory_order_relaxed);
  for (uint32_t id = 0; id < TA_TAG_SLOTS; id++) {
    if ((id >= ntags && id != TA_TAG_OVERFLOW) || !_ta_budget_covers(name, n, id)) continue;
    if (_ta_budget_find_locked(id) != me) continue;
    __atomic_store_n(&_ta_tag_budget_of[id], (uint8_t)me, __ATOMIC_RELEASE);
    _ta_tag_holders_many(id, atomic_load(&_ta_tag_holders[id])); /* its marks become reservations */
  }
  int64_t s = _ta_budget_sum(me);
  atomic_store(&bu->charged, s);
  if (s > (int64_t)limit) {
    atomic_store(&bu->over, 1u);
    atomic_fetch_add(&bu->crossings, 1);
  }
  return 0;
}

TA_EXPORT int tagalloc_set_budget(const char *tag, uint64_t bytes, int policy) {
  size_t n = _ta_tag_len(tag);
  if (!n || bytes == 0 || bytes > INT64_MAX || policy < (int)TA_BUDGET_FAIL || policy > (int)TA_BUDGET_OBSERVE) return EINVAL;
  if (!_ta_ensure_init()) return ENOMEM;
  _ta_mutex_lock(&_ta_tags_lock);
  int rc = _ta_budget_set_locked(tag, n, bytes, (uint32_t)policy);
  _ta_mutex_unlock(&_ta_tags_lock);
  return rc;
}

TA_EXPORT void tagalloc_set_budget_callback(tagalloc_budget_fn fn, void *arg) {
  _ta_budget_arg = arg;
  atomic_store_explicit(&_ta_budget_fn, fn, memory_order_release);
}

TA_EXPORT int tagalloc_budget_stats(const char *tag, tagalloc_budget_stats_t *out) {
  uint32_t hash;
  size_t n = _ta_tag_scan(tag, &hash);
  if (!n || !out) return EINVAL;
  if (!_ta_ensure_init()) return ENOMEM;
  int32_t id = _ta_tag_find_hashed(tag, n, hash);
  uint32_t count = atomic_load_explicit(&_ta_books->budgets_count, memory_order_acquire);
  for (uint32_t i = 0; id >= 0 && i < count; i++) {
    _ta_budget_t *bu = &_ta_budgets[i];
    if (bu->tag != (uint32_t)id) continue;
    int64_t c = atomic_load_explicit(&bu->charged, memory_order_relaxed);
    out->limit = bu->limit;
    out->policy = (int)bu->policy;
    out->charged = c > 0 ? (uint64_t)c : 0;
    out->crossings = atomic_load_explicit(&bu->crossings, memory_order_relaxed);
    out->refused = atomic_load_explicit(&bu->refused, memory_order_relaxed);
    return 0;
  }
  return ENOENT;
}

/* TAGALLOC_BUDGET='gfx=256M,parser=64M:notify' at start: each entry a tag,
 * a size (the options' syntax, _ta_parse_size) and a policy (fail by
 * default). A bad
 * entry is an error naming it, and the program does not start (a budget
 * silently left out would not do what the user asked). */
static void _ta_budgets_init(void) {
  _ta_budgets = (_ta_budget_t *)((uint8_t *)_ta_books + _ta_books->budgets_off);
  const char *env = getenv(TA_ENV_BUDGET);
  if (!env || !*env) return;
  for (const char *e = env; *e;) {
    while (*e == ' ') e++; /* "a=1M, b=2M" */
    const char *end = strchr(e, ',');
    size_t len = end ? (size_t)(end - e) : strlen(e);
    size_t entry_len = len;
    while (entry_len && e[entry_len - 1] == ' ') entry_len--;
    char entry[160];
    if (entry_len >= sizeof entry) _ta_fatal("TAGALLOC_BUDGET: an entry is too long: %.40s...", e);
    memcpy(entry, e, entry_len);
    entry[entry_len] = 0;
    char *eq = strchr(entry, '=');
    uint32_t policy = TA_BUDGET_FAIL;
    char *colon = eq ? strchr(eq, ':') : NULL;
    if (colon) {
      *colon = 0;
      if (strcmp(colon + 1, "fail") == 0) policy = TA_BUDGET_FAIL;
      else if (strcmp(colon + 1, "notify") == 0) policy = TA_BUDGET_NOTIFY;
      else if (strcmp(colon + 1, "observe") == 0) policy = TA_BUDGET_OBSERVE;
      else policy = 0;
    }
    size_t bytes = 0;
    bool ok = eq != NULL && policy != 0;
    if (ok) {
      *eq = 0;
      ok = _ta_parse_size(eq + 1, &bytes) && bytes > 0 && bytes <= (size_t)INT64_MAX; /* the options' syntax */
    }
    size_t n = ok ? _ta_tag_len(entry) : 0;
    if (!n) {
      memcpy(entry, e, entry_len); /* as given */
      entry[entry_len] = 0;
      _ta_fatal("TAGALLOC_BUDGET: cannot read \"%s\": want TAG=SIZE[:fail|notify|observe], SIZE like 64M", entry);
    }
    _ta_mutex_lock(&_ta_tags_lock);
    int rc = _ta_budget_set_locked(entry, n, bytes, policy);
    _ta_mutex_unlock(&_ta_tags_lock);
    if (rc) _ta_fatal("TAGALLOC_BUDGET: \"%s\": more than %d budgets or %u tags", entry, TA_BUDGETS_MAX, (unsigned)TA_MAX_TAGS);
    e += len;
    if (*e == ',') e++;
  }
}
