/* spawn: what each process costs, as a shell or make pays it. The parent
 * builds a heap of small blocks (a shell's variables and hash tables),
 * then starts children one at a time and waits for each: even ones exec
 * /bin/true after a few allocations (fork and exec, as a shell runs a
 * command), odd ones allocate, free and exit without exec (a forked
 * worker, or a subshell). Every child's exit status goes into the
 * checksum, so a child that failed shows.
 * Usage: spawn [children=200] [heap-blocks=20000] [seed=1] */
#include "common.h"
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	long long children = arg(argc, argv, 1, 200);
	long long nheap = arg(argc, argv, 2, 20000);
	rng_t r = { (uint64_t)arg(argc, argv, 3, 1) };
	if (children < 1 || nheap < 1)
		die("children and heap-blocks must be positive");
	void **heap = xmalloc((size_t)nheap * sizeof *heap);
	for (long long i = 0; i < nheap; i++) {
		size_t n = (size_t)rng_range(&r, 16, 256);
		heap[i] = xmalloc(n);
		memset(heap[i], (int)i, n);
	}
	uint64_t h = 0;
	double t0 = now_seconds();
	for (long long c = 0; c < children; c++) {
		fflush(stdout); /* a child's exit must not write the parent's buffer again */
		pid_t pid = fork();
		if (pid < 0)
			die("fork failed");
		if (pid == 0) {
			void *p[16];
			for (int i = 0; i < 16; i++)
				p[i] = xmalloc(64 + 64 * (size_t)i);
			if (c % 2 == 0) {
				execl("/bin/true", "true", (char *)NULL);
				_exit(127);
			}
			for (int i = 0; i < 16; i++)
				free(p[i]);
			free(heap[c % nheap]);
			exit(3); /* through the atexit handlers, as a subshell exits */
		}
		int st;
		if (waitpid(pid, &st, 0) != pid)
			die("waitpid failed");
		h = mix(h, WIFEXITED(st) ? (uint64_t)WEXITSTATUS(st) : 1000 + (uint64_t)st);
	}
	double dt = now_seconds() - t0;
	for (long long i = 0; i < nheap; i++)
		free(heap[i]);
	free(heap);
	print_checksum(h);
	print_metric("per_child_us", dt / (double)children * 1e6);
	return 0;
}
