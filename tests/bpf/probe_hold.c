/* probe_hold: attach a probe set to a running target and keep draining
 * until stdin closes (or a signal); the bench script (bench/probes) uses
 * it to measure throughput under each probe set and attach/detach latency.
 *
 * usage: probe_hold --pid PID --probes none|sched+cpu|park|poll|all
 *                   [--poll-end entry|uretprobe] [--per-probe]
 *                   [--latency N --instances M] [--stats]
 * --latency N: attach and detach N times (poll probes on M instances: the
 * plan's polls, repeated), print the attach/detach times and exit.
 * --stats: turn on the kernel's BPF run-time statistics while attached and
 * report each d9 program's runs and run time (bench/probes' "where the
 * time goes"; the statistics themselves cost ≈ 2 clock reads per run, so
 * the throughput runs leave them off).
 * Prints one JSON line: attach_ms, detach_ms, records (and per record
 * type), drops, and with --stats the programs. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "harness.h"
#include "uprobes/uprobes.h"

static volatile sig_atomic_t stop;
static unsigned long records, records_by_type[D9_REC_TYPE_MAX];

static void on_signal(int sig)
{
        stop = 1;
}

static int count_record(void *ctx, const void *rec, size_t size)
{
        const struct d9_rec_hdr *h = rec;

        records++;
        if (size >= sizeof(*h) && h->type < D9_REC_TYPE_MAX)
                records_by_type[h->type]++;
        return 0;
}

/* Runs and run time of the d9 programs this process holds, summed by name. */
#define MAX_PROGS 16
struct prog_stats {
        size_t n;
        char name[MAX_PROGS][BPF_OBJ_NAME_LEN];
        uint64_t runs[MAX_PROGS], ns[MAX_PROGS];
};

static void prog_stats_read(struct prog_stats *ps)
{
        memset(ps, 0, sizeof(*ps));
        for (int fd = 3; fd < 4096; fd++) {
                struct bpf_prog_info info;
                uint32_t len = sizeof(info);
                size_t i;

                memset(&info, 0, sizeof(info));
                if (bpf_prog_get_info_by_fd(fd, &info, &len) < 0 || strncmp(info.name, "d9_", 3))
                        continue;
                for (i = 0; i < ps->n && strcmp(ps->name[i], info.name); i++)
                        ;
                if (i == ps->n) {
                        if (ps->n == MAX_PROGS)
                                continue;
                        snprintf(ps->name[ps->n++], BPF_OBJ_NAME_LEN, "%s", info.name);
                }
                ps->runs[i] += info.run_cnt;
                ps->ns[i] += info.run_time_ns;
        }
}

/* ,"progs":{"name":{"runs":N,"ns":T},...} for the runs between a and b. */
static void prog_stats_print(const struct prog_stats *a, const struct prog_stats *b)
{
        printf(",\"progs\":{");
        for (size_t i = 0; i < b->n; i++) {
                uint64_t runs = b->runs[i], ns = b->ns[i];

                for (size_t j = 0; j < a->n; j++)
                        if (!strcmp(a->name[j], b->name[i])) {
                                runs -= a->runs[j];
                                ns -= a->ns[j];
                        }
                printf("%s\"%s\":{\"runs\":%llu,\"ns\":%llu}", i ? "," : "", b->name[i],
                       (unsigned long long)runs, (unsigned long long)ns);
        }
        printf("}");
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
        int latency = 0, stats_fd = -1, r;
        bool stats = false;
        struct prog_stats ps0, ps1;
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
                else if (!strcmp(argv[a], "--stats"))
                        stats = true;
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
        if (stats && (stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME)) < 0) {
                fprintf(stderr, "probe_hold: cannot enable BPF statistics: %s\n", strerror(errno));
                return 1;
        }
        prog_stats_read(&ps0);
        fprintf(stderr, "attached\n");
        while (!stop && d9_bpf_target_poll(t, 100) >= 0 && kill(pid, 0) == 0)
                ;
        prog_stats_read(&ps1);
        if (stats_fd >= 0)
                close(stats_fd);
        d9_bpf_target_drops(t, &drops);
        clock_gettime(CLOCK_MONOTONIC, &t0);
        d9_bpf_detach_target(t);
        detach_ms = ms_since(&t0);
        printf("{\"attach_ms\":%.2f,\"detach_ms\":%.2f,\"records\":%lu,\"drops\":%llu,"
               "\"by_type\":[", attach_ms, detach_ms, records, (unsigned long long)drops);
        for (int i = 1; i < D9_REC_TYPE_MAX; i++)
                printf("%s%lu", i > 1 ? "," : "", records_by_type[i]);
        printf("]");
        if (stats)
                prog_stats_print(&ps0, &ps1);
        printf("}\n");
        probe_plan_free(plan);
        d9_bpf_close(bpf);
        free(err);
        return 0;
}
