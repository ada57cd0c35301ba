/* multilib: a program whose heap belongs to several libraries in set
 * shares, to measure per-library estimates (bench/multilib.sh): of the
 * bytes allocated, liblayer_a.so 60%, _b 25%, _c 10%, _d 4%, and the
 * program itself about 1%. Interleaved in rounds, so each library's
 * samples come from all of the run; each library's working sets, left
 * live, scale with the total (about 50 MiB live at exit per 400 MiB).
 * Argument: MiB allocated in all (default 400). */
#include <stdint.h>
#include <stdlib.h>

void layer_a(uint64_t seed, size_t bytes, size_t slots);
void layer_b(uint64_t seed, size_t bytes, size_t slots);
void layer_c(uint64_t seed, size_t bytes, size_t slots);
void layer_d(uint64_t seed, size_t bytes, size_t slots);

int main(int argc, char **argv) {
  size_t total = (size_t)(argc > 1 ? atol(argv[1]) : 400) << 20;
  const int rounds = 20;
  size_t per = total / rounds, k = total / (400 << 20) ? total / (400 << 20) : 1;
  void **own = calloc(4096, sizeof *own);
  for (int r = 0; r < rounds; r++) {
    layer_a(1000 + r, per * 60 / 100, 500 * k);
    layer_b(2000 + r, per * 25 / 100, 300 * k);
    layer_c(3000 + r, per * 10 / 100, 150 * k);
    layer_d(4000 + r, per * 4 / 100, 60 * k);
    for (size_t i = 0, done = 0; done < per / 100; i = (i + 1) % 4096) { /* its own 1% */
      free(own[i]);
      own[i] = malloc(200 + i % 600);
      done += 200 + i % 600;
    }
  }
  return 0;
}
