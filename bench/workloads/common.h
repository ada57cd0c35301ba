/* Shared helpers for the allocator benchmark workloads: a seeded PRNG,
 * argument parsing, /proc readers and the output protocol the Go runner
 * parses ("checksum: HEX" must match glibc's; "metric NAME VALUE" lines are
 * collected per allocator). Header-only so each workload stays one file. */
#ifndef BENCH_COMMON_H
#define BENCH_COMMON_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* splitmix64: tiny, fast, good enough to pick sizes and slots. */
typedef struct {
	uint64_t s;
} rng_t;

static inline uint64_t rng_next(rng_t *r)
{
	uint64_t z = (r->s += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

/* rng_range returns a value in [lo, hi]. */
static inline uint64_t rng_range(rng_t *r, uint64_t lo, uint64_t hi)
{
	return lo + rng_next(r) % (hi - lo + 1);
}

/* mix folds v into a running checksum so order and value both count. */
static inline uint64_t mix(uint64_t h, uint64_t v)
{
	h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
	return h;
}

/* arg returns argv[i] as an integer, or def when absent. */
static inline long long arg(int argc, char **argv, int i, long long def)
{
	if (i < argc && argv[i][0] != '\0')
		return strtoll(argv[i], NULL, 0);
	return def;
}

static inline void die(const char *msg)
{
	fprintf(stderr, "workload: %s\n", msg);
	exit(2);
}

static inline void *xmalloc(size_t n)
{
	void *p = malloc(n);
	if (p == NULL)
		die("out of memory");
	return p;
}

static inline double now_seconds(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* vm_rss_kib reads VmRSS from /proc/self/status (0 if unavailable). */
static inline long vm_rss_kib(void)
{
	FILE *f = fopen("/proc/self/status", "r");
	char line[256];
	long kib = 0;
	if (f == NULL)
		return 0;
	while (fgets(line, sizeof line, f) != NULL) {
		if (strncmp(line, "VmRSS:", 6) == 0) {
			kib = strtol(line + 6, NULL, 10);
			break;
		}
	}
	fclose(f);
	return kib;
}

static inline void print_checksum(uint64_t h)
{
	printf("checksum: %016llx\n", (unsigned long long)h);
}

static inline void print_metric(const char *name, double v)
{
	printf("metric %s %.10g\n", name, v);
}

#endif
