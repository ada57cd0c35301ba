/* many_tags: many threads, each cycling through many heap-block tags, with
 * half the blocks freed by another thread. Per round, each thread sets each
 * of the tags in turn (SetHeapBlockTagForThread; the names "tag-0",
 * "tag-1", ... are the same on every thread and built once, so snprintf is
 * not measured), allocates blocks_per_pair blocks of each of 16, 64, 256,
 * 1024 and 2048 bytes under it, stamps and keeps them, and clears the tag.
 * A barrier then holds every block live at once (the peak RSS is the
 * measurement), and each thread checks and frees its own blocks of the even
 * tags and its neighbour's ((i+1) % threads) of the odd tags; a second
 * barrier ends the round. Later rounds measure reuse after cross-thread
 * frees.
 *
 * The tag functions are weak references: under tagalloc (LD_PRELOAD) they
 * are its own, under the other allocators they are absent and not called,
 * so the output is the same everywhere. Metrics: live_kib (the bytes asked
 * for, all live at the barrier), alloc_s and free_s (wall time of the two
 * phases over all rounds, barrier waits included), and tag_api (1 when the
 * tag functions were found). The default 500 rounds take 2.5 to 12 s
 * under glibc on a 2-core machine, 1.1 to 1.6 s under mimalloc: glibc's
 * time varies widely from run to run, as 32 threads share its 16 arenas
 * (8 per core) and queue on their locks.
 * Usage: many_tags [threads=32] [tags=256] [blocks_per_pair=1] [rounds=500] */
#include "common.h"
#include <pthread.h>

/* Weak: NULL unless a loaded library (tagalloc) defines them. In a PIE (what
 * cc builds by default on Debian and most distributions) they are left to
 * the dynamic linker; a non-PIE link would resolve them to NULL for good
 * and measure tagalloc untagged, hence the warning (an error in the strict
 * build the tests use). */
extern void SetHeapBlockTagForThread(const char *tag) __attribute__((weak));
extern void ClearHeapBlockTagForThread(void) __attribute__((weak));
#ifndef __PIE__
#warning "many_tags is not built as a PIE: the tag functions will not be found under tagalloc"
#endif

#define NSIZES 5
static const size_t sizes[NSIZES] = { 16, 64, 256, 1024, 2048 };

/* One cache line at least each: a worker writes its sum, and workers
 * sharing a line would measure the benchmark's own false sharing. */
typedef struct {
	_Alignas(64) int id;
	unsigned char **blk; /* [tag][size][k]: tags * NSIZES * per blocks */
	uint64_t sum;
} worker_t;

static int threads, ntags;
static long per;             /* blocks per (tag, size) pair */
static long rounds;
static char (*names)[16];    /* the tag names, shared by every thread */
static worker_t *workers;
static pthread_barrier_t barrier;
static double alloc_s, free_s; /* kept by thread 0 */

/* stamp is what block k of size s under tag t of thread id holds in round
 * r: distinct per block and per round, so a block handed out twice, or
 * overwritten by its allocator, is caught. */
static inline uint64_t stamp(long r, int id, int t, int s, long k)
{
	uint64_t h = mix(0, (uint64_t)r);
	h = mix(h, (uint64_t)id);
	h = mix(h, (uint64_t)t);
	h = mix(h, (uint64_t)s);
	return mix(h, (uint64_t)k);
}

/* allocate fills w's blocks for round r, each under its tag. */
static void allocate(worker_t *w, long r)
{
	unsigned char **b = w->blk;
	for (int t = 0; t < ntags; t++) {
		if (SetHeapBlockTagForThread)
			SetHeapBlockTagForThread(names[t]);
		for (int s = 0; s < NSIZES; s++) {
			size_t n = sizes[s];
			for (long k = 0; k < per; k++) {
				unsigned char *p = xmalloc(n);
				uint64_t v = stamp(r, w->id, t, s, k);
				memcpy(p, &v, sizeof v);
				p[n - 1] = (unsigned char)(v >> 56);
				*b++ = p;
			}
		}
		if (ClearHeapBlockTagForThread)
			ClearHeapBlockTagForThread();
	}
}

