/* prodcons: cross-thread frees. Producer threads malloc blocks of 24..512
 * bytes, fill a header, and push them through a lock-free single-producer
 * single-consumer ring (indexes published in batches) to their consumer
 * thread, which checks and frees them.
 * Usage: prodcons [pairs=1] [items-per-pair=3000000] [seed=1] */
#include "common.h"
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>

#define RING 4096 /* power of two */
#define BATCH 64 /* divides RING */

typedef struct {
	_Alignas(64) _Atomic size_t head; /* written by the consumer */
	_Alignas(64) _Atomic size_t tail; /* written by the producer */
	_Alignas(64) void *slot[RING];
	long long items;
	uint64_t seed;
	uint64_t sum;
} ring_t;

typedef struct {
	uint64_t seq;
	uint64_t size;
} hdr_t;

static void *produce(void *argp)
{
	ring_t *q = argp;
	rng_t r = { q->seed };
	size_t tail = 0, head = 0; /* head: the consumer's, as last seen */
	for (long long i = 0; i < q->items; i++) {
		size_t n = (size_t)rng_range(&r, sizeof(hdr_t) + 8, 512);
		hdr_t *h = xmalloc(n);
		h->seq = (uint64_t)i;
		h->size = n;
		((unsigned char *)h)[n - 1] = (unsigned char)(i * 7);
		while (tail - head == RING) {
			/* Full: publish what is queued, then wait for room. */
			atomic_store_explicit(&q->tail, tail, memory_order_release);
			head = atomic_load_explicit(&q->head, memory_order_acquire);
			if (tail - head == RING)
				sched_yield();
		}
		q->slot[tail & (RING - 1)] = h;
		/* Publish in batches, so the two threads share a cache line
		 * once per batch, not once per block. */
		if (++tail % BATCH == 0)
			atomic_store_explicit(&q->tail, tail, memory_order_release);
	}
	atomic_store_explicit(&q->tail, tail, memory_order_release);
	return NULL;
}

static void *consume(void *argp)
{
	ring_t *q = argp;
	size_t head = 0, tail = 0; /* tail: the producer's, as last seen */
	uint64_t sum = 0;
	for (long long i = 0; i < q->items; i++) {
		while (head == tail) {
			/* Empty: give back what was freed, then wait for more. */
			atomic_store_explicit(&q->head, head, memory_order_release);
			tail = atomic_load_explicit(&q->tail, memory_order_acquire);
			if (head == tail)
				sched_yield();
		}
		hdr_t *h = q->slot[head & (RING - 1)];
		if (h->seq != (uint64_t)i || ((unsigned char *)h)[h->size - 1] != (unsigned char)(i * 7))
			die("prodcons: corrupted block");
		sum = mix(sum, h->seq ^ h->size);
		free(h);
		if (++head % BATCH == 0)
			atomic_store_explicit(&q->head, head, memory_order_release);
	}
	q->sum = sum;
	return NULL;
}

int main(int argc, char **argv)
{
	int pairs = (int)arg(argc, argv, 1, 1);
	long long items = arg(argc, argv, 2, 3000000);
	uint64_t seed = (uint64_t)arg(argc, argv, 3, 1);
	if (pairs < 1 || pairs > 128 || items < 0)
		die("usage: prodcons [pairs] [items] [seed]");
	ring_t *q = aligned_alloc(64, sizeof *q * (size_t)pairs);
	pthread_t *t = calloc((size_t)pairs * 2, sizeof *t);
	if (q == NULL || t == NULL)
		die("out of memory");
	memset(q, 0, sizeof *q * (size_t)pairs);
	for (int i = 0; i < pairs; i++) {
		q[i].items = items;
		q[i].seed = seed * 1000003 + (uint64_t)i;
		if (pthread_create(&t[2 * i], NULL, consume, &q[i]) != 0 ||
		    pthread_create(&t[2 * i + 1], NULL, produce, &q[i]) != 0)
			die("pthread_create failed");
	}
	uint64_t h = 0;
	for (int i = 0; i < 2 * pairs; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < pairs; i++)
		h = mix(h, q[i].sum);
	print_checksum(h);
	free(q);
	free(t);
	return 0;
}
