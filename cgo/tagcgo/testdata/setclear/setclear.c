/* A stand-in for a library with only DMD's SetHeapBlockTagForThread and
 * ClearHeapBlockTagForThread (no push/pop), preloaded into cgoprog to test
 * tagcgo's fallback: it writes "TID set NAME" or "TID clear" to stderr. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static void say(const char *what, const char *name) {
  char line[128];
  int n = snprintf(line, sizeof line, "%d %s%s%s\n", (int)gettid(), what, name ? " " : "", name ? name : "");
  if (n > 0) (void)!write(2, line, (size_t)n < sizeof line ? (size_t)n : sizeof line - 1);
}

void SetHeapBlockTagForThread(const char *tag) { say("set", tag); }
void ClearHeapBlockTagForThread(void) { say("clear", NULL); }
