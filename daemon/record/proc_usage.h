/* proc_usage: a target's resource counters (getrusage's, and threads, fds,
 * I/O bytes) read from outside through its /proc/PID directory fd. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "proto/d9proto.h"

/* Context switches are counted per thread in /proc (a process's status
 * file shows its main thread's only); what threads gone since the last
 * sample had switched is kept here so the sums never go back. */
struct proc_usage_threads {
        struct proc_thread_switches {
                uint32_t tid;
                uint64_t vol, invol;
        } *seen;                        /* last sample's threads, by tid */
        size_t n_seen;
        uint64_t gone_vol, gone_invol;  /* of threads that exited since */
        /* The highest VmHWM read so far: the kernel computes it from RSS
         * counters it keeps per CPU and reads approximately (6.2+), so a
         * read can come out a page below the last one; a peak never goes
         * back (seen: 3,162,112 then 3,158,016 bytes). */
        uint64_t max_rss;
};

/* Threads whose switches one sample reads; past it (or past the threads
 * stat counted + 64) the others keep their last counts. */
#define PROC_USAGE_THREADS_MAX 4096

/* proc_fd: O_PATH|O_DIRECTORY fd of /proc/PID, opened while the caller's
 * pidfd proved the PID was the target's (reads fail with ESRCH once it has
 * exited: the fd names that process, not the PID). Returns 0 or -errno. */
int proc_usage_read(int proc_fd, struct proc_usage_threads *th, struct d9_process_usage *out);
void proc_usage_threads_free(struct proc_usage_threads *th);
