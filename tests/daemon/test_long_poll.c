/* The default probe set's derivations (daemon/long_poll.c), fed synthetic
 * stacks and records: which threads become workers from what their stacks
 * show, which off-CPU intervals are parks and which are polls blocking a
 * worker, and how fast run ticks and preemptions inside one poll frame
 * become one D9LongPollEvent (and which do not). */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/d9_events.h"
#include "daemon/record/attach_poll.h"
#include "daemon/record/long_poll.h"
#include "proto/d9proto.h"
#include "daemon/record/translate.h"
#include "daemon/symbolize/mapping.h"
#include "daemon/symbolize/stack_marks.h"
#include "uprobes/uprobes.h"
#include "../tap.h"

enum { C_TASK, C_TASK2, C_LAUNCH, C_JOB, C_BOXED, N_POINTS };
/* Link-time ranges of the fake poll functions; stacks use these addresses
 * as is (the hook below maps an address to itself). */
#define TASK_FN 0x10000
#define TASK2_FN 0x11000
#define LAUNCH_FN 0x20000
#define JOB_FN 0x30000
#define BOXED_FN 0x40000      /* poll<Pin<Box<dyn Future>>, S> */
#define OTHER_FN 0x90000        /* no poll: the worker loop, park, libc */
#define PERIOD 500000ull

static struct probe_point points[N_POINTS];
/* A call in TASK_FN into Tokio's own code (yield_now): its return address. */
#define HARNESS_RET (TASK_FN + 0x301)
static uint64_t harness_sites[] = { HARNESS_RET };
/* The boxed futures' poll functions the plan names (plan_dyn_names.c), in
 * the executable's one text segment, mapped at bias 0 (test_boxed_run). */
#define DYN_FN 0x50000
static struct probe_segment segments[] = { { 0x40000, 0x40000, 0x20000, true } };
static char fn_text[] = "app::boxed_spin::{{closure}}";
static struct probe_fn_name fns[] = { { DYN_FN, 0 } };
static struct probe_plan plan = { .points = points, .n_points = N_POINTS, .harness_sites = harness_sites,
                                  .n_harness_sites = 1, .segments = segments, .n_segments = 1,
                                  .dyn_fns = fns, .n_dyn_fns = 1, .dyn_fn_text = fn_text,
                                  .dyn_fn_text_len = sizeof(fn_text) };

static void plan_init(void)
{
        points[C_TASK] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_TASK, .label = (char *)"app::serve",
                                               .vaddr = TASK_FN, .func_end = TASK_FN + 0x400 };
        points[C_TASK2] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_TASK2, .label = (char *)"app::tick",
                                                .vaddr = TASK2_FN, .func_end = TASK2_FN + 0x400 };
        points[C_LAUNCH] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_LAUNCH, .label = (char *)"0x20000",
                                                 .vaddr = LAUNCH_FN, .func_end = LAUNCH_FN + 0x400,
                                                 .blocking_task = true };
        points[C_JOB] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_JOB, .label = (char *)"0x30000",
                                              .vaddr = JOB_FN, .func_end = JOB_FN + 0x400, .blocking_task = true };
        points[C_BOXED] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_BOXED,
                                                .label = (char *)"core::pin::Pin<Box<dyn Future>>",
                                                .vaddr = BOXED_FN, .func_end = BOXED_FN + 0x400, .boxed_dyn = true };
}

static int same_vaddr(void *ctx, uint64_t addr, uint64_t *vaddr)
{
        *vaddr = addr;
        return 0;
}

struct log {
        int park[256], unpark[256], samples[256];
        int long_running, long_blocked, long_preempted, long_yielded, long_at_attach;
        int long_on[256];               /* long polls per worker_id */
        uint64_t min_ns[8], ticks[8], worker[8], leaf[8];
        bool runnable[8];               /* the stack led by the runnable mark (leaf: the frame under it) */
        char label[8][32];
        uint64_t waited_ns[8];
        uint64_t sample_leaf;           /* the last CPU sample's first frame */
};

static uint64_t field_u(const struct d9_dec_event *ev, const char *name)
{
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name))
                        return ev->values[i].u;
        return UINT64_MAX;
}

/* A string field, copied (decoded strings are not NUL-terminated). */
static const char *field_s(const struct d9_dec_event *ev, const char *name, char *buf, size_t len)
{
        buf[0] = 0;
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name) && ev->values[i].str.p)
                        snprintf(buf, len, "%.*s", (int)ev->values[i].str.len, ev->values[i].str.p);
        return buf;
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct log *l = ctx;
        const char *n = ev->schema->name;
        uint64_t w = field_u(ev, "worker_id");

        if (!strcmp(n, "D9LongPollEvent")) {
                int i = l->long_running + l->long_blocked + l->long_preempted + l->long_yielded + l->long_at_attach;
                char how[16];

                field_s(ev, "how", how, sizeof(how));

                if (i < 8) {
                        l->min_ns[i] = field_u(ev, "min_ns");
                        l->ticks[i] = field_u(ev, "ticks");
                        l->worker[i] = w;
                        field_s(ev, "spawn_loc", l->label[i], sizeof(l->label[i]));
                        l->waited_ns[i] = field_u(ev, "waited_ns");
                        for (uint16_t k = 0; k < ev->schema->nfields; k++)
                                if (!strcmp(ev->schema->fields[k].name, "stack") && ev->values[k].stack.n) {
                                        const struct d9_value *v = &ev->values[k];

                                        l->runnable[i] = d9_value_stack_addr(v, 0) ==
                                                         stack_mark_addr(STACK_MARK_RUNNABLE) && v->stack.n > 1;
                                        l->leaf[i] = d9_value_stack_addr(v, l->runnable[i]);
                                }
                }
                if (!strcmp(how, "running"))
                        l->long_running++;
                else if (!strcmp(how, "blocked"))
                        l->long_blocked++;
                else if (!strcmp(how, "preempted"))
                        l->long_preempted++;
                else if (!strcmp(how, "yielded"))
                        l->long_yielded++;
                else if (!strcmp(how, "at attach"))
                        l->long_at_attach++;
                if (w < 256)
                        l->long_on[w]++;
                return 0;
        }
        if (w > 255)
                return 0;
        if (!strcmp(n, "WorkerParkEvent"))
                l->park[w]++;
        else if (!strcmp(n, "WorkerUnparkEvent"))
                l->unpark[w]++;
        else if (!strcmp(n, "CpuSampleEvent")) {
                l->samples[w]++;
                for (uint16_t i = 0; i < ev->schema->nfields; i++)
                        if (!strcmp(ev->schema->fields[i].name, "callchain") && ev->values[i].stack.n)
                                l->sample_leaf = d9_value_stack_addr(&ev->values[i], 0);
        }
        return 0;
}

struct run {
        struct translate tr;
        struct d9_enc *enc;
        uint8_t *buf;
        uint64_t ts, stack_id;
};

/* full_set: poll uprobes, so polls running at the attach (attach_poll.c)
 * instead of the default set's derivations. */
static void run_begin(struct run *r, bool full_set)
{
        memset(r, 0, sizeof(*r));
        r->buf = malloc(1 << 22);
        d9_enc_new(&r->enc);
        d9_enc_set_output(r->enc, r->buf, 1 << 22, NULL, NULL);
        translate_init(&r->tr, 1, &plan, false, false);
        if (full_set)
                attach_poll_enable(&r->tr, same_vaddr, NULL);
        else
                long_poll_enable(&r->tr, PERIOD, same_vaddr, NULL);
        translate_set_encoder(&r->tr, r->enc);
        r->ts = 1000000000;
}

static void run_start(struct run *r)
{
        run_begin(r, false);
}

