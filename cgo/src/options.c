/* options.c: the one options table. Each option has a name, a default, its
 * TAGALLOC_ environment variable and a line of doc; all are parsed once, at
 * initialization. Sizes accept K, M, G suffixes (powers of 1024). */

#include <stdlib.h>

_ta_options_t _ta_opt;

/* The builds that read an option: TAGALLOC_VERBOSE names only those of
 * the build it runs in, and the others, if set, get a warning. */
enum { TA_OPT_ANY, TA_OPT_CHECK, TA_OPT_STACKS };

typedef struct _ta_option_s {
  const char *env;
  size_t *dst;
  size_t def;
  const char *doc;
  int builds; /* TA_OPT_* */
} _ta_option_t;

static const _ta_option_t _ta_options[] = {
    {"TAGALLOC_ARENA_RESERVE", &_ta_opt.arena_reserve, 64 * TA_GiB,
     "address space reserved per arena (halved until the OS accepts it)", TA_OPT_ANY},
    {"TAGALLOC_HUGE_THRESHOLD", &_ta_opt.huge_threshold, 32 * TA_MiB,
     "blocks this large or larger get their own mapping", TA_OPT_ANY},
    {"TAGALLOC_PURGE_DELAY_MS", &_ta_opt.purge_delay_ms, 200,
     "free memory is returned to the OS after this many milliseconds", TA_OPT_ANY},
    {"TAGALLOC_RETAIN_MIN", &_ta_opt.retain_min, 8 * TA_MiB,
     "free-but-resident memory kept for reuse (at least; or 1/8 of the heap)", TA_OPT_ANY},
    {"TAGALLOC_VERBOSE", &_ta_opt.verbose, 0, "1: print the options in effect to stderr at start", TA_OPT_ANY},
    {"TAGALLOC_REQUESTED", &_ta_opt.requested, 0,
     "1: keep each block's requested size, so reports give live requested bytes (costs a little time)", TA_OPT_ANY},
    {"TAGALLOC_SAMPLE_RATE", &_ta_opt.sample_rate, 512 * TA_KiB,
     "with stacks: mean bytes allocated between two sampled blocks (Poisson)", TA_OPT_STACKS},
    {"TAGALLOC_UNWIND", &_ta_opt.unwind, 0,
     "with stacks: 0 cached CFI rules (libgcc where they do not reach), 1 libgcc only, 2 both, aborting if they differ",
     TA_OPT_STACKS},
    {"TAGALLOC_CHECK", &_ta_opt.check, 7,
     "checking build (tagalloc run --check): a sum of 1 canaries after each block (overruns, found at free "
     "and realloc), 2 poison in freed blocks (writes after free, found at reuse), 4 delayed reuse (quarantine)",
     TA_OPT_CHECK},
    {"TAGALLOC_CHECK_QUARANTINE", &_ta_opt.check_quarantine, 4 * TA_MiB,
     "checking build: bytes of freed blocks held back from reuse, oldest released first (a block over a "
     "quarter of it is not held)",
     TA_OPT_CHECK},
    {"TAGALLOC_FAULT_EVERY", &_ta_opt.fault_every, 0,
     "testing: every Nth request for memory (a span, a mapping) fails as if memory were exhausted", TA_OPT_ANY},
    {"TAGALLOC_FAULT_COUNT", &_ta_opt.fault_count, 0,
     "testing: stop injecting after this many failures (0: never stop), as if memory came back", TA_OPT_ANY},
};
/* And one string option, TAGALLOC_TAG: untagged threads are charged to this
 * name instead of "untagged" (tags.c). */

/* A size as every tagalloc command reads one (internal/size): digits, then
 * optionally K, M or G (either case), "i" after the unit, "B"; spaces around
 * it. internal/size/testdata/sizes.txt holds the cases both are tested on. */
static bool _ta_is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

static bool _ta_parse_size(const char *s, size_t *out) {
  if (!s) return false;
  while (_ta_is_space(*s)) s++;
  if (*s < '0' || *s > '9') return false;
  size_t v = 0;
  for (; *s >= '0' && *s <= '9'; s++) {
    size_t d = (size_t)(*s - '0');
    if (v > (SIZE_MAX - d) / 10) return false;
    v = v * 10 + d;
  }
  size_t mul = 1;
  switch (*s) {
  case 'k': case 'K': mul = TA_KiB; break;
  case 'm': case 'M': mul = TA_MiB; break;
  case 'g': case 'G': mul = TA_GiB; break;
  }
  if (mul > 1) {
    s++;
    if (*s == 'i' || *s == 'I') s++;
  }
  if (*s == 'b' || *s == 'B') s++;
  while (_ta_is_space(*s)) s++;
  if (*s) return false;
  if (mul > 1 && v > SIZE_MAX / mul) return false;
  *out = v * mul;
  return true;
}

/* Whether this build of the library reads option o. */
static bool _ta_option_here(const _ta_option_t *o) {
  return o->builds == TA_OPT_ANY || (o->builds == TA_OPT_CHECK && TA_CHECK) || (o->builds == TA_OPT_STACKS && TA_SAMPLING);
}

static void _ta_options_parse(void) {
  for (size_t i = 0; i < sizeof(_ta_options) / sizeof(_ta_options[0]); i++) {
    const _ta_option_t *o = &_ta_options[i];
    *o->dst = o->def;
    const char *v = getenv(o->env);
    if (!v) continue;
    if (!_ta_option_here(o)) {
      bool chk = o->builds == TA_OPT_CHECK;
      _ta_warn("%s: this build of the library has no %s (tagalloc run --%s builds one)", o->env,
               chk ? "checks" : "stacks", chk ? "check" : "stacks");
      continue;
    }
    size_t x;
    if (_ta_parse_size(v, &x)) *o->dst = x;
    else _ta_warn("ignoring %s=%s: not a size (%s)", o->env, v, o->doc);
  }
  _ta_opt.default_tag = getenv("TAGALLOC_TAG");
  /* TAGALLOC_STACKS=off|sampled|full: in a library built with TA_SAMPLING */
  const char *st = getenv("TAGALLOC_STACKS");
  _ta_opt.stacks = 0;
  if (st && strcmp(st, "sampled") == 0) _ta_opt.stacks = 1;
  else if (st && strcmp(st, "full") == 0) _ta_opt.stacks = 2;
  else if (st && strcmp(st, "off") != 0) _ta_warn("ignoring TAGALLOC_STACKS=%s: off, sampled or full", st);
  if (_ta_opt.stacks && !TA_SAMPLING) {
    _ta_warn("TAGALLOC_STACKS=%s: this build of the library has no stacks (tagalloc run --stacks builds one)", st);
    _ta_opt.stacks = 0;
  }
  if (_ta_opt.sample_rate == 0) _ta_opt.sample_rate = 1;
  if (_ta_opt.sample_rate > ((size_t)1 << 60)) _ta_opt.sample_rate = (size_t)1 << 60; /* a countdown is an int64_t */
  if (_ta_opt.huge_threshold <= TA_MAX_SMALL) _ta_opt.huge_threshold = TA_MAX_SMALL + 1;
  if (_ta_opt.arena_reserve < 64 * TA_MiB) _ta_opt.arena_reserve = 64 * TA_MiB;
  if (_ta_opt.verbose)
    for (size_t i = 0; i < sizeof(_ta_options) / sizeof(_ta_options[0]); i++) {
      const _ta_option_t *o = &_ta_options[i];
      if (_ta_option_here(o)) _ta_warn("%s=%zu", o->env, *o->dst);
    }
}
