/* sched_switch_count: issue 2's proof that real BPF runs in the tests.
 *
 * Start a real Tokio target (its `mixed` workload) and, next to it, a
 * second busy process that switches constantly; attach only the
 * scheduler probes to the target and count off-CPU records. The target's
 * threads must show switches, sleeps with their wait for a CPU after the
 * wakeup; nothing of any other process may appear.
 *
 * usage: sched_switch_count TARGET-BINARY [ARGS...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

struct counts {
        pid_t target, noise;
        unsigned long offcpu, waited, other_tgid, noise_seen, bad_size;
};

static int on_record(void *ctx, const void *data, size_t size)
{
        const struct d9_rec_hdr *h = data;
        struct counts *c = ctx;

        if (size < sizeof(*h)) {
                c->bad_size++;
                return 0;
        }
        if ((pid_t)h->tgid != c->target)
                c->other_tgid++;
        if ((pid_t)h->tgid == c->noise || (pid_t)h->tid == c->noise)
                c->noise_seen++;
        if (h->type == D9_REC_OFFCPU && size == sizeof(struct d9_rec_offcpu)) {
                const struct d9_rec_offcpu *o = data;

                c->offcpu++;
                /* A sleeper's wait for a CPU once woken, read from the
                 * kernel's sched_info at its switch-in (no wakeup program):
                 * some must be > 0 with a busy process beside the target,
                 * and none longer than its interval. */
                if (o->prev_state && o->sched_wait_ns > 0 && o->sched_wait_ns <= o->hdr.ts - o->off_ts)
                        c->waited++;
                else if (o->sched_wait_ns > o->hdr.ts - o->off_ts)
                        c->bad_size++;
        }
        return 0;
}

/* A process that goes off CPU thousands of times a second. */
static int start_noise(struct child *c)
{
        char *argv[] = { "/bin/sh", "-c", "while :; do sleep 0.001; done", NULL };

        return child_start(c, argv, false);
}

int main(int argc, char **argv)
{
        struct counts counts = { 0 };
        struct child target, noise;
        struct d9_bpf_opts bo = { .no_cpu_sampling = true };
        struct d9_bpf_target_opts to = { .probes = D9_PROBE_SCHED, .offcpu_min_ns = 0,
                                         .on_record = on_record, .ctx = &counts };
        struct d9_bpf *bpf = NULL;
        struct d9_bpf_target *t = NULL;
        char *err = NULL;
        uint64_t drops = 0;
        int r;

        if (argc < 2) {
                fprintf(stderr, "usage: %s TARGET [ARGS...]\n", argv[0]);
                return 2;
        }
        tap_plan(7);
        r = d9_bpf_open(&bo, &bpf);
        if (!tap_ok(r == 0, "BPF programs load (%s)", strerror(-r)))
                return tap_done();
        if (start_noise(&noise) < 0 || child_start(&target, argv + 1, true) < 0) {
                tap_ok(false, "start target %s and a noise process", argv[1]);
                return tap_done();
        }
        counts.target = target.pid;
        counts.noise = noise.pid;
        r = d9_bpf_attach_target(bpf, target.pid, NULL, &to, &t, &err);
        tap_ok(r == 0, "attach sched probes to PID %d%s%s", target.pid, err ? ": " : "",
               err ? err : "");
        if (r == 0) {
                drain_until_exit(t, &target);
                d9_bpf_target_drops(t, &drops);
                d9_bpf_detach_target(t);
        }
        child_kill(&noise);
        child_kill(&target);
        tap_diag("offcpu=%lu waited=%lu other=%lu noise=%lu drops=%llu", counts.offcpu,
                 counts.waited, counts.other_tgid, counts.noise_seen,
                 (unsigned long long)drops);
        tap_ok(counts.offcpu > 0, "target threads' sched_switch seen (%lu off-CPU records)",
               counts.offcpu);
        tap_ok(counts.waited > 0, "sleeps of target threads carry their wait for a CPU (%lu records)",
               counts.waited);
        tap_ok(counts.other_tgid == 0 && counts.noise_seen == 0 && counts.bad_size == 0,
               "no other process's switches recorded, no wait longer than its interval");
        /* The snapshot must see our objects, or the leak check proves nothing. */
        static struct bpf_ids ids;
        bpf_snapshot_self(&ids);
        tap_ok(ids.n > 0, "%zu BPF objects of ours while loaded", ids.n);
        d9_bpf_close(bpf);
        tap_ok(bpf_count_alive(&ids) == 0, "none of them left after close");
        free(err);
        return tap_done();
}
