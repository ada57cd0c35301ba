/* many.c: 4100 tags (4 past the limit), 3 blocks each, from 4 threads. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "../../cgo/include/tagalloc.h"

static void *work(void *arg) {
  int base = (int)(long)arg;
  char name[32];
  for (int i = base; i < 4100; i += 4) {
    snprintf(name, sizeof name, "tag-%04d", i);
    tagalloc_weak_set(name);
    for (int k = 0; k < 3; k++) (void)malloc((size_t)(16 + i % 2000));
  }
  tagalloc_weak_clear();
  return NULL;
}

int main(void) {
  pthread_t t[4];
  for (long i = 0; i < 4; i++) pthread_create(&t[i], NULL, work, (void *)i);
  for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
  return 0;
}
