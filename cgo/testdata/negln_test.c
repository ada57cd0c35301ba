/* negln_test.c: the sampler's -ln(u) (src/negln.h) against libm's, over
 * u spread across (0, 1): every binade, every table interval, the ends.
 * Fails above an error of 1e-9 (relative; absolute where -ln u < 1), or
 * if a table entry is not the series' value. */
#include <math.h>
#include <stdio.h>

#include "../src/negln.h"

int main(void) {
  /* the tables are the series' values, bit for bit */
  for (int i = 0; i < 256; i++) {
    double c = 1 + i / 256.0;
    if (_ta_ln_at[i] != _ta_ln_series(c) || _ta_inv_at[i] != 1 / c) {
      printf("table entry %d: ln %a (series %a), inverse %a (want %a)\n", i, _ta_ln_at[i], _ta_ln_series(c), _ta_inv_at[i], 1 / c);
      return 1;
    }
  }
  double worst = 0, worst_u = 0;
  unsigned long n = 0;
  uint64_t x = 88172645463325252ull;
  for (int k = 0; k < 4000000; k++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    double u = (double)((x >> 11) | 1) / 9007199254740992.0; /* as the sampler draws it */
    if (k % 4 == 1) u = ldexp(1 + (k % 1024) / 1024.0, -(k % 53) - 1); /* table points, binades */
    if (k == 2) u = 1.0 / 9007199254740992.0;
    if (k == 3) u = 1 - 1.0 / 9007199254740992.0;
    if (!(u > 0 && u < 1)) continue;
    double want = -log(u), got = _ta_neg_ln(u);
    /* relative, or absolute where -ln u < 1 (a countdown of under a mean
     * rate: there the error is a billionth of the rate) */
    double err = fabs(got - want) / (want > 1 ? want : 1);
    if (err > worst) worst = err, worst_u = u;
    n++;
  }
  printf("%lu values, worst relative error %.3g at u=%.17g\n", n, worst, worst_u);
  return worst < 1e-9 ? 0 : 1;
}
