/* offcpu_pending_entry: an entry left in d9_offcpu_pending costs no
 * off-CPU record and no stack.
 *
 * A long off-CPU interval's record waits in that map, keyed by tid, for a
 * task_work in the thread. The kernel drops a task_work it cannot add (a
 * thread past exit_task_work) and leaves the entry; tids come back
 * (pid_max 32768 on Debian). Two such entries are seeded here from user
 * space for every thread of a real Tokio target:
 *   foreign: another process's, before the attach. The threads' long
 *     intervals must still get stacks (before: all stackless, "pending").
 *   unwritten: this target's, with a marker interval inside the
 *     recording, after the attach. Each must be written exactly once, at
 *     the thread's next long interval (before: never), or, for a thread
 *     that has none before the detach, at the detach (before: never).
 * After each detach no entry of the target may be left (one seeded for a
 * tid no thread has, as a thread past exit_task_work leaves: before, it
 * stayed while d9d ran).
 *
 * usage: offcpu_pending_entry TARGET-BINARY [ARGS...] */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "harness.h"

#define MAX_TIDS 64
#define MARK_OFF_NS 7000000ULL  /* a marker interval: 7 ms ... */
#define MARK_ON_NS 1000000ULL   /* ... ending 1 ms before it is seeded */
#define NOBODY_TID 0x7ffffff0u  /* above any pid_max */

struct run {
        pid_t target;
        size_t n_tids;
        uint32_t tids[MAX_TIDS];
        uint64_t seeded_ts;             /* the markers' clock (0: foreign entries) */
        uint64_t marks[MAX_TIDS];       /* marker off_ts per tid (0: none seeded) */
        uint64_t seeded_at[MAX_TIDS];   /* just after its entry went in */
        unsigned long mark_written[MAX_TIDS];
        unsigned long long_after[MAX_TIDS];     /* long intervals after the seeding that
                                                 * reached the pending map */
        unsigned long with_stack, pending, offcpu;
        unsigned long left;             /* its entries still there after the detach */
        uint64_t nobody_mark;           /* the marker of the entry of a tid no thread has */
        unsigned long nobody_written;
};

static uint64_t mono_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ULL + (uint64_t)ts.tv_nsec;
}

static int tid_index(const struct run *r, uint32_t tid)
{
        for (size_t i = 0; i < r->n_tids; i++)
                if (r->tids[i] == tid)
                        return (int)i;
        return -1;
}

static int on_record(void *ctx, const void *data, size_t size)
{
        const struct d9_rec_offcpu *o = data;
        struct run *r = ctx;
        int i;

        if (size != sizeof(*o) || o->hdr.type != D9_REC_OFFCPU || (pid_t)o->hdr.tgid != r->target)
                return 0;
        if (o->hdr.tid == NOBODY_TID) {
                r->nobody_written += r->nobody_mark && o->off_ts == r->nobody_mark &&
                                     o->no_stack == D9_NOSTACK_GONE;
                return 0;
        }
        i = tid_index(r, o->hdr.tid);
        if (i < 0)
                return 0;
        if (r->marks[i] && o->off_ts == r->marks[i]) {
                r->mark_written[i]++;
                return 0;
        }
        r->offcpu++;
        if (o->stack_id)
                r->with_stack++;
        else if (o->no_stack == D9_NOSTACK_PENDING)
                r->pending++;
        /* Switched in after the entry went in, and past the rate and
         * length checks: it met the entry. */
        if (r->marks[i] && o->hdr.ts > r->seeded_at[i] &&
            (o->stack_id || o->no_stack == D9_NOSTACK_PENDING))
                r->long_after[i]++;
        return 0;
}

