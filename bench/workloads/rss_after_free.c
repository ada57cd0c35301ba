/* rss_after_free: does memory go back to the OS after a large free?
 * Allocates about 1 GiB in mixed sizes (small, medium and large blocks),
 * touches all of it, frees everything in a shuffled order, and samples
 * VmRSS right after the frees and one second later (the process stays idle,
 * as a server between bursts would: any purging must be the allocator's own).
 * Prints metrics in KiB, and "work_s", the time of the allocate/touch/free
 * phase, which the runner reports as this workload's time (the idle second
 * would otherwise swamp it).
 * With remote=1 another thread frees the blocks, and the thread that made
 * them waits in nanosleep, a call no allocator sees, through the frees and
 * the second after (a producer whose consumer freed all it made, idle
 * until more work comes): only an allocator that can give back memory its
 * owner thread does not look at returns it.
 * Usage: rss_after_free [mib=1024] [seed=1] [wait-ms=1000] [remote=0] */
#include "common.h"
#include <pthread.h>
#include <unistd.h>

struct freeing {
	unsigned char **blk;
	size_t *len, n;
	uint64_t h;
	volatile int done;
};

static void free_all(struct freeing *f)
{
	for (size_t i = 0; i < f->n; i++) {
		f->h = mix(f->h, f->blk[i][0] ^ f->blk[i][f->len[i] - 1]);
		free(f->blk[i]);
	}
}

static void *freer(void *arg)
{
	struct freeing *f = arg;
	free_all(f);
	__atomic_store_n(&f->done, 1, __ATOMIC_RELEASE);
	return NULL;
}

static size_t pick_size(rng_t *r)
{
	uint64_t c = rng_range(r, 0, 99);
	if (c < 80)
		return (size_t)rng_range(r, 16, 1024);          /* small */
	if (c < 97)
		return (size_t)rng_range(r, 1025, 64 << 10);    /* medium */
	return (size_t)rng_range(r, (64 << 10) + 1, 4 << 20); /* large */
}

int main(int argc, char **argv)
{
	long long mib = arg(argc, argv, 1, 1024);
	uint64_t seed = (uint64_t)arg(argc, argv, 2, 1);
	long long wait_ms = arg(argc, argv, 3, 1000);
	long long remote = arg(argc, argv, 4, 0);
	if (mib < 1 || wait_ms < 0 || remote < 0 || remote > 1)
		die("usage: rss_after_free [mib] [seed] [wait-ms] [remote: 0 or 1]");
	rng_t r = { seed };
	size_t goal = (size_t)mib << 20, total = 0, n = 0, cap = 1 << 16;
	unsigned char **blk = xmalloc(cap * sizeof *blk);
	size_t *len = xmalloc(cap * sizeof *len);
	long base = vm_rss_kib();
	double t0 = now_seconds();
	while (total < goal) {
		if (n == cap) {
			cap *= 2;
			unsigned char **nb = realloc(blk, cap * sizeof *blk);
			size_t *nl = realloc(len, cap * sizeof *len);
			if (nb == NULL || nl == NULL)
				die("out of memory");
			blk = nb;
			len = nl;
		}
		size_t sz = pick_size(&r);
		blk[n] = xmalloc(sz);
		memset(blk[n], (int)(n & 0xff), sz);
		len[n++] = sz;
		total += sz;
	}
	long peak = vm_rss_kib();
	/* Shuffle, then free everything: the worst case for coalescing. */
	for (size_t i = n - 1; i > 0; i--) {
		size_t j = (size_t)rng_range(&r, 0, i);
		unsigned char *tb = blk[i];
		size_t tl = len[i];
		blk[i] = blk[j];
		len[i] = len[j];
		blk[j] = tb;
		len[j] = tl;
	}
	struct freeing f = { blk, len, n, 0, 0 };
	pthread_t t;
	if (!remote) {
		free_all(&f);
	} else {
		if (pthread_create(&t, NULL, freer, &f) != 0)
			die("pthread_create");
		struct timespec tick = { 0, 1000000 };
		while (!__atomic_load_n(&f.done, __ATOMIC_ACQUIRE))
			nanosleep(&tick, NULL);
	}
	double work = now_seconds() - t0;
	long after = vm_rss_kib();
	struct timespec idle = { (time_t)(wait_ms / 1000), (long)(wait_ms % 1000) * 1000000L };
	nanosleep(&idle, NULL);
	long later = vm_rss_kib();
	if (remote)
		pthread_join(t, NULL);
	free(blk);
	free(len);
	print_checksum(mix(f.h, (uint64_t)n));
	print_metric("work_s", work);
	print_metric("rss_base_kib", (double)base);
	print_metric("rss_peak_kib", (double)peak);
	print_metric("rss_after_free_kib", (double)after);
	print_metric("rss_after_1s_kib", (double)later);
	return 0;
}
