/* Maps a pid of d9d's own pid namespace to the kernel's tgid. */
#include "bpf/bpf_pidns.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "bpf/bpf_task_iter.h"
#include "daemon/core/cleanup.h"
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
        _cleanup_close_ int iter_fd = d9_bpf_task_iter_open(skel->progs.d9_kernel_tgid, pid, false);
        if (iter_fd < 0)
                return iter_fd;
        return read_iter_tgid(iter_fd, tgid);
}
