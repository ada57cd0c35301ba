/* purger.c: the thread that returns free memory to the OS when the
 * program makes no call that would. The arena and the huge cache purge
 * what is past the purge delay or the retain limit whenever the program
 * allocates or frees through them (arena.c, _ta_unlock_purge); a program
 * that frees a gigabyte and then works in its small blocks, or sleeps,
 * made none, and kept the gigabyte resident for good (a test that waited
 * a second for its RSS to fall passed or failed by whether its own stdio
 * happened to need a new span).
 *
 * One thread per process, started the first time an arena operation
 * leaves more free memory resident than retain_min (not at load: most
 * programs never need it), with every signal blocked and named "tagalloc-purge". While
 * anything is resident and free it wakes every half purge delay and
 * purges as an arena operation would (_ta_arena_purge, _ta_huge_purge:
 * no allocation, so it has no heap and no thread record); when nothing
 * is, it waits on a condition variable until an operation leaves some.
 * The hand-off is one seq_cst store and load on each side (_ta_purger_kick
 * against _ta_purger_main's last look): either the purger sees the new
 * free memory, or the operation sees it idle and wakes it. A fork child
 * has no purger (threads do not come along) and starts its own as the
 * parent did. If the thread cannot be made (a sandbox without clone,
 * no memory) nothing else changes: purging is left to the operations, as
 * before, and it is not tried again; so with TAGALLOC_PURGER=0, for a
 * program that must stay single-threaded. */

#include <signal.h>

static pthread_mutex_t TA_LOCK _ta_purger_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t TA_LOCK _ta_purger_cond = PTHREAD_COND_INITIALIZER;
enum { TA_PURGER_NONE, TA_PURGER_STARTING, TA_PURGER_RUNNING, TA_PURGER_FAILED };
static _Atomic(int) _ta_purger_state;
static _Atomic(bool) _ta_purger_idle; /* waiting on the condition variable */
static bool _ta_purger_work;          /* under _ta_purger_lock: wake up */

/* May any free memory be resident: dirty spans (arena.c's bound, which
 * counts every page of a guessed span), cached huge mappings, or spans
 * in use that other threads' frees emptied (arena.c)? */
static inline bool _ta_purger_due(void) {
  return atomic_load_explicit(&_ta_arena_dirty_bytes, memory_order_seq_cst) != 0 ||
         atomic_load_explicit(&_ta_huge_cached_pages, memory_order_seq_cst) != 0 ||
         atomic_load_explicit(&_ta_emptied_pending, memory_order_seq_cst) != 0;
}

static void *_ta_purger_main(void *arg) {
  (void)arg;
  (void)prctl(PR_SET_NAME, (unsigned long)"tagalloc-purge", 0, 0, 0);
  for (;;) {
    size_t ms = _ta_opt.purge_delay_ms / 2;
    if (ms < 10) ms = 10;
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
    _ta_arena_purge(false);
    _ta_huge_purge(false);
    _ta_emptied_purge();
    /* Idle, then a last look: an operation that left memory free after
     * this store sees the purger idle and wakes it. */
    _ta_mutex_lock(&_ta_purger_lock);
    atomic_store_explicit(&_ta_purger_idle, true, memory_order_seq_cst);
    while (!_ta_purger_work && !_ta_purger_due())
      if (_ta_cond_wait_plain(&_ta_purger_cond, &_ta_purger_lock) != 0) break; /* then the sleep above paces it */
    _ta_purger_work = false;
    atomic_store_explicit(&_ta_purger_idle, false, memory_order_relaxed);
    _ta_mutex_unlock(&_ta_purger_lock);
  }
  return NULL;
}

/* Start the purger (the first caller to get here), with every signal
 * blocked in it: a program's handlers never run on our thread. What the C
 * library allocates for the thread (its TLS vector, for good: the thread
 * never exits) is charged to no tag, not to the tag of whichever thread
 * happened to start it, and comes from mappings of its own, not from the
 * starting thread's heap, which may be in the middle of a walk (heap.c,
 * _ta_tls_heapless). */
