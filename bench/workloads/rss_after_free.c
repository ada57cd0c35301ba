/* rss_after_free: does memory go back to the OS after a large free?
 * Allocates about 1 GiB in mixed sizes (small, medium and large blocks),
 * touches all of it, frees everything in a shuffled order, and samples
 * VmRSS right after the frees and one second later (the process stays idle,
 * as a server between bursts would: any purging must be the allocator's own).
 * Prints metrics in KiB, and "work_s", the time of the allocate/touch/free
 * phase, which the runner reports as this workload's time (the idle second
 * would otherwise swamp it).
 * Usage: rss_after_free [mib=1024] [seed=1] [wait-ms=1000] */
#include "common.h"
#include <unistd.h>

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
	if (mib < 1 || wait_ms < 0)
		die("usage: rss_after_free [mib] [seed] [wait-ms]");
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
	uint64_t h = 0;
	for (size_t i = 0; i < n; i++) {
		h = mix(h, blk[i][0] ^ blk[i][len[i] - 1]);
		free(blk[i]);
	}
	double work = now_seconds() - t0;
	free(blk);
	free(len);
	long after = vm_rss_kib();
	usleep((useconds_t)(wait_ms * 1000));
	long later = vm_rss_kib();
	print_checksum(mix(h, (uint64_t)n));
	print_metric("work_s", work);
	print_metric("rss_base_kib", (double)base);
	print_metric("rss_peak_kib", (double)peak);
	print_metric("rss_after_free_kib", (double)after);
	print_metric("rss_after_1s_kib", (double)later);
	return 0;
}
