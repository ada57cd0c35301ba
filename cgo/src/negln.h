/* negln.h: -ln(u) for the sampler's exponential countdowns, without libm.
 * A draw follows every sampled block and every realloc of a large one
 * (under realloc_chain, 5.6M a run): the series it used first, after a
 * loop halving u into [1, 2), was 14% of that program's time. Here u's
 * exponent comes from its bits, and ln of its mantissa m from a table at
 * 256 points c and a short series in r = m/c - 1 (|r| < 1/256): within
 * 1e-9 of libm's, relative (absolute where -ln u < 1: a countdown of under
 * a mean rate), checked by cgo/testdata/negln_test.c. */
#ifndef TA_NEGLN_H
#define TA_NEGLN_H

#include <stdint.h>
#include <string.h>

#define TA_LN2 0.6931471805599453

static double _ta_ln_at[256];  /* ln(1 + i/256) */
static double _ta_inv_at[256]; /* 1 / (1 + i/256) */

/* ln(x) for x in [1, 2), by the odd series of atanh: slow, for the table. */
static double _ta_ln_series(double x) {
  double z = (x - 1) / (x + 1), z2 = z * z, sum = 0, term = z;
  for (int k = 1; k < 60; k += 2, term *= z2) sum += term / k;
  return 2 * sum;
}

static void _ta_negln_init(void) {
  for (int i = 0; i < 256; i++) {
    double c = 1 + i / 256.0;
    _ta_ln_at[i] = _ta_ln_series(c);
    _ta_inv_at[i] = 1 / c;
  }
}

/* -ln(u) for u in (0, 1) (a normal double); _ta_negln_init first. */
static inline double _ta_neg_ln(double u) {
  uint64_t b;
  memcpy(&b, &u, sizeof b);
  int e = (int)(b >> 52) - 1023;
  uint64_t frac = b & ((1ull << 52) - 1);
  unsigned i = (unsigned)(frac >> 44);
  double m, c = 1 + i / 256.0;
  b = frac | (1023ull << 52);
  memcpy(&m, &b, sizeof m);
  double r = (m - c) * _ta_inv_at[i];
  return -(e * TA_LN2 + _ta_ln_at[i] + r * (1 - r * (0.5 - r * (1.0 / 3 - r * 0.25))));
}

#endif
