/* odd_test.c MODE [ARGS]: callers the allocator must survive (issue 7 item 6).
 * Run preloaded, with a timeout (TestOdd): a hang fails.
 *   signal-alarm SECS   a SIGALRM timer whose handler mallocs and frees while
 *                       the main thread is in a tight malloc/free loop
 *   signal-arena SECS   the same where both mostly take large blocks (spans
 *                       of the arena, under its lock): a handler's malloc
 *                       may get NULL then, but nothing hangs or drifts
 *   signal-crash SECS   a crash-handler-like SIGUSR1 handler (backtrace(),
 *                       backtrace_symbols_fd(), malloc) sent at random times
 *                       by another thread while the main thread allocates
 *   thread-exit ROUNDS  threads that exit holding cached blocks, many times:
 *                       RSS bounded, books exact
 *   fork-storm ROUNDS   fork() from many threads at once while others
 *                       allocate; the children allocate and exit
 *   dlopen LIB ROUNDS   dlopen/dlclose of a library whose constructor and
 *                       destructor allocate (odd_dl.c) */
#include "tcheck.h"

#include <execinfo.h>
#include <malloc.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../include/tagalloc.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int arena_mode; /* signal-arena */

/* A ring of live blocks with a pattern, checked before each is freed. */
#define RING 64
typedef struct {
  unsigned char *p[RING];
  size_t n[RING];
} ring_t;

static long ring_step(ring_t *r, uint64_t *seed, int big) {
  unsigned i = (unsigned)(t_rand(seed) % RING);
  long bad = 0;
  if (r->p[i]) {
    if (!t_verify(r->p[i], r->n[i] < 256 ? r->n[i] : 256, r->n[i])) bad++;
    free(r->p[i]);
  }
  uint64_t x = t_rand(seed) % 100;
  size_t n = x < (arena_mode ? 20 : 70) ? t_rand(seed) % 256
             : x < (arena_mode ? 30 : 97) || !big ? t_rand(seed) % 8192
                                                  : 600000 + t_rand(seed) % 400000;
  r->p[i] = malloc(n);
  r->n[i] = n;
  if (!r->p[i]) return bad + 1;
  t_fill(r->p[i], n < 256 ? n : 256, n);
  return bad;
}

static void ring_clear(ring_t *r) {
  for (int i = 0; i < RING; i++) free(r->p[i]), r->p[i] = NULL;
}

/* The end of every mode: the books equal a heap walk, the heap's invariants
 * hold, and the mode is counted as passed or failed. */
static int odd_finish(void) {
  t_check_books();
  t_check();
  if (t_cur_failed) t_failed++; else t_passed++;
  return t_summary();
}

/* RSS after the rounds stays within a slack of what it was halfway: 8 MiB,
 * or ODD_RSS_SLACK_KB (the checking build holds freed blocks back in its
 * quarantine and reclaims exited threads' pages in batches). */
static void check_rss_bounded(size_t rss_early, size_t rss_max) {
  const char *slack_env = getenv("ODD_RSS_SLACK_KB");
  size_t slack = slack_env ? (size_t)strtoul(slack_env, NULL, 10) : 8192;
  CHECK(rss_max <= rss_early + slack, "RSS grew from %zu kB to %zu kB (slack %zu kB)", rss_early, rss_max, slack);
}

/* ---- signals ------------------------------------------------------------------ */

static _Atomic(long) handler_calls, handler_bad, handler_null, handler_beside;
static int devnull = -1;

/* The handler's sizes are classes the interrupted loop never uses (it
 * takes 0..8 KiB): a handler allocating the class the interrupted malloc
 * or free is changing races on that page's list, which types.h's error
 * policy does not promise to survive (no allocator does); one taking
 * other classes, or the arena lock's large spans, is promised. */
