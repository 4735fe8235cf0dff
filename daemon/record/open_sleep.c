/* open_sleep.c: the workers still asleep as a recording ends (open_sleep.h). */
#include "daemon/record/open_sleep.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bpf/bpf_loader.h"
#include "bpf/d9_events.h"
#include "daemon/core/cleanup.h"
#include "daemon/record/translate.h"

#define OPEN_SLEEP_THREADS_MAX 4096     /* threads looked at, at most */
#define OPEN_SLEEPS_MAX 128             /* sleeps captured, at most */
#define OPEN_SLEEP_STACK_ID (0xd90eull << 48)   /* | tid: no BPF stack id looks so */

struct open_sleep {
        struct d9_thread_off off;
        uint64_t sp, pc;
        char comm[16];
        uint32_t len;                   /* stack bytes read */
        uint8_t stack[D9_STACK_USER_BYTES];
};

struct open_sleeps {
        size_t n;
        struct open_sleep s[];
};

/* A whole small file under the thread's /proc directory, NUL-terminated. */
static int read_task_file(int proc_fd, pid_t ns_tid, const char *name, char *buf, size_t n)
{
        char path[64];
        _cleanup_close_ int fd = -1;
        ssize_t got;

        snprintf(path, sizeof(path), "task/%d/%s", ns_tid, name);
        fd = openat(proc_fd, path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
        if (fd < 0)
                return -errno;
        got = read(fd, buf, n - 1);
        if (got < 0)
                return -errno;
        buf[got] = '\0';
        return 0;
}

/* The thread's CPU time (schedstat's first field), to tell whether it ran. */
static int thread_cpu_ns(int proc_fd, pid_t ns_tid, uint64_t *ns)
{
        char buf[128];
        int r = read_task_file(proc_fd, ns_tid, "schedstat", buf, sizeof(buf));

        if (r < 0)
                return r;
        return sscanf(buf, "%" SCNu64, ns) == 1 ? 0 : -EINVAL;
}

/* User stack pointer and pc of a thread blocked in the kernel: the last two
 * words of its syscall line ("running": on a CPU, none). */
static int thread_user_regs(int proc_fd, pid_t ns_tid, uint64_t *sp, uint64_t *pc)
{
        char buf[256], *last, *prev;
        int r = read_task_file(proc_fd, ns_tid, "syscall", buf, sizeof(buf));

        if (r < 0)
                return r;
        buf[strcspn(buf, "\n")] = '\0';
        last = strrchr(buf, ' ');
        if (!last || !strncmp(buf, "running", 7))
                return -EAGAIN;
        *last = '\0';
        prev = strrchr(buf, ' ');
        if (!prev)
                return -EINVAL;
        *sp = strtoull(prev + 1, NULL, 16);
        *pc = strtoull(last + 1, NULL, 16);
        return *sp && *pc ? 0 : -EINVAL;
}

/* The end of the mapping that holds addr, from a /proc/PID/maps text; 0
 * if none does. */
static uint64_t mapping_end_at(const char *maps, uint64_t addr)
{
        for (const char *line = maps; line && *line;) {
                unsigned long long lo, hi;
                const char *nl = strchr(line, '\n');

                if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && addr >= lo && addr < hi)
                        return hi;
                line = nl ? nl + 1 : NULL;
        }
        return 0;
}

/* Where the thread sleeps, its stack read while it still did: true if
 * captured (it has not run since its switch-out). The read stops at the
 * end of the stack's mapping, as BPF's copy does at the stack's top: a
 * readable mapping right above (musl's heap above a thread's stack: npm
 * pagefind) made the read all it asked for, and the stack of a thread
 * asleep at the stop read as cut at the copy's end (write_one: a short
 * read is the top). */
static bool capture_one(struct open_sleep *o, int proc_fd, pid_t pid, pid_t ns_tid, const char *maps)
{
        struct iovec local = { o->stack, sizeof(o->stack) }, remote;
        uint64_t end;
        char name[sizeof(o->comm) + 1];
        uint64_t cpu_ns;
        ssize_t got;

        if (thread_cpu_ns(proc_fd, ns_tid, &cpu_ns) < 0 || cpu_ns != o->off.cpu_ns ||
            thread_user_regs(proc_fd, ns_tid, &o->sp, &o->pc) < 0)
                return false;
        remote = (struct iovec){ (void *)(uintptr_t)o->sp, sizeof(o->stack) };
        end = mapping_end_at(maps, o->sp);
        if (end && end - o->sp < remote.iov_len)
                remote.iov_len = local.iov_len = (size_t)(end - o->sp);
        got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
        /* Read while it slept: the same sleep, or nothing of it. */
        if (got <= 0 || thread_cpu_ns(proc_fd, ns_tid, &cpu_ns) < 0 || cpu_ns != o->off.cpu_ns)
                return false;
        o->len = (uint32_t)got;
        /* Its name, as BPF's records carry it: an idle worker has no other. */
        memset(o->comm, 0, sizeof(o->comm));
        if (read_task_file(proc_fd, ns_tid, "comm", name, sizeof(name)) == 0) {
                name[strcspn(name, "\n")] = '\0';
                memcpy(o->comm, name, sizeof(o->comm) - 1);
        }
        return true;
}