/* A stack on tid: user frames leaf first, kernel ones none. */
static uint64_t stack(struct run *r, uint32_t tid, const uint64_t *frames, uint32_t n)
{
        translate_stack_frames(&r->tr, tid, ++r->stack_id, frames, n, 0, false);
        return r->stack_id;
}

static void offcpu(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t len)
{
        struct d9_rec_offcpu o = { .prev_state = 1, .stack_id = stack_id };

        o.off_ts = r->ts;
        r->ts += len;
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = tid, .tgid = 1, .ts = r->ts };
        translate_record(&r->tr, &o, sizeof(o));
}

/* tid preempted for len (an involuntary interval, its stack stack_id) in
 * the stretch BPF named since (0: none named). */
static void preempt_in(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t len, uint64_t since)
{
        struct d9_rec_offcpu o = { .prev_state = 0, .stack_id = stack_id, .run_since = since };

        o.off_ts = r->ts;
        r->ts += len;
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = tid, .tgid = 1, .ts = r->ts };
        translate_record(&r->tr, &o, sizeof(o));
}

static void preempt(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t len)
{
        preempt_in(r, tid, stack_id, len, 0);
}

/* tid gave its CPU up (sched_yield, still runnable) for len. */
static void yield(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t len)
{
        struct d9_rec_offcpu o = { .prev_state = 0, .stack_id = stack_id, .syscall = 24 + 1 };

        o.off_ts = r->ts;
        r->ts += len;
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = tid, .tgid = 1, .ts = r->ts };
        translate_record(&r->tr, &o, sizeof(o));
}

static void tick(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t since)
{
        struct d9_rec_run t = { .stack_id = stack_id, .since_ts = since };

        r->ts += PERIOD;
        t.hdr = (struct d9_rec_hdr){ .type = D9_REC_RUN_SAMPLE, .tid = tid, .tgid = 1, .ts = r->ts };
        translate_record(&r->tr, &t, sizeof(t));
}

/* A 99 Hz CPU sample of tid at ts with the stack stack_id. */
static void cpu_sample_at(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t ts)
{
        struct d9_rec_sample smp = { .ip = 0x1234, .stack_id = stack_id };

        smp.hdr = (struct d9_rec_hdr){ .type = D9_REC_CPU_SAMPLE, .tid = tid, .tgid = 1, .ts = ts };
        translate_record(&r->tr, &smp, sizeof(smp));
}

static void poll_start_at(struct run *r, uint32_t tid, uint64_t ts)
{
        struct d9_rec_task t = { .task_id = 7, .cookie = C_TASK2 };

        t.hdr = (struct d9_rec_hdr){ .type = D9_REC_POLL_START, .tid = tid, .tgid = 1, .ts = ts };
        translate_record(&r->tr, &t, sizeof(t));
}

static void run_end(struct run *r, struct log *l, char *workers, size_t len)
{
        struct d9_dec_opts opts = { .strict = true, .on_event = on_event, .ctx = l };
        struct d9_dec_result res;
        const uint8_t *out;
        size_t n;

        memset(l, 0, sizeof(*l));
        long_poll_flush(&r->tr, true);
        attach_poll_flush(&r->tr);
        translate_worker_list(&r->tr, workers, len);
        out = d9_enc_output(r->enc, &n);
        if (d9_decode(out, n, &opts, &res) < 0)
                printf("# decode failed: %s\n", res.error);
        translate_destroy(&r->tr);
        d9_enc_free(r->enc);
        free(r->buf);
}

/* Workers from stacks: a task poll frame makes a worker, and teaches which
 * blocking poll is the launch; an idle worker whose park stack shows only
 * that launch frame is a worker too; a spawn_blocking job's thread is not.
 * Parks are a worker's sleeps outside a task poll; a sleep inside one is a
 * blocked long poll, not a park. */
