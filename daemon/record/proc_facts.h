/* proc_facts: what /proc says of one process, read through a directory fd
 * of /proc/PID and confirmed by its pidfd, so every fact is of the process
 * the pidfd names (not of a process that reused its PID meanwhile). */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct proc_facts {
        char exe[4096];         /* readlink of exe, in the process's own root; "" for kernel threads */
        char cgroup[1024];      /* its cgroup v2 path ("0::" line of cgroup), "" if none */
        char nspid[128];        /* NSpid: host pid first, innermost namespace's last */
        pid_t ns_pid;           /* the pid it sees itself as (innermost) */
        uid_t uid;              /* owner of /proc/PID */
};

/* Fill f for pid, whose pidfd the caller holds. -ESRCH: gone, or the PID
 * now names another process. */
int proc_facts_read(pid_t pid, int pidfd, struct proc_facts *f);
