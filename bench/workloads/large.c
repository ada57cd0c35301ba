/* large: big blocks, 64 KiB..64 MiB. Keeps a few live at once; each new
 * block is touched on every page, checked and freed later, so the cost of
 * getting pages from (and giving them back to) the OS is what is measured.
 * Usage: large [iters=300] [live=4] [seed=1] */
#include "common.h"

#define PAGE 4096

int main(int argc, char **argv)
{
	long long iters = arg(argc, argv, 1, 300);
	int live = (int)arg(argc, argv, 2, 4);
	uint64_t seed = (uint64_t)arg(argc, argv, 3, 1);
	if (iters < 0 || live < 1 || live > 1024)
		die("usage: large [iters] [live] [seed]");
	rng_t r = { seed };
	unsigned char **blk = calloc((size_t)live, sizeof *blk);
	size_t *len = calloc((size_t)live, sizeof *len);
	if (blk == NULL || len == NULL)
		die("out of memory");
	uint64_t h = 0;
	for (long long i = 0; i < iters; i++) {
		int k = (int)rng_range(&r, 0, (uint64_t)live - 1);
		if (blk[k] != NULL) {
			for (size_t off = 0; off < len[k]; off += PAGE)
				h = mix(h, blk[k][off]);
			h = mix(h, blk[k][len[k] - 1]);
			free(blk[k]);
		}
		/* 64 KiB << 0..10, plus an odd tail so sizes are not all powers of two. */
		size_t n = ((size_t)64 << 10 << rng_range(&r, 0, 10)) + (size_t)rng_range(&r, 0, 8191);
		unsigned char *p = xmalloc(n);
		for (size_t off = 0; off < n; off += PAGE)
			p[off] = (unsigned char)(off / PAGE + (size_t)i);
		p[n - 1] = (unsigned char)i;
		blk[k] = p;
		len[k] = n;
	}
	for (int k = 0; k < live; k++)
		free(blk[k]);
	free(blk);
	free(len);
	print_checksum(h);
	return 0;
}
