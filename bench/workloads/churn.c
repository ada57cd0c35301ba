/* churn: threads that come and go, after mimalloc's stress test (the
 * "mstress" of mimalloc-bench). Each round starts T threads and joins them;
 * a thread makes a few thousand zeroed blocks of 8 B..1 KiB (1 in 100 a
 * hundred times bigger, 1 in 1,000 a thousand times, 1 in 10,000 ten
 * thousand: up to 10 MiB), keeps half of them to the end of its life,
 * frees two in three of the others at random, and swaps one in four with
 * a shared array of 1,000 slots, so a block may be freed by a thread of a
 * later round. Between rounds half the shared slots are freed. What it
 * shows: whether the memory of threads that have gone serves the threads
 * that come (peak RSS), and the cost of a thread's first and last call.
 * Usage: churn [threads=2] [scale=50] [rounds=25] */
#include "common.h"
#include <pthread.h>
#include <stdatomic.h>

#define SLOTS 1000

static _Atomic(uintptr_t *) slots[SLOTS];
static long long scale;
static uint64_t made[256]; /* per thread id: the sizes it made (its own stream), over the rounds */

/* percent: true with probability pct / 100 (pct may be fractional). */
static int percent(rng_t *r, double pct)
{
	return (double)(rng_next(r) % 1000000) < pct * 10000.0;
}

/* make: a zeroed block of words words (scaled up now and then), its first
 * and last word stamped with its size so free can check it. */
static uintptr_t *make(rng_t *r, size_t words, uint64_t *sum)
{
	if (percent(r, 1)) {
		if (percent(r, 1))
			words *= 10000;
		else if (percent(r, 10))
			words *= 1000;
		else
			words *= 100;
	}
	if (words == 40)
		words++; /* a size glibc's threads use for their own stacks */
	uintptr_t *p = calloc(words, sizeof *p);
	if (p == NULL)
		die("out of memory");
	p[0] = words ^ 0x5a5a;
	if (words > 1)
		p[words - 1] = words ^ 0xa5a5;
	*sum = mix(*sum, words);
	return p;
}

static void unmake(uintptr_t *p)
{
	if (p == NULL)
		return;
	uintptr_t words = p[0] ^ 0x5a5a;
	if (words == 0 || (words > 1 && p[words - 1] != (words ^ 0xa5a5)))
		die("churn: a block's contents changed");
	free(p);
}

static void *run(void *argp)
{
	uint64_t id = (uint64_t)(uintptr_t)argp;
	rng_t r = { (id + 1) * 43 };
	uint64_t sum = made[id]; /* here, not in made[]: threads' entries share a line */
	size_t allocs = (size_t)(100 * scale) * (size_t)(id % 8 + 1);
	size_t keep = allocs / 2, nkept = 0, ndata = 0, cap = 0;
	uintptr_t **kept = calloc(keep ? keep : 1, sizeof *kept);
	uintptr_t **data = NULL;
	if (kept == NULL)
		die("out of memory");
	while (allocs > 0 || keep > 0) {
		if (keep == 0 || (percent(&r, 50) && allocs > 0)) {
			allocs--;
			if (ndata == cap) {
				cap += 100000;
				data = realloc(data, cap * sizeof *data);
				if (data == NULL)
					die("out of memory");
			}
			data[ndata++] = make(&r, (size_t)1 << (rng_next(&r) % 5), &sum);
		} else {
			kept[nkept++] = make(&r, (size_t)1 << (rng_next(&r) % 7), &sum);
			keep--;
		}
		if (percent(&r, 66) && ndata > 0) {
			size_t i = rng_next(&r) % ndata;
			unmake(data[i]);
			data[i] = NULL;
		}
		if (percent(&r, 25) && ndata > 0) {
			size_t i = rng_next(&r) % ndata;
			data[i] = atomic_exchange(&slots[rng_next(&r) % SLOTS], data[i]);
		}
	}
	for (size_t i = 0; i < nkept; i++)
		unmake(kept[i]);
	for (size_t i = 0; i < ndata; i++)
		unmake(data[i]);
	free(kept);
	free(data);
	made[id] = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	int nthreads = (int)arg(argc, argv, 1, 2);
	scale = arg(argc, argv, 2, 50);
	long long rounds = arg(argc, argv, 3, 25);
	if (nthreads < 1 || nthreads > 256 || scale < 1 || rounds < 1)
		die("usage: churn [threads] [scale] [rounds]");
	rng_t r = { 42 };
	pthread_t t[256];
	uint64_t sum = 0;
	for (long long n = 0; n < rounds; n++) {
		for (int i = 0; i < nthreads; i++)
			if (pthread_create(&t[i], NULL, run, (void *)(uintptr_t)i) != 0)
				die("pthread_create failed");
		for (int i = 0; i < nthreads; i++)
			pthread_join(t[i], NULL);
		for (int i = 0; i < SLOTS; i++) {
			if (percent(&r, 50) || n + 1 == rounds) {
				unmake(atomic_exchange(&slots[i], NULL));
			}
		}
	}
	for (int i = 0; i < nthreads; i++)
		sum = mix(sum, made[i]);
	print_checksum(sum);
	return 0;
}
