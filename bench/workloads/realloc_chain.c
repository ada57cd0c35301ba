/* realloc_chain: "just enough" growth. Several buffers, grown in turn by a
 * few bytes at a time through realloc until each reaches its target size
 * (up to a few MiB); a full buffer is checked, freed and started again.
 * Usage: realloc_chain [chains=8] [rounds=12] [max-kib=4096] [seed=1] */
#include "common.h"

typedef struct {
	unsigned char *buf;
	size_t len, target;
	uint64_t tag;
} chain_t;

static unsigned char byte_at(uint64_t tag, size_t i)
{
	return (unsigned char)((i * 131) ^ tag);
}

int main(int argc, char **argv)
{
	int chains = (int)arg(argc, argv, 1, 8);
	long long rounds = arg(argc, argv, 2, 12);
	long long max_kib = arg(argc, argv, 3, 4096);
	uint64_t seed = (uint64_t)arg(argc, argv, 4, 1);
	if (chains < 1 || rounds < 0 || max_kib < 1)
		die("usage: realloc_chain [chains] [rounds] [max-kib] [seed]");
	rng_t r = { seed };
	chain_t *c = calloc((size_t)chains, sizeof *c);
	if (c == NULL)
		die("out of memory");
	size_t max = (size_t)max_kib * 1024;
	uint64_t h = 0;
	long long todo = rounds * chains; /* chains still to complete */
	for (int i = 0; i < chains; i++) {
		c[i].target = max / 4 + (size_t)rng_range(&r, 0, max - max / 4);
		c[i].tag = rng_next(&r);
	}
	while (todo > 0) {
		for (int i = 0; i < chains; i++) {
			chain_t *ch = &c[i];
			if (ch->target == 0)
				continue;
			size_t add = (size_t)rng_range(&r, 1, 64);
			unsigned char *p = realloc(ch->buf, ch->len + add);
			if (p == NULL)
				die("out of memory");
			for (size_t j = 0; j < add; j++)
				p[ch->len + j] = byte_at(ch->tag, ch->len + j);
			ch->buf = p;
			ch->len += add;
			if (ch->len < ch->target)
				continue;
			/* Done: check a sample of the contents, then start over. */
			for (size_t j = 0; j < ch->len; j += 4093) {
				if (ch->buf[j] != byte_at(ch->tag, j))
					die("realloc_chain: contents lost in realloc");
				h = mix(h, ch->buf[j]);
			}
			h = mix(h, ch->len);
			free(ch->buf);
			ch->buf = NULL;
			ch->len = 0;
			ch->tag = rng_next(&r);
			ch->target = --todo >= chains ? max / 4 + (size_t)rng_range(&r, 0, max - max / 4) : 0;
		}
	}
	for (int i = 0; i < chains; i++)
		free(c[i].buf);
	free(c);
	print_checksum(h);
	return 0;
}
