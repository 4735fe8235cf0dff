/* A thread asleep when d9d attaches has no switch-out in the recording;
 * without a sched_wakeup program its switch-in cannot tell a sleep from a
 * preemption, so the threads asleep at the attach are marked first
 * (d9_seed_sleepers in d9_sched.bpf.c). */
#include "bpf/bpf_sleepers.h"

#include <errno.h>
#include <unistd.h>

#include "bpf/bpf_task_iter.h"
#include "daemon/core/cleanup.h"
#include "d9_sched.skel.h"

int d9_bpf_seed_sleepers(struct d9_sched *skel, pid_t pid)
{
        _cleanup_close_ int iter_fd = d9_bpf_task_iter_open(skel->progs.d9_seed_sleepers, pid, true);
        char buf[64];
        ssize_t n;

        if (iter_fd < 0)
                return iter_fd;
        /* The program prints nothing: reading to the end runs it. */
        while ((n = read(iter_fd, buf, sizeof(buf))) != 0)
                if (n < 0 && errno != EINTR)
                        return -errno;
        return 0;
}
