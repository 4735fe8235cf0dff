/* proc_usage.c: ProcessResourceUsageEvent's getrusage(RUSAGE_SELF) fields
 * as an outside reader finds them, and the rest of D9ProcessResourcesEvent.
 *
 * Sources (all relative to the target's /proc/PID fd, O_NOFOLLOW, never a
 * path a client gave):
 *   stat    utime, stime (clock ticks: 10 ms at USER_HZ 100), minflt,
 *           majflt, num_threads, rss: whole thread group, exited threads
 *           included, as getrusage counts them;
 *   status  VmHWM (getrusage's ru_maxrss), VmRSS;
 *   io      read_bytes / write_bytes (ru_inblock / ru_oublock are these in
 *           512-byte units, as the kernel computes them), rchar, wchar;
 *   fd      st_size of the directory is the number of open fds (Linux 6.2);
 *   task/T/status  voluntary / nonvoluntary_ctxt_switches per thread: the
 *           process's own status shows only its main thread's. Switches of
 *           a thread after its last sample and before its exit are missed. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "proto/d9proto.h"
#include "daemon/record/proc_usage.h"

/* Reads a small /proc file below dir_fd into buf (NUL-terminated). */
static int read_at(int dir_fd, const char *name, char *buf, size_t cap)
{
        _cleanup_close_ int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = d9_read_full(fd, buf, cap - 1, -1);
        if (n < 0)
                return (int)n;
        buf[n] = 0;
        return 0;
}

/* The value after "key" in a "Key:\tvalue" file, 0 if absent. */
static uint64_t field_after(const char *text, const char *key)
{
        const char *p = strstr(text, key);

        return p ? strtoull(p + strlen(key), NULL, 10) : 0;
}

static int read_stat(int proc_fd, struct d9_process_usage *u)
{
        static long tick_ns;
        char buf[2048], *p, *save = NULL, *tok;
        unsigned long long v[22] = { 0 };
        int i = 3, r = read_at(proc_fd, "stat", buf, sizeof(buf));

        if (r < 0)
                return r;
        if (!tick_ns) {
                long hz = sysconf(_SC_CLK_TCK);
                tick_ns = 1000000000L / (hz > 0 ? hz : 100);
        }
        /* The name in parentheses may hold spaces and ')': fields start
         * after the last ')'. Field 3 is the state letter. */
        p = strrchr(buf, ')');
        if (!p)
                return -EIO;
        for (tok = strtok_r(p + 1, " ", &save); tok && i < 25; tok = strtok_r(NULL, " ", &save), i++)
                if (i >= 4 && i - 4 < 22)
                        v[i - 4] = strtoull(tok, NULL, 10);
        if (i < 25)
                return -EIO;
        /* v[k] is field k + 4 of proc(5). */
        u->minor_faults = v[10 - 4];
        u->major_faults = v[12 - 4];
        u->user_cpu_ns = v[14 - 4] * (uint64_t)tick_ns;
        u->system_cpu_ns = v[15 - 4] * (uint64_t)tick_ns;
        u->threads = v[20 - 4];
        return 0;
}

static int read_status_and_io(int proc_fd, struct d9_process_usage *u)
{
        char buf[8192];
        int r = read_at(proc_fd, "status", buf, sizeof(buf));

        if (r < 0)
                return r;
        u->max_rss_bytes = field_after(buf, "\nVmHWM:") * 1024;
        u->rss_bytes = field_after(buf, "\nVmRSS:") * 1024;
        r = read_at(proc_fd, "io", buf, sizeof(buf));
        if (r < 0)
                return r;
        u->rchar = field_after(buf, "rchar:");
        u->wchar = field_after(buf, "wchar:");
        u->read_bytes = field_after(buf, "\nread_bytes:");
        u->write_bytes = field_after(buf, "\nwrite_bytes:");
        u->block_input_ops = u->read_bytes >> 9;
        u->block_output_ops = u->write_bytes >> 9;
        return 0;
}

