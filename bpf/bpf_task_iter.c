/* One process's threads through a BPF task iterator: the tgid lookup
 * (bpf_pidns.c), the sleepers' seeding and the Worker sweep
 * (bpf_sleepers.c) use it. */
#include "bpf/bpf_task_iter.h"

#include <errno.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "daemon/core/cleanup.h"

static struct bpf_link *attach_to_process(struct bpf_program *prog, int pidfd, bool or_all_tasks)
{
        union bpf_iter_link_info linfo = { .task.pid_fd = (__u32)pidfd };
        LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &linfo, .link_info_len = sizeof(linfo));
        struct bpf_link *link = bpf_program__attach_iter(prog, &opts);

        if (!link && errno == EINVAL && or_all_tasks)
                link = bpf_program__attach_iter(prog, NULL);
        return link;
}

int d9_bpf_task_iter_open(struct bpf_program *prog, pid_t pid, bool or_all_tasks)
{
        _cleanup_close_ int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        struct bpf_link *link;
        int iter_fd;

        if (pidfd < 0)
                return -errno;
        link = attach_to_process(prog, pidfd, or_all_tasks);
        if (!link)
                return -errno;
        iter_fd = bpf_iter_create(bpf_link__fd(link));
        if (iter_fd < 0)
                iter_fd = -errno;
        bpf_link__destroy(link);
        return iter_fd;
}

int d9_bpf_task_iter_run(struct bpf_program *prog, pid_t pid, bool or_all_tasks)
{
        _cleanup_close_ int iter_fd = d9_bpf_task_iter_open(prog, pid, or_all_tasks);
        char buf[64];
        ssize_t n;

        if (iter_fd < 0)
                return iter_fd;
        while ((n = read(iter_fd, buf, sizeof(buf))) != 0)
                if (n < 0 && errno != EINTR)
                        return -errno;
        return 0;
}
