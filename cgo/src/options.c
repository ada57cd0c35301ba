/* options.c: the one options table. Each option has a name, a default, its
 * TAGALLOC_ environment variable and a line of doc; all are parsed once, at
 * initialization. Sizes accept K, M, G suffixes (powers of 1024). */

#include <stdlib.h>

_ta_options_t _ta_opt;

/* The builds that read an option (TA_OPT_ANY, TA_OPT_CHECK, TA_OPT_STACKS:
 * shared.h): TAGALLOC_VERBOSE names only those of the build it runs in,
 * and the others, if set, get a warning. */
typedef struct _ta_option_s {
  const char *env;
  size_t *dst;
  size_t def;
  const char *doc;
  int builds; /* TA_OPT_* */
} _ta_option_t;

/* The table: TA_OPTIONS (shared.h, generated from internal/layout/mklayout/desc.go,
 * where the docs' table and the Go side read it too). */
#define TA_OPTION_ROW(env, field, def, builds, doc) {env, &_ta_opt.field, def, doc, builds},
static const _ta_option_t _ta_options[] = {TA_OPTIONS(TA_OPTION_ROW)};
#undef TA_OPTION_ROW
/* And two string options: TA_ENV_TAG, untagged threads are charged to
 * this name instead of "untagged" (tags.c); TA_ENV_STACKS, below. */

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
  _ta_opt.default_tag = getenv(TA_ENV_TAG);
  /* TAGALLOC_STACKS=off|sampled|full: in a library built with TA_SAMPLING */
  const char *st = getenv(TA_ENV_STACKS);
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