static void alloc_in_handler(void) {
  size_t sizes[] = {12000, 20000, 40000, 100000};
  if (arena_mode) sizes[3] = 700000;
  void *b[4];
  for (int i = 0; i < 4; i++) {
    b[i] = malloc(sizes[i]);
    if (!b[i]) {
      atomic_fetch_add(&handler_null, 1);
      continue;
    }
    memset(b[i], 0x33, sizes[i]);
    /* a large block mapped beside the arena (the thread was in arena work)
     * has OS pages, not arena pages */
    if (sizes[i] > 512 * 1024 && malloc_usable_size(b[i]) == ((sizes[i] + 4095) & ~(size_t)4095))
      atomic_fetch_add(&handler_beside, 1);
  }
  for (int i = 3; i >= 0; i--) {
    if (b[i] && ((unsigned char *)b[i])[sizes[i] - 1] != 0x33) atomic_fetch_add(&handler_bad, 1);
    free(b[i]);
  }
}

static void on_alarm(int sig) {
  (void)sig;
  int e = errno;
  alloc_in_handler();
  atomic_fetch_add(&handler_calls, 1);
  errno = e;
}

static void on_crash(int sig) {
  (void)sig;
  int e = errno;
  void *frames[32];
  int n = backtrace(frames, 32); /* warmed up at setup: no dlopen here */
  backtrace_symbols_fd(frames, n, devnull); /* what crash handlers use: no malloc */
  alloc_in_handler();
  atomic_fetch_add(&handler_calls, 1);
  errno = e;
}

static _Atomic(int) stop;
static pthread_t main_thread;

static void *kicker(void *arg) {
  (void)arg;
  uint64_t seed = 99;
  while (!atomic_load(&stop)) {
    pthread_kill(main_thread, SIGUSR1);
    usleep((useconds_t)(50 + t_rand(&seed) % 400));
  }
  return NULL;
}

static int run_signals(int crash, double secs) {
  devnull = open("/dev/null", O_WRONLY);
  /* the allocator initializes on the first call: a handler interrupting
   * that gets NULL (types.h, the error policy); real programs are long
   * past it when their timers start */
  free(malloc(1));
  /* as crash handlers are set up: backtrace's first call loads libgcc_s
   * (dlopen, malloc of any size), so it is made before the handler runs */
  void *warm[4];
  (void)backtrace(warm, 4);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = crash ? on_crash : on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(crash ? SIGUSR1 : SIGALRM, &sa, NULL);
  pthread_t k;
  main_thread = pthread_self();
  if (crash) {
    pthread_create(&k, NULL, kicker, NULL);
  } else {
    struct itimerval it = {{0, 97}, {0, 97}}; /* as often as the kernel will */
    setitimer(ITIMER_REAL, &it, NULL);
  }
  ring_t r;
  memset(&r, 0, sizeof r);
  uint64_t seed = 7;
  long bad = 0, ops = 0;
  double end = now_s() + secs;
  while (now_s() < end) {
    for (int i = 0; i < 1000; i++) bad += ring_step(&r, &seed, 1);
    for (int i = 0; i < 1000; i++) free(malloc(32)); /* the tightest loop */
    ops += 2000;
  }
  if (crash) {
    atomic_store(&stop, 1);
    pthread_join(k, NULL);
  } else {
    struct itimerval off = {{0, 0}, {0, 0}};
    setitimer(ITIMER_REAL, &off, NULL);
  }
  ring_clear(&r);
  printf("%s: %ld operations, %ld handler calls (each 4 mallocs and frees), %ld bad blocks, %ld corrupted, %ld NULL and %ld mapped beside the arena in the handler\n",
         crash ? "signal-crash" : arena_mode ? "signal-arena" : "signal-alarm", ops, atomic_load(&handler_calls), bad, atomic_load(&handler_bad),
         atomic_load(&handler_null), atomic_load(&handler_beside));
  t_cur = "signals";
  CHECK(bad == 0 && atomic_load(&handler_bad) == 0, "corrupted blocks");
  /* never NULL: a handler interrupting its thread's arena work maps its
   * block on its own (types.h); signal-arena makes that common */
  CHECK(atomic_load(&handler_null) == 0, "malloc in the handler failed");
  if (arena_mode) CHECK(atomic_load(&handler_beside) > 0, "no handler landed in arena work: the mode tests nothing");
  CHECK(atomic_load(&handler_calls) > 100, "only %ld handler calls", atomic_load(&handler_calls));
  return odd_finish();
}

