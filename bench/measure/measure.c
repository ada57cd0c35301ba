/* measure: run a workload as its own process and report what it used.
 * Usage: measure FD PROG [ARGS...]
 *
 * The harness is a Go program, and Go starts a child with clone(CLONE_VM):
 * the child's peak RSS (ru_maxrss) then counts the harness's own resident
 * memory at the exec (a /bin/true started from a Go process holding 50 MiB
 * reports 54 MiB). So the harness starts this small program, which starts
 * PROG with fork and exec as a shell or time(1) does, waits for it, and
 * writes PROG's own figures on file descriptor FD, one line:
 *   maxrss_kib minflt utime_us stime_us wall_ns
 * then exits as PROG did (its exit status, or 128 + the signal that ended
 * it). PROG dies with this process (PR_SET_PDEATHSIG): a harness that kills
 * it on a timeout kills the workload too. Standard input, output and error
 * and the environment pass through. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static long long now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc < 3) {
		fprintf(stderr, "usage: measure FD PROG [ARGS...]\n");
		return 2;
	}
	char *end;
	long fd = strtol(argv[1], &end, 10);
	if (*end != '\0' || fd < 3 || fd > 1000) {
		fprintf(stderr, "measure: bad file descriptor %s\n", argv[1]);
		return 2;
	}
	pid_t parent = getpid();
	long long start = now_ns();
	pid_t pid = fork();
	if (pid < 0) {
		fprintf(stderr, "measure: fork: %s\n", strerror(errno));
		return 2;
	}
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getppid() != parent) /* the parent died before the prctl */
			_exit(137);
		close((int)fd);
		execvp(argv[2], argv + 2);
		fprintf(stderr, "measure: %s: %s\n", argv[2], strerror(errno));
		_exit(127);
	}
	int status;
	struct rusage ru;
	pid_t w;
	while ((w = wait4(pid, &status, 0, &ru)) < 0 && errno == EINTR) {
	}
	long long wall = now_ns() - start;
	if (w < 0) {
		fprintf(stderr, "measure: wait4: %s\n", strerror(errno));
		return 2;
	}
	dprintf((int)fd, "%ld %ld %lld %lld %lld\n", ru.ru_maxrss, ru.ru_minflt,
		(long long)ru.ru_utime.tv_sec * 1000000 + ru.ru_utime.tv_usec,
		(long long)ru.ru_stime.tv_sec * 1000000 + ru.ru_stime.tv_usec, wall);
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	if (WIFSIGNALED(status))
		return 128 + WTERMSIG(status);
	return 2;
}
