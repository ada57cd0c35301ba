/* init.c: lazy initialization (the first allocation may come before any
 * constructor runs), thread exit, and fork. */

#include <sys/auxv.h>

_Atomic(int) _ta_init_state;
static pthread_mutex_t TA_LOCK _ta_init_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread bool _ta_in_init;
static _Atomic(bool) _ta_atfork_done;

static void _ta_fork_prepare(void);
static void _ta_fork_parent(void);
static void _ta_fork_child(void);

/* A key no program sets on purpose: from the kernel's random bytes (the
 * auxiliary vector's AT_RANDOM, already there, no system call), never 0. */
static void _ta_free_key_init(void) {
  const uintptr_t *r = (const uintptr_t *)getauxval(AT_RANDOM);
  if (r) _ta_free_key ^= r[1];
  _ta_free_key |= 1;
}

static bool _ta_init_slow(void) {
  int s = atomic_load_explicit(&_ta_init_state, memory_order_acquire);
  if (s < 2) {
    /* An allocation made by init itself, before the core is ready, fails
     * (NULL/ENOMEM) rather than deadlocking; none is expected. */
    if (_ta_in_init) return false;
    _ta_mutex_lock(&_ta_init_lock);
    if (atomic_load(&_ta_init_state) < 2) {
      _ta_in_init = true;
      atomic_store(&_ta_init_state, 1);
      _ta_options_parse();
      _ta_free_key_init();
      bool ok = _ta_books_init();
      if (ok) _ta_tags_init(_ta_opt.default_tag);
      if (ok) _ta_budgets_init(); /* TAGALLOC_BUDGET: before any tag is used */
      if (ok) _ta_sample_init();
      ok = ok && _ta_arena_init() && pthread_key_create(&_ta_key, _ta_thread_done) == 0;
      atomic_store_explicit(&_ta_init_state, ok ? 2 : 0, memory_order_release);
      _ta_in_init = false;
      if (!ok) _ta_warn("cannot reserve address space for the heap (errno %d)", errno);
    }
    _ta_mutex_unlock(&_ta_init_lock);
    if (atomic_load(&_ta_init_state) < 2) return false;
  }
  /* Outside every lock: pthread_atfork may allocate, through us. */
  bool expect = false;
  if (atomic_compare_exchange_strong(&_ta_atfork_done, &expect, true)) {
    pthread_atfork(_ta_fork_prepare, _ta_fork_parent, _ta_fork_child);
    atomic_store_explicit(&_ta_init_state, 3, memory_order_release);
  }
  return true;
}

/* fork: hold every lock across it, so the child starts with consistent
 * books. The child keeps the forking thread's heap; the other threads'
 * heaps stay as they were (their pages are freed into remotely). */
static void _ta_fork_prepare(void) {
  _ta_sample_fork_prepare();
  _ta_mutex_lock(&_ta_tags_lock);
  _ta_mutex_lock(&_ta_threads_lock);
  _ta_mutex_lock(&_ta_heaps_lock);
  _ta_mutex_lock(&_ta_aband_lock);
  _ta_mutex_lock(&_ta_arena_lock);
  _ta_mutex_lock(&_ta_huge_lock);
  _ta_mutex_lock(&_ta_meta_lock);
  _ta_books_fork_prepare(); /* every list whole: the child's books come from this copy */
}

static void _ta_fork_parent(void) {
  _ta_books_fork_parent();
  _ta_mutex_unlock(&_ta_meta_lock);
  _ta_mutex_unlock(&_ta_huge_lock);
  _ta_mutex_unlock(&_ta_arena_lock);
  _ta_mutex_unlock(&_ta_aband_lock);
  _ta_mutex_unlock(&_ta_heaps_lock);
  _ta_mutex_unlock(&_ta_threads_lock);
  _ta_mutex_unlock(&_ta_tags_lock);
  _ta_sample_fork_parent();
}

static void _ta_fork_child(void) {
  bool resync = _ta_books_fork_child(); /* first: nothing may write the parent's books */
  _ta_mutex_reinit(&_ta_meta_lock);
  _ta_mutex_reinit(&_ta_huge_lock);
  _ta_mutex_reinit(&_ta_arena_lock);
  _ta_mutex_reinit(&_ta_aband_lock);
  _ta_mutex_reinit(&_ta_heaps_lock);
  _ta_mutex_reinit(&_ta_threads_lock);
  _ta_mutex_reinit(&_ta_tags_lock);
  _ta_sample_fork_child();
  _ta_report_fork_child();
  _ta_purger_fork_child();
  /* Only the forking thread lives on: the others' records are free. Any
   * of them may have been between a change to the heap and its count
   * (the fast paths take no lock fork holds): then the copied books are
   * off by those blocks, so they are resynced with the heap. */
  for (_ta_thread_t *t = _ta_threads_first(); t; t = t->next)
    if (t != _ta_tls_thread && atomic_load_explicit(&t->live, memory_order_relaxed)) {
      atomic_store_explicit(&t->live, false, memory_order_relaxed);
      resync = true;
    }
  _ta_heaps_disown_vanished();
  if (!_ta_books) return;
  if (resync) _ta_books_resync();
  _ta_books_rebase(resync); /* the child's figures begin with its life */
  _ta_budgets_recount();    /* the rebase moved the marks */
}
