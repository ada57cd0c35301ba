// Compiled by gcc (itself under the preload) and then run under the preload.
//
// Worker threads malloc, calloc, realloc, memalign and free blocks of every
// size class and beyond, fill each block with a pattern and check it before
// every realloc and free, and hand blocks to other threads to free. The main
// thread forks while the workers run; the child allocates, starts a thread
// and exits. Everything printed on stdout is deterministic; anything wrong
// is counted and printed, and makes the exit status 1.
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define THREADS 4
#define SLOTS 512
#define OPS 30000
#define MAILBOX 256

static int errors; // guarded by mu
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static void fail(const char *what, size_t size) {
  pthread_mutex_lock(&mu);
  if (errors < 20)
    fprintf(stderr, "prog: %s (size %zu)\n", what, size);
  errors++;
  pthread_mutex_unlock(&mu);
}

static uint64_t next(uint64_t *s) {
  uint64_t x = *s;
  x ^= x << 13;
  x ^= x >> 7;
  x ^= x << 17;
  return *s = x;
}

typedef struct {
  unsigned char *p;
  size_t size;
  unsigned char seed;
} block_t;

static void fill(block_t *b) {
  for (size_t i = 0; i < b->size; i++)
    b->p[i] = (unsigned char)(b->seed + i * 31);
}

static void check(const block_t *b, size_t n, const char *when) {
  // Every byte of small blocks; a sample of large ones.
  size_t step = n <= 65536 ? 1 : 509;
  for (size_t i = 0; i < n; i += step)
    if (b->p[i] != (unsigned char)(b->seed + i * 31)) {
      fail(when, b->size);
      return;
    }
  if (n > 0 && b->p[n - 1] != (unsigned char)(b->seed + (n - 1) * 31))
    fail(when, b->size);
}

static size_t pick_size(uint64_t *rng) {
  uint64_t r = next(rng) % 100;
  if (r < 60)
    return 1 + next(rng) % 256;
  if (r < 85)
    return 257 + next(rng) % 16128;
  if (r < 99)
    return 16385 + next(rng) % 245760;
  return 262144 + next(rng) % (2 << 20);
}

// Blocks allocated by one thread and freed by another.
static block_t mailbox[MAILBOX];
static int mail_count;
static long mail_in, mail_out;

static void post(block_t b) {
  pthread_mutex_lock(&mu);
  if (mail_count < MAILBOX) {
    mailbox[mail_count++] = b;
    mail_in++;
    b.p = NULL;
  }
  pthread_mutex_unlock(&mu);
  if (b.p) {
    check(&b, b.size, "pattern at free (mailbox full)");
    free(b.p);
  }
}

static void take(void) {
  block_t b = {0};
  pthread_mutex_lock(&mu);
  if (mail_count > 0) {
    b = mailbox[--mail_count];
    mail_out++;
  }
  pthread_mutex_unlock(&mu);
  if (b.p) {
    check(&b, b.size, "pattern at cross-thread free");
    free(b.p);
  }
}

typedef struct {
  int id;
  uint64_t sum; // of sizes, in the thread's own (deterministic) order
  long ops[8];
} result_t;

