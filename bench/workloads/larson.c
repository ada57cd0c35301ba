/* larson: a server simulation after Larson & Krishnan (ISMM '98). Each
 * epoch starts fresh worker threads; each takes over the slot array (and
 * so the blocks) left by a different thread of the previous epoch, and
 * replaces random slots with new blocks of 8..512 bytes. Blocks are thus
 * freed by threads other than those that allocated them, and thread caches
 * are created and torn down all the time.
 * Usage: larson [threads=2] [epochs=40] [ops-per-epoch=250000] [slots=4000] [seed=1] */
#include "common.h"
#include <pthread.h>

/* One cache line each: the worker updates r on every step, and two sets
 * sharing a line would measure the benchmark's own false sharing (which
 * depends on where the allocator happens to put the array), not the
 * allocator. */
typedef struct {
	_Alignas(64) unsigned char **slot;
	size_t *size;
	rng_t r;   /* travels with the array, so the work is deterministic */
	uint64_t sum;
} set_t;

typedef struct {
	set_t *set;
	long slots;
	long long ops;
} job_t;

static void *work(void *argp)
{
	job_t *j = argp;
	set_t *s = j->set;
	uint64_t h = s->sum;
	for (long long i = 0; i < j->ops; i++) {
		uint64_t x = rng_next(&s->r);
		long k = (long)(x % (uint64_t)j->slots);
		if (s->slot[k] != NULL) {
			h = mix(h, s->slot[k][0] ^ s->slot[k][s->size[k] - 1]);
			free(s->slot[k]);
		}
		size_t n = 8 + (size_t)((x >> 32) % 505);
		unsigned char *p = xmalloc(n);
		p[0] = (unsigned char)x;
		p[n - 1] = (unsigned char)(x >> 8);
		s->slot[k] = p;
		s->size[k] = n;
	}
	s->sum = h;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = (int)arg(argc, argv, 1, 2);
	long long epochs = arg(argc, argv, 2, 40);
	long long ops = arg(argc, argv, 3, 250000);
	long slots = (long)arg(argc, argv, 4, 4000);
	uint64_t seed = (uint64_t)arg(argc, argv, 5, 1);
	if (threads < 1 || threads > 256 || epochs < 0 || ops < 0 || slots < 1)
		die("usage: larson [threads] [epochs] [ops] [slots] [seed]");
	set_t *set = aligned_alloc(64, (size_t)threads * sizeof *set);
	job_t *job = calloc((size_t)threads, sizeof *job);
	pthread_t *t = calloc((size_t)threads, sizeof *t);
	if (set == NULL || job == NULL || t == NULL)
		die("out of memory");
	memset(set, 0, (size_t)threads * sizeof *set);
	/* The main thread fills every array first, as larson's setup does. */
	for (int i = 0; i < threads; i++) {
		set[i].slot = calloc((size_t)slots, sizeof *set[i].slot);
		set[i].size = calloc((size_t)slots, sizeof *set[i].size);
		if (set[i].slot == NULL || set[i].size == NULL)
			die("out of memory");
		set[i].r.s = seed * 7919 + (uint64_t)i;
		for (long k = 0; k < slots; k++) {
			size_t n = 8 + (size_t)(rng_next(&set[i].r) % 505);
			set[i].slot[k] = xmalloc(n);
			memset(set[i].slot[k], (int)k, n);
			set[i].size[k] = n;
		}
	}
	for (long long e = 0; e < epochs; e++) {
		for (int i = 0; i < threads; i++) {
			/* Thread i of this epoch takes the set thread i-1 had last epoch. */
			job[i] = (job_t){ .set = &set[(i + e) % threads], .slots = slots, .ops = ops };
			if (pthread_create(&t[i], NULL, work, &job[i]) != 0)
				die("pthread_create failed");
		}
		for (int i = 0; i < threads; i++)
			pthread_join(t[i], NULL);
	}
	uint64_t h = 0;
	for (int i = 0; i < threads; i++) {
		for (long k = 0; k < slots; k++)
			free(set[i].slot[k]);
		free(set[i].slot);
		free(set[i].size);
		h = mix(h, set[i].sum);
	}
	free(set);
	free(job);
	free(t);
	print_checksum(h);
	return 0;
}
