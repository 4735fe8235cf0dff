/* run_tick_after_preemption: the run ticks (D9_PROBE_RUNS) keep a stack
 * right after a long preemption of a thread that never sleeps, and no more
 * often than one per 8 ms past a stretch's first 32 ms.
 *
 * A spinner (no syscall, one stretch) shares CPU 0 with a SCHED_FIFO
 * pulse: 12 ms of spin, 18 ms of sleep, 20 times. A long poll's end is
 * its last tick with a stack: spaced by ticks (CPU time), a tick kept one
 * within 3 ms after 5 of the 20 preemptions, so a poll that ended then
 * read up to its preemption short (a 50 ms spin read 23.5 ms when its
 * preemption's off-CPU record did not extend it). Spaced by wall time,
 * the first tick after it keeps one.
 *
 * usage: run_tick_after_preemption */

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

#define MS 1000000ull
#define PULSES 20

struct seen {
        pid_t spinner;
        uint64_t first_ts;
        size_t n_runs, n_preempts;
        uint64_t runs[4096];
        uint64_t preempt_on[256], preempt_off[256];
};

static int on_record(void *ctx, const void *data, size_t size)
{
        const struct d9_rec_hdr *h = data;
        struct seen *s = ctx;

        if (size < sizeof(*h) || (pid_t)h->tid != s->spinner)
                return 0;
        if (!s->first_ts)
                s->first_ts = h->ts;
        if (h->type == D9_REC_RUN_SAMPLE && s->n_runs < 4096)
                s->runs[s->n_runs++] = h->ts;
        if (h->type == D9_REC_OFFCPU && size == sizeof(struct d9_rec_offcpu) && s->n_preempts < 256) {
                const struct d9_rec_offcpu *o = data;

                if (!o->prev_state) {
                        s->preempt_off[s->n_preempts] = o->off_ts;
                        s->preempt_on[s->n_preempts++] = o->hdr.ts;
                }
        }
        return 0;
}

static uint64_t now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void pin_to_cpu0(void)
{
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(0, &set);
        sched_setaffinity(0, sizeof(set), &set);
}

/* A thread that never sleeps (no syscall: one stretch), on CPU 0. */
static pid_t start_spinner(void)
{
        pid_t pid = fork();

        if (pid != 0)
                return pid;
        pin_to_cpu0();
        for (volatile unsigned long n = 0;; n++)
                ;
}

/* The pulse, in a child: real-time, so the spinner waits out each burst. */
static pid_t start_pulse(void)
{
        struct sched_param sp = { .sched_priority = 10 };
        pid_t pid = fork();

        if (pid != 0)
                return pid;
        pin_to_cpu0();
        if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
                _exit(3);
        usleep(60000);
        for (int i = 0; i < PULSES; i++) {
                uint64_t end = now_ns() + 12 * MS;

                while (now_ns() < end)
                        ;
                usleep(18000);
        }
        _exit(0);
}

int main(void)
{
        static struct seen seen;
        struct child spinner = { .out_fd = -1 }, pulse = { .out_fd = -1 };
        struct d9_bpf_opts bo = { .no_cpu_sampling = true };
        struct d9_bpf_target_opts to = { .probes = D9_PROBE_SCHED | D9_PROBE_RUNS, .offcpu_min_ns = MS,
                                         .on_record = on_record, .ctx = &seen };
        struct d9_bpf *bpf = NULL;
        struct d9_bpf_target *t = NULL;
        size_t long_ones = 0, kept_after = 0, close_pairs = 0;
        char *err = NULL;
        int r;

        tap_plan(4);
        r = d9_bpf_open(&bo, &bpf);
        if (!tap_ok(r == 0, "BPF programs load (%s)", strerror(-r)))
                return tap_done();
        spinner.pid = start_spinner();
        seen.spinner = spinner.pid;
        usleep(100000);
        r = d9_bpf_attach_target(bpf, spinner.pid, NULL, &to, &t, &err);
        tap_ok(r == 0, "attach sched probes and run ticks to the spinner %d%s%s", spinner.pid, err ? ": " : "",
               err ? err : "");
        if (r == 0) {
                pulse.pid = start_pulse();
                drain_until_exit(t, &pulse);
                d9_bpf_detach_target(t);
        }
        child_kill(&spinner);
        d9_bpf_close(bpf);
        /* Past the stretch's first 32 ms (its ticks all keep one before). */
        for (size_t i = 0; i < seen.n_preempts; i++) {
                size_t j = 0;

                if (seen.preempt_on[i] - seen.preempt_off[i] < 9 * MS || seen.preempt_off[i] < seen.first_ts + 40 * MS)
                        continue;
                long_ones++;
                while (j < seen.n_runs && seen.runs[j] < seen.preempt_on[i])
                        j++;
                kept_after += j < seen.n_runs && seen.runs[j] - seen.preempt_on[i] <= 3 * MS;
        }
        for (size_t j = 1; j < seen.n_runs; j++)
                close_pairs += seen.runs[j - 1] > seen.first_ts + 40 * MS && seen.runs[j] - seen.runs[j - 1] < 7 * MS;
        tap_diag("pulse exit %d, %zu preemptions, %zu kept ticks", pulse.status, seen.n_preempts, seen.n_runs);
        tap_ok(long_ones >= PULSES / 2 && kept_after == long_ones,
               "a tick keeps a stack within 3 ms after each preemption of 9 ms or more: %zu of %zu", kept_after,
               long_ones);
        tap_ok(seen.n_runs > 0 && close_pairs == 0,
               "past 40 ms, kept ticks stay 7 ms or more apart: %zu pairs closer of %zu ticks", close_pairs,
               seen.n_runs);
        free(err);
        return tap_done();
}