struct open_sleeps *open_sleeps_capture(const struct d9_bpf_target *bt, int proc_fd, pid_t pid,
                                        const char *maps)
{
        struct open_sleeps *os = calloc(1, sizeof(*os) + OPEN_SLEEPS_MAX * sizeof(os->s[0]));
        struct dirent *de;
        int dir_fd, seen = 0;
        DIR *dir;

        if (!os)
                return NULL;
        dir_fd = openat(proc_fd, "task", O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
        dir = dir_fd >= 0 ? fdopendir(dir_fd) : NULL;
        if (!dir) {
                if (dir_fd >= 0)
                        close(dir_fd);
                free(os);
                return NULL;
        }
        while ((de = readdir(dir)) && seen++ < OPEN_SLEEP_THREADS_MAX && os->n < OPEN_SLEEPS_MAX) {
                pid_t ns_tid = (pid_t)strtol(de->d_name, NULL, 10);
                struct open_sleep *o = &os->s[os->n];

                /* Asleep (not preempted) since a switch-out in this recording. */
                if (ns_tid > 0 && d9_bpf_target_thread_off(bt, ns_tid, &o->off) == 0 && o->off.off_ts &&
                    o->off.state && capture_one(o, proc_fd, pid, ns_tid, maps))
                        os->n++;
        }
        closedir(dir);
        if (!os->n) {
                free(os);
                return NULL;
        }
        return os;
}

/* One sleep as BPF would have written it, had the thread come back now. */
static int write_one(struct translate *tr, const struct open_sleep *s, uint64_t now, struct d9_rec_stack *rec,
                     bool known)
{
        struct d9_rec_offcpu o = { 0 };

        memset(rec, 0, D9_REC_STACK_FIXED);
        rec->hdr = (struct d9_rec_hdr){ .type = D9_REC_STACK, .tid = s->off.tid, .ts = now };
        rec->stack_id = OPEN_SLEEP_STACK_ID | s->off.tid;
        rec->regs[D9_DW_RSP] = s->sp;
        rec->regs[D9_DW_RIP] = s->pc;
        rec->regs[D9_DW_RBP] = s->off.bp;
        /* A worker translate knows keeps its worker: this stack says
         * nothing of it. One it never saw (asleep from before the attach
         * to now) is named by BPF's read of its Worker at the attach: its
         * loop is the same, it has not run since. A short read ran into
         * the end of the stack's mapping. */
        if (!known) {
                rec->worker = s->off.worker;
                rec->worker_rt = s->off.worker_rt;
                rec->worker_found_ts = s->off.worker_found_ts;
        }
        rec->flags = (known ? D9_SREC_WK_SEARCH : 0) | (s->len < sizeof(s->stack) ? D9_SREC_TOP : 0);
        rec->user_len = s->len;
        memcpy(rec->data, s->stack, s->len);
        translate_record(tr, rec, D9_REC_STACK_FIXED + s->len);
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = s->off.tid, .ts = now };
        o.off_ts = s->off.off_ts;
        o.stack_id = rec->stack_id;
        o.prev_state = s->off.state;
        o.cpu_ns = s->off.cpu_ns;
        o.syscall = s->off.syscall;
        memcpy(o.comm, s->comm, sizeof(o.comm));
        return translate_open_offcpu(tr, &o);
}

int open_sleeps_write(struct translate *tr, const struct open_sleeps *os, uint64_t now)
{
        _cleanup_free_ struct d9_rec_stack *rec = NULL;
        int written = 0, r;

        if (!os)
                return 0;
        rec = malloc(sizeof(*rec));
        if (!rec)
                return -ENOMEM;
        for (size_t i = 0; i < os->n; i++) {
                bool known = translate_thread_is_worker(tr, os->s[i].off.tid);

                if (os->s[i].off.off_ts > now || (!known && !os->s[i].off.worker))
                        continue;
                if ((r = write_one(tr, &os->s[i], now, rec, known)) < 0)
                        return r;
                written++;
        }
        return written;
}

void open_sleeps_free(struct open_sleeps *os)
{
        free(os);
}
