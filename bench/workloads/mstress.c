/* mstress: mixed lifetimes on several threads, after mimalloc-bench's
 * mstress: each thread replaces random slots of its own 2,000 blocks
 * (sizes mostly 8..128 bytes, some up to 4 KiB, a few up to 64 KiB), hands
 * one block in ten to a shared array (the block there before is freed by
 * whichever thread takes the slot: another thread, most often), and every
 * 20,000 steps frees half of its own. Peak RSS against the live data is
 * what it shows: short- and long-lived blocks share pages.
 * Usage: mstress [threads=2] [steps-per-thread=2000000] [seed=1] */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

#define LOCAL 2000
#define SHARED 4096

static _Atomic(unsigned char *) shared[SHARED];

typedef struct {
	long long steps;
	uint64_t seed, sum;
} worker_t;

static size_t pick_size(rng_t *r)
{
	uint64_t x = rng_range(r, 0, 999);
	if (x < 900)
		return (size_t)rng_range(r, 8, 128);
	if (x < 990)
		return (size_t)rng_range(r, 129, 4096);
	return (size_t)rng_range(r, 4097, 65536);
}

static void *run(void *argp)
{
	worker_t *w = argp;
	rng_t r = { w->seed };
	unsigned char *local[LOCAL] = { 0 };
	for (long long s = 0; s < w->steps; s++) {
		size_t n = pick_size(&r);
		unsigned char *p = xmalloc(n);
		p[0] = (unsigned char)n;
		p[n - 1] = (unsigned char)s;
		w->sum = mix(w->sum, n);
		if (rng_range(&r, 0, 9) == 0) {
			unsigned char *old = atomic_exchange(&shared[rng_range(&r, 0, SHARED - 1)], p);
			free(old); /* another thread's, most often */
		} else {
			int k = (int)rng_range(&r, 0, LOCAL - 1);
			free(local[k]);
			local[k] = p;
		}
		if (s % 20000 == 19999)
			for (int k = 0; k < LOCAL; k += 2) {
				free(local[k]);
				local[k] = NULL;
			}
	}
	for (int k = 0; k < LOCAL; k++)
		free(local[k]);
	return NULL;
}

int main(int argc, char **argv)
{
	int nthreads = (int)arg(argc, argv, 1, 2);
	long long steps = arg(argc, argv, 2, 2000000);
	uint64_t seed = (uint64_t)arg(argc, argv, 3, 1);
	if (nthreads < 1 || nthreads > 256 || steps < 1)
		die("usage: mstress [threads] [steps-per-thread] [seed]");
	worker_t *w = calloc((size_t)nthreads, sizeof *w);
	pthread_t *t = calloc((size_t)nthreads, sizeof *t);
	if (w == NULL || t == NULL)
		die("out of memory");
	for (int i = 0; i < nthreads; i++) {
		w[i].steps = steps;
		w[i].seed = seed * 7919 + (uint64_t)i;
		pthread_create(&t[i], NULL, run, &w[i]);
	}
	uint64_t sum = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		sum += w[i].sum;
	}
	for (int i = 0; i < SHARED; i++)
		free(atomic_load(&shared[i]));
	free(w);
	free(t);
	print_checksum(sum);
	return 0;
}
