/* sched_switch_count: issue 2's proof that real BPF runs in the tests.
 *
 * Start a real Tokio target (its `mixed` workload) and, next to it, a
 * second busy process that switches constantly; attach only the
 * scheduler probes to the target and count off-CPU records. The target's
 * threads must show switches; nothing of any other process may appear.
 *
 * usage: sched_switch_count TARGET-BINARY [ARGS...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "harness.h"

struct counts {
        pid_t target, noise;
        unsigned long offcpu, wakeups, other_tgid, noise_seen, bad_size;
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
        if (h->type == D9_REC_OFFCPU && size == sizeof(struct d9_rec_offcpu))
                c->offcpu++;
        else if (h->type == D9_REC_WAKEUP)
                c->wakeups++;
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
        struct d9_bpf_target_opts to = { .probes = D9_PROBE_SCHED | D9_PROBE_WAKEUPS,
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
        tap_diag("offcpu=%lu wakeups=%lu other=%lu noise=%lu drops=%llu", counts.offcpu,
                 counts.wakeups, counts.other_tgid, counts.noise_seen,
                 (unsigned long long)drops);
        tap_ok(counts.offcpu > 0, "target threads' sched_switch seen (%lu off-CPU records)",
               counts.offcpu);
        tap_ok(counts.wakeups > 0, "target threads' sched_wakeup seen when asked for (%lu records)",
               counts.wakeups);
        tap_ok(counts.other_tgid == 0 && counts.noise_seen == 0 && counts.bad_size == 0,
               "no other process's switches recorded");
        /* The snapshot must see our objects, or the leak check proves nothing. */
        static struct bpf_ids ids;
        bpf_snapshot_self(&ids);
        tap_ok(ids.n > 0, "%zu BPF objects of ours while loaded", ids.n);
        d9_bpf_close(bpf);
        tap_ok(bpf_count_alive(&ids) == 0, "none of them left after close");
        free(err);
        return tap_done();
}
