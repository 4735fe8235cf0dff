/* probe_hold: attach a probe set to a running target and keep draining
 * until stdin closes (or a signal); the bench script (bench/probes) uses
 * it to measure throughput under each probe set and attach/detach latency.
 *
 * usage: probe_hold --pid PID --probes none|sched+cpu|park|poll|all
 *                   [--poll-end entry|uretprobe] [--per-probe]
 *                   [--latency N --instances M]
 * --latency N: attach and detach N times (poll probes on M instances: the
 * plan's polls, repeated), print the attach/detach times and exit.
 * Prints one JSON line: attach_ms, detach_ms, records, drops, points. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"
#include "uprobes/uprobes.h"

static volatile sig_atomic_t stop;
static unsigned long records;

static void on_signal(int sig)
{
        stop = 1;
}

static int count_record(void *ctx, const void *rec, size_t size)
{
        records++;
        return 0;
}

static double ms_since(const struct timespec *t0)
{
        struct timespec t1;

        clock_gettime(CLOCK_MONOTONIC, &t1);
        return (double)(t1.tv_sec - t0->tv_sec) * 1e3 + (double)(t1.tv_nsec - t0->tv_nsec) / 1e6;
}

/* Probe sets of the bench, cumulative as in issue 4. */
static unsigned parse_probes(const char *s)
{
        if (!strcmp(s, "sched+cpu"))
                return D9_PROBE_SCHED | D9_PROBE_CPU;
        if (!strcmp(s, "park"))
                return D9_PROBE_SCHED | D9_PROBE_CPU | D9_PROBE_PARK;
        if (!strcmp(s, "poll"))
                return D9_PROBE_SCHED | D9_PROBE_CPU | D9_PROBE_PARK | D9_PROBE_POLL;
        if (!strcmp(s, "all"))
                return D9_PROBE_ALL;
        return 0;
}

/* Grow the plan's poll points to `want` instances by repeating the real
 * ones (each repeat is its own uprobe consumer in the kernel), so attach
 * and detach are measured at the scale of a large application (design.md:
 * 2376 polls in codex). Arbitrary other functions would not do: some
 * start with instructions uprobes refuse. */
static int pad_polls(struct probe_plan *plan, size_t want)
{
        struct probe_point *pts = calloc(want, sizeof(*pts));
        size_t n = 0, polls = probe_plan_count(plan, PROBE_POLL, false);

        if (!pts)
                return -ENOMEM;
        if (!polls) {
                free(pts);
                return -ENOENT;
        }
        while (n < want)
                for (size_t i = 0; i < plan->n_points && n < want; i++)
                        if (plan->points[i].kind == PROBE_POLL && !plan->points[i].skipped) {
                                pts[n] = plan->points[i];
                                pts[n].cookie = n;
                                n++;
                        }
        /* The plan's own array stays owned by the plan (freed with it). */
        plan->points = pts;
        plan->n_points = n;
        return 0;
}

static int latency_runs(struct d9_bpf *bpf, pid_t pid, struct probe_plan *plan,
                        const struct d9_bpf_target_opts *to, int runs)
{
        double attach_sum = 0, detach_sum = 0, attach_max = 0, detach_max = 0;
        struct d9_bpf_target *t;
        struct timespec t0;
        char *err = NULL;

        for (int i = 0; i < runs; i++) {
                double a, d;

                clock_gettime(CLOCK_MONOTONIC, &t0);
                if (d9_bpf_attach_target(bpf, pid, plan, to, &t, &err) < 0) {
                        fprintf(stderr, "probe_hold: %s\n", err);
                        return 1;
                }
                a = ms_since(&t0);
                clock_gettime(CLOCK_MONOTONIC, &t0);
                d9_bpf_detach_target(t);
                d = ms_since(&t0);
                attach_sum += a;
                detach_sum += d;
                attach_max = a > attach_max ? a : attach_max;
                detach_max = d > detach_max ? d : detach_max;
        }
        printf("{\"instances\":%zu,\"runs\":%d,\"uprobe_multi\":%s,\"attach_ms_avg\":%.2f,"
               "\"attach_ms_max\":%.2f,\"detach_ms_avg\":%.2f,\"detach_ms_max\":%.2f}\n",
               plan->n_points, runs, d9_bpf_uses_uprobe_multi(bpf) ? "true" : "false",
               attach_sum / runs, attach_max, detach_sum / runs, detach_max);
        return 0;
}

int main(int argc, char **argv)
{
        struct d9_bpf_opts bo = { 0 };
        struct d9_bpf_target_opts to = { .on_record = count_record };
        struct probe_plan *plan = NULL;
        struct d9_bpf *bpf = NULL;
        struct d9_bpf_target *t = NULL;
        struct timespec t0;
        double attach_ms, detach_ms;
        uint64_t drops = 0;
        int latency = 0, r;
        size_t instances = 0;
        char *err = NULL;
        pid_t pid = 0;

        for (int a = 1; a < argc; a++) {
                if (!strcmp(argv[a], "--pid") && a + 1 < argc)
                        pid = atoi(argv[++a]);
                else if (!strcmp(argv[a], "--probes") && a + 1 < argc)
                        to.probes = parse_probes(argv[++a]);
                else if (!strcmp(argv[a], "--poll-end") && a + 1 < argc)
                        to.poll_end = !strcmp(argv[++a], "entry") ? D9_POLL_END_ENTRY_ONLY
                                                                  : D9_POLL_END_URETPROBE;
                else if (!strcmp(argv[a], "--per-probe"))
                        bo.force_per_probe = true;
                else if (!strcmp(argv[a], "--latency") && a + 1 < argc)
                        latency = atoi(argv[++a]);
                else if (!strcmp(argv[a], "--instances") && a + 1 < argc)
                        instances = (size_t)atol(argv[++a]);
        }
        if (pid <= 0 || !to.probes) {
                fprintf(stderr, "usage: %s --pid PID --probes sched+cpu|park|poll|all\n",
                        argv[0]);
                return 2;
        }
        r = d9_bpf_open(&bo, &bpf);
        if (r < 0) {
                fprintf(stderr, "probe_hold: cannot load BPF: %s\n", strerror(-r));
                return 1;
        }
        if (probe_plan_for_pid(pid, &plan, &err) < 0) {
                fprintf(stderr, "probe_hold: %s\n", err);
                return 1;
        }
        if (latency) {
                if (instances && pad_polls(plan, instances) < 0) {
                        fprintf(stderr, "probe_hold: cannot find %zu functions\n", instances);
                        return 1;
                }
                return latency_runs(bpf, pid, plan, &to, latency);
        }
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (d9_bpf_attach_target(bpf, pid, plan, &to, &t, &err) < 0) {
                fprintf(stderr, "probe_hold: %s\n", err);
                return 1;
        }
        attach_ms = ms_since(&t0);
        fprintf(stderr, "attached\n");
        while (!stop && d9_bpf_target_poll(t, 100) >= 0 && kill(pid, 0) == 0)
                ;
        d9_bpf_target_drops(t, &drops);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        d9_bpf_detach_target(t);
        detach_ms = ms_since(&t0);
        printf("{\"attach_ms\":%.2f,\"detach_ms\":%.2f,\"records\":%lu,\"drops\":%llu}\n",
               attach_ms, detach_ms, records, (unsigned long long)drops);
        probe_plan_free(plan);
        d9_bpf_close(bpf);
        free(err);
        return 0;
}
