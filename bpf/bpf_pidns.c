/* Maps a pid of d9d's own pid namespace to the kernel's tgid. */
#include "bpf/bpf_pidns.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "d9_sched.skel.h"

/* PROC_PID_INIT_INO: the initial pid namespace's fixed inode number. */
#define D9_INIT_PIDNS_INO 0xEFFFFFFCu

static bool in_initial_pidns(void)
{
        struct stat st;

        /* Unreadable: assume the common case, as d9d did before it knew. */
        return stat("/proc/self/ns/pid", &st) < 0 || st.st_ino == D9_INIT_PIDNS_INO;
}

static int read_iter_tgid(int iter_fd, uint32_t *tgid)
{
        char buf[32];
        ssize_t n = read(iter_fd, buf, sizeof(buf) - 1);

        if (n < 0)
                return -errno;
        if (n == 0)
                return -ESRCH; /* no task left: the process is gone */
        buf[n] = '\0';
        char *end;
        unsigned long v = strtoul(buf, &end, 10);
        if (end == buf || *end != '\n' || v == 0 || v > UINT32_MAX)
                return -EPROTO;
        *tgid = (uint32_t)v;
        return 0;
}

int d9_bpf_kernel_tgid(struct d9_sched *skel, pid_t pid, uint32_t *tgid)
{
        if (in_initial_pidns()) {
                *tgid = (uint32_t)pid;
                return 0;
        }
        int pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
        if (pidfd < 0)
                return -errno;
        union bpf_iter_link_info linfo = { .task.pid_fd = (uint32_t)pidfd };
        LIBBPF_OPTS(bpf_iter_attach_opts, opts, .link_info = &linfo, .link_info_len = sizeof(linfo));
        struct bpf_link *link = bpf_program__attach_iter(skel->progs.d9_kernel_tgid, &opts);
        int r = link ? 0 : -errno;
        close(pidfd);
        if (r < 0)
                return r;
        int iter_fd = bpf_iter_create(bpf_link__fd(link));
        r = iter_fd < 0 ? -errno : read_iter_tgid(iter_fd, tgid);
        if (iter_fd >= 0)
                close(iter_fd);
        bpf_link__destroy(link);
        return r;
}