/* release frees, for round r, w's own blocks of the even tags and those of
 * the next thread of the odd tags, after checking their stamps. */
static void release(worker_t *w, long r, uint64_t *h)
{
	for (int t = 0; t < ntags; t++) {
		worker_t *o = t & 1 ? &workers[(w->id + 1) % threads] : w;
		unsigned char **b = o->blk + (size_t)t * NSIZES * (size_t)per;
		for (int s = 0; s < NSIZES; s++) {
			size_t n = sizes[s];
			for (long k = 0; k < per; k++) {
				unsigned char *p = *b;
				uint64_t v, want = stamp(r, o->id, t, s, k);
				memcpy(&v, p, sizeof v);
				if (v != want || p[n - 1] != (unsigned char)(want >> 56))
					die("a block's stamp changed while it was live");
				*h = mix(*h, v ^ p[n - 1]);
				free(p);
				*b++ = NULL;
			}
		}
	}
}

static void *run(void *argp)
{
	worker_t *w = argp;
	uint64_t h = 0;
	double t0 = 0, t1 = 0;
	pthread_barrier_wait(&barrier); /* start together */
	for (long r = 0; r < rounds; r++) {
		if (w->id == 0)
			t0 = now_seconds();
		allocate(w, r);
		pthread_barrier_wait(&barrier); /* every block is live */
		if (w->id == 0)
			t1 = now_seconds();
		release(w, r, &h);
		pthread_barrier_wait(&barrier); /* the neighbour is done with ours */
		if (w->id == 0) {
			double t2 = now_seconds();
			alloc_s += t1 - t0;
			free_s += t2 - t1;
		}
	}
	w->sum = h;
	return NULL;
}

int main(int argc, char **argv)
{
	threads = (int)arg(argc, argv, 1, 32);
	ntags = (int)arg(argc, argv, 2, 256);
	per = (long)arg(argc, argv, 3, 1);
	rounds = (long)arg(argc, argv, 4, 500);
	if (threads < 1 || threads > 1024 || ntags < 1 || ntags > 100000 || per < 1 || per > 1000000 || rounds < 0)
		die("usage: many_tags [threads] [tags] [blocks_per_pair] [rounds]");
	size_t nblk = (size_t)ntags * NSIZES * (size_t)per; /* per thread */
	names = calloc((size_t)ntags, sizeof *names);
	workers = aligned_alloc(64, (size_t)threads * sizeof *workers);
	pthread_t *tid = calloc((size_t)threads, sizeof *tid);
	if (names == NULL || workers == NULL || tid == NULL)
		die("out of memory");
	for (int t = 0; t < ntags; t++)
		snprintf(names[t], sizeof names[t], "tag-%d", t);
	for (int i = 0; i < threads; i++) {
		workers[i] = (worker_t){ .id = i, .blk = calloc(nblk, sizeof(unsigned char *)) };
		if (workers[i].blk == NULL)
			die("out of memory");
	}
	if (pthread_barrier_init(&barrier, NULL, (unsigned)threads) != 0)
		die("pthread_barrier_init failed");
	for (int i = 0; i < threads; i++) {
		if (pthread_create(&tid[i], NULL, run, &workers[i]) != 0)
			die("pthread_create failed");
	}
	uint64_t h = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(tid[i], NULL);
		h = mix(h, workers[i].sum);
	}
	print_checksum(h);
	size_t pair = 0;
	for (int s = 0; s < NSIZES; s++)
		pair += sizes[s];
	print_metric("live_kib", (double)threads * ntags * (double)per * (double)pair / 1024);
	print_metric("alloc_s", alloc_s);
	print_metric("free_s", free_s);
	print_metric("tag_api", SetHeapBlockTagForThread != NULL && ClearHeapBlockTagForThread != NULL);
	pthread_barrier_destroy(&barrier);
	for (int i = 0; i < threads; i++)
		free(workers[i].blk);
	free(workers);
	free(tid);
	free(names);
	return 0;
}