/* ---- threads that exit holding cached blocks ------------------------------------ */

#define XTHREADS 16
#define HANDED 128
static void *handed[XTHREADS][HANDED];

static void *exiting_thread(void *arg) {
  long id = (long)arg;
  if (id % 3 == 0) SetHeapBlockTagForThread(id % 2 ? "odd-exit-a" : "odd-exit-b");
  uint64_t seed = (uint64_t)id * 7919 + 1;
  void *mine[256];
  /* fill pages of several classes and free most: the heap holds partly
   * used pages with free blocks cached when the thread exits; every fifth
   * block outlives the thread (the main thread frees it, cross-thread) */
  for (int i = 0; i < 256; i++) {
    size_t n = 16 + t_rand(&seed) % 2000;
    mine[i] = malloc(n);
    if (mine[i]) memset(mine[i], 1, n);
  }
  int k = 0;
  for (int i = 0; i < 256; i++) {
    if (i % 5) free(mine[i]);
    else handed[id][k++] = mine[i];
  }
  while (k < HANDED) handed[id][k++] = malloc(16 + t_rand(&seed) % 600);
  return NULL;
}

static int run_thread_exit(int rounds) {
  size_t rss_early = 0, rss_max = 0;
  for (int r = 0; r < rounds; r++) {
    pthread_t t[XTHREADS];
    for (long i = 0; i < XTHREADS; i++) pthread_create(&t[i], NULL, exiting_thread, (void *)i);
    for (int i = 0; i < XTHREADS; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < XTHREADS; i++)
      for (int k = 0; k < HANDED; k++) free(handed[i][k]), handed[i][k] = NULL;
    size_t rss = t_status_kb("VmRSS");
    if (r == rounds / 2) rss_early = rss; /* a leak grows on; a warm-up does not */
    if (r > rounds / 2 && rss > rss_max) rss_max = rss;
    if (r % 50 == 0) t_check_books();
  }
  tagalloc_tag_stats_t st;
  t_cur = "thread-exit";
  for (int i = 0; i < 2; i++) {
    const char *tag = i ? "odd-exit-a" : "odd-exit-b";
    CHECK(tagalloc_tag_stats(tag, &st) == 0 && st.live_bytes == 0 && st.live_blocks == 0, "%s: %zu live bytes left", tag,
          st.live_bytes);
  }
  printf("thread-exit: %d rounds of %d threads, RSS %zu kB after round %d, at most %zu kB after\n", rounds, XTHREADS,
         rss_early, rounds / 2, rss_max);
  check_rss_bounded(rss_early, rss_max);
  return odd_finish();
}

/* ---- fork from many threads at once ---------------------------------------------------- */

#define FORKERS 8
#define ALLOCATORS 3
static pthread_barrier_t fork_barrier;
static _Atomic(long) child_failures, children;
static int fork_rounds;

static void child_work(uint64_t seed) {
  alarm(30); /* a hung child dies, and its parent sees the signal */
  ring_t r;
  memset(&r, 0, sizeof r);
  long bad = 0;
  for (int i = 0; i < 3000; i++) bad += ring_step(&r, &seed, 1);
  ring_clear(&r);
  t_check_books();
  _exit(bad ? 3 : 0);
}

static void *forker(void *arg) {
  long id = (long)arg;
  int rounds = fork_rounds;
  for (int r = 0; r < rounds; r++) {
    pthread_barrier_wait(&fork_barrier); /* every forker at once */
    pid_t pid = fork();
    if (pid == 0) child_work((uint64_t)id * 1000 + (uint64_t)r);
    if (pid < 0) {
      atomic_fetch_add(&child_failures, 1);
      continue;
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
      fprintf(stderr, "child %d: status 0x%x\n", (int)pid, st);
      atomic_fetch_add(&child_failures, 1);
    }
    atomic_fetch_add(&children, 1);
  }
  return NULL;
}

