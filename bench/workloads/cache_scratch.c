/* cache_scratch: passive false sharing, after Hoard's cache-scratch test.
 * The main thread allocates one small object per thread back to back and
 * hands them out; each thread frees its object, then repeatedly allocates an
 * object of the same size, writes to it many times and frees it. An
 * allocator that hands neighbouring bytes of one cache line to different
 * threads makes the writes fight over that line.
 * Usage: cache_scratch [threads=2] [iters=5000] [writes=20000] [size=8] */
#include "common.h"
#include <pthread.h>

typedef struct {
	volatile unsigned char *first;
	long long iters, writes;
	size_t size;
	uint64_t sum;
} job_t;

static void *work(void *argp)
{
	job_t *j = argp;
	uint64_t h = 0;
	free((void *)j->first);
	for (long long i = 0; i < j->iters; i++) {
		volatile unsigned char *p = xmalloc(j->size);
		for (size_t b = 0; b < j->size; b++)
			p[b] = (unsigned char)b;
		for (long long w = 0; w < j->writes; w++) {
			for (size_t b = 0; b < j->size; b++)
				p[b] = (unsigned char)(p[b] + 1 + (unsigned char)w);
		}
		for (size_t b = 0; b < j->size; b++)
			h = mix(h, p[b]);
		free((void *)p);
	}
	j->sum = h;
	return NULL;
}

int main(int argc, char **argv)
{
	int threads = (int)arg(argc, argv, 1, 2);
	long long iters = arg(argc, argv, 2, 5000);
	long long writes = arg(argc, argv, 3, 20000);
	size_t size = (size_t)arg(argc, argv, 4, 8);
	if (threads < 1 || threads > 256 || iters < 0 || writes < 0 || size < 1)
		die("usage: cache_scratch [threads] [iters] [writes] [size]");
	job_t *job = calloc((size_t)threads, sizeof *job);
	pthread_t *t = calloc((size_t)threads, sizeof *t);
	if (job == NULL || t == NULL)
		die("out of memory");
	for (int i = 0; i < threads; i++) {
		job[i] = (job_t){ .first = xmalloc(size), .iters = iters, .writes = writes, .size = size };
		memset((void *)job[i].first, 0, size);
	}
	for (int i = 0; i < threads; i++)
		if (pthread_create(&t[i], NULL, work, &job[i]) != 0)
			die("pthread_create failed");
	uint64_t h = 0;
	for (int i = 0; i < threads; i++) {
		pthread_join(t[i], NULL);
		h = mix(h, job[i].sum);
	}
	free(job);
	free(t);
	print_checksum(h);
	return 0;
}
