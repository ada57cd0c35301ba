/* batches: producer threads fill batches of 4,096 blocks and queue them
 * (at most 100 waiting, under a lock); consumer threads take one batch at
 * a time and free every block of it. Every free is of another thread's
 * block, and a consumer never allocates: the pattern of Lever and
 * Boreham's xmalloc test (mimalloc-bench's xmalloc-testN), run for a
 * fixed number of batches instead of a fixed time so that the wall time
 * compares.
 *
 * usage: batches [pairs] [batches-per-producer] [size (0: mixed 8 B..2 KiB)] */
#include "common.h"
#include <pthread.h>

#define PER_BATCH 4096
#define QUEUE_MAX 100

typedef struct batch {
	struct batch *next;
	unsigned char *blk[PER_BATCH];
} batch_t;

static const size_t mixed[] = { 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048 };

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER, not_full = PTHREAD_COND_INITIALIZER;
static batch_t *queue;
static int queued, producing;
static long long per_producer;
static size_t size;

typedef struct {
	int id;
	uint64_t sum;
} worker_t;

static void *produce(void *argp)
{
	worker_t *w = argp;
	rng_t r = { (uint64_t)w->id * 7919 + 1 };
	for (long long k = 0; k < per_producer; k++) {
		batch_t *b = xmalloc(sizeof *b);
		for (int i = 0; i < PER_BATCH; i++) {
			size_t n = size ? size : mixed[rng_next(&r) % (sizeof mixed / sizeof mixed[0])];
			b->blk[i] = xmalloc(n);
			memset(b->blk[i], (int)((uint64_t)k ^ (uint64_t)i ^ (uint64_t)w->id), n < 128 ? n : 128);
		}
		pthread_mutex_lock(&mu);
		while (queued >= QUEUE_MAX)
			pthread_cond_wait(&not_full, &mu);
		b->next = queue;
		queue = b;
		queued++;
		pthread_cond_signal(&not_empty);
		pthread_mutex_unlock(&mu);
	}
	pthread_mutex_lock(&mu);
	producing--;
	pthread_cond_broadcast(&not_empty);
	pthread_mutex_unlock(&mu);
	return NULL;
}

static void *consume(void *argp)
{
	worker_t *w = argp;
	for (;;) {
		pthread_mutex_lock(&mu);
		while (queue == NULL && producing > 0)
			pthread_cond_wait(&not_empty, &mu);
		batch_t *b = queue;
		if (b != NULL) {
			queue = b->next;
			queued--;
			pthread_cond_signal(&not_full);
		}
		pthread_mutex_unlock(&mu);
		if (b == NULL)
			return NULL; /* every producer done, the queue empty */
		for (int i = 0; i < PER_BATCH; i++) {
			w->sum += b->blk[i][0];
			free(b->blk[i]);
		}
		free(b);
	}
}

int main(int argc, char **argv)
{
	int pairs = (int)arg(argc, argv, 1, 2);
	per_producer = arg(argc, argv, 2, 3000);
	long long sz = arg(argc, argv, 3, 64);
	if (pairs < 1 || pairs > 64 || per_producer < 1 || sz < 0 || sz > 1 << 20)
		die("usage: batches [pairs] [batches-per-producer] [size (0: mixed)]");
	size = (size_t)sz;
	producing = pairs;
	pthread_t t[128];
	worker_t w[128];
	for (int i = 0; i < 2 * pairs; i++) {
		w[i] = (worker_t){ .id = i };
		if (pthread_create(&t[i], NULL, i < pairs ? produce : consume, &w[i]) != 0)
			die("pthread_create failed");
	}
	uint64_t sum = 0;
	for (int i = 0; i < 2 * pairs; i++) {
		pthread_join(t[i], NULL);
		sum += w[i].sum;
	}
	print_checksum(sum);
	return 0;
}