/* This process's d9_offcpu_pending (map names keep 15 characters). */
static int pending_map_fd(void)
{
        static struct bpf_ids ids;

        bpf_snapshot_self(&ids);
        for (size_t i = 0; i < ids.n; i++) {
                struct bpf_map_info info = { 0 };
                __u32 len = sizeof(info);
                int fd;

                if (ids.kind[i] != 1)
                        continue;
                fd = bpf_map_get_fd_by_id(ids.id[i]);
                if (fd < 0)
                        continue;
                if (!bpf_map_get_info_by_fd(fd, &info, &len) &&
                    !strncmp(info.name, "d9_offcpu_pending", sizeof(info.name) - 1) &&
                    info.value_size == sizeof(struct d9_offcpu_pending_entry))
                        return fd;
                close(fd);
        }
        return -ENOENT;
}

static unsigned long entries_of(int map_fd, pid_t tgid)
{
        struct d9_offcpu_pending_entry e;
        uint32_t key, *prev = NULL;
        unsigned long n = 0;

        while (!bpf_map_get_next_key(map_fd, prev, &key)) {
                n += !bpf_map_lookup_elem(map_fd, &key, &e) && e.tgid == (uint32_t)tgid;
                prev = &key;
        }
        return n;
}

static int list_tids(struct run *r)
{
        char path[64];
        struct dirent *de;
        DIR *d;

        snprintf(path, sizeof(path), "/proc/%d/task", r->target);
        d = opendir(path);
        if (!d)
                return -errno;
        r->n_tids = 0;
        while ((de = readdir(d)) && r->n_tids < MAX_TIDS)
                if (de->d_name[0] != '.')
                        r->tids[r->n_tids++] = (uint32_t)strtoul(de->d_name, NULL, 10);
        closedir(d);
        return (int)r->n_tids;
}

/* Seeds one entry per thread: foreign (tgid 1, no interval) or, with
 * marks, this target's with a marker interval. Returns entries seeded. */
static size_t seed(struct run *r, int map_fd, bool marks)
{
        size_t n = 0;

        r->seeded_ts = marks ? mono_ns() : 0;
        for (size_t i = 0; i < r->n_tids; i++) {
                struct d9_offcpu_pending_entry e = { .tgid = 1 };

                if (marks) {
                        e.tgid = (uint32_t)r->target;
                        e.span.off_ts = r->seeded_ts - MARK_OFF_NS;
                        e.span.on_ts = r->seeded_ts - MARK_ON_NS;
                        e.span.state = 1;
                }
                /* NOEXIST: a thread's own entry (its callback due) stays. */
                if (bpf_map_update_elem(map_fd, &r->tids[i], &e, BPF_NOEXIST) == 0) {
                        r->marks[i] = marks ? e.span.off_ts : 0;
                        r->seeded_at[i] = mono_ns();
                        n++;
                }
        }
        /* And one for a tid no thread has, with a marker interval: nothing
         * ever takes it over, as with a thread gone past exit_task_work
         * whose callback never ran; the detach must write its interval
         * and forget it. */
        if (marks) {
                struct d9_offcpu_pending_entry e = {
                        .tgid = (uint32_t)r->target,
                        .span = { .off_ts = r->seeded_ts - MARK_OFF_NS, .on_ts = r->seeded_ts - MARK_ON_NS,
                                  .state = 1 },
                };
                uint32_t nobody = NOBODY_TID;

                if (bpf_map_update_elem(map_fd, &nobody, &e, BPF_NOEXIST) == 0) {
                        r->nobody_mark = e.span.off_ts;
                        n++;
                }
        }
        return n;
}