static void test_workers_and_parks_from_stacks(void)
{
        const uint64_t busy[] = { OTHER_FN + 5, TASK_FN + 0x10, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t idle[] = { OTHER_FN + 1, OTHER_FN + 2, LAUNCH_FN + 0x30 };
        const uint64_t job[] = { OTHER_FN + 1, JOB_FN + 0x10 };
        const uint64_t loop[] = { OTHER_FN + 1, OTHER_FN + 7 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        offcpu(&r, 102, stack(&r, 102, idle, 3), 2000000);     /* before any worker is known */
        offcpu(&r, 101, stack(&r, 101, busy, 4), 3000000);     /* sleeps inside app::serve */
        offcpu(&r, 102, stack(&r, 102, idle, 3), 2000000);     /* idle worker: a park */
        offcpu(&r, 103, stack(&r, 103, job, 2), 2000000);      /* blocking-pool job */
        offcpu(&r, 104, stack(&r, 104, loop, 2), 2000000);     /* no poll frame at all */
        offcpu(&r, 101, stack(&r, 101, idle, 3), 2000000);     /* worker 0 parks */
        offcpu(&r, 101, 0, 2000000);                           /* no stack: counted as a park */
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "two workers from stacks, not the job's or the loop's thread ('%s')", workers);
        ok(l.long_blocked == 1 && l.worker[0] == 0 && l.min_ns[0] == 3000000 && !strcmp(l.label[0], "app::serve"),
           "sleep inside a task poll: one blocked long poll on worker 0, 3 ms, app::serve (%d, w%llu, %llu ns, '%s')",
           l.long_blocked, (unsigned long long)l.worker[0], (unsigned long long)l.min_ns[0], l.label[0]);
        ok(l.park[0] == 2 && l.unpark[0] == 2, "worker 0: 2 parks (launch-only stack, no stack), not the blocked poll (%d)",
           l.park[0]);
        ok(l.park[1] == 1 && l.unpark[1] == 1,
           "worker 1: 1 park; its first sleep came before any worker taught the launch frame (%d)", l.park[1]);
        ok(l.park[255] == 0 && l.park[254] == 0, "no parks for non-workers (%d, %d)", l.park[255], l.park[254]);
}

/* A stack taken in the kernel (one kernel frame first), cut or whole. */
static uint64_t stack_in_kernel(struct run *r, uint32_t tid, const uint64_t *frames, uint32_t n, bool cut)
{
        translate_stack_frames(&r->tr, tid, ++r->stack_id, frames, n, 1, cut);
        return r->stack_id;
}

/* A sleep whose stack was cut before its poll frame (the deep copies' byte
 * rate used up: npm pact stub server, 412 of 412 default-set parks were
 * sleeps inside a poll) is in the poll that whole stacks through its site
 * (innermost 4 user frames) showed; at a site not seen whole, or seen both
 * in a poll and not, it is a park as before. */
static void test_cut_sleep_in_poll_by_its_site(void)
{
#define K 0xffffffff81000000ull
#define SITE OTHER_FN + 0x61, OTHER_FN + 0x75, OTHER_FN + 0x89, OTHER_FN + 0x9d
#define SITE2 OTHER_FN + 0x61, OTHER_FN + 0x77, OTHER_FN + 0x99, OTHER_FN + 0x9d
        const uint64_t whole[] = { K, SITE, TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t cut[] = { K, SITE, OTHER_FN + 0x95 };
        const uint64_t cut_unknown[] = { K, OTHER_FN + 0x61, OTHER_FN + 0x7a, OTHER_FN + 0x8a, OTHER_FN + 0x9d,
                                         OTHER_FN + 0x95 };
        const uint64_t parked[] = { K, SITE2, OTHER_FN + 2, LAUNCH_FN + 0x30 };
        const uint64_t mixed[] = { K, SITE2, TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t mixed_cut[] = { K, SITE2, OTHER_FN + 0x95 };
#undef K
#undef SITE
#undef SITE2
        struct log l;
        struct run r;
        char workers[64];
        uint64_t placed;

        run_start(&r);
        offcpu(&r, 101, stack_in_kernel(&r, 101, whole, 8, false), 3000000);
        offcpu(&r, 101, stack_in_kernel(&r, 101, cut_unknown, 6, true), 2000000);
        offcpu(&r, 101, stack_in_kernel(&r, 101, cut, 6, true), 4000000);
        offcpu(&r, 101, stack_in_kernel(&r, 101, mixed, 8, false), 2000000);
        offcpu(&r, 101, stack_in_kernel(&r, 101, parked, 7, false), 2000000);
        offcpu(&r, 101, stack_in_kernel(&r, 101, mixed_cut, 6, true), 2000000);
        placed = r.tr.cut_in_poll_by_site;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_blocked == 3 && l.min_ns[1] == 4000000 && !strcmp(l.label[1], "app::serve") && placed == 1,
           "a cut sleep at a site whole stacks showed in app::serve is a blocked long poll there (%d blocked, the "
           "second %llu ns '%s'; %llu placed by site)", l.long_blocked, (unsigned long long)l.min_ns[1], l.label[1],
           (unsigned long long)placed);
        ok(!strcmp(workers, "0") && l.park[0] == 3,
           "cut at a site never seen whole, or seen in a poll and not: parks as before (%d of 3; workers '%s')",
           l.park[0], workers);
}

/* Ticks: a run of ticks in one task poll frame with no voluntary switch
 * between is one long poll, from first to last tick; it ends at another
 * poll frame, a new stretch (since), an off-CPU interval or a flush. One
 * tick is not a long poll; a tick without a stack changes nothing. */
static void test_long_polls_from_ticks(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t in_task2[] = { TASK2_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        const uint64_t truncated[] = { OTHER_FN + 3, OTHER_FN + 4 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        for (int i = 0; i < 4; i++)     /* 5 ticks: 2.5 ms from first to last */
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        tick(&r, 101, 0, since);        /* no stack: neither extends nor ends it */
        tick(&r, 101, stack(&r, 101, truncated, 2), since);    /* unwind stopped early: same */
        tick(&r, 101, stack(&r, 101, in_task, 3), since);
        for (int i = 0; i < 3; i++)     /* another future type, same stretch */
                tick(&r, 101, stack(&r, 101, in_task2, 3), since);
        since = r.ts;                   /* the worker slept: a new stretch */
        tick(&r, 101, stack(&r, 101, in_task2, 3), since);
        tick(&r, 101, stack(&r, 101, outside, 2), since);      /* one tick only: none */
        for (int i = 0; i < 4; i++)     /* on worker 1, ended by its sleep */
                tick(&r, 102, stack(&r, 102, in_task, 3), since);
        offcpu(&r, 102, stack(&r, 102, outside, 2), 2000000);
        since = r.ts;
        for (int i = 0; i < 2; i++)     /* 0.5 ms apart: under the 1 ms promised, none */
                tick(&r, 102, stack(&r, 102, in_task, 3), since);
        offcpu(&r, 102, stack(&r, 102, outside, 2), 2000000);
        since = r.ts;
        for (int i = 0; i < 3; i++)     /* still open at the end: flushed */
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 4, "4 running long polls (%d)", l.long_running);
        ok(l.ticks[0] == 5 && l.min_ns[0] == 6 * PERIOD && !strcmp(l.label[0], "app::serve"),
           "first: 5 ticks in it over 3 ms (a stackless and a truncated tick between), app::serve (%llu, %llu ns, '%s')", (unsigned long long)l.ticks[0],
           (unsigned long long)l.min_ns[0], l.label[0]);
        ok(l.ticks[1] == 3 && !strcmp(l.label[1], "app::tick") && l.min_ns[1] == 2 * PERIOD,
           "second: another frame ends the first; 3 ticks of app::tick (%llu, '%s')", (unsigned long long)l.ticks[1],
           l.label[1]);
        ok(l.ticks[2] == 4 && l.worker[2] == 1, "third: worker 1's run, ended by its off-CPU interval (%llu, w%llu)",
           (unsigned long long)l.ticks[2], (unsigned long long)l.worker[2]);
        ok(l.ticks[3] == 3 && l.worker[3] == 0, "fourth: the open run, flushed at the end; none of 2 ticks "
           "0.5 ms apart (%llu)", (unsigned long long)l.ticks[3]);
        ok(l.long_blocked == 0 && l.park[1] == 2, "worker 1's sleeps outside a poll are parks (%d)", l.park[1]);
}

/* A running long poll shows the stack of its tick deepest inside the poll
 * (the busy loop's body), not a tick that landed in the poll's own code
 * after that loop returned, even when that one came last. */
static void test_long_poll_stack_is_its_deepest_tick(void)
{
        const uint64_t in_busy[] = { OTHER_FN + 0x77, TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t tail[] = { TASK_FN + 0x80, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        tick(&r, 101, stack(&r, 101, tail, 3), since);
        for (int i = 0; i < 3; i++)
                tick(&r, 101, stack(&r, 101, in_busy, 4), since);
        tick(&r, 101, stack(&r, 101, tail, 3), since);
        offcpu(&r, 101, stack(&r, 101, outside, 2), 2000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.ticks[0] == 5 && l.leaf[0] == OTHER_FN + 0x77,
           "the long poll's stack is its deepest tick's (leaf %#llx, want %#llx; %d polls, %llu ticks)",
           (unsigned long long)l.leaf[0], (unsigned long long)(OTHER_FN + 0x77), l.long_running,
           (unsigned long long)l.ticks[0]);
}

/* The default set on a service that blocks in place all the time
 * (deltachat's SQLite calls): every stack says which worker's loop its
 * thread runs and since when (BPF reads the loop's Arc<Worker> near the
 * top of the stack, d9_stack_worker). Attached mid-run, two workers; each
 * round the holder of one worker hands its core to a stand-in thread from
 * a pool that comes and goes, and goes on in its blocking section (its
 * stacks still show the task poll and that worker's older loop) before
 * its loop ends. The ids are Tokio's two, whatever the threads; the
 * stand-ins' long polls are on their worker's lane, the givers' blocking
 * sections on none; parks only on the two lanes. */
static void test_block_in_place_workers_from_the_stack(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t parked[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        const uint64_t job[] = { OTHER_FN + 3, JOB_FN + 0x20 };
        enum { RT = 0x7f00aa00 };
        uint32_t holder[2] = { 101, 102 };
        uint64_t found[2] = { 1000, 1000 }, since;
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        for (int k = 1; k >= 0; k--) {          /* worker 1's thread seen first */
                translate_stack_worker(&r.tr, holder[k], RT, (uint32_t)k + 1, found[k], false);
                offcpu(&r, holder[k], stack(&r, holder[k], parked, 2), 2000000);
        }
        for (uint32_t i = 0; i < 20; i++) {
                int k = (int)(i % 2);
                uint32_t h = holder[k], sn = 200 + i;
                uint64_t f = r.ts;

                since = r.ts;
                for (int n = 0; n < 4; n++) {   /* the stand-in polls as worker k */
                        translate_stack_worker(&r.tr, sn, RT, (uint32_t)k + 1, f, false);
                        tick(&r, sn, stack(&r, sn, in_task, 3), since);
                }
                for (int n = 0; n < 3; n++) {   /* the giver, in its blocking section */
                        translate_stack_worker(&r.tr, h, RT, (uint32_t)k + 1, found[k], false);
                        tick(&r, h, stack(&r, h, in_task, 3), found[k]);
                }
                translate_stack_worker(&r.tr, h, RT, 0, 0, false);     /* its loop ended */
                offcpu(&r, h, stack(&r, h, job, 2), 2000000);
                translate_stack_worker(&r.tr, sn, RT, (uint32_t)k + 1, f, false);
                offcpu(&r, sn, stack(&r, sn, parked, 2), 2000000);
                holder[k] = sn;
                found[k] = f;
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "20 hand-offs to stand-ins from a pool: only Tokio's 2 workers ('%s')", workers);
        ok(l.long_on[0] == 10 && l.long_on[1] == 10 && l.long_on[255] == 20,
           "the stand-ins' long polls on their worker (%d, %d), the givers' blocking sections on none (%d)",
           l.long_on[0], l.long_on[1], l.long_on[255]);
        ok(l.park[0] == 11 && l.park[1] == 11 && l.park[2] == 0 && l.park[255] == 0,
           "parks on the two workers only (%d, %d; elsewhere %d)", l.park[0], l.park[1], l.park[2] + l.park[255]);
}

/* While BPF is still learning where the build keeps its Worker, a stack
 * naming none says nothing: no thread stands in for a worker then (it
 * would leave an id behind once its worker is named). After 4 stacks that
 * really name none (a current-thread runtime) the thread is its worker. */
static void test_no_thread_id_while_bpf_searches(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        char during[64];

        run_start(&r);
        for (int i = 0; i < 10; i++) {
                translate_stack_worker(&r.tr, 101, 0, 0, 0, true);
                offcpu(&r, 101, stack(&r, 101, in_task, 3), 2000000);
        }
        translate_worker_list(&r.tr, during, sizeof(during));
        uint64_t ids_during = r.tr.ids_by_thread;
        for (int i = 0; i < 4; i++) {
                translate_stack_worker(&r.tr, 101, 0, 0, 0, false);
                offcpu(&r, 101, stack(&r, 101, in_task, 3), 2000000);
        }
        uint64_t ids_after = r.tr.ids_by_thread;
        run_end(&r, &l, workers, sizeof(workers));
        ok(!during[0] && !strcmp(workers, "0") && ids_during == 0 && ids_after == 1,
           "no id while BPF searches ('%s'), the thread's own after 4 stacks naming none ('%s'), counted as an "
           "id by thread (%llu, then %llu)", during, workers, (unsigned long long)ids_during,
           (unsigned long long)ids_after);
}

/* Threads 101 and 102 in task polls under LAUNCH_FN, BPF naming them
 * workers 0 and 1 of runtime rt. */
static void two_named_workers(struct run *r, uint64_t rt)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };

        for (uint32_t k = 0; k < 2; k++) {
                translate_stack_worker(&r->tr, 101 + k, rt, k + 1, 1000, false);
                offcpu(r, 101 + k, stack(r, 101 + k, in_task, 3), 2000000);
        }
}

/* A thread whose loop was launched as the loops of workers BPF named
 * (the same blocking poll below its task poll), when BPF names none for
 * it, is one of those workers, not a runtime of its own: no id by thread
 * (npm deltachat in a CI run: a stand-in's thread read as worker 2). A
 * thread under another launch still stands in for its runtime. */
static void test_no_thread_id_under_a_named_workers_launch(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t own_rt[] = { TASK_FN + 0x40, OTHER_FN + 9, JOB_FN + 0x20 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64], unnamed[64];

        run_start(&r);
        two_named_workers(&r, RT);
        for (int i = 0; i < 6; i++) {
                translate_stack_worker(&r.tr, 300, RT, 0, 0, false);
                offcpu(&r, 300, stack(&r, 300, in_task, 3), 2000000);
        }
        translate_worker_list(&r.tr, unnamed, sizeof(unnamed));
        uint64_t ids = r.tr.ids_by_thread;
        for (int i = 0; i < 6; i++) {
                translate_stack_worker(&r.tr, 400, RT, 0, 0, false);
                offcpu(&r, 400, stack(&r, 400, own_rt, 3), 2000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(unnamed, "0,1") && ids == 0,
           "6 stacks in a task poll under the named workers' launch, no Worker named: no id of its own ('%s', "
           "%llu ids by thread)", unnamed, (unsigned long long)ids);
        ok(!strcmp(workers, "0,1,2"), "a thread under another launch stands in for its own runtime ('%s')", workers);
}

/* Default set: a thread whose stacks show a blocking-pool poll with no
 * task poll above it, and which BPF says runs no worker loop, runs
 * spawn_blocking jobs: its samples are the pool's (254), as with poll
 * uprobes (npm sandbox-agent's job threads read 255 in the default set,
 * 254 in the full one). A worker's launch (seen below task polls) is not
 * a job. */
static void test_job_thread_samples_are_the_pools(void)
{
        const uint64_t in_launch[] = { OTHER_FN + 1, LAUNCH_FN + 0x30 };
        const uint64_t job[] = { OTHER_FN + 1, JOB_FN + 0x10 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        two_named_workers(&r, RT);
        for (int i = 0; i < 3; i++) {
                translate_stack_worker(&r.tr, 300, RT, 0, 0, false);
                cpu_sample_at(&r, 300, stack(&r, 300, job, 2), r.ts += 1000000);
                translate_stack_worker(&r.tr, 301, RT, 0, 0, false);
                cpu_sample_at(&r, 301, stack(&r, 301, in_launch, 2), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && l.samples[254] == 3 && l.samples[255] == 3,
           "a job's thread's samples are the pool's, a thread in a loop's launch BPF names no worker of "
           "is not: workers '%s', samples 254: %d, 255: %d", workers, l.samples[254], l.samples[255]);
}

/* A job seen while BPF still searches the build cannot be told from an
 * idle worker in its launch; BPF's first answer, "no loop", makes the
 * thread the pool's though that stack shows no job (npm sandbox-agent in a
 * CI run: a job in the search's first 9 ms, then 86 samples idle in the
 * pool's wait read 255). Had BPF named a worker there, the job was its
 * launch. */
static void test_job_before_bpf_answers(void)
{
        const uint64_t job[] = { OTHER_FN + 1, JOB_FN + 0x10 };
        const uint64_t pool_wait[] = { OTHER_FN + 3, OTHER_FN + 4 };
        const uint64_t idle[] = { OTHER_FN + 1, OTHER_FN + 2, JOB_FN + 0x30 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        translate_stack_worker(&r.tr, 300, RT, 0, 0, true);
        cpu_sample_at(&r, 300, stack(&r, 300, job, 2), r.ts += 1000000);
        translate_stack_worker(&r.tr, 301, RT, 0, 0, true);
        cpu_sample_at(&r, 301, stack(&r, 301, idle, 3), r.ts += 1000000);
        for (int i = 0; i < 3; i++) {
                translate_stack_worker(&r.tr, 300, RT, 0, 0, false);
                cpu_sample_at(&r, 300, stack(&r, 300, pool_wait, 2), r.ts += 1000000);
                translate_stack_worker(&r.tr, 301, RT, 1, 1000, false);
                cpu_sample_at(&r, 301, stack(&r, 301, idle, 3), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.samples[254] == 3 && l.samples[255] == 2 && l.samples[0] == 3,
           "a job shown before BPF answered: the thread is the pool's from the answer on (254: %d of 3), each "
           "thread's sample before it on none (255: %d of 2); a worker named at the answer is its worker "
           "(0: %d of 3)",
           l.samples[254], l.samples[255], l.samples[0]);
}

/* A blocking poll taken for a job that a later stack shows launching a
 * loop (a task poll above it: block_in_place's loops are launched by
 * another function than the runtime's, at a depth BPF may not read): the
 * thread is not the pool's after all (npm sideseat: the thread holding
 * worker 0 read 254 for a whole recording). */
static void test_job_that_launched_a_loop_is_no_pool(void)
{
        const uint64_t idle_in_launch[] = { OTHER_FN + 1, JOB_FN + 0x30 };
        const uint64_t wait[] = { OTHER_FN + 3, OTHER_FN + 4 };
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, JOB_FN + 0x20 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        translate_stack_worker(&r.tr, 302, RT, 0, 0, true);
        cpu_sample_at(&r, 302, stack(&r, 302, idle_in_launch, 2), r.ts += 1000000);
        translate_stack_worker(&r.tr, 302, RT, 0, 0, false);
        cpu_sample_at(&r, 302, stack(&r, 302, wait, 2), r.ts += 1000000);
        for (int i = 0; i < 5; i++) {
                translate_stack_worker(&r.tr, 302, RT, 0, 0, false);
                cpu_sample_at(&r, 302, stack(&r, 302, in_task, 3), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.samples[254] == 1 && !strcmp(workers, "0"),
           "taken for the pool's at BPF's answer (254: %d of 1), not once a task poll above that blocking poll shows "
           "a loop (workers '%s')", l.samples[254], workers);
}

/* Tokio's blocking-pool loop, which polls launches and jobs, and a
 * thread's start: functions of 0x100 bytes for the hook below. */
#define POOL_FN 0xa0000
#define START_FN 0xb0000

static int fn_of_0x100(const struct translate *tr, uint64_t addr, uint64_t *fn)
{
        *fn = addr & ~0xffull;
        return 0;
}

/* A pool thread waiting for a job in the pool's loop shows no poll; the
 * loop is the function that calls blocking-pool polls (here the workers'
 * launch): once that is known and launches are seen to show, such a
 * thread's samples are the pool's (254), not "no worker" (npm rari: 43 %
 * of its pool threads' samples, idle since before the attach). A thread
 * outside that loop stays 255; one in it whose launches are not known yet
 * waits for BPF's "no loop". */
static void test_idle_pool_thread_is_the_pools(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20, POOL_FN + 0x31, START_FN + 5 };
        const uint64_t job[] = { OTHER_FN + 1, JOB_FN + 0x10, POOL_FN + 0x31, START_FN + 5 };
        const uint64_t pool_wait[] = { OTHER_FN + 3, POOL_FN + 0x48, START_FN + 5 };
        const uint64_t block_on[] = { OTHER_FN + 3, OTHER_FN + 0x210, START_FN + 7 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        r.tr.lp_fn_of = fn_of_0x100;
        cpu_sample_at(&r, 300, stack(&r, 300, pool_wait, 3), r.ts += 1000000);
        for (uint32_t k = 0; k < 2; k++) {
                translate_stack_worker(&r.tr, 101 + k, RT, k + 1, 1000, false);
                cpu_sample_at(&r, 101 + k, stack(&r, 101 + k, in_task, 5), r.ts += 1000000);
        }
        for (int i = 0; i < 3; i++) {
                cpu_sample_at(&r, 300, stack(&r, 300, pool_wait, 3), r.ts += 1000000);
                cpu_sample_at(&r, 301, stack(&r, 301, block_on, 3), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && l.samples[254] == 3 && l.samples[255] == 4 && l.samples[0] == 1 &&
                   l.samples[1] == 1,
           "idle in the pool's loop: the pool's once the launches taught the loop (254: %d of 3); before that, "
           "and outside the loop, none (255: %d of 4); workers '%s'",
           l.samples[254], l.samples[255], workers);

        run_start(&r);
        r.tr.lp_fn_of = fn_of_0x100;
        translate_stack_worker(&r.tr, 310, RT, 0, 0, false);
        cpu_sample_at(&r, 310, stack(&r, 310, job, 4), r.ts += 1000000);
        translate_stack_worker(&r.tr, 311, RT, 0, 0, true);
        cpu_sample_at(&r, 311, stack(&r, 311, pool_wait, 3), r.ts += 1000000);
        translate_stack_worker(&r.tr, 311, RT, 0, 0, false);
        cpu_sample_at(&r, 311, stack(&r, 311, pool_wait, 3), r.ts += 1000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.samples[254] == 2 && l.samples[255] == 1,
           "a loop taught by a job, no launch seen: a thread idle in it is the pool's at BPF's \"no loop\" (254: %d "
           "of 2, the job's and the answered one; 255: %d of 1)",
           l.samples[254], l.samples[255]);
}

/* tid asleep since before the attach, for len, in futex (a park's call). */
static void slept_before(struct run *r, uint32_t tid, uint64_t stack_id, uint64_t len)
{
        struct d9_rec_offcpu o = { .prev_state = 1 | D9_OFFCPU_BEGAN_BEFORE, .stack_id = stack_id,
                                   .syscall = 202 + 1 };

        o.off_ts = r->ts;
        r->ts += len;
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = tid, .tgid = 1, .ts = r->ts };
        translate_record(&r->tr, &o, sizeof(o));
}

/* A sleep from before the attach waits until its thread shows its worker,
 * then is that worker's park from the trace's start. A multi-thread
 * worker parks inside its loop, under the launch's blocking-pool poll: a
 * thread asleep in the pool between jobs that later takes a worker's loop
 * (block_in_place's new loop) was no parked worker (npm sideseat, full
 * set: worker 1 busy and parked 115 % of the time). */
static void test_pool_sleep_before_attach_is_no_park(void)
{
        const uint64_t pool_wait[] = { OTHER_FN + 3, OTHER_FN + 4 };
        const uint64_t parked[] = { OTHER_FN + 1, OTHER_FN + 2, LAUNCH_FN + 0x30 };
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        slept_before(&r, 300, stack(&r, 300, pool_wait, 2), 5000000);
        slept_before(&r, 301, stack(&r, 301, parked, 3), 5000000);
        for (uint32_t k = 0; k < 2; k++) {
                translate_stack_worker(&r.tr, 300 + k, RT, k + 1, 1000, false);
                cpu_sample_at(&r, 300 + k, stack(&r, 300 + k, in_task, 3), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && l.park[0] == 0 && l.unpark[0] == 0 && l.park[1] == 1 && l.unpark[1] == 1,
           "asleep since before the attach: in the pool, no park of the worker it became (%d, %d); in its loop, "
           "its worker's park (%d, %d; workers '%s')", l.park[0], l.unpark[0], l.park[1], l.unpark[1], workers);
}

/* Poll uprobes with longpoll (all,longpoll): the polls name the workers
 * and BPF does not look for the Worker at stacks, which then say "none".
 * Read as "its loop ended", that took each worker's thread off its worker
 * (its samples the pool's), and its next long poll gave it a second id by
 * thread: mixed's two workers read 0,1,2,3. */
static void test_workers_from_polls_with_longpoll(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        enum { RT = 0x7f00aa00 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        r.tr.workers_from_polls = true;
        for (uint32_t k = 0; k < 2; k++) {
                struct d9_rec_task p = { .task_id = 7 + k, .cookie = C_TASK2, .worker = k + 1, .worker_rt = RT };

                p.hdr = (struct d9_rec_hdr){ .type = D9_REC_POLL_START, .tid = 101 + k, .tgid = 1, .ts = r.ts };
                translate_record(&r.tr, &p, sizeof(p));
        }
        for (uint32_t k = 0; k < 2; k++) {
                uint64_t since = r.ts;

                for (int i = 0; i < 6; i++) {   /* a running long poll of 6 ticks */
                        uint64_t id = stack(&r, 101 + k, in_task, 3);

                        translate_stack_worker(&r.tr, 101 + k, 0, 0, 0, false);
                        tick(&r, 101 + k, id, since);
                        cpu_sample_at(&r, 101 + k, id, r.ts);
                }
                offcpu(&r, 101 + k, stack(&r, 101 + k, in_task, 3), 2000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && l.long_on[0] == 1 && l.long_on[1] == 1 && l.samples[0] >= 6 &&
           l.samples[1] >= 6 && !l.samples[254],
           "polls name workers 0 and 1; their stacks' 'none' changes nothing: workers '%s', long polls %d/%d, "
           "samples %d/%d, %d as the pool's", workers, l.long_on[0], l.long_on[1], l.samples[0], l.samples[1],
           l.samples[254]);
}

/* The periodic flush goes by trace time: a worker preempted for 50 ms in
 * the middle of a long poll (other threads' records go on), with flushes
 * between, still gives one long poll; only a second of trace time with no
 * tick on it writes an open run. (It went by the wall clock: a drain
 * running late split every busy poll.) */
static void test_flush_by_trace_time(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;
        int before;

        run_start(&r);
        since = r.ts;
        for (int i = 0; i < 4; i++)
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        long_poll_flush(&r.tr, false);
        offcpu(&r, 102, stack(&r, 102, outside, 2), 50000000);  /* 101 preempted meanwhile */
        long_poll_flush(&r.tr, false);
        for (int i = 0; i < 4; i++)
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        before = (int)r.tr.long_polls;
        offcpu(&r, 102, stack(&r, 102, outside, 2), 1500000000);
        long_poll_flush(&r.tr, false);
        ok(before == 0 && r.tr.long_polls == 1, "flushes while the worker is preempted keep its run open; "
           "1.5 s of trace time without a tick write it (%d, then %llu)", before, (unsigned long long)r.tr.long_polls);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.ticks[0] == 8, "one long poll of 8 ticks across the preemption (%d, %llu)",
           l.long_running, (unsigned long long)l.ticks[0]);
}

/* A busy poll on a loaded machine: ticks count CPU time, so its wall time
 * is mostly preemptions. One whose stack shows the run's poll frame
 * extends the run to its switch-in; one in another frame ends it and is
 * that other poll's. */
static void test_preemptions_extend_runs(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t in_task2[] = { TASK2_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        for (int i = 0; i < 3; i++)     /* 1 ms from first to last tick */
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        preempt(&r, 101, stack(&r, 101, in_task, 3), 20000000);        /* 20 ms inside it */
        tick(&r, 101, stack(&r, 101, in_task, 3), since);
        preempt(&r, 101, stack(&r, 101, in_task2, 3), 20000000);       /* another frame */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.ticks[0] == 4 && l.min_ns[0] == 3 * PERIOD + 20000000,
           "a preemption inside the run's frame counts to its switch-in (%d, %llu ticks, %llu ns)",
           l.long_running, (unsigned long long)l.ticks[0], (unsigned long long)l.min_ns[0]);
        ok(l.long_preempted == 1 && l.min_ns[1] == 20000000 && !strcmp(l.label[1], "app::tick"),
           "one in another frame ends the run and is that poll's, preempted 20 ms (%d, %llu ns, '%s')",
           l.long_preempted, (unsigned long long)l.min_ns[1], l.label[1]);
        ok(l.waited_ns[0] == 20000000 && l.waited_ns[1] == 20000000,
           "each says how long it waited for a CPU inside it (%llu, %llu ns)", (unsigned long long)l.waited_ns[0],
           (unsigned long long)l.waited_ns[1]);
}

/* A run's waits for a CPU add up, and one that began before the run's
 * first tick counts from that tick (npm codex-acp: a "running" 306 ms
 * poll of 10 ticks had 11 runnable off-CPU samples in it, and read as if
 * its own work took all of it). A blocked poll waited for no CPU. */
static void test_runs_say_how_long_they_waited(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        for (int i = 0; i < 3; i++)
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        preempt(&r, 101, stack(&r, 101, in_task, 3), 3000000);
        tick(&r, 101, stack(&r, 101, in_task, 3), since);
        preempt(&r, 101, stack(&r, 101, in_task, 3), 4000000);
        tick(&r, 101, stack(&r, 101, in_task, 3), since);
        offcpu(&r, 101, stack(&r, 101, in_task, 3), 5000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.waited_ns[0] == 7000000 && l.long_blocked == 1 && l.waited_ns[1] == 0,
           "two preemptions in a run: waited %llu ns (want 7000000); the blocked poll after it %llu",
           (unsigned long long)l.waited_ns[0], (unsigned long long)l.waited_ns[1]);
}

/* A poll spinning on sched_yield (npm codex: its longest poll, 35 ms,
 * read "preempted", pointing at the machine): the same
 * run, said to be the thread's own yielding. */
static void test_yields_are_not_preemptions(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        yield(&r, 101, stack(&r, 101, in_task, 3), 12000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_yielded == 1 && l.long_preempted == 0 && l.min_ns[0] == 12000000,
           "a 12 ms sched_yield inside a poll is a yielded long poll, not a preempted one (%d yielded, %d "
           "preempted, %llu ns)", l.long_yielded, l.long_preempted, (unsigned long long)l.min_ns[0]);
}

/* A preemption goes on with a run only within the stretch BPF names (no
 * voluntary switch-out between, as the ticks' since_ts): a worker that
 * slept for microseconds between polls of one future type (npm grafbase's
 * 16 connections of one server type) read as one 45 ms poll over
 * preemptions far apart. */
static void test_preemptions_of_another_stretch(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        tick(&r, 101, stack(&r, 101, outside, 2), r.ts);       /* makes 101 a worker */
        since = r.ts;
        preempt_in(&r, 101, stack(&r, 101, in_task, 3), 2000000, since);
        r.ts += 10000000;               /* other polls, a short sleep: no record */
        since = r.ts;
        preempt_in(&r, 101, stack(&r, 101, in_task, 3), 3000000, since);
        tick(&r, 101, stack(&r, 101, in_task, 3), since);      /* same stretch: goes on */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_preempted == 2 && l.min_ns[0] == 2000000 && l.min_ns[1] == 3000000 + PERIOD &&
           l.ticks[1] == 1,
           "preemptions 10 ms apart in two stretches are two polls, 2 ms and 3.5 ms (%d: %llu, %llu ns; "
           "the second's tick %llu)", l.long_preempted, (unsigned long long)l.min_ns[0],
           (unsigned long long)l.min_ns[1], (unsigned long long)l.ticks[1]);
}

/* A short poll preempted for milliseconds (a loaded machine, a throttled
 * cgroup) gets at most one tick: the preemption alone shows how long it
 * held the worker. Intervals outside a poll frame are no poll. */
static void test_preempted_short_polls(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t in_task2[] = { TASK2_FN + 0x80, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        tick(&r, 101, stack(&r, 101, outside, 2), since);      /* makes 101 a worker */
        preempt(&r, 101, stack(&r, 101, in_task, 3), 8000000);  /* no tick in it: 8 ms */
        preempt(&r, 101, stack(&r, 101, in_task, 3), 4000000);  /* again in it: 12 ms in all */
        tick(&r, 101, stack(&r, 101, outside, 2), since);      /* back in the loop: ends it */
        tick(&r, 101, stack(&r, 101, in_task2, 3), since);     /* one tick, then preempted 5 ms */
        preempt(&r, 101, stack(&r, 101, in_task2, 3), 5000000);
        offcpu(&r, 101, stack(&r, 101, outside, 2), 3000000);  /* its park ends it */
        preempt(&r, 101, stack(&r, 101, outside, 2), 9000000); /* in the loop: no poll */
        tick(&r, 101, stack(&r, 101, in_task, 3), r.ts);       /* one tick alone: none */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_preempted == 2 && l.long_running == 0 && l.long_blocked == 0,
           "two preempted long polls, nothing else (%d preempted, %d running, %d blocked)", l.long_preempted,
           l.long_running, l.long_blocked);
        ok(l.min_ns[0] == 12000000 && l.ticks[0] == 0 && !strcmp(l.label[0], "app::serve") && l.worker[0] == 0 &&
           l.leaf[0] == TASK_FN + 0x40 && l.runnable[0],
           "first: app::serve on worker 0 held it 12 ms over two preemptions, no tick, its stack marked runnable "
           "(%llu ns, %llu ticks, '%s', w%llu, %s)", (unsigned long long)l.min_ns[0],
           (unsigned long long)l.ticks[0], l.label[0], (unsigned long long)l.worker[0],
           l.runnable[0] ? "marked" : "not marked");
        ok(l.min_ns[1] == 5000000 && l.ticks[1] == 1 && !strcmp(l.label[1], "app::tick") &&
           l.leaf[1] == TASK2_FN + 0x80,
           "second: app::tick from its one tick to switch-in, 5 ms, the tick's stack (%llu ns, %llu ticks, '%s')",
           (unsigned long long)l.min_ns[1], (unsigned long long)l.ticks[1], l.label[1]);
        ok(l.park[0] == 1, "the sleep outside a poll is still a park (%d)", l.park[0]);
}

/* A long poll of a boxed future's poll instance is not named after the box
 * (npm endform-proxy-network: 254 of 257 said Pin<Box<dyn Future>>): it
 * stays unlabelled, and its stack names the future. */
static void test_boxed_long_poll_unlabelled(void)
{
        const uint64_t in_boxed[] = { OTHER_FN + 0x50, BOXED_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        for (int i = 0; i < 4; i++)
                tick(&r, 101, stack(&r, 101, in_boxed, 4), since);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.ticks[0] == 4 && l.label[0][0] == 0,
           "a boxed future's long poll is unlabelled, not the box (%d polls, %llu ticks, '%s')", l.long_running,
           (unsigned long long)l.ticks[0], l.label[0]);
}

/* A boxed future's running long poll is named by what the box's poll
 * called (the plan's table), from its deepest tick: a first tick in the
 * box's own poll, before that call, names nothing (a CI run under load: 2
 * of 20 spins of one boxed future unlabelled, their stacks those of the
 * 18 labelled). */
static void test_boxed_run_named_by_its_deepest_tick(void)
{
        const uint64_t in_box[] = { BOXED_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t in_future[] = { OTHER_FN + 0x50, DYN_FN + 0x10, BOXED_FN + 0x48, OTHER_FN + 9,
                                       LAUNCH_FN + 0x20 };
        struct exe_map m;
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;
        int e;

        run_start(&r);
        e = exe_map_from_maps("00040000-00060000 r-xp 00040000 fd:01 7 /opt/app/t\n", "/opt/app/t", segments, 1,
                              &m);
        translate_set_exe_map(&r.tr, &m);
        r.tr.lp_fn_of = fn_of_0x100;
        since = r.ts;
        tick(&r, 101, stack(&r, 101, in_box, 3), since);
        for (int i = 0; i < 3; i++)
                tick(&r, 101, stack(&r, 101, in_future, 5), since);
        run_end(&r, &l, workers, sizeof(workers));
        ok(e == 0 && l.long_running == 1 && l.ticks[0] == 4 && !strcmp(l.label[0], "app::boxed_spin::{{closure}}"),
           "a boxed future's long poll whose first tick was in the box's own poll: named by its deeper ticks "
           "(%d polls, %llu ticks, '%s')", l.long_running, (unsigned long long)l.ticks[0], l.label[0]);
}

/* A stack whose task poll frame called into Tokio's own code around the
 * future (a harness site: yield_now after the future returned) is in no
 * poll: its preemption is no long poll (npm endform-proxy-network: 236 of
 * 257), and a tick there ends the running poll. The leaf frame at that
 * address is the poll function running its own code, maybe the future
 * inlined: still a poll. */
static void test_harness_calls_are_no_poll(void)
{
        const uint64_t in_yield[] = { OTHER_FN + 0x70, HARNESS_RET - 1, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t in_future[] = { OTHER_FN + 0x70, TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t leaf_there[] = { HARNESS_RET - 1, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t outside[] = { OTHER_FN + 3, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since;

        run_start(&r);
        since = r.ts;
        tick(&r, 101, stack(&r, 101, outside, 2), since);      /* makes 101 a worker */
        preempt(&r, 101, stack(&r, 101, in_yield, 4), 8000000);
        offcpu(&r, 101, stack(&r, 101, outside, 2), 2000000);
        since = r.ts;
        for (int i = 0; i < 3; i++)
                tick(&r, 101, stack(&r, 101, in_future, 4), since);
        tick(&r, 101, stack(&r, 101, in_yield, 4), since);     /* ends that run */
        tick(&r, 101, stack(&r, 101, in_future, 4), since);    /* one tick alone: none */
        offcpu(&r, 101, stack(&r, 101, outside, 2), 2000000);
        preempt(&r, 101, stack(&r, 101, in_future, 4), 6000000);
        offcpu(&r, 101, stack(&r, 101, outside, 2), 2000000);
        preempt(&r, 101, stack(&r, 101, leaf_there, 3), 7000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_running == 1 && l.ticks[0] == 3 && l.min_ns[0] == 2 * PERIOD,
           "the run of 3 ticks in the future ends at the tick in yield_now (%d running, %llu ticks, %llu ns)",
           l.long_running, (unsigned long long)l.ticks[0], (unsigned long long)l.min_ns[0]);
        ok(l.long_preempted == 2 && l.min_ns[1] == 6000000 && l.min_ns[2] == 7000000,
           "preempted in the future (6 ms) and at the leaf (7 ms) are long polls, in yield_now (8 ms) none "
           "(%d preempted: %llu, %llu ns)", l.long_preempted, (unsigned long long)l.min_ns[1],
           (unsigned long long)l.min_ns[2]);
        ok(l.park[0] == 3, "the worker's sleeps outside a poll are parks (%d)", l.park[0]);
}

/* A stack record of a thread new to translate, the one that fills its
 * thread table to the point of growing: the worker lookup inside it must
 * not move the table under the thread translate_record holds (npm
 * nushell: d9d crashed in every default-set recording once its
 * short-lived threads passed 2,048). The stack lands in the thread, and
 * the sample that names it gets its frames. */
static void test_stack_of_the_thread_that_fills_the_table(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        union {
                struct translate_held_stack h;
                uint8_t bytes[sizeof(struct translate_held_stack) + 3 * sizeof(uint64_t)];
        } held = { 0 };
        struct log l;
        struct run r;
        char workers[64];

        run_start(&r);
        for (uint32_t tid = 1000; tid < 1127; tid++)      /* 127 of the first table's 256 */
                tick(&r, tid, 0, r.ts);
        held.h.hdr = (struct d9_rec_hdr){ .type = TRANSLATE_REC_HELD_STACK, .tid = 2000, .tgid = 1, .ts = r.ts };
        held.h.stack_id = 77;
        held.h.n = 3;
        memcpy(held.h.frames, in_task, sizeof(in_task));
        translate_record(&r.tr, &held, translate_held_stack_size(&held.h));
        cpu_sample_at(&r, 2000, 77, r.ts + 1000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.sample_leaf == TASK_FN + 0x40,
           "the 128th thread's stack is its sample's, the table grown around it (leaf 0x%llx)",
           (unsigned long long)l.sample_leaf);
}

/* --full-on-stall: a run past the threshold counts as a stall while it
 * still runs, so a poll that never ends opens a window; counted once, not
 * again at its end; a shorter run none. */
static void test_stall_counted_while_running(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        struct log l;
        struct run r;
        char workers[64];
        uint64_t since, during, after, short_run;

        run_start(&r);
        r.tr.stall_ns = 10 * 1000000ull;
        since = r.ts;
        for (int i = 0; i < 10; i++)    /* 4.5 ms */
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        short_run = r.tr.stalls;
        for (int i = 0; i < 30; i++)    /* 19.5 ms from the first tick */
                tick(&r, 101, stack(&r, 101, in_task, 3), since);
        during = r.tr.stalls;
        long_poll_flush(&r.tr, true);
        after = r.tr.stalls;
        run_end(&r, &l, workers, sizeof(workers));
        ok(short_run == 0 && during == 1 && after == 1 && l.long_running == 1,
           "a run past the stall threshold counts while running (%llu at 4.5 ms, %llu at 19.5 ms), once (%llu "
           "after its end; %d long poll)", (unsigned long long)short_run, (unsigned long long)during,
           (unsigned long long)after, l.long_running);
}

/* The full set (poll uprobes, no run ticks): a thread sampled inside a
 * task poll frame with no poll start, end or park of its own since the
 * uprobes went live has been in that poll since before: one D9LongPollEvent
 * "at attach" from the uprobes' start to its last such sample, written at
 * its first own record or at the end; not for a thread whose poll began
 * after (its start came first), nor from samples before the uprobes, nor
 * under 1 ms. */
static void test_poll_running_at_attach(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t ms = 1000000;
        struct log l;
        struct run r;
        char workers[64];
        uint64_t t0;

        run_begin(&r, true);
        t0 = r.ts + 100 * ms;
        cpu_sample_at(&r, 103, stack(&r, 103, in_task, 3), t0 - 50 * ms);    /* before the uprobes */
        translate_uprobes_from(&r.tr, t0);
        for (int i = 1; i <= 3; i++)                                            /* stuck since before t0 */
                cpu_sample_at(&r, 101, stack(&r, 101, in_task, 3), t0 + i * 10 * ms);
        poll_start_at(&r, 102, t0 + 5 * ms);                                    /* a poll begun after t0 */
        cpu_sample_at(&r, 102, stack(&r, 102, in_task, 3), t0 + 15 * ms);
        cpu_sample_at(&r, 105, stack(&r, 105, in_task, 3), t0 + ms / 2);       /* 0.5 ms: not written */
        poll_start_at(&r, 101, t0 + 40 * ms);                                   /* its poll ended */
        cpu_sample_at(&r, 101, stack(&r, 101, in_task, 3), t0 + 50 * ms);      /* in the new one: nothing */
        for (int i = 1; i <= 2; i++)                                            /* still stuck at the end */
                cpu_sample_at(&r, 104, stack(&r, 104, in_task, 3), t0 + i * 10 * ms);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.long_at_attach == 2 && l.min_ns[0] == 30 * ms && l.ticks[0] == 3 && l.worker[0] < 255 &&
           !strcmp(l.label[0], "app::serve") && l.min_ns[1] == 20 * ms && l.ticks[1] == 2 && l.worker[1] == 255,
           "two polls running at the attach: %d 'at attach' (%llu ms in %llu samples, on the worker its next poll "
           "named, %llu, '%s'; %llu ms in %llu, still running at the end, worker %llu: not known)", l.long_at_attach,
           (unsigned long long)(l.min_ns[0] / ms), (unsigned long long)l.ticks[0], (unsigned long long)l.worker[0],
           l.label[0], (unsigned long long)(l.min_ns[1] / ms), (unsigned long long)l.ticks[1],
           (unsigned long long)l.worker[1]);
}

/* Full set: a spawn_blocking job running since before the attach has no
 * poll start to say its thread is the pool's; its stack does once a
 * worker's stack has shown which blocking poll is the launch (npm
 * sideseat: 416 of 416 of such a job's samples read 255). Before that, and
 * for a thread idle in the launch, 255; a poll start of its own decides
 * from then on. */
static void test_full_set_job_since_before_attach(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20 };
        const uint64_t job[] = { OTHER_FN + 1, JOB_FN + 0x10 };
        const uint64_t in_launch[] = { OTHER_FN + 1, LAUNCH_FN + 0x30 };
        struct log l;
        struct run r;
        char workers[64];

        run_begin(&r, true);
        translate_uprobes_from(&r.tr, r.ts);
        cpu_sample_at(&r, 300, stack(&r, 300, job, 2), r.ts += 1000000);       /* no launch known: 255 */
        cpu_sample_at(&r, 101, stack(&r, 101, in_task, 3), r.ts += 1000000);   /* a worker's: the launch */
        for (int i = 0; i < 3; i++) {
                cpu_sample_at(&r, 300, stack(&r, 300, job, 2), r.ts += 1000000);
                cpu_sample_at(&r, 301, stack(&r, 301, in_launch, 2), r.ts += 1000000);
        }
        poll_start_at(&r, 300, r.ts += 1000000);                                /* a task poll of its own */
        cpu_sample_at(&r, 300, stack(&r, 300, in_task, 3), r.ts += 1000000);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.samples[254] == 3 && l.samples[255] == 5,
           "a job since before the attach: the pool's once the launch is known (254: %d of 3); before it, and a "
           "thread idle in the launch, on none (255: %d of 5)", l.samples[254], l.samples[255]);
}

/* Full set: a pool thread waiting in the pool's loop for its first job of
 * the recording has no poll start to say it is the pool's; its stack does,
 * as in the default set, once the loop (the function calling blocking-pool
 * polls) is learnt and a worker's stack has shown its launch under a task
 * poll. Before that, and a thread outside the loop, 255; a worker named by
 * its polls keeps its id. */
static void test_full_set_idle_pool_thread(void)
{
        const uint64_t in_task[] = { TASK_FN + 0x40, OTHER_FN + 9, LAUNCH_FN + 0x20, POOL_FN + 0x31, START_FN + 5 };
        const uint64_t pool_wait[] = { OTHER_FN + 3, POOL_FN + 0x48, START_FN + 5 };
        const uint64_t block_on[] = { OTHER_FN + 3, OTHER_FN + 0x210, START_FN + 7 };
        struct log l;
        struct run r;
        char workers[64];

        run_begin(&r, true);
        r.tr.lp_fn_of = fn_of_0x100;
        translate_uprobes_from(&r.tr, r.ts);
        cpu_sample_at(&r, 300, stack(&r, 300, pool_wait, 3), r.ts += 1000000);    /* nothing learnt: 255 */
        poll_start_at(&r, 101, r.ts += 1000000);
        cpu_sample_at(&r, 101, stack(&r, 101, in_task, 5), r.ts += 1000000);      /* a worker's: loop, launch */
        for (int i = 0; i < 3; i++) {
                cpu_sample_at(&r, 300, stack(&r, 300, pool_wait, 3), r.ts += 1000000);
                cpu_sample_at(&r, 301, stack(&r, 301, block_on, 3), r.ts += 1000000);
                cpu_sample_at(&r, 101, stack(&r, 101, pool_wait, 3), r.ts += 1000000);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.samples[254] == 3 && l.samples[255] == 4 && !strcmp(workers, "0"),
           "full set, idle in the pool's loop: the pool's once a worker's stack taught the loop and its launch "
           "(254: %d of 3); before that, and outside the loop, none (255: %d of 4); the worker keeps its id "
           "('%s')", l.samples[254], l.samples[255], workers);
}

int main(void)
{
        plan_init();
        test_workers_and_parks_from_stacks();
        test_cut_sleep_in_poll_by_its_site();
        test_long_polls_from_ticks();
        test_long_poll_stack_is_its_deepest_tick();
        test_block_in_place_workers_from_the_stack();
        test_no_thread_id_while_bpf_searches();
        test_no_thread_id_under_a_named_workers_launch();
        test_workers_from_polls_with_longpoll();
        test_job_thread_samples_are_the_pools();
        test_job_before_bpf_answers();
        test_job_that_launched_a_loop_is_no_pool();
        test_idle_pool_thread_is_the_pools();
        test_pool_sleep_before_attach_is_no_park();
        test_full_set_job_since_before_attach();
        test_full_set_idle_pool_thread();
        test_flush_by_trace_time();
        test_preemptions_of_another_stretch();
        test_preemptions_extend_runs();
        test_runs_say_how_long_they_waited();
        test_yields_are_not_preemptions();
        test_preempted_short_polls();
        test_stall_counted_while_running();
        test_poll_running_at_attach();
        test_boxed_long_poll_unlabelled();
        test_boxed_run_named_by_its_deepest_tick();
        test_harness_calls_are_no_poll();
        test_stack_of_the_thread_that_fills_the_table();
        return tap_done();
}