static void *worker(void *arg) {
  result_t *res = arg;
  uint64_t rng = 0x9e3779b97f4a7c15ULL * (uint64_t)(res->id + 1);
  block_t slots[SLOTS];
  memset(slots, 0, sizeof slots);
  for (int op = 0; op < OPS; op++) {
    block_t *b = &slots[next(&rng) % SLOTS];
    int kind = (int)(next(&rng) % 8);
    if (b->p) {
      if (kind < 2) { // grow or shrink, keeping the common prefix
        size_t n = pick_size(&rng);
        unsigned char *q = realloc(b->p, n);
        if (!q) {
          fail("realloc returned NULL", n);
          continue;
        }
        b->p = q;
        check(b, n < b->size ? n : b->size, "pattern after realloc");
        b->size = n;
        fill(b);
        res->ops[0]++;
      } else if (kind == 2) {
        post(*b);
        b->p = NULL;
        res->ops[1]++;
      } else {
        check(b, b->size, "pattern at free");
        if (malloc_usable_size(b->p) < b->size)
          fail("malloc_usable_size smaller than the request", b->size);
        free(b->p);
        b->p = NULL;
        res->ops[2]++;
      }
      continue;
    }
    size_t n = pick_size(&rng);
    res->sum += n;
    unsigned char seed = (unsigned char)next(&rng);
    if (kind == 0) {
      unsigned char *p = calloc(1, n);
      if (!p) {
        fail("calloc returned NULL", n);
        continue;
      }
      for (size_t i = 0; i < n; i += (n > 65536 ? 4093 : 1))
        if (p[i]) {
          fail("calloc memory not zero", n);
          break;
        }
      b->p = p;
      res->ops[3]++;
    } else if (kind == 1) {
      size_t align = (size_t)16 << (next(&rng) % 9); // 16 .. 4096
      void *p = NULL;
      int e = posix_memalign(&p, align, n);
      if (e || !p || (uintptr_t)p % align) {
        fail("posix_memalign", n);
        continue;
      }
      b->p = p;
      res->ops[4]++;
    } else if (kind == 2) {
      size_t align = (size_t)64 << (next(&rng) % 5);
      size_t m = (n + align - 1) / align * align;
      void *p = aligned_alloc(align, m);
      if (!p || (uintptr_t)p % align) {
        fail("aligned_alloc", m);
        continue;
      }
      b->p = p;
      n = m;
      res->ops[5]++;
    } else {
      b->p = malloc(n);
      if (!b->p) {
        fail("malloc returned NULL", n);
        continue;
      }
      res->ops[6]++;
    }
    b->size = n;
    b->seed = seed;
    fill(b);
    if (op % 16 == 0)
      take();
  }
  for (int i = 0; i < SLOTS; i++)
    if (slots[i].p) {
      check(&slots[i], slots[i].size, "pattern at final free");
      free(slots[i].p);
    }
  return NULL;
}

static void preload_check(const char *role) {
  const char *path = getenv("REALPROG_CHECK"), *lib = getenv("REALPROG_LIB");
  if (!path || !lib)
    return;
  const char *state = "absent";
  FILE *f = fopen("/proc/self/maps", "r");
  char *line = NULL;
  size_t cap = 0;
  ssize_t n;
  size_t ll = strlen(lib);
  while (f && (n = getline(&line, &cap, f)) > 0) {
    if (line[n - 1] == '\n')
      line[--n] = 0;
    if ((size_t)n >= ll && strcmp(line + n - ll, lib) == 0) {
      state = "mapped";
      break;
    }
  }
  free(line);
  if (f)
    fclose(f);
  FILE *out = fopen(path, "a");
  if (out) {
    fprintf(out, "%s %s\n", role, state);
    fclose(out);
  }
}

static void *child_thread(void *arg) {
  char **v = arg;
  for (int i = 0; i < 1000; i++) {
    v[i] = malloc(32 + i);
    memset(v[i], i & 0xff, 32 + i);
  }
  return NULL;
}

// Runs in a child forked while the workers were running: the allocator must
// be usable here (its locks released by the fork handlers).
static int child_main(void) {
  preload_check("forked-child");
  uint64_t rng = 42;
  block_t b[64] = {{0}};
  for (int i = 0; i < 20000; i++) {
    block_t *x = &b[next(&rng) % 64];
    if (x->p) {
      check(x, x->size, "pattern at free in forked child");
      free(x->p);
      x->p = NULL;
    } else {
      x->size = pick_size(&rng) % 70000 + 1;
      x->seed = (unsigned char)i;
      x->p = malloc(x->size);
      if (!x->p)
        return 3;
      fill(x);
    }
  }
  char *v[1000];
  pthread_t t;
  if (pthread_create(&t, NULL, child_thread, v) != 0 || pthread_join(t, NULL) != 0)
    return 4;
  for (int i = 0; i < 1000; i++)
    free(v[i]);
  for (int i = 0; i < 64; i++)
    free(b[i].p);
  return errors ? 5 : 0;
}

static int cmp_u32(const void *a, const void *b) {
  uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
  return (x > y) - (x < y);
}

