/* setuid_exec.c: become another user, then run a program, as a server
 * dropping its privileges for a helper does.
 *   setuid_exec [-f] UID GID PROG [ARGS...]
 * With -f it forks first: the child switches and execs, the parent waits
 * and exits with its status. Exit 120 if a switch fails, 121 if the exec
 * does. It allocates first, so under tagalloc run the process has books
 * (as root) before it execs as the other user: the program it execs
 * replaces them with its own. */
#define _GNU_SOURCE
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv) {
  int fork_first = argc > 1 && strcmp(argv[1], "-f") == 0;
  argc -= fork_first, argv += fork_first;
  if (argc < 4) {
    fprintf(stderr, "usage: setuid_exec [-f] UID GID PROG [ARGS...]\n");
    return 2;
  }
  uid_t uid = (uid_t)strtoul(argv[1], NULL, 10);
  gid_t gid = (gid_t)strtoul(argv[2], NULL, 10);
  volatile char *before = malloc(4096); /* books of this process, before the switch */
  if (!before) return 124;
  before[0] = 1;
  if (fork_first) {
    pid_t pid = fork();
    if (pid < 0) return 122;
    if (pid > 0) {
      int st;
      if (waitpid(pid, &st, 0) != pid) return 123;
      return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    }
  }
  if ((geteuid() == 0 && setgroups(0, NULL) != 0) || setgid(gid) != 0 || setuid(uid) != 0) {
    perror("setuid_exec: switching user");
    return 120;
  }
  execv(argv[3], argv + 3);
  perror("setuid_exec: exec");
  return 121;
}
