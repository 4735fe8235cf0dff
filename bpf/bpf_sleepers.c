/* A thread asleep when d9d attaches has no switch-out in the recording;
 * without a sched_wakeup program its switch-in cannot tell a sleep from a
 * preemption, so the threads asleep at the attach are marked first
 * (d9_seed_sleepers in d9_sched.bpf.c). */
#include "bpf/bpf_sleepers.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "d9_sched.skel.h"

static struct bpf_link *attach_iter(struct d9_sched *skel, int pidfd)
{
        union bpf_iter_link_info linfo = { .task.pid_fd = (__u32)pidfd };
        LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &linfo, .link_info_len = sizeof(linfo));
        struct bpf_link *link = bpf_program__attach_iter(skel->progs.d9_seed_sleepers, &opts);

        /* Before Linux 6.1 a task iterator takes no pid: all tasks. */
        if (!link && errno == EINVAL)
                link = bpf_program__attach_iter(skel->progs.d9_seed_sleepers, NULL);
        return link;
}

int d9_bpf_seed_sleepers(struct d9_sched *skel, pid_t pid)
{
        char buf[64];
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0), iter_fd, r = 0;
        struct bpf_link *link;
        ssize_t n;

        if (pidfd < 0)
                return -errno;
        link = attach_iter(skel, pidfd);
        if (!link)
                r = -errno;
        close(pidfd);
        if (r < 0)
                return r;
        iter_fd = bpf_iter_create(bpf_link__fd(link));
        if (iter_fd < 0)
                r = -errno;
        /* The program prints nothing: reading to the end runs it. */
        while (iter_fd >= 0 && (n = read(iter_fd, buf, sizeof(buf))) != 0) {
                if (n < 0 && errno != EINTR) {
                        r = -errno;
                        break;
                }
        }
        if (iter_fd >= 0)
                close(iter_fd);
        bpf_link__destroy(link);
        return r;
}
