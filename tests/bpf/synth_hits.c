/* synth_hits: the records d9's uprobe program writes for each kind of hit,
 * exactly, on the synthetic Tokio of bench/hitcost/synth.h (functions in
 * this binary that the real loader probes through a hand-made plan). A real
 * runtime decides itself when it polls, wakes and parks; here the order is
 * ours, so the fields can be pinned down one by one: the task id read
 * through the vtable, cookies, the entry-only poll end (why, start_ts, the
 * timestamp it shares with the poll that closes it), park keys, waker ids,
 * spawn through a uretprobe, and no drops; and how often a consumer that
 * does not drain is woken (once per 64 KiB, not once per record). */
#include <bpf/bpf.h>
#include <stdio.h>
#include <sys/epoll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"
#include "synth.h"

#define MAX_RECS 4096
#define POLLS 1000

static union {
        struct d9_rec_hdr hdr;
        struct d9_rec_task task;
        struct d9_rec_wake wake;
        struct d9_rec_park park;
} recs[MAX_RECS];
static size_t n_recs;
static uint32_t my_tid;

/* Keep the Tokio records of this thread, in ring order. */
static int keep_record(void *ctx, const void *rec, size_t size)
{
        const struct d9_rec_hdr *h = rec;

        if (h->tid != my_tid || h->type > D9_REC_UNPARK || n_recs == MAX_RECS ||
            size > sizeof(recs[0]))
                return 0;
        memcpy(&recs[n_recs++], rec, size);
        return 0;
}

static size_t count_type(size_t from, uint16_t type)
{
        size_t n = 0;

        for (size_t i = from; i < n_recs; i++)
                n += recs[i].hdr.type == type;
        return n;
}

/* poll, wake, poll, park (+ unpark), wake outside a poll, complete, bind.
 * Entry-only: the second poll's start also ends the first (no POLL_END of
 * its own, user space closes it there); the park writes the second's end. */
static void check_sequence(void)
{
        static const uint16_t want[] = {
                D9_REC_POLL_START, D9_REC_WAKE, D9_REC_POLL_START,
                D9_REC_POLL_END, D9_REC_PARK, D9_REC_UNPARK, D9_REC_WAKE,
                D9_REC_TERMINATE, D9_REC_SPAWN,
        };
        size_t n = sizeof(want) / sizeof(want[0]);
        bool order = n_recs >= n;

        for (size_t i = 0; order && i < n; i++)
                order = recs[i].hdr.type == want[i];
        if (!tap_ok(order, "one record per hit, in call order (%zu records)", n_recs))
                return;
        tap_ok(recs[0].task.task_id == SYNTH_TASK_ID && recs[0].task.cookie == 0 &&
                       recs[0].task.header == (uint64_t)(uintptr_t)synth_header(),
               "poll start: task id %llu read through the vtable, cookie, header",
               (unsigned long long)recs[0].task.task_id);
        tap_ok(recs[1].wake.woken_task_id == SYNTH_TASK_ID &&
                       recs[1].wake.waker_task_id == SYNTH_TASK_ID && recs[1].wake.cookie == 1,
               "wake inside a poll: woken and waker ids, cookie");
        tap_ok(recs[2].hdr.ts > recs[0].hdr.ts && recs[2].task.task_id == SYNTH_TASK_ID,
               "the next poll's start, the end of the open one, has no POLL_END before it");
        tap_ok(recs[3].task.why == D9_END_PARK && recs[3].task.start_ts == recs[2].hdr.ts &&
                       recs[3].hdr.ts == recs[4].hdr.ts,
               "a park closes the open poll at the park's ts");
        tap_ok(recs[4].park.park_key == SYNTH_PARK_KEY && recs[5].park.park_key == SYNTH_PARK_KEY &&
                       recs[5].hdr.ts >= recs[4].hdr.ts &&
                       recs[5].park.cpu_ns >= recs[4].park.cpu_ns && recs[4].park.cpu_ns > 0,
               "park/unpark: key read through arg0, unpark later, thread CPU time grows");
        tap_ok(recs[6].wake.waker_task_id == 0 && recs[6].wake.woken_task_id == SYNTH_TASK_ID,
               "wake outside a poll: no waker");
        tap_ok(recs[7].task.task_id == SYNTH_TASK_ID && recs[7].task.cookie == 2,
               "terminate: task id, cookie");
        tap_ok(recs[8].task.task_id == SYNTH_TASK_ID && recs[8].task.cookie == 3 &&
                       recs[8].task.header == (uint64_t)(uintptr_t)synth_header(),
               "spawn: header from the return value of a uretprobe, its task id");
}

/* POLLS polls in a row, entry-only: one record each, no POLL_END (each
 * start ends its predecessor). */
