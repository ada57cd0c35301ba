/* hostile_tags.c: allocate under tag names a hostile program might choose
 * (markup, script, quotes, bidi controls, exposition-format look-alikes),
 * (i + 1) * 64 KiB under the i-th, and print the library's own books as
 * "books INDEX LIVE_BYTES" (by index: the names hold spaces). Then prints
 * "ready PID" and waits until its standard input closes. The Go tests
 * keep the same list (hostileTags in livepage_test.go). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "../../../cgo/include/tagalloc.h"

static const char *names[] = {
    "<img src=x onerror=document.title='pwned'>",
    "\"quoted\" 'single' & back\\slash",
    "\xe2\x80\xae" "evil" "\xe2\x80\xac" " bidi " "\xe2\x81\xa6" "iso" "\xe2\x81\xa9",
    "</script><script>alert(1)</script>",
    "{tag=\"x\",pid=\"1\"} 1",
    "plain",
};

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0); /* no buffer to allocate under a tag */
  int n = (int)(sizeof names / sizeof names[0]);
  for (int i = 0; i < n; i++) {
    tagalloc_weak_set(names[i]);
    for (int j = 0; j < 16 * (i + 1); j++) {
      char *p = malloc(4096);
      memset(p, i, 4096);
    }
  }
  tagalloc_weak_clear();
  for (int i = 0; i < n; i++) {
    tagalloc_tag_stats_t s;
    if (tagalloc_weak_stats(names[i], &s) == 0) printf("books %d %zu\n", i, s.live_bytes);
  }
  printf("ready %d\n", (int)getpid());
  char c;
  while (read(0, &c, 1) > 0) {
  }
  return 0;
}
