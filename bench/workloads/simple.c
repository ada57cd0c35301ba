/* simple: after glibc's bench-malloc-simple. For each block size (16 B to
 * 1 KiB) and batch (25 to 1,600 blocks), malloc a batch, then free it in
 * the order it was made, many times over; once on the main thread, then
 * again on a second thread (a process with threads takes other paths in
 * some allocators). What it shows: the cost of a malloc/free pair when the
 * batch fills pages and empties them again, so a page runs full and empty
 * over and over. Blocks of 4 KiB are left out: glibc trims its heap after
 * each batch of 1,600 (15 s of system time), which would measure only that;
 * 1 KiB x 1,600 does it already (about 3 s).
 * Usage: simple [rounds=2000] */
#include "common.h"
#include <pthread.h>

static long long rounds;
static uint64_t sums[2];

static void *run(void *arg)
{
	uint64_t *sum = arg;
	static const size_t sizes[] = { 16, 64, 256, 1024 };
	static const int batches[] = { 25, 100, 400, 1600 };
	void *a[1600];
	for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
		for (size_t b = 0; b < sizeof batches / sizeof batches[0]; b++)
			for (long long r = 0; r < rounds; r++) {
				int n = batches[b];
				for (int i = 0; i < n; i++) {
					a[i] = malloc(sizes[s]);
					if (a[i] == NULL)
						die("out of memory");
					*(unsigned char *)a[i] = (unsigned char)i;
				}
				for (int i = 0; i < n; i++) {
					*sum += *(unsigned char *)a[i];
					free(a[i]);
				}
			}
	return NULL;
}

int main(int argc, char **argv)
{
	rounds = arg(argc, argv, 1, 2000);
	if (rounds < 1)
		die("usage: simple [rounds]");
	run(&sums[0]);
	pthread_t t;
	if (pthread_create(&t, NULL, run, &sums[1]) != 0)
		die("pthread_create failed");
	pthread_join(t, NULL);
	print_checksum(mix(sums[0], sums[1]));
	return 0;
}