static void check_poll_run(size_t from)
{
        size_t starts = count_type(from, D9_REC_POLL_START), ends = count_type(from, D9_REC_POLL_END);
        uint64_t last_start = 0;
        bool ordered = true;

        for (size_t i = from; i < n_recs; i++)
                if (recs[i].hdr.type == D9_REC_POLL_START) {
                        ordered &= recs[i].task.task_id == SYNTH_TASK_ID && recs[i].hdr.ts >= last_start;
                        last_start = recs[i].hdr.ts;
                }
        tap_ok(starts == POLLS && ends == 0, "%d polls: %zu starts, %zu ends (one record per poll)", POLLS,
               starts, ends);
        tap_ok(ordered, "every start: the task's id, in time order");
}

/* The target's ring: the one BPF ringbuf map named d9_ring this process holds. */
static int find_ring_fd(void)
{
        for (int fd = 3; fd < 1024; fd++) {
                struct bpf_map_info info;
                uint32_t len = sizeof(info);

                memset(&info, 0, sizeof(info));
                if (bpf_map_get_info_by_fd(fd, &info, &len) == 0 &&
                    info.type == BPF_MAP_TYPE_RINGBUF && !strcmp(info.name, "d9_ring"))
                        return fd;
        }
        return -1;
}

/* Poll hits without draining; an edge-triggered epoll on the ring sees one
 * event per wakeup the BPF side sends. Each poll start writes 1 record of
 * 72 + 8 bytes (entry-only). */
static void check_wakeups(struct d9_bpf_target *t)
{
        const size_t calls = 4000, bytes = calls * 80;
        struct epoll_event ev = { .events = EPOLLIN | EPOLLET };
        int ring = find_ring_fd(), ep = epoll_create1(EPOLL_CLOEXEC);
        size_t wakeups = 0;

        d9_bpf_target_consume(t);
        if (!tap_ok(ring >= 0 && ep >= 0 && epoll_ctl(ep, EPOLL_CTL_ADD, ring, &ev) == 0,
                    "edge-triggered epoll on the target's ring"))
                return;
        epoll_wait(ep, &ev, 1, 0);
        for (size_t i = 0; i < calls; i++) {
                synth_poll(synth_header());
                wakeups += epoll_wait(ep, &ev, 1, 0) == 1;
        }
        /* One boundary per 64 KiB, each hit by at most two records. */
        tap_ok(wakeups >= 1 && wakeups <= 2 * (bytes / (64 * 1024)) + 2,
               "a consumer that does not drain is woken %zu times for %zu KiB of records "
               "(once per 64 KiB, not per record)", wakeups, bytes / 1024);
        close(ep);
        d9_bpf_target_consume(t);
}

int main(void)
{
        struct d9_bpf_opts bo = { .no_cpu_sampling = true };
        struct d9_bpf_target_opts to = {
                .probes = D9_PROBE_POLL | D9_PROBE_PARK | D9_PROBE_WAKE | D9_PROBE_TERMINATE |
                          D9_PROBE_SPAWN,
                .poll_end = D9_POLL_END_ENTRY_ONLY,
                .on_record = keep_record,
        };
        struct probe_point pts[8];
        struct probe_plan plan;
        struct d9_bpf *bpf = NULL;
        struct d9_bpf_target *t = NULL;
        uint64_t drops = 1;
        char exe[4096], *err = NULL;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
        size_t first_run;
        void *hdr = synth_header();

        tap_plan(16);
        my_tid = (uint32_t)gettid();
        if (n < 0)
                return 1;
        exe[n] = 0;
        synth_plan(&plan, pts, exe);
        if (!tap_ok(d9_bpf_open(&bo, &bpf) == 0 &&
                            d9_bpf_attach_target(bpf, getpid(), &plan, &to, &t, &err) == 0,
                    "attach the real loader to this process's synthetic Tokio%s%s",
                    err ? ": " : "", err ? err : ""))
                return tap_done();
        tap_ok(d9_bpf_target_poll_end(t) == D9_POLL_END_ENTRY_ONLY &&
                       d9_bpf_target_n_attached(t) == 6,
               "entry-only poll end, 6 points attached");
        synth_poll(hdr);
        synth_wake(hdr);
        synth_poll(hdr);
        synth_park(synth_park_key());
        synth_wake(hdr);
        synth_complete(hdr);
        synth_bind(hdr);
        d9_bpf_target_consume(t);
        check_sequence();
        first_run = n_recs;
        for (int i = 0; i < POLLS; i++)
                synth_poll(hdr);
        d9_bpf_target_consume(t);
        check_poll_run(first_run);
        d9_bpf_target_drops(t, &drops);
        tap_ok(drops == 0, "no drops (%llu)", (unsigned long long)drops);
        check_wakeups(t);
        d9_bpf_detach_target(t);
        d9_bpf_close(bpf);
        free(err);
        return tap_done();
}
