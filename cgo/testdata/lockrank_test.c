/* lockrank_test: the debug build's check of the lock order (types.h,
 * Locks; static.c, _ta_locks_ranked). Taking two locks in the table's
 * order passes; taking them the other way round, or one lock twice,
 * aborts naming both, in a child (the parent checks how it died; the Go
 * test checks what it said). Built against the test core only: the probe
 * is not in the preloaded library. */
#include "tcheck.h"

#include <sys/wait.h>
#include <unistd.h>

void ta_test_lock_ranks_probe(int first, int second);

/* ranks: places in static.c's table */
enum { R_TAGS = 3, R_THREADS = 4, R_ARENA = 7, R_HUGE = 8, R_META = 9 };

/* Runs the probe in a child; returns its exit status, or -signal. */
static int probe_in_child(int first, int second) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    ta_test_lock_ranks_probe(first, second);
    _exit(0);
  }
  int st = 0;
  if (waitpid(pid, &st, 0) != pid) return -1000;
  return WIFSIGNALED(st) ? -WTERMSIG(st) : WEXITSTATUS(st);
}

static void in_order(void) {
  ta_test_lock_ranks_probe(R_TAGS, R_ARENA);
  ta_test_lock_ranks_probe(R_ARENA, R_HUGE);
  ta_test_lock_ranks_probe(R_THREADS, R_META);
  void *p = malloc(100 << 20); /* huge: the arena's and the huge table's locks, still in order after the probes */
  CHECK(p != NULL, "malloc failed");
  free(p);
  int st = probe_in_child(R_HUGE, R_META);
  CHECK(st == 0, "in order, the child ended with %d", st);
}

static void out_of_order(void) {
  int st = probe_in_child(R_ARENA, R_TAGS);
  CHECK(st != 0, "arena then tags: the child ended with %d", st);
  st = probe_in_child(R_HUGE, R_HUGE); /* one lock twice: a deadlock */
  CHECK(st != 0, "the huge lock twice: the child ended with %d", st);
}

int main(void) {
  RUN(in_order);
  RUN(out_of_order);
  return t_summary();
}
