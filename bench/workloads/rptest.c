/* rptest: a random pattern with pauses, after rpmalloc's benchmark: each
 * thread replaces random slots of 4,096 blocks of 16 bytes..16 KiB and,
 * every 5,000 operations, sleeps 2 ms, long enough for an allocator's
 * purge timer to run between bursts: memory returned to the OS during a
 * pause that the next burst asks for again costs page faults.
 * Usage: rptest [threads=2] [ops-per-thread=1000000] [seed=1] */
#include "common.h"
#include <pthread.h>
#include <unistd.h>

#define SLOTS 4096

typedef struct {
	long long ops;
	uint64_t seed, sum;
} worker_t;

static void *run(void *argp)
{
	worker_t *w = argp;
	rng_t r = { w->seed };
	unsigned char **slot = calloc(SLOTS, sizeof *slot);
	if (slot == NULL)
		die("out of memory");
	for (long long i = 0; i < w->ops; i++) {
		int k = (int)rng_range(&r, 0, SLOTS - 1);
		if (slot[k] != NULL) {
			w->sum = mix(w->sum, slot[k][0]);
			free(slot[k]);
		}
		/* log-uniform sizes: as many blocks under 128 B as over 2 KiB */
		size_t n = (size_t)16 << rng_range(&r, 0, 10);
		n += (size_t)rng_range(&r, 0, n - 1);
		slot[k] = xmalloc(n);
		slot[k][0] = (unsigned char)(n + (size_t)i);
		slot[k][n - 1] = 0;
		if (i % 5000 == 4999)
			usleep(2000);
	}
	for (int k = 0; k < SLOTS; k++)
		free(slot[k]);
	free(slot);
	return NULL;
}

int main(int argc, char **argv)
{
	int nthreads = (int)arg(argc, argv, 1, 2);
	long long ops = arg(argc, argv, 2, 1000000);
	uint64_t seed = (uint64_t)arg(argc, argv, 3, 1);
	if (nthreads < 1 || nthreads > 256 || ops < 1)
		die("usage: rptest [threads] [ops-per-thread] [seed]");
	worker_t *w = calloc((size_t)nthreads, sizeof *w);
	pthread_t *t = calloc((size_t)nthreads, sizeof *t);
	if (w == NULL || t == NULL)
		die("out of memory");
	for (int i = 0; i < nthreads; i++) {
		w[i].ops = ops;
		w[i].seed = seed * 104729 + (uint64_t)i;
		pthread_create(&t[i], NULL, run, &w[i]);
	}
	uint64_t sum = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		sum += w[i].sum;
	}
	free(w);
	free(t);
	print_checksum(sum);
	return 0;
}
