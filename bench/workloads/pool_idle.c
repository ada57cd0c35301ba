/* pool_idle: a pool of worker threads that goes idle between bursts, as
 * a server's or a build tool's does. Each round the main thread queues 4
 * tasks a worker (a task makes 2,000 blocks of 16..2,048 bytes, writes
 * them and frees them), waits for the pool to finish, then works alone
 * on 16 MiB of 1 KiB blocks while the workers wait on a condition
 * variable. Peak RSS shows what idle workers hold for their next tasks:
 * an allocator whose threads keep pages of every size class they used
 * holds them through the main thread's work. With sem=1 the pool waits on
 * semaphores instead (a task a post), as CPython's queues and some pools'
 * workers do.
 * Usage: pool_idle [workers=8] [rounds=5] [sem=0] */
#include "common.h"
#include <pthread.h>
#include <semaphore.h>

#define TASK_BLOCKS 2000
#define MAIN_BLOCKS 16384

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t work_cv = PTHREAD_COND_INITIALIZER, done_cv = PTHREAD_COND_INITIALIZER;
static long long next_task, end_task; /* tasks [next_task, end_task) wait; each has its own seed */
static int running, quit;
static uint64_t task_sum; /* under mu: the sum of every task's, in any order */
static int use_sem;
static sem_t work_sem, done_sem; /* sem=1: a post a task (or a quit), a post when a round's last task is done */

static uint64_t task(long long k)
{
	rng_t r = { (uint64_t)k * 7919 + 1 };
	unsigned char *p[TASK_BLOCKS];
	size_t n[TASK_BLOCKS];
	uint64_t sum = 0;
	for (int i = 0; i < TASK_BLOCKS; i++) {
		n[i] = (size_t)rng_range(&r, 16, 2048);
		p[i] = xmalloc(n[i]);
		memset(p[i], (int)(i + k), n[i]);
	}
	for (int i = 0; i < TASK_BLOCKS; i++) {
		sum += p[i][n[i] - 1];
		free(p[i]);
	}
	return sum;
}

/* Run the next task, with mu held (released while it runs); true if it
 * was the round's last to finish. */
static int run_next_locked(void)
{
	long long k = next_task++;
	running++;
	pthread_mutex_unlock(&mu);
	uint64_t s = task(k);
	pthread_mutex_lock(&mu);
	task_sum += s;
	running--;
	return next_task == end_task && running == 0;
}

/* A worker of the pool waiting on semaphores: a post a task, or a quit. */
static void *sem_worker(void *arg)
{
	(void)arg;
	for (;;) {
		while (sem_wait(&work_sem) != 0)
			;
		pthread_mutex_lock(&mu);
		if (next_task == end_task) { /* a quit */
			pthread_mutex_unlock(&mu);
			return NULL;
		}
		int last = run_next_locked();
		pthread_mutex_unlock(&mu);
		if (last)
			sem_post(&done_sem);
	}
}

static void *worker(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&mu);
	for (;;) {
		while (next_task == end_task && !quit)
			pthread_cond_wait(&work_cv, &mu);
		if (next_task == end_task)
			break;
		if (run_next_locked())
			pthread_cond_signal(&done_cv);
	}
	pthread_mutex_unlock(&mu);
	return NULL;
}

int main(int argc, char **argv)
{
	int workers = (int)arg(argc, argv, 1, 8);
	long long rounds = arg(argc, argv, 2, 5);
	use_sem = (int)arg(argc, argv, 3, 0);
	if (workers < 1 || workers > 256 || rounds < 1 || use_sem < 0 || use_sem > 1)
		die("usage: pool_idle [workers] [rounds] [sem: 0 or 1]");
	if (use_sem && (sem_init(&work_sem, 0, 0) != 0 || sem_init(&done_sem, 0, 0) != 0))
		die("sem_init failed");
	pthread_t *t = xmalloc((size_t)workers * sizeof *t);
	for (int i = 0; i < workers; i++)
		if (pthread_create(&t[i], NULL, use_sem ? sem_worker : worker, NULL) != 0)
			die("pthread_create failed");
	uint64_t h = 0;
	for (long long r = 0; r < rounds; r++) {
		if (use_sem) {
			pthread_mutex_lock(&mu);
			end_task += 4 * workers;
			pthread_mutex_unlock(&mu);
			for (int i = 0; i < 4 * workers; i++)
				sem_post(&work_sem);
			while (sem_wait(&done_sem) != 0)
				;
		} else {
			pthread_mutex_lock(&mu);
			end_task += 4 * workers;
			pthread_cond_broadcast(&work_cv);
			while (next_task != end_task || running != 0)
				pthread_cond_wait(&done_cv, &mu);
			pthread_mutex_unlock(&mu);
		}
		/* the pool idles: the main thread works alone */
		unsigned char **big = xmalloc(MAIN_BLOCKS * sizeof *big);
		for (int i = 0; i < MAIN_BLOCKS; i++) {
			big[i] = xmalloc(1024);
			memset(big[i], (int)(i + r), 1024);
		}
		for (int i = 0; i < MAIN_BLOCKS; i++) {
			h = mix(h, big[i][1023]);
			free(big[i]);
		}
		free(big);
	}
	pthread_mutex_lock(&mu);
	quit = 1;
	pthread_cond_broadcast(&work_cv);
	pthread_mutex_unlock(&mu);
	if (use_sem)
		for (int i = 0; i < workers; i++)
			sem_post(&work_sem);
	for (int i = 0; i < workers; i++)
		pthread_join(t[i], NULL);
	free(t);
	print_checksum(mix(h, task_sum));
	return 0;
}
