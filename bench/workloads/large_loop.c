/* large_loop: big blocks allocated and freed in a loop, the pattern where
 * an allocator that hands pages back to the OS at once pays a page fault
 * per page on every iteration. SLOTS blocks of random sizes MIN..MAX KiB
 * replace each other at random; each new block is touched on its first
 * and last byte (touch=0) or on every page (touch=1).
 *   large_loop [iters=20000] [slots=64] [min_kib=64] [max_kib=4096] [touch=0] [seed=1]
 * The suite runs it twice: 64 slots of 64 KiB..4 MiB touched at the ends,
 * and 1 slot of 5..25 MiB touched on every page. */
#include "common.h"

#define PAGE 4096

int main(int argc, char **argv)
{
	long long iters = arg(argc, argv, 1, 20000);
	int slots = (int)arg(argc, argv, 2, 64);
	long long lo = arg(argc, argv, 3, 64), hi = arg(argc, argv, 4, 4096);
	int touch = (int)arg(argc, argv, 5, 0);
	uint64_t seed = (uint64_t)arg(argc, argv, 6, 1);
	if (iters < 0 || slots < 1 || slots > 1 << 16 || lo < 1 || hi < lo || hi > 1 << 20)
		die("usage: large_loop [iters] [slots] [min_kib] [max_kib] [touch] [seed]");
	rng_t r = { seed };
	unsigned char **blk = calloc((size_t)slots, sizeof *blk);
	size_t *len = calloc((size_t)slots, sizeof *len);
	if (blk == NULL || len == NULL)
		die("out of memory");
	uint64_t h = 0;
	for (long long i = 0; i < iters; i++) {
		int k = (int)rng_range(&r, 0, (uint64_t)slots - 1);
		if (blk[k] != NULL) {
			h = mix(h, blk[k][0]);
			h = mix(h, blk[k][len[k] - 1]);
			free(blk[k]);
		}
		size_t n = (size_t)rng_range(&r, (uint64_t)lo << 10, (uint64_t)hi << 10);
		unsigned char *p = xmalloc(n);
		if (touch)
			for (size_t off = 0; off < n; off += PAGE)
				p[off] = (unsigned char)(off / PAGE + (size_t)i);
		p[0] = (unsigned char)i;
		p[n - 1] = (unsigned char)(i >> 8);
		blk[k] = p;
		len[k] = n;
	}
	for (int k = 0; k < slots; k++)
		free(blk[k]);
	free(blk);
	free(len);
	print_checksum(h);
	return 0;
}
