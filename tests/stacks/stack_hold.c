/* stack_hold: not a test; bench/stacks drives it. Attaches sched + 99 Hz
 * CPU sampling to --pid with or without stack capture, drains and unwinds
 * every STACK record as d9d would (daemon/record/unwind.c, default budget), until
 * SIGTERM/SIGINT. Prints "attached" on stderr once attached, and at the end
 * one JSON line on stdout: records, stacks unwound, unwind us per stack,
 * frames per stack, stacks over budget, ring drops, and for each of our BPF
 * programs its runs and ns per run (kernel.bpf_stats_enabled must be 1 for
 * those to count).
 *
 * usage: stack_hold --pid PID [--stacks on|off|cpu|offcpu] [--user-bytes N]
 *                   [--offcpu-min-us N] [--offcpu-rate N] [--offcpu-burst N]
 *                   [--fp-tail on|off]
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>

#include "harness.h"
#include "daemon/record/unwind.h"

#define MAX_FRAMES 128

struct hold {
        pid_t pid;
        struct unwinder *uw;
        unsigned long records, stacks, unwind_err;
        uint64_t frames[MAX_FRAMES];
};

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
        (void)sig;
        stop = 1;
}

static int on_record(void *ctx, const void *rec, size_t size)
{
        struct hold *h = ctx;
        const struct d9_rec_hdr *hdr = rec;

        h->records++;
        if (hdr->type != D9_REC_STACK)
                return 0;
        h->stacks++;
        if (unwinder_stack(h->uw, rec, size, h->frames, MAX_FRAMES, NULL) < 0)
                h->unwind_err++;
        return 0;
}

/* Runs and run time of the BPF programs this process holds. */
static void print_prog_stats(const struct bpf_ids *ids)
{
        for (size_t i = 0; i < ids->n; i++) {
                struct bpf_prog_info info = { 0 };
                __u32 len = sizeof(info);
                int fd;

                if (ids->kind[i] != 0 || (fd = bpf_prog_get_fd_by_id(ids->id[i])) < 0)
                        continue;
                if (bpf_prog_get_info_by_fd(fd, &info, &len) == 0 &&
                    (!strcmp(info.name, "d9_sched_switch") || !strcmp(info.name, "d9_cpu_sample")))
                        printf(",\"%s_runs\":%llu,\"%s_ns_per_run\":%.0f", info.name,
                               (unsigned long long)info.run_cnt, info.name,
                               info.run_cnt ? (double)info.run_time_ns / (double)info.run_cnt : 0.0);
                close(fd);
        }
}

static int parse_args(int argc, char **argv, pid_t *pid, struct d9_stack_cfg *sc)
{
        bool fp_tail = false;

        for (int a = 1; a + 1 < argc; a += 2) {
                const char *k = argv[a], *v = argv[a + 1];
                unsigned long n = strtoul(v, NULL, 10);

                if (!strcmp(k, "--pid"))
                        *pid = (pid_t)n;
                else if (!strcmp(k, "--stacks"))
                        sc->flags = !strcmp(v, "off") ? 0 : !strcmp(v, "cpu") ? D9_STACK_CPU
                                  : !strcmp(v, "offcpu") ? D9_STACK_OFFCPU
                                  : D9_STACK_CPU | D9_STACK_OFFCPU;
                else if (!strcmp(k, "--user-bytes"))
                        sc->user_bytes = (uint32_t)n;
                else if (!strcmp(k, "--offcpu-min-us"))
                        sc->offcpu_min_us = (uint32_t)n;
                else if (!strcmp(k, "--offcpu-rate"))
                        sc->offcpu_per_sec = (uint32_t)n;
                else if (!strcmp(k, "--offcpu-burst"))
                        sc->offcpu_burst = (uint32_t)n;
                else if (!strcmp(k, "--fp-tail"))
                        fp_tail = !strcmp(v, "on");
                else
                        return -EINVAL;
        }
        if (fp_tail && sc->flags)
                sc->flags |= D9_STACK_FP_TAIL;
        return *pid > 0 ? 0 : -EINVAL;
}

int main(int argc, char **argv)
{
        struct d9_bpf_target_opts to = {
                .probes = D9_PROBE_SCHED | D9_PROBE_CPU,
                .stack = { .flags = D9_STACK_CPU | D9_STACK_OFFCPU, .user_bytes = 8192,
                           .offcpu_min_us = 1000, .offcpu_per_sec = 100, .offcpu_burst = 20 },
                .on_record = on_record,
        };
        struct d9_bpf_opts bo = { .sample_hz = 99 };
        static struct bpf_ids ids;
        struct hold h = { 0 };
        struct d9_bpf_target *t = NULL;
        struct d9_bpf *bpf = NULL;
        struct unwind_stats st;
        uint64_t drops = 0;
        char *err = NULL;
        int r;

        if (parse_args(argc, argv, &h.pid, &to.stack) < 0) {
                fprintf(stderr, "usage: stack_hold --pid PID [--stacks on|off|cpu|offcpu] [--user-bytes N] "
                        "[--offcpu-min-us N] [--offcpu-rate N] [--offcpu-burst N] [--fp-tail on|off]\n");
                return 2;
        }
        to.ctx = &h;
        signal(SIGTERM, on_signal);
        signal(SIGINT, on_signal);
        r = d9_bpf_open(&bo, &bpf);
        if (r == 0)
                r = d9_bpf_attach_target(bpf, h.pid, NULL, &to, &t, &err);
        if (r == 0)
                r = unwinder_new_reading(h.pid, NULL, &h.uw);
        if (r < 0) {
                fprintf(stderr, "stack_hold: cannot attach to pid %d: %s\n", h.pid, err ? err : strerror(-r));
                return 1;
        }
        fprintf(stderr, "attached\n");
        while (!stop)
                d9_bpf_target_poll(t, 50);
        d9_bpf_target_consume(t);
        d9_bpf_target_drops(t, &drops);
        bpf_snapshot_self(&ids);
        unwinder_get_stats(h.uw, &st);
        printf("{\"records\":%lu,\"stacks\":%lu,\"unwind_errors\":%lu,\"unwind_us_per_stack\":%.1f,"
               "\"frames_per_stack\":%.1f,\"over_budget\":%llu,\"drops\":%llu",
               h.records, h.stacks, h.unwind_err,
               st.stacks ? (double)st.ns / 1e3 / (double)st.stacks : 0.0,
               st.stacks ? (double)st.frames / (double)st.stacks : 0.0,
               (unsigned long long)st.over_budget, (unsigned long long)drops);
        print_prog_stats(&ids);
        printf("}\n");
        d9_bpf_detach_target(t);
        d9_bpf_close(bpf);
        unwinder_free(h.uw);
        return 0;
}