TA_NOINLINE static void _ta_purger_start(void) {
#if TA_DEBUG >= 1
  /* pthread_create allocates, and its malloc may take any of our locks */
  if (_ta_tls_ranks) _ta_fatal("the purger started while holding %s (its thread's TLS is a malloc)", _ta_lock_name(31 - __builtin_clz(_ta_tls_ranks)));
#endif
  int expect = TA_PURGER_NONE;
  if (!atomic_compare_exchange_strong(&_ta_purger_state, &expect, TA_PURGER_STARTING)) return;
  uint32_t tag = _ta_current_tag();
  _ta_thread_t *th = _ta_tls_thread;
  if (tag != TA_TAG_UNTAGGED && th) (void)_ta_use_tag(th, TA_TAG_UNTAGGED); /* its counters exist: it was current */
  sigset_t all, old;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &old);
  _ta_heap_t *h = _ta_tls_heap; /* set aside (dlsym may allocate too): see _ta_tls_heapless */
  _ta_tls_heap = &_ta_heap_empty;
  _ta_tls_heapless = true;
  pthread_attr_t attr;
  pthread_t t;
  _ta_pthread_create_t create = _ta_pthread_create_real();
  int rc = create ? pthread_attr_init(&attr) : EAGAIN;
  if (rc == 0) {
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_attr_setstacksize(&attr, 64 * 1024);
    rc = create(&t, &attr, _ta_purger_main, NULL);
    pthread_attr_destroy(&attr);
  }
  _ta_tls_heapless = false;
  _ta_tls_heap = h;
  pthread_sigmask(SIG_SETMASK, &old, NULL);
  if (tag != TA_TAG_UNTAGGED && th) (void)_ta_use_tag(th, tag);
  atomic_store(&_ta_purger_state, rc == 0 ? TA_PURGER_RUNNING : TA_PURGER_FAILED);
}

/* An arena operation just ended (no arena or huge lock held): if it left
 * free memory resident, see that the purger will look at it. The thread
 * is started only once more than retain_min is free and resident (what
 * the retain limit always allows): a program that never frees that much
 * never has it. The lock is only tried: a signal handler's free that
 * interrupted this very section must not wait for it, and whoever holds
 * it either wakes the purger or is the purger, about to look again. */
static void _ta_purger_kick(void) {
  if (!_ta_purger_due()) return;
  int st = atomic_load_explicit(&_ta_purger_state, memory_order_relaxed);
  if (ta_unlikely(st == TA_PURGER_NONE)) {
    if (!_ta_opt.purger) return; /* TAGALLOC_PURGER=0 */
    size_t free_res = atomic_load_explicit(&_ta_arena_dirty_bytes, memory_order_relaxed) +
                      ((atomic_load_explicit(&_ta_huge_cached_pages, memory_order_relaxed) +
                        atomic_load_explicit(&_ta_emptied_pending, memory_order_relaxed)) << TA_PAGE_SHIFT);
    if (free_res > _ta_opt.retain_min) _ta_purger_start();
    return;
  }
  if (st != TA_PURGER_RUNNING || !atomic_load_explicit(&_ta_purger_idle, memory_order_seq_cst)) return;
  if (!_ta_mutex_trylock(&_ta_purger_lock)) return;
  _ta_purger_work = true;
  pthread_cond_signal(&_ta_purger_cond);
  _ta_mutex_unlock(&_ta_purger_lock);
}

/* A fork child: the purger stayed with the parent. */
static void _ta_purger_fork_child(void) {
  _ta_mutex_reinit(&_ta_purger_lock);
  _ta_purger_cond = (pthread_cond_t)PTHREAD_COND_INITIALIZER;
  /* Stores only where a value changes: the state lies among data the
   * child does not otherwise write, so each store is a copy-on-write
   * fault (a page copied) in every child of a program whose purger never
   * started. */
  if (_ta_purger_work) _ta_purger_work = false;
  if (atomic_load(&_ta_purger_idle)) atomic_store(&_ta_purger_idle, false);
  int st = atomic_load(&_ta_purger_state);
  if (st != TA_PURGER_FAILED && st != TA_PURGER_NONE) atomic_store(&_ta_purger_state, TA_PURGER_NONE);
}