static void *allocator(void *arg) {
  uint64_t seed = (uint64_t)(long)arg + 5;
  ring_t r;
  memset(&r, 0, sizeof r);
  long bad = 0;
  while (!atomic_load(&stop)) bad += ring_step(&r, &seed, 1);
  ring_clear(&r);
  if (bad) atomic_fetch_add(&child_failures, 1000);
  return NULL;
}

static int run_fork_storm(int rounds) {
  fork_rounds = rounds;
  pthread_barrier_init(&fork_barrier, NULL, FORKERS);
  pthread_t f[FORKERS], a[ALLOCATORS];
  for (long i = 0; i < ALLOCATORS; i++) pthread_create(&a[i], NULL, allocator, (void *)i);
  for (long i = 0; i < FORKERS; i++) pthread_create(&f[i], NULL, forker, (void *)i);
  for (int i = 0; i < FORKERS; i++) pthread_join(f[i], NULL);
  atomic_store(&stop, 1);
  for (int i = 0; i < ALLOCATORS; i++) pthread_join(a[i], NULL);
  printf("fork-storm: %ld children forked by %d threads at once (%d allocating), %ld failures\n", atomic_load(&children),
         FORKERS, ALLOCATORS, atomic_load(&child_failures));
  t_cur = "fork-storm";
  CHECK(atomic_load(&child_failures) == 0, "%ld failures", atomic_load(&child_failures));
  CHECK(atomic_load(&children) == (long)FORKERS * rounds, "%ld children", atomic_load(&children));
  return odd_finish();
}

/* ---- dlopen of a library that allocates in its constructor and destructor ------------- */

static int run_dlopen(const char *lib, int rounds) {
  t_cur = "dlopen";
  size_t rss_early = 0, rss_max = 0;
  for (int r = 0; r < rounds; r++) {
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    CHECK(h != NULL, "dlopen %s: %s", lib, dlerror());
    if (!h) break;
    long (*work)(int) = (long (*)(int))dlsym(h, "odd_dl_work");
    CHECK(work != NULL, "dlsym odd_dl_work");
    if (work) CHECK(work(r) == 0, "odd_dl_work found bad blocks");
    CHECK(dlclose(h) == 0, "dlclose: %s", dlerror());
    tagalloc_tag_stats_t st;
    CHECK(tagalloc_tag_stats("odd-dl", &st) == 0 && st.live_blocks == 0, "round %d: the library's tag holds %zu blocks", r,
          st.live_blocks);
    size_t rss = t_status_kb("VmRSS");
    if (r == rounds / 2) rss_early = rss; /* a leak grows on; a warm-up does not */
    if (r > rounds / 2 && rss > rss_max) rss_max = rss;
    if (r % 20 == 0) t_check_books();
  }
  printf("dlopen: %d rounds, RSS %zu kB after round %d, at most %zu kB after\n", rounds, rss_early, rounds / 2, rss_max);
  check_rss_bounded(rss_early, rss_max);
  return odd_finish();
}

int main(int argc, char **argv) {
  if (argc < 3) return 2;
  if (!t_tagalloc_active()) {
    fprintf(stderr, "tagalloc is not the allocator\n");
    return 1;
  }
  const char *m = argv[1];
  if (!strcmp(m, "signal-alarm")) return run_signals(0, atof(argv[2]));
  if (!strcmp(m, "signal-crash")) return run_signals(1, atof(argv[2]));
  if (!strcmp(m, "signal-arena")) return arena_mode = 1, run_signals(0, atof(argv[2]));
  if (!strcmp(m, "thread-exit")) return run_thread_exit(atoi(argv[2]));
  if (!strcmp(m, "fork-storm")) return run_fork_storm(atoi(argv[2]));
  if (!strcmp(m, "dlopen") && argc == 4) return run_dlopen(argv[2], atoi(argv[3]));
  return 2;
}
