/* small_random: random sizes 8..1024 bytes over a working set of slots.
 * Each thread owns an array of slots and, per step, frees a random slot's
 * block (checking its stamp) and puts a new block of random size there.
 * With read=0 a block is freed without being read first (an evicted
 * buffer whose bytes went out long ago): over a working set bigger than
 * the caches, the block's line is then the allocator's own miss.
 * Usage: small_random [threads=1] [iters-per-thread=20000000] [slots=20000] [seed=1] [read=1] */
#include "common.h"
#include <pthread.h>

typedef struct {
	int id;
	long long iters;
	long slots;
	int read; /* read a block (its stamp) before freeing it */
	uint64_t seed;
	uint64_t sum;
} worker_t;

static void *run(void *argp)
{
	worker_t *w = argp;
	rng_t r = { w->seed * 0x100000001b3ULL + (uint64_t)w->id };
	unsigned char **slot = calloc((size_t)w->slots, sizeof *slot);
	size_t *size = calloc((size_t)w->slots, sizeof *size);
	uint64_t h = 0;
	if (slot == NULL || size == NULL)
		die("out of memory");
	for (long long i = 0; i < w->iters; i++) {
		uint64_t x = rng_next(&r);
		long k = (long)(x % (uint64_t)w->slots);
		if (slot[k] != NULL) {
			if (w->read) {
				uint64_t stamp;
				memcpy(&stamp, slot[k], sizeof stamp);
				h = mix(h, stamp ^ slot[k][size[k] - 1]);
			} else {
				h = mix(h, size[k]);
			}
			free(slot[k]);
		}
		/* Sizes 8..1024, biased toward small ones like real programs. */
		size_t n = (x >> 32) & 1 ? 8 + ((x >> 33) % 121) : 8 + ((x >> 33) % 1017);
		unsigned char *p = xmalloc(n);
		uint64_t stamp = (uint64_t)i ^ n;
		memcpy(p, &stamp, sizeof stamp);
		p[n - 1] = (unsigned char)i;
		slot[k] = p;
		size[k] = n;
	}
	for (long k = 0; k < w->slots; k++) {
		if (slot[k] != NULL) {
			h = mix(h, slot[k][size[k] - 1]);
			free(slot[k]);
		}
	}
	free(slot);
	free(size);
	w->sum = h;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = (int)arg(argc, argv, 1, 1);
	long long iters = arg(argc, argv, 2, 20000000);
	long slots = (long)arg(argc, argv, 3, 20000);
	uint64_t seed = (uint64_t)arg(argc, argv, 4, 1);
	int read = (int)arg(argc, argv, 5, 1);
	if (threads < 1 || threads > 256 || iters < 0 || slots < 1 || (read != 0 && read != 1))
		die("usage: small_random [threads] [iters] [slots] [seed] [read=0|1]");
	worker_t *w = calloc((size_t)threads, sizeof *w);
	pthread_t *t = calloc((size_t)threads, sizeof *t);
	if (w == NULL || t == NULL)
		die("out of memory");
	for (int i = 0; i < threads; i++) {
		w[i] = (worker_t){ .id = i, .iters = iters, .slots = slots, .read = read, .seed = seed };
		if (pthread_create(&t[i], NULL, run, &w[i]) != 0)
			die("pthread_create failed");
	}
	uint64_t h = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		h = mix(h, w[i].sum);
	}
	print_checksum(h);
	free(w);
	free(t);
	return 0;
}
