/* What an attach learns from a target's threads as they are, by task
 * iterators run once its config is in:
 * - a thread asleep when d9d attaches has no switch-out in the recording;
 *   without a sched_wakeup program its switch-in cannot tell a sleep from
 *   a preemption, so the threads asleep at the attach are marked first
 *   (d9_seed_sleepers in d9_sched.bpf.c);
 * - a default-set target's Worker search gets one scan of every thread,
 *   idle workers included (d9_wk_sweep). */
#include "bpf/bpf_sleepers.h"

#include <pthread.h>

#include "bpf/bpf_task_iter.h"
#include "d9_sched.skel.h"

/* Threads scanned per sweep, in the iterator's (tid) order: a runtime's
 * workers start right after the main thread. */
#define D9_WK_SWEEP_THREADS 64

int d9_bpf_seed_sleepers(struct d9_sched *skel, pid_t pid)
{
        return d9_bpf_task_iter_run(skel->progs.d9_seed_sleepers, pid, true);
}

/* Three passes: a depth is confirmed by D9_WK_HITS consistent finds, which
 * a thread's own scans give by finding its Worker again (up to 4 scans per
 * 100 ms); a two-worker runtime's one pass gives two, and its workers,
 * idle, no more until they wake. The second pass is that second look. The
 * third, with the depth known, reads each thread's Worker at it into the
 * thread's storage (one word and the Worker's two reads a thread), so a
 * worker that sleeps through the whole recording is named at the stop. */
#define D9_WK_SWEEP_PASSES 3

/* One sweep at a time: the budget is one word, and the scan's scratch is
 * one per CPU (an attach on d9d's BPF thread and a late plan's on its
 * loop could otherwise share both). */
static pthread_mutex_t sweep_lock = PTHREAD_MUTEX_INITIALIZER;

int d9_bpf_sweep_workers(struct d9_sched *skel, pid_t pid)
{
        int r = 0;

        pthread_mutex_lock(&sweep_lock);
        for (int i = 0; i < D9_WK_SWEEP_PASSES && r == 0; i++) {
                skel->bss->d9_wk_sweep_budget = D9_WK_SWEEP_THREADS;
                r = d9_bpf_task_iter_run(skel->progs.d9_wk_sweep, pid, true);
        }
        pthread_mutex_unlock(&sweep_lock);
        return r;
}
