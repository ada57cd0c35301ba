/* xmalloc: threads allocate batches and other threads free them, as in
 * xmalloc-test (mimalloc-bench): thread i fills batches of 128 blocks of
 * 16..256 bytes and hands each to thread i+1 (a ring), which frees the
 * batches it is given; every block is freed by another thread than the
 * one that allocated it. The pages come back through cross-thread frees:
 * the allocator must reuse them without a trip through the OS.
 * Usage: xmalloc [threads=2] [batches-per-thread=40000] [seed=1] */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define BATCH 128
#define PENDING_MAX 64 /* batches a thread may be ahead of the one it feeds */

typedef struct batch {
	struct batch *next;
	void *blk[BATCH];
} batch_t;

typedef struct {
	_Alignas(64) _Atomic(batch_t *) inbox; /* a Treiber stack: pushed by the thread before, taken whole */
	_Atomic long pending;                   /* batches in it: a producer ahead by PENDING_MAX waits */
	_Alignas(64) long long batches;
	uint64_t seed, sum;
	int id;
} worker_t;

static worker_t *workers;
static int nthreads;
static _Atomic int done_producing;

static uint64_t drain(worker_t *w)
{
	uint64_t sum = 0;
	batch_t *b = atomic_exchange(&w->inbox, NULL);
	long n = 0;
	while (b != NULL) {
		n++;
		batch_t *next = b->next;
		for (int i = 0; i < BATCH; i++) {
			unsigned char *p = b->blk[i];
			sum += p[0];
			free(p);
		}
		free(b);
		b = next;
	}
	atomic_fetch_sub(&w->pending, n);
	return sum;
}

static void *run(void *argp)
{
	worker_t *w = argp;
	worker_t *to = &workers[(w->id + 1) % nthreads];
	rng_t r = { w->seed };
	for (long long k = 0; k < w->batches; k++) {
		batch_t *b = xmalloc(sizeof *b);
		for (int i = 0; i < BATCH; i++) {
			size_t n = (size_t)rng_range(&r, 16, 256);
			unsigned char *p = xmalloc(n);
			p[0] = (unsigned char)(n ^ (size_t)k);
			p[n - 1] = 1;
			b->blk[i] = p;
		}
		while (atomic_load(&to->pending) >= PENDING_MAX) { /* the consumer is behind: do our own share */
			w->sum += drain(w);
			sched_yield();
		}
		atomic_fetch_add(&to->pending, 1);
		b->next = atomic_load(&to->inbox);
		while (!atomic_compare_exchange_weak(&to->inbox, &b->next, b)) {
		}
		if ((k & 7) == 0)
			w->sum += drain(w);
	}
	atomic_fetch_add(&done_producing, 1);
	while (atomic_load(&done_producing) < nthreads) {
		w->sum += drain(w);
		sched_yield();
	}
	w->sum += drain(w);
	return NULL;
}

int main(int argc, char **argv)
{
	nthreads = (int)arg(argc, argv, 1, 2);
	long long batches = arg(argc, argv, 2, 40000);
	uint64_t seed = (uint64_t)arg(argc, argv, 3, 1);
	if (nthreads < 1 || nthreads > 256 || batches < 1)
		die("usage: xmalloc [threads] [batches-per-thread] [seed]");
	workers = calloc((size_t)nthreads, sizeof *workers);
	pthread_t *t = calloc((size_t)nthreads, sizeof *t);
	if (workers == NULL || t == NULL)
		die("out of memory");
	for (int i = 0; i < nthreads; i++) {
		workers[i].id = i;
		workers[i].batches = batches;
		workers[i].seed = seed * 1000003 + (uint64_t)i;
	}
	for (int i = 0; i < nthreads; i++)
		pthread_create(&t[i], NULL, run, &workers[i]);
	uint64_t sum = 0;
	for (int i = 0; i < nthreads; i++) {
		pthread_join(t[i], NULL);
		sum += workers[i].sum; /* a sum: the same whoever freed what */
	}
	free(workers);
	free(t);
	print_checksum(sum);
	return 0;
}