static int record(struct d9_bpf *bpf, char **argv, int map_fd, bool marks, struct run *r)
{
        struct d9_bpf_target_opts to = {
                .probes = D9_PROBE_SCHED,
                .stack = { .flags = D9_STACK_OFFCPU, .user_bytes = 8192, .offcpu_min_us = 1000,
                           .offcpu_per_sec = 1000, .offcpu_burst = 200 },
                .offcpu_min_ns = 1000000,
                .on_record = on_record, .ctx = r,
        };
        struct d9_bpf_target *t = NULL;
        struct child target;
        char *err = NULL;
        size_t seeded = 0;
        int ret;

        if (child_start(&target, argv, true) < 0)
                return -ECHILD;
        r->target = target.pid;
        usleep(300 * 1000);     /* its runtime's threads are up */
        if (list_tids(r) <= 0) {
                child_kill(&target);
                return -ESRCH;
        }
        if (!marks)
                seeded = seed(r, map_fd, false);
        ret = d9_bpf_attach_target(bpf, target.pid, NULL, &to, &t, &err);
        if (ret == 0) {
                if (marks) {
                        usleep(200 * 1000);
                        seeded = seed(r, map_fd, true);
                }
                drain_until_exit(t, &target);
                d9_bpf_detach_target(t);
                r->left = entries_of(map_fd, target.pid);
        } else {
                tap_diag("attach: %s", err ? err : strerror(-ret));
        }
        child_kill(&target);
        tap_diag("%s: %zu threads, %zu entries seeded, %lu off-CPU records (%lu with a stack, "
                 "%lu pending)", marks ? "unwritten" : "foreign", r->n_tids, seeded, r->offcpu,
                 r->with_stack, r->pending);
        free(err);
        return ret < 0 ? ret : (int)seeded;
}

int main(int argc, char **argv)
{
        struct d9_bpf_opts bo = { .no_cpu_sampling = true };
        static struct run foreign, unwritten;
        unsigned long due = 0, written = 0, twice = 0, rest = 0, at_detach = 0;
        struct d9_bpf *bpf = NULL;
        int map_fd, r;

        if (argc < 2) {
                fprintf(stderr, "usage: %s TARGET [ARGS...]\n", argv[0]);
                return 2;
        }
        tap_plan(7);
        r = d9_bpf_open(&bo, &bpf);
        if (!tap_ok(r == 0, "BPF programs load (%s)", strerror(-r)))
                return tap_done();
        map_fd = pending_map_fd();
        if (!tap_ok(map_fd >= 0, "d9_offcpu_pending found, value of %zu bytes",
                    sizeof(struct d9_offcpu_pending_entry))) {
                d9_bpf_close(bpf);
                return tap_done();
        }

        r = record(bpf, argv + 1, map_fd, false, &foreign);
        tap_ok(r > 0 && foreign.offcpu > 0 && foreign.with_stack * 10 >= foreign.offcpu * 9,
               "another process's entries: %lu of %lu long intervals have a stack (%lu pending)",
               foreign.with_stack, foreign.offcpu, foreign.pending);

        r = record(bpf, argv + 1, map_fd, true, &unwritten);
        for (size_t i = 0; i < unwritten.n_tids; i++) {
                if (!unwritten.marks[i])
                        continue;
                due += unwritten.long_after[i] > 0;
                written += unwritten.mark_written[i] == 1 && unwritten.long_after[i] > 0;
                rest += unwritten.long_after[i] == 0;
                at_detach += unwritten.mark_written[i] == 1 && unwritten.long_after[i] == 0;
                twice += unwritten.mark_written[i] > 1;
                if (unwritten.long_after[i] > 0 && unwritten.mark_written[i] != 1)
                        tap_diag("tid %u: its entry written %lu times, %lu long intervals after",
                                 unwritten.tids[i], unwritten.mark_written[i], unwritten.long_after[i]);
        }
        tap_ok(r > 0 && due > 0 && written == due,
               "this target's unwritten entries: %lu of %lu written at the thread's next long interval",
               written, due);
        tap_ok(unwritten.nobody_written == 1 && at_detach == rest,
               "written at the detach, stackless: the entry of a tid no thread has (%lu), and those "
               "of threads with no long interval after them (%lu of %lu)",
               unwritten.nobody_written, at_detach, rest);
        tap_ok(twice == 0, "none written twice (%lu)", twice);
        tap_ok(foreign.left == 0 && unwritten.left == 0,
               "no entry of a detached target is left (%lu, %lu)", foreign.left, unwritten.left);
        close(map_fd);
        d9_bpf_close(bpf);
        return tap_done();
}