static int read_fd_count(int proc_fd, struct d9_process_usage *u)
{
        _cleanup_close_ int fd = openat(proc_fd, "fd", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct stat st;

        if (fd < 0 || fstat(fd, &st) < 0)
                return -errno;
        u->open_fds = (uint64_t)st.st_size;
        return 0;
}

static int cmp_tid(const void *a, const void *b)
{
        uint32_t x = ((const struct proc_thread_switches *)a)->tid;
        uint32_t y = ((const struct proc_thread_switches *)b)->tid;

        return x < y ? -1 : x > y;
}

/* Threads of the last sample missing from this one: exited, their last
 * counts go to the gone totals; or, when this sample could not list every
 * thread (cap), kept as they were (appended to now, which has room). Both
 * lists are sorted by tid; returns now's new length. */
static size_t account_gone(struct proc_usage_threads *th, struct proc_thread_switches *now, size_t n,
                           bool complete)
{
        size_t j = 0, out = n;

        for (size_t i = 0; i < th->n_seen; i++) {
                while (j < n && now[j].tid < th->seen[i].tid)
                        j++;
                if (j < n && now[j].tid == th->seen[i].tid)
                        continue;
                if (!complete) {
                        now[out++] = th->seen[i];
                        continue;
                }
                th->gone_vol += th->seen[i].vol;
                th->gone_invol += th->seen[i].invol;
        }
        if (out != n)
                qsort(now, out, sizeof(*now), cmp_tid);
        return out;
}

static int read_switches(int proc_fd, struct proc_usage_threads *th, struct d9_process_usage *u)
{
        int task_fd = openat(proc_fd, "task", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        struct proc_thread_switches *now;
        struct dirent *de;
        size_t n = 0;
        bool complete = true;
        DIR *dir;

        if (task_fd < 0)
                return -errno;
        dir = fdopendir(task_fd);
        if (!dir) {
                close(task_fd);
                return -errno;
        }
        /* Room for the threads stat counted and some born since. */
        size_t cap = u->threads + 64 < PROC_USAGE_THREADS_MAX ? u->threads + 64 : PROC_USAGE_THREADS_MAX;
        now = calloc(cap + th->n_seen, sizeof(*now));
        while (now && (de = readdir(dir))) {
                char name[300], buf[8192];

                if (de->d_name[0] < '1' || de->d_name[0] > '9')
                        continue;
                if (n == cap) {
                        complete = false;
                        break;
                }
                snprintf(name, sizeof(name), "%s/status", de->d_name);
                if (read_at(task_fd, name, buf, sizeof(buf)) < 0)
                        continue;       /* exited while listed: its counts were in the last sample */
                now[n].tid = (uint32_t)strtoul(de->d_name, NULL, 10);
                now[n].vol = field_after(buf, "\nvoluntary_ctxt_switches:");
                now[n].invol = field_after(buf, "\nnonvoluntary_ctxt_switches:");
                n++;
        }
        closedir(dir);
        if (!now)
                return -ENOMEM;
        qsort(now, n, sizeof(*now), cmp_tid);
        n = account_gone(th, now, n, complete);
        u->voluntary_context_switches = th->gone_vol;
        u->involuntary_context_switches = th->gone_invol;
        for (size_t i = 0; i < n; i++) {
                u->voluntary_context_switches += now[i].vol;
                u->involuntary_context_switches += now[i].invol;
        }
        free(th->seen);
        th->seen = now;
        th->n_seen = n;
        return 0;
}

int proc_usage_read(int proc_fd, struct proc_usage_threads *th, struct d9_process_usage *out)
{
        struct d9_process_usage u = { 0 };
        int r = read_stat(proc_fd, &u);

        if (r == 0)
                r = read_status_and_io(proc_fd, &u);
        if (r == 0)
                r = read_fd_count(proc_fd, &u);
        if (r == 0)
                r = read_switches(proc_fd, th, &u);
        if (r < 0)
                return r;
        if (u.max_rss_bytes < th->max_rss)
                u.max_rss_bytes = th->max_rss;
        th->max_rss = u.max_rss_bytes;
        *out = u;
        return 0;
}

void proc_usage_threads_free(struct proc_usage_threads *th)
{
        free(th->seen);
        th->seen = NULL;
        th->n_seen = 0;
}