int main(void) {
  preload_check("prog-main");

  // Edge cases whose results are fixed by the C standard or by glibc's
  // documented behavior, which programs rely on.
  // volatile: keeps gcc from warning about (and folding) the huge sizes.
  volatile size_t huge = SIZE_MAX - 4096, half = SIZE_MAX / 2;
  errno = 0;
  void *p = malloc(huge);
  printf("malloc(huge): %s %s\n", p ? "non-NULL" : "NULL", errno == ENOMEM ? "ENOMEM" : "?");
  errno = 0;
  p = calloc(half, 4);
  printf("calloc(overflow): %s %s\n", p ? "non-NULL" : "NULL", errno == ENOMEM ? "ENOMEM" : "?");
  p = malloc(0);
  printf("malloc(0): %s\n", p ? "non-NULL" : "NULL");
  free(p);
  free(NULL);
  p = realloc(NULL, 100);
  printf("realloc(NULL, 100): %s\n", p ? "non-NULL" : "NULL");
  free(p);

  result_t res[THREADS];
  pthread_t th[THREADS];
  memset(res, 0, sizeof res);
  for (int i = 0; i < THREADS; i++) {
    res[i].id = i;
    if (pthread_create(&th[i], NULL, worker, &res[i]) != 0) {
      perror("pthread_create");
      return 2;
    }
  }
  // Fork while the workers allocate.
  int child_status[3];
  for (int i = 0; i < 3; i++) {
    usleep(20000);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 2;
    }
    if (pid == 0)
      _exit(child_main());
    int st;
    waitpid(pid, &st, 0);
    child_status[i] = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    if (WIFSIGNALED(st))
      fprintf(stderr, "prog: forked child %d was killed by signal %d (%s)%s\n", i, WTERMSIG(st),
              strsignal(WTERMSIG(st)), WCOREDUMP(st) ? ", core dumped" : "");
  }
  for (int i = 0; i < THREADS; i++)
    pthread_join(th[i], NULL);
  while (mail_count > 0)
    take();

  // Short-lived threads: thread exit paths.
  for (int round = 0; round < 32; round++) {
    char *v[1000];
    pthread_t t;
    pthread_create(&t, NULL, child_thread, v);
    pthread_join(t, NULL);
    for (int i = 0; i < 1000; i++)
      free(v[i]);
  }

  // A big array, sorted, and strings from stdio.
  size_t n = 1 << 20;
  uint32_t *a = malloc(n * sizeof *a);
  uint64_t rng = 7;
  for (size_t i = 0; i < n; i++)
    a[i] = (uint32_t)next(&rng);
  qsort(a, n, sizeof *a, cmp_u32);
  uint64_t h = 1469598103934665603ULL;
  for (size_t i = 0; i < n; i += 997)
    h = (h ^ a[i]) * 1099511628211ULL;
  free(a);
  char *s = NULL;
  for (int i = 0; i < 2000; i++) {
    char *t = NULL;
    if (asprintf(&t, "%s%d,", s ? s : "", i % 10) < 0)
      return 2;
    free(s);
    s = t;
  }
  char *dup = strdup(s);

  for (int i = 0; i < THREADS; i++)
    printf("thread %d: sizes=%llu realloc=%ld post=%ld free=%ld calloc=%ld memalign=%ld aligned_alloc=%ld malloc=%ld\n",
           i, (unsigned long long)res[i].sum, res[i].ops[0], res[i].ops[1], res[i].ops[2],
           res[i].ops[3], res[i].ops[4], res[i].ops[5], res[i].ops[6]);
  // How many posted blocks found room in the mailbox depends on scheduling;
  // that every one was freed once does not.
  printf("mailbox: all freed: %s\n", mail_in == mail_out ? "yes" : "no");
  printf("forked children: %d %d %d\n", child_status[0], child_status[1], child_status[2]);
  printf("qsort: %016llx\n", (unsigned long long)h);
  printf("asprintf: %zu %s\n", strlen(dup), strcmp(dup, s) == 0 ? "same" : "different");
  free(dup);
  free(s);
  printf("errors: %d\n", errors);
  return errors ? 1 : 0;
}
