/* translate's identity rules (daemon/record/translate.c, docs/probe-plan.md "Worker
 * identity"), each fed a synthetic d9_rec_* stream and checked on the
 * decoded dial9 events: which lane every poll, park and unpark lands on,
 * and what runtime.<name> lists. The orders are the ones that broke on
 * production binaries: attach mid-run (polls before any park), records of
 * several threads interleaved, blocking-pool threads coming and going,
 * a worker whose core first shows up under another thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/sysmacros.h>
#include <string.h>

#include "bpf/d9_events.h"
#include "proto/d9proto.h"
#include "daemon/record/translate.h"
#include "daemon/symbolize/stack_marks.h"
#include "uprobes/uprobes.h"
#include "../tap.h"

/* Cookies of the fake plan. */
enum { C_TASK, C_TASK2, C_BLOCKING, C_LAUNCH, C_PARK, C_CT_PARK, C_BOXED, N_POINTS };

#define BOXED_LABEL "core::pin::Pin<alloc::boxed::Box<dyn core::future::future::Future+Output = ()+core::marker::Send>>"

/* The executable's PT_LOADs and what its boxed futures' polls are named,
 * as the 1.43 release target's plan has them. */
static struct probe_segment segments[] = {
        { 0, 0, 0x45c48, false }, { 0x46c50, 0x45c50, 0xbb520, true }, { 0x103170, 0x101170, 0x7908, false },
};
static char fn_text[] = "<app::Conn as core::future::future::Future>::poll\0"
                        "d9_target::mixed::boxed_batch::{{closure}}";
static struct probe_fn_name fns[] = { { 0x85dd0, 50 }, { 0x86020, 0 } };

static struct probe_point points[N_POINTS];
static struct probe_plan plan = { .points = points, .n_points = N_POINTS, .segments = segments, .n_segments = 3,
                                  .dyn_fns = fns, .n_dyn_fns = 2, .dyn_fn_text = fn_text,
                                  .dyn_fn_text_len = sizeof(fn_text) };

static void plan_init(void)
{
        points[C_TASK] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_TASK, .label = (char *)"app::serve" };
        points[C_TASK2] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_TASK2, .label = (char *)"0x41ec0" };
        /* Stripped: the label says nothing, the flag (vtable shape) does. */
        points[C_BLOCKING] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_BLOCKING,
                                                   .label = (char *)"0x6b050", .blocking_task = true };
        points[C_LAUNCH] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_LAUNCH,
                                                 .label = (char *)"0x6b4d0", .blocking_task = true };
        points[C_PARK] = (struct probe_point){ .kind = PROBE_PARK, .cookie = C_PARK, .label = (char *)"park" };
        points[C_CT_PARK] = (struct probe_point){ .kind = PROBE_PARK, .cookie = C_CT_PARK,
                                                  .label = (char *)"tokio::runtime::scheduler::current_thread::Context::park" };
        points[C_BOXED] = (struct probe_point){ .kind = PROBE_POLL, .cookie = C_BOXED, .label = (char *)BOXED_LABEL,
                                                .boxed_dyn = true, .dyn_vtable_hdr_off = 48 };
}

struct lane_log {
        int poll_start[256], poll_end[256], park[256], unpark[256], samples[256];
        int spawns, spawns_instrumented;
        int blocking_polls;             /* D9BlockingPollEvent */
        uint64_t blocking_ns;           /* their summed duration */
        /* Park/unpark order per lane: 'p' / 'u', for the alternation check. */
        char order[256][64];
        /* Summed cpu_time_ns of parks and unparks, sched_wait_ns of unparks. */
        uint64_t park_cpu[256], unpark_cpu[256], unpark_wait[256];
        /* Polls started on a lane whose previous poll had not ended. */
        bool open[256];
        int overlaps;
        /* Each lane's closed polls (start, end, task), and how many pairs of
         * one task's polls overlap in time (two lanes at once). */
        uint64_t open_ts[256], open_task[256];
        struct lane_poll { uint64_t start, end, task; } polls[64];
        int n_polls, task_overlaps;
        char names[4][17];              /* thread_name of the first samples */
        int n_names;
        char labels[16][160];           /* spawn_loc of the first poll starts */
        int n_labels;
        char spawn_labels[4][160];      /* spawn_loc of the first spawns */
        int n_spawn_labels;
        uint64_t poll_ends_lost;        /* D9LostEventsEvent source "poll_end" */
        char windows[64];               /* D9WakeWindowEvent attached, '1' or '0' each */
        uint32_t chain_len[8];          /* the first CPU samples' callchains: length, */
        uint64_t chain_leaf[8], chain_outer[8]; /* leaf and outermost frame */
        int n_chains;
};

static uint64_t field_u(const struct d9_dec_event *ev, const char *name)
{
        for (uint16_t i = 0; i < ev->schema->nfields; i++)
                if (!strcmp(ev->schema->fields[i].name, name))
                        return ev->values[i].type == D9_T_BOOL ? ev->values[i].b : ev->values[i].u;
        return UINT64_MAX;
}

static void order_push(char *s, char c)
{
        size_t n = strlen(s);

        if (n + 1 < 64) {
                s[n] = c;
                s[n + 1] = 0;
        }
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct lane_log *l = ctx;
        const char *n = ev->schema->name;
        uint64_t w = field_u(ev, "worker_id");

        if (!strcmp(n, "D9BlockingPollEvent")) {
                l->blocking_polls++;
                l->blocking_ns += field_u(ev, "duration_ns");
                return 0;
        }
        if (!strcmp(n, "D9WakeWindowEvent")) {
                order_push(l->windows, field_u(ev, "attached") ? '1' : '0');
                return 0;
        }
        if (!strcmp(n, "D9LostEventsEvent")) {
                for (uint16_t i = 0; i < ev->schema->nfields; i++)
                        if (!strcmp(ev->schema->fields[i].name, "source") && ev->values[i].resolved &&
                            ev->values[i].str.len == 8 && !memcmp(ev->values[i].str.p, "poll_end", 8))
                                l->poll_ends_lost += field_u(ev, "lost");
                return 0;
        }
        if (!strcmp(n, "TaskSpawnEvent")) {
                l->spawns++;
                l->spawns_instrumented += field_u(ev, "instrumented") == 1;
                for (uint16_t i = 0; i < ev->schema->nfields && l->n_spawn_labels < 4; i++)
                        if (!strcmp(ev->schema->fields[i].name, "spawn_loc") && ev->values[i].resolved)
                                snprintf(l->spawn_labels[l->n_spawn_labels++], sizeof(l->spawn_labels[0]),
                                         "%.*s", (int)ev->values[i].str.len, ev->values[i].str.p);
                return 0;
        }
        if (w > 255)
                return 0;
        if (!strcmp(n, "PollStartEvent")) {
                l->poll_start[w]++, l->overlaps += l->open[w], l->open[w] = true;
                l->open_ts[w] = ev->ts;
                l->open_task[w] = field_u(ev, "task_id");
                for (uint16_t i = 0; i < ev->schema->nfields && l->n_labels < 16; i++)
                        if (!strcmp(ev->schema->fields[i].name, "spawn_loc") && ev->values[i].resolved)
                                snprintf(l->labels[l->n_labels++], sizeof(l->labels[0]), "%.*s",
                                         (int)ev->values[i].str.len, ev->values[i].str.p);
        }
        else if (!strcmp(n, "PollEndEvent")) {
                l->poll_end[w]++, l->open[w] = false;
                for (int i = 0; i < l->n_polls; i++)
                        l->task_overlaps += l->polls[i].task == l->open_task[w] &&
                                            l->polls[i].start < ev->ts && l->open_ts[w] < l->polls[i].end;
                if (l->n_polls < 64)
                        l->polls[l->n_polls++] = (struct lane_poll){ l->open_ts[w], ev->ts, l->open_task[w] };
        }
        else if (!strcmp(n, "WorkerParkEvent"))
                l->park[w]++, order_push(l->order[w], 'p'), l->park_cpu[w] += field_u(ev, "cpu_time_ns");
        else if (!strcmp(n, "WorkerUnparkEvent"))
                l->unpark[w]++, order_push(l->order[w], 'u'), l->unpark_cpu[w] += field_u(ev, "cpu_time_ns"),
                        l->unpark_wait[w] += field_u(ev, "sched_wait_ns");
        else if (!strcmp(n, "CpuSampleEvent")) {
                l->samples[w]++;
                for (uint16_t i = 0; i < ev->schema->nfields && l->n_chains < 8; i++)
                        if (!strcmp(ev->schema->fields[i].name, "callchain")) {
                                const struct d9_value *c = &ev->values[i];

                                l->chain_len[l->n_chains] = c->stack.n;
                                l->chain_leaf[l->n_chains] = c->stack.n ? d9_value_stack_addr(c, 0) : 0;
                                l->chain_outer[l->n_chains++] =
                                        c->stack.n ? d9_value_stack_addr(c, c->stack.n - 1) : 0;
                        }
                for (uint16_t i = 0; i < ev->schema->nfields && l->n_names < 4; i++)
                        if (!strcmp(ev->schema->fields[i].name, "thread_name") && ev->values[i].present) {
                                uint32_t len = ev->values[i].str.len < 16 ? ev->values[i].str.len : 16;

                                memcpy(l->names[l->n_names], ev->values[i].str.p, len);
                                l->names[l->n_names++][len] = 0;
                        }
        }
        return 0;
}

struct run {
        struct translate tr;
        struct d9_enc *enc;
        uint8_t *buf;
        size_t cap;
        uint64_t ts;
};

static void run_start(struct run *r, bool wake_probes, bool park_probes)
{
        memset(r, 0, sizeof(*r));
        r->cap = 1 << 22;
        r->buf = malloc(r->cap);
        d9_enc_new(&r->enc);
        d9_enc_set_output(r->enc, r->buf, r->cap, NULL, NULL);
        translate_init(&r->tr, 1, &plan, wake_probes, park_probes);
        translate_set_encoder(&r->tr, r->enc);
        r->ts = 1000000;
}

/* The full set's entry-only poll end: a thread's next poll start ends its
 * open poll (no POLL_END record). */
static void run_start_entry_only(struct run *r)
{
        run_start(r, true, true);
        r->tr.end_at_next_poll = true;
}

static void hdr(struct d9_rec_hdr *h, struct run *r, uint16_t type, uint32_t tid)
{
        *h = (struct d9_rec_hdr){ .type = type, .tid = tid, .tgid = 1, .ts = r->ts += 1000 };
}

static void poll_rt(struct run *r, uint32_t tid, uint64_t cookie, uint64_t task, uint64_t sched)
{
        struct d9_rec_task t = { .task_id = task, .cookie = cookie, .sched = sched };

        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        translate_record(&r->tr, &t, sizeof(t));
        hdr(&t.hdr, r, D9_REC_POLL_END, tid);
        translate_record(&r->tr, &t, sizeof(t));
}

static void poll(struct run *r, uint32_t tid, uint64_t cookie, uint64_t task, bool end)
{
        struct d9_rec_task t = { .task_id = task, .cookie = cookie };

        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        translate_record(&r->tr, &t, sizeof(t));
        if (end) {
                hdr(&t.hdr, r, D9_REC_POLL_END, tid);
                translate_record(&r->tr, &t, sizeof(t));
        }
}

static void poll_boxed(struct run *r, uint32_t tid, uint64_t task, uint64_t future_poll)
{
        struct d9_rec_task t = { .task_id = task, .cookie = C_BOXED, .future_poll = future_poll };

        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        translate_record(&r->tr, &t, sizeof(t));
        hdr(&t.hdr, r, D9_REC_POLL_END, tid);
        translate_record(&r->tr, &t, sizeof(t));
}

static void park_at(struct run *r, uint32_t tid, uint64_t key, uint64_t cookie)
{
        struct d9_rec_park p = { .park_key = key, .cookie = cookie };

        hdr(&p.hdr, r, D9_REC_PARK, tid);
        translate_record(&r->tr, &p, sizeof(p));
        hdr(&p.hdr, r, D9_REC_UNPARK, tid);
        translate_record(&r->tr, &p, sizeof(p));
}

static void park(struct run *r, uint32_t tid, uint64_t key)
{
        park_at(r, tid, key, C_PARK);
}

static void offcpu_sched(struct run *r, uint32_t tid, uint32_t prev_state, uint64_t cpu_ns, uint64_t wait_ns)
{
        struct d9_rec_offcpu o = { .prev_state = prev_state, .cpu_ns = cpu_ns, .sched_wait_ns = wait_ns };

        o.off_ts = r->ts + 1;
        hdr(&o.hdr, r, D9_REC_OFFCPU, tid);
        translate_record(&r->tr, &o, sizeof(o));
}

static void offcpu(struct run *r, uint32_t tid, uint32_t prev_state)
{
        offcpu_sched(r, tid, prev_state, 0, 0);
}

static void sample(struct run *r, uint32_t tid)
{
        struct d9_rec_sample smp = { .ip = 0x1234 };

        hdr(&smp.hdr, r, D9_REC_CPU_SAMPLE, tid);
        translate_record(&r->tr, &smp, sizeof(smp));
}

static void sample_named(struct run *r, uint32_t tid, const char *comm)
{
        struct d9_rec_sample smp = { .ip = 0x1234 };

        strncpy(smp.comm, comm, sizeof(smp.comm) - 1);
        hdr(&smp.hdr, r, D9_REC_CPU_SAMPLE, tid);
        translate_record(&r->tr, &smp, sizeof(smp));
}

static void run_end(struct run *r, struct lane_log *l, char *workers, size_t len)
{
        struct d9_dec_opts opts = { .strict = true, .on_event = on_event, .ctx = l };
        struct d9_dec_result res;
        const uint8_t *out;
        size_t n;

        memset(l, 0, sizeof(*l));
        translate_worker_list(&r->tr, workers, len);
        out = d9_enc_output(r->enc, &n);
        if (d9_decode(out, n, &opts, &res) < 0)
                printf("# decode failed: %s\n", res.error);
        translate_destroy(&r->tr);
        d9_enc_free(r->enc);
        free(r->buf);
}

static int polls_off(const struct lane_log *l, int from)
{
        int n = 0;

        for (int w = from; w < 254; w++)
                n += l->poll_start[w];
        return n;
}

/* Stripped build, no park probes: blocking threads (spawn_blocking jobs,
 * one thread per job, coming and going) interleaved with two workers'
 * polls. Workers are the threads that poll runtime tasks; blocking jobs
 * are D9BlockingPollEvents (no "Worker 254" lane) and mint no worker. */
static void test_blocking_pool_never_workers(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        for (int round = 0; round < 50; round++) {
                poll(&r, 101, C_TASK, 1 + round, true);
                poll(&r, 200 + round, C_BLOCKING, 1000 + round, false); /* a job starts... */
                poll(&r, 102, C_TASK2, 2 + round, true);
                sample(&r, 200 + round);
                if (round % 3 == 0) {
                        struct d9_rec_task end = { .task_id = 1000 + round, .cookie = C_BLOCKING };
                        hdr(&end.hdr, &r, D9_REC_POLL_END, 200 + round); /* ... and ends, interleaved */
                        translate_record(&r.tr, &end, sizeof(end));
                }
        }
        sample(&r, 101);
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "stripped, 50 blocking threads: runtime.main is the 2 workers ('%s')", workers);
        ok(l.poll_start[254] == 0 && l.poll_end[254] == 0 && polls_off(&l, 2) == 0,
           "no spawn_blocking job is a poll on a worker lane, 254 included (%d on 254, %d on minted ids)",
           l.poll_start[254], polls_off(&l, 2));
        ok(l.poll_start[0] == 50 && l.poll_start[1] == 50 && l.poll_end[0] == 50 && l.poll_end[1] == 50,
           "runtime-task polls on workers 0 and 1 (%d, %d), each ended", l.poll_start[0], l.poll_start[1]);
        ok(l.blocking_polls == 17 && l.blocking_ns == 17 * 4000 /* 4 records of 1 us each in between */,
           "each ended job is one D9BlockingPollEvent with its duration (%d of 17, %llu ns)", l.blocking_polls,
           (unsigned long long)l.blocking_ns);
        ok(l.samples[254] == 50 && l.samples[0] == 1, "samples of blocking threads on 254 (%d), of a worker on it (%d)",
           l.samples[254], l.samples[0]);
        ok(l.spawns_instrumented == 0 && l.spawns > 0,
           "no wake probe attached: no TaskSpawnEvent says instrumented (%d of %d)", l.spawns_instrumented, l.spawns);
}

/* A worker thread's own launch (a blocking-pool task enclosing all of its
 * polls, traced from exec with uretprobes: its end never comes) is not
 * what makes it a worker, and its open poll is closed at the next one. */
static void test_launch_poll_does_not_decide(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, false);
        poll(&r, 101, C_LAUNCH, 900, false);
        poll(&r, 102, C_LAUNCH, 901, false);
        poll(&r, 301, C_BLOCKING, 902, true); /* a blocking-only thread */
        for (int i = 0; i < 10; i++) {
                poll(&r, 101, C_TASK, 1, true);
                poll(&r, 102, C_TASK, 2, true);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "launch polls then task polls: runtime.main '0,1' ('%s')", workers);
        ok(l.poll_start[254] == 0 && l.blocking_polls == 1 && l.poll_start[0] == 10 && l.poll_end[0] == 10 &&
           l.poll_start[1] == 10 && l.poll_end[1] == 10,
           "launch polls (never ended) write nothing, the ended blocking poll one event (%d), task polls "
           "balanced (%d/%d, %d/%d)", l.blocking_polls, l.poll_start[0], l.poll_end[0], l.poll_start[1], l.poll_end[1]);
        ok(l.spawns_instrumented == l.spawns && l.spawns > 0, "wake probes attached: spawns say instrumented (%d of %d)",
           l.spawns_instrumented, l.spawns);
}

/* Attach mid-run with park probes: both workers poll before their first
 * park, their records interleaved; then a third thread runs worker 0's
 * core (block_in_place) and polls before it parks with that core's key. */
static void test_park_keys_mid_run(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, true);
        poll(&r, 101, C_TASK, 1, true);
        poll(&r, 102, C_TASK, 2, true);
        poll(&r, 101, C_TASK, 3, true);
        park(&r, 102, 0xB000);
        park(&r, 101, 0xA000);
        poll(&r, 102, C_TASK, 4, true);
        /* Core A moves to thread 103; 101 runs blocking code inline. */
        poll(&r, 103, C_TASK, 5, true);
        park(&r, 103, 0xA000);
        poll(&r, 103, C_TASK, 6, true);
        park(&r, 103, 0xA000);
        /* A park whose key BPF could not read names no core. */
        park(&r, 104, 0);
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "mid-run, interleaved, core moved to a new thread: runtime.main '0,1' ('%s')",
           workers);
        ok(l.park[0] == 3 && l.park[1] == 1 && l.park[255] == 0 && l.park[2] == 0,
           "parks by core: worker 0 x3, worker 1 x1 (%d, %d), none elsewhere", l.park[0], l.park[1]);
        ok(!strcmp(l.order[0], "pupupu") && !strcmp(l.order[1], "pu"), "park/unpark alternate ('%s', '%s')",
           l.order[0], l.order[1]);
}

/* The id a thread held until its first park is reused by the next core,
 * so the ids stay dense. */
static void test_given_back_id_is_reused(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, true);
        poll(&r, 101, C_TASK, 1, true); /* 0: provisional for 101 */
        park(&r, 101, 0xA000);          /* 0 = core A */
        poll(&r, 103, C_TASK, 2, true); /* 1: provisional for 103 */
        park(&r, 103, 0xA000);          /* core A again: 1 given back */
        park(&r, 102, 0xB000);          /* new core B takes 1 again */
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "a given-back id is reused by the next core: '%s'", workers);
        ok(l.park[1] == 1 && l.park[0] == 2 && l.park[2] == 0, "core B parks on 1 (%d), core A on 0 (%d)", l.park[1],
           l.park[0]);
}

/* No park probes (stripped): a worker's voluntary sleep outside a poll is
 * a park and an unpark; preemption, sleep inside a poll, and blocking-pool
 * threads are not. */
static void test_parks_from_sched_switch(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        poll(&r, 101, C_TASK, 1, true);
        offcpu(&r, 101, 1);     /* idle: park */
        offcpu(&r, 101, 0);     /* preempted: not a park */
        poll(&r, 101, C_TASK, 2, false);
        offcpu(&r, 101, 1);     /* std::thread::sleep inside a poll: not a park */
        struct d9_rec_task end = { .task_id = 2, .cookie = C_TASK };
        hdr(&end.hdr, &r, D9_REC_POLL_END, 101);
        translate_record(&r.tr, &end, sizeof(end));
        offcpu(&r, 101, 1);     /* idle again: park */
        poll(&r, 201, C_BLOCKING, 3, true);
        offcpu(&r, 201, 1);     /* blocking thread idle: no worker park */
        offcpu(&r, 999, 1);     /* a thread never seen polling */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 2 && l.unpark[0] == 2 && !strcmp(l.order[0], "pupu"),
           "worker 0: 2 parks from idle switch-outs, alternating ('%s')", l.order[0]);
        ok(l.park[254] == 0 && l.park[255] == 0, "no park for blocking or unknown threads (%d, %d)", l.park[254],
           l.park[255]);
        ok(!strcmp(workers, "0"), "one worker ('%s')", workers);
}

/* Without park probes a worker parks only where Tokio parks one: its
 * sleeps outside a poll in a futex or epoll wait are parks; one in another
 * system call (a brk in free(), a sleep in a thread hook) or in none (a
 * page fault) is not; one whose call is not known (0) is, as before. */
static void test_sched_parks_only_in_park_calls(void)
{
        static const uint32_t calls[] = { 202 + 1, 232 + 1, 12 + 1, 230 + 1, D9_OFFCPU_NO_SYSCALL, 0, 281 + 1 };
        uint64_t not_parks;
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        poll(&r, 101, C_TASK, 1, true);
        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
                struct d9_rec_offcpu o = { .prev_state = 1, .syscall = calls[i] };

                o.off_ts = r.ts + 1;
                hdr(&o.hdr, &r, D9_REC_OFFCPU, 101);
                translate_record(&r.tr, &o, sizeof(o));
        }
        not_parks = r.tr.sleeps_not_parks;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 4 && l.unpark[0] == 4 && not_parks == 3,
           "futex, epoll_wait, epoll_pwait and an unknown call park; brk, clock_nanosleep and no call do not: "
           "%d parks, %d unparks, %llu sleeps not parks",
           l.park[0], l.unpark[0], (unsigned long long)not_parks);
}

/* A sleep inside a poll whose OFFCPU record comes after that poll's end
 * (BPF writes it at the thread's return to user space, by task work that
 * can run after the poll-end uprobe): the poll blocked, no park. */
static void test_sleep_record_after_its_poll_end(void)
{
        struct d9_rec_task t = { .task_id = 5, .cookie = C_TASK };
        struct d9_rec_offcpu o = { .prev_state = 1 };
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        hdr(&t.hdr, &r, D9_REC_POLL_START, 101);
        translate_record(&r.tr, &t, sizeof(t));
        o.off_ts = r.ts + 100;
        hdr(&t.hdr, &r, D9_REC_POLL_END, 101);
        translate_record(&r.tr, &t, sizeof(t));
        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = 101, .tgid = 1, .ts = r.ts - 100 };
        translate_record(&r.tr, &o, sizeof(o));
        offcpu(&r, 101, 1);     /* idle after it: a park */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 1 && l.unpark[0] == 1,
           "a sleep inside a poll, its record after the poll's end, is no park: %d parks for 1 idle sleep",
           l.park[0]);
}

/* Parks from sched_switch carry what the scheduler says: the thread's CPU
 * time at switch-out on both events, the wakeup-to-switch-in wait on the
 * unpark (BPF measures both; see d9_sched.bpf.c). */
static void test_sched_parks_carry_cpu_and_wait(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        poll(&r, 101, C_TASK, 1, true);
        offcpu_sched(&r, 101, 1, 5000000, 30000);
        poll(&r, 101, C_TASK, 1, true);
        offcpu_sched(&r, 101, 1, 7000000, 40000);
        offcpu_sched(&r, 101, 0, 9000000, 0);   /* preempted: no park, its numbers nowhere */
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 2 && l.park_cpu[0] == 12000000 && l.unpark_cpu[0] == 12000000,
           "sched parks: cpu_time_ns of parks %llu, of unparks %llu (want 12000000 each)",
           (unsigned long long)l.park_cpu[0], (unsigned long long)l.unpark_cpu[0]);
        ok(l.unpark[0] == 2 && l.unpark_wait[0] == 70000, "sched unparks: sched_wait_ns %llu (want 70000)",
           (unsigned long long)l.unpark_wait[0]);
}

/* A worker asleep since before the recording, woken before the trace's
 * first segment opened and on CPU only after it: its park starts with the
 * trace, and its unpark's wait is the part the trace spans, not BPF's
 * whole wait (a first attach under 2 CPU hogs: an unpark's wait of 1.1 ms
 * after a park of 0.39 ms). */
static void test_sleep_from_before_the_trace_waits_within_it(void)
{
        struct d9_rec_offcpu o = { .prev_state = 1 | D9_OFFCPU_BEGAN_BEFORE, .sched_wait_ns = 1100000 };
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        poll(&r, 101, C_TASK, 1, true);         /* its worker, known */
        r.tr.recording_start_ts = r.ts + 600000;
        o.off_ts = r.ts - 200000;               /* BPF's start, before the trace's */
        hdr(&o.hdr, &r, D9_REC_OFFCPU, 101);
        o.hdr.ts = r.tr.recording_start_ts + 390000;
        r.ts = o.hdr.ts;
        translate_record(&r.tr, &o, sizeof(o));
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 1 && l.unpark[0] == 1 && l.unpark_wait[0] == 390000,
           "a sleep from before the trace, woken before it began: its unpark waits %llu ns, the 390000 the trace "
           "spans (%d park, %d unpark)", (unsigned long long)l.unpark_wait[0], l.park[0], l.unpark[0]);
}

/* A worker's launch poll encloses its task polls (uretprobe mode: its end
 * may never come); when the launch task terminates on that thread its
 * poll is written, spanning the worker's whole loop, so no launch task
 * ends unpolled. */
static void test_launch_poll_ends_at_its_terminate(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t start;

        run_start(&r, true, false);
        poll(&r, 101, C_LAUNCH, 900, false);
        start = r.ts;
        for (int i = 0; i < 5; i++)
                poll(&r, 101, C_TASK, 1 + i, true);
        struct d9_rec_task term = { .task_id = 900, .cookie = 0 };
        hdr(&term.hdr, &r, D9_REC_TERMINATE, 101);
        translate_record(&r.tr, &term, sizeof(term));
        uint64_t want = r.ts - start;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.blocking_polls == 1 && l.blocking_ns == want && l.poll_start[0] == 5 && l.poll_end[0] == 5 &&
           !strcmp(workers, "0"),
           "launch terminates: its blocking poll written once, %llu ns (want %llu), task polls balanced (%d/%d)",
           (unsigned long long)l.blocking_ns, (unsigned long long)want, l.poll_start[0], l.poll_end[0]);
}

/* The runtime of runtime.<name> is the one whose tasks a worker polls (the
 * task's scheduler: its runtime's Handle Arc), not names or arrival order:
 * two multi-thread runtimes and a current-thread one, their workers'
 * records interleaved, blocking-pool polls (whose scheduler field is no
 * Handle) in between. */
static const char *rt_val(const struct tr_runtimes *rts, const char *key)
{
        for (uint32_t i = 0; i < rts->n; i++)
                if (!strcmp(rts->key[i], key))
                        return rts->val[i];
        return NULL;
}

static void test_runtimes_told_apart(bool park_probes)
{
        enum { A = 0x7f00aa00, B = 0x7f00bb00, C = 0x7f00cc00 };
        struct tr_runtimes rts;
        struct lane_log l;
        struct run r;
        char workers[64];
        const char *main_, *rt1, *rt2;

        run_start(&r, false, park_probes);
        for (int round = 0; round < 3; round++) {
                poll_rt(&r, 101, C_TASK, 1, A);
                poll_rt(&r, 201, C_TASK2, 2, B);
                poll_rt(&r, 1, C_TASK, 3, C);
                poll_rt(&r, 300 + round, C_BLOCKING, 10 + round, 10 + round);
                poll_rt(&r, 102, C_TASK, 4, A);
                poll_rt(&r, 202, C_TASK2, 5, B);
                if (park_probes) /* cores show up after the polls (attach mid-run) */
                        for (uint32_t tid = 101; tid <= 203; tid += tid == 102 ? 99 : 1)
                                park(&r, tid, 0xC0DE0000 + tid);
                poll_rt(&r, 203, C_TASK2, 6, B);
        }
        translate_runtimes(&r.tr, &rts);
        main_ = rt_val(&rts, "runtime.main");
        rt1 = rt_val(&rts, "runtime.rt1");
        rt2 = rt_val(&rts, "runtime.rt2");
        ok(rts.n == 3 && main_ && rt1 && rt2 && !strcmp(main_, "0,3") && !strcmp(rt1, "1,4,5") && !strcmp(rt2, "2"),
           "%s: 3 runtimes: main '%s' (A), rt1 '%s' (B), rt2 '%s' (current-thread C)",
           park_probes ? "park probes" : "no park probes", main_ ? main_ : "-", rt1 ? rt1 : "-", rt2 ? rt2 : "-");
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1,2,3,4,5") && l.blocking_polls == 3, "all 6 workers ('%s'), 3 blocking polls (%d)",
           workers, l.blocking_polls);
}

/* A worker that also polls a LocalSet's tasks (another scheduler value)
 * stays in its runtime; no runtime appears for the LocalSet, and the
 * metadata is not restated at every poll. */
static void test_local_set_does_not_move_worker(void)
{
        struct tr_runtimes rts;
        struct run r;
        int changes = 0;

        run_start(&r, false, false);
        for (int i = 0; i < 20; i++) {
                poll_rt(&r, 101, C_TASK, 1, 0x7f00aa00);
                r.tr.ws.changed = false;
                poll_rt(&r, 101, C_TASK2, 2, 0x7f00dd00);
                changes += r.tr.ws.changed;
        }
        translate_runtimes(&r.tr, &rts);
        ok(rts.n == 1 && !strcmp(rts.val[0], "0") && changes == 0,
           "LocalSet polls on a worker: runtime.main '%s' only (%u entries), %d restatements", rts.n ? rts.val[0] : "-",
           rts.n, changes);
        translate_destroy(&r.tr);
        d9_enc_free(r.enc);
        free(r.buf);
}

/* Without a readable scheduler (older plans): every worker in runtime.main. */
static void test_runtime_unknown_is_main(void)
{
        struct tr_runtimes rts;
        struct run r;

        run_start(&r, false, false);
        poll_rt(&r, 101, C_TASK, 1, 0);
        poll_rt(&r, 102, C_TASK, 2, 0);
        translate_runtimes(&r.tr, &rts);
        ok(rts.n == 1 && !strcmp(rts.key[0], "runtime.main") && !strcmp(rts.val[0], "0,1"),
           "scheduler unreadable: runtime.main '%s' only (%u entries)", rts.n ? rts.val[0] : "-", rts.n);
        translate_destroy(&r.tr);
        d9_enc_free(r.enc);
        free(r.buf);
}

/* With park probes attached, off-CPU records are samples only. */
static void test_no_sched_parks_with_probes(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, true);
        poll(&r, 101, C_TASK, 1, true);
        park(&r, 101, 0xA000);
        offcpu(&r, 101, 1);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.park[0] == 1, "park probes attached: only their parks (%d)", l.park[0]);
}

/* Current-thread runtime: the one thread polling tasks is the worker; the
 * blocking pool's threads are not, however many there are. */
static void test_current_thread(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        for (int i = 0; i < 33; i++) {
                poll(&r, 300 + i, C_BLOCKING, 500 + i, true);
                poll(&r, 1, C_TASK, 1, true);
        }
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0") && l.poll_start[0] == 33 && l.blocking_polls == 33 && l.poll_start[254] == 0,
           "current-thread + 33 blocking threads: runtime.main '%s', %d polls on the worker, %d blocking-pool polls",
           workers, l.poll_start[0], l.blocking_polls);
}

static void poll_open(struct run *r, uint32_t tid, uint64_t cookie, uint64_t task, uint64_t sched)
{
        struct d9_rec_task t = { .task_id = task, .cookie = cookie, .sched = sched };

        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        translate_record(&r->tr, &t, sizeof(t));
}

static void poll_close(struct run *r, uint32_t tid, uint64_t cookie, uint64_t task)
{
        struct d9_rec_task t = { .task_id = task, .cookie = cookie };

        hdr(&t.hdr, r, D9_REC_POLL_END, tid);
        translate_record(&r->tr, &t, sizeof(t));
}

static bool lanes_balanced(const struct lane_log *l)
{
        for (int w = 0; w < 256; w++)
                if (l->poll_start[w] != l->poll_end[w])
                        return false;
        return true;
}

/* restate's shape, with park probes, attached mid-run: a multi-thread main
 * runtime whose workers poll, and current-thread runtimes (one per
 * partition) whose drivers only park for seconds. Each of those is a
 * runtime of its own from its first current-thread park, not part of
 * runtime.main; once one polls a task, the Handle becomes its key, and
 * main stays the first runtime seen polling even when a current-thread
 * park came first. */
static void test_idle_current_thread_runtimes_apart(void)
{
        enum { A = 0x7f00aa00, P = 0x7f00dd00 };
        struct tr_runtimes rts;
        struct lane_log l;
        struct run r;
        char workers[64];
        const char *main_, *rt1, *rt2;

        run_start(&r, false, true);
        park_at(&r, 301, 0xC7000, C_CT_PARK);     /* a partition's runtime, idle */
        poll_rt(&r, 101, C_TASK, 1, A);
        park(&r, 101, 0xA1);
        poll_rt(&r, 102, C_TASK, 2, A);
        park(&r, 102, 0xA2);
        park_at(&r, 302, 0xC8000, C_CT_PARK);     /* another one */
        park_at(&r, 301, 0xC7000, C_CT_PARK);
        translate_runtimes(&r.tr, &rts);
        main_ = rt_val(&rts, "runtime.main");
        rt1 = rt_val(&rts, "runtime.rt1");
        rt2 = rt_val(&rts, "runtime.rt2");
        ok(rts.n == 3 && main_ && rt1 && rt2 && !strcmp(main_, "1,2") && !strcmp(rt1, "0") && !strcmp(rt2, "3"),
           "idle current-thread runtimes: main '%s', rt1 '%s', rt2 '%s'", main_ ? main_ : "-", rt1 ? rt1 : "-",
           rt2 ? rt2 : "-");
        poll_rt(&r, 302, C_TASK2, 9, P);          /* the second polls a task */
        park_at(&r, 302, 0xC8000, C_CT_PARK);
        poll_rt(&r, 303, C_TASK2, 10, P);         /* block_on from another thread: same runtime */
        translate_runtimes(&r.tr, &rts);
        rt2 = rt_val(&rts, "runtime.rt2");
        ok(rts.n == 3 && rt2 && !strncmp(rt2, "3", 1) && r.tr.ws.n_runtimes == 3,
           "its first poll keys it by the Handle: rt2 '%s', still 3 runtimes (%u)", rt2 ? rt2 : "-",
           r.tr.ws.n_runtimes);
        run_end(&r, &l, workers, sizeof(workers));
}

#define RT_A 0x7f00aa00
#define RT_B 0x7f00bb00

/* A runtime task's poll start as BPF writes it: inside the loop of Tokio's
 * worker `index` of runtime rt, found on the stack (d9_worker_find), or
 * index -1 when BPF found none. */
static void wpoll_open(struct run *r, uint32_t tid, uint64_t task, uint64_t rt, int index)
{
        struct d9_rec_task t = { .task_id = task, .cookie = C_TASK, .sched = rt };

        if (index >= 0) {
                t.worker = (uint32_t)index + 1;
                t.worker_rt = rt;
        }
        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        translate_record(&r->tr, &t, sizeof(t));
}

static void wpoll(struct run *r, uint32_t tid, uint64_t task, uint64_t rt, int index)
{
        wpoll_open(r, tid, task, rt, index);
        poll_close(r, tid, C_TASK, task);
}

/* A park with park probes: its core's key, and the worker BPF knows the
 * thread's loop runs (-1: none yet). */
static void wpark(struct run *r, uint32_t tid, uint64_t key, uint64_t rt, int index)
{
        struct d9_rec_park p = { .park_key = key, .cookie = C_PARK };

        if (index >= 0) {
                p.worker = (uint32_t)index + 1;
                p.worker_rt = rt;
        }
        hdr(&p.hdr, r, D9_REC_PARK, tid);
        translate_record(&r->tr, &p, sizeof(p));
        hdr(&p.hdr, r, D9_REC_UNPARK, tid);
        translate_record(&r->tr, &p, sizeof(p));
}

static uint32_t lcg(uint32_t *seed)
{
        *seed = *seed * 1103515245u + 12345u;
        return *seed >> 16;
}

/* Attached mid-run (no worker's loop seen starting): each task poll says
 * which of Tokio's workers polls it, so threads show up in any order,
 * interleaved with blocking-pool threads coming and going, and each gets
 * Tokio's own index as its id: worker 1's thread, seen first, is lane 1. */
static void test_worker_index_mid_run_any_order(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint32_t seed = 7;

        run_start(&r, false, false);
        for (int i = 0; i < 200; i++) {
                switch (lcg(&seed) % 4) {
                case 0:
                        wpoll(&r, 102, 2, RT_A, 1);
                        break;
                case 1:
                        wpoll(&r, 101, 1, RT_A, 0);
                        break;
                case 2:
                        poll(&r, 300 + i, C_BLOCKING, 1000 + i, true);
                        break;
                default:
                        sample(&r, 300 + i - 1);
                }
        }
        uint64_t by_thread = r.tr.polls_by_thread, ids_by_thread = r.tr.ids_by_thread;
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && by_thread == 0 && ids_by_thread == 0,
           "mid-run, any order, blocking threads coming and going: runtime.main '%s' (Tokio's 2 workers), "
           "%llu polls and %llu ids by thread", workers, (unsigned long long)by_thread,
           (unsigned long long)ids_by_thread);
        ok(l.poll_start[0] > 30 && l.poll_start[1] > 30 && polls_off(&l, 2) == 0 && lanes_balanced(&l) && !l.overlaps,
           "worker 0's polls on 0 (%d), worker 1's on 1 (%d), none elsewhere (%d), balanced, no overlap",
           l.poll_start[0], l.poll_start[1], polls_off(&l, 2));
}

/* deltachat's shape: every poll calls block_in_place, so each worker's
 * core moves to a stand-in thread that runs a new loop; the stand-ins come
 * from a pool that comes and goes, the records of the two workers
 * interleave in a different order each round, and the ring drops some
 * loops' own POLL_START. The holder's poll leaves the lane when the
 * stand-in polls (the rest is the blocking section, on no worker), its
 * late end writes nothing, and no id but Tokio's two is ever used. */
static void test_block_in_place_stand_ins_take_the_worker(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint32_t holder[2] = { 101, 102 }, seed = 11, next_tid = 200;
        int polls = 0;
        uint64_t task = 1;

        run_start(&r, false, false);
        for (int round = 0; round < 60; round++) {
                int k = (int)(lcg(&seed) % 2);
                uint32_t h = holder[k], s = next_tid++;
                uint64_t t = task++;

                wpoll(&r, holder[1 - k], task++, RT_A, 1 - k);          /* the other worker goes on */
                wpoll_open(&r, h, t, RT_A, k);                          /* h calls block_in_place */
                if (lcg(&seed) % 3)                                     /* the stand-in's loop (or dropped) */
                        poll_open(&r, s, C_LAUNCH, 5000 + round, 0);
                if (lcg(&seed) % 2)
                        wpoll(&r, holder[1 - k], task++, RT_A, 1 - k);
                wpoll(&r, s, task++, RT_A, k);                          /* the stand-in polls as worker k */
                poll_close(&r, h, C_TASK, t);                           /* h's poll returns: on no lane */
                poll_close(&r, h, C_LAUNCH, 4000 + round);              /* h's loop ends: a pool thread */
                sample(&r, h);
                wpoll(&r, s, task++, RT_A, k);
                holder[k] = s;
                polls += 3;
        }
        uint64_t handed = r.tr.cores_handed;
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && polls_off(&l, 2) == 0,
           "60 hand-offs to stand-ins from a pool: runtime.main '%s', no poll on another id (%d)", workers,
           polls_off(&l, 2));
        ok(lanes_balanced(&l) && !l.overlaps && l.poll_start[0] + l.poll_start[1] >= polls,
           "each lane's polls balanced and never overlapping (%d + %d polls)", l.poll_start[0], l.poll_start[1]);
        ok(handed == 60 && l.samples[254] == 60 && l.samples[0] + l.samples[1] == 0,
           "every hand-off counted (%llu); the givers' samples after it on 254 (%d)", (unsigned long long)handed,
           l.samples[254]);
}

/* block_in_place whose giver takes its core back before the stand-in
 * does: the stand-in's loop returns at once, polling nothing; the giver
 * goes on as the same worker, no hand-off. */
static void test_block_in_place_core_taken_back(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        wpoll(&r, 101, 1, RT_A, 0);
        wpoll_open(&r, 101, 2, RT_A, 0);
        poll_open(&r, 201, C_LAUNCH, 900, 0);
        poll_close(&r, 201, C_LAUNCH, 900);
        poll_close(&r, 101, C_TASK, 2);
        wpoll(&r, 101, 3, RT_A, 0);
        uint64_t handed = r.tr.cores_handed;
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0") && l.poll_start[0] == 3 && l.poll_end[0] == 3 && handed == 0,
           "core taken back: runtime.main '%s', 3 polls on 0 (%d ended), no hand-off (%llu)", workers,
           l.poll_end[0], (unsigned long long)handed);
}

/* A thread's first polls without a worker (BPF's scan found none yet: a
 * LocalSet's task first) get an id of the thread's own; when its index
 * shows, that id is the worker, whatever Tokio calls it: no third id. */
static void test_thread_id_becomes_the_worker(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        wpoll(&r, 101, 1, RT_B, -1);
        wpoll(&r, 102, 2, RT_B, -1);
        wpoll(&r, 101, 3, RT_A, 1);
        wpoll(&r, 102, 4, RT_A, 0);
        wpoll(&r, 101, 5, RT_B, -1);    /* the loop's worker stays known */
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1") && l.poll_start[0] == 3 && l.poll_start[1] == 2,
           "ids of threads become the workers they turn out to be: '%s' (%d, %d polls)", workers, l.poll_start[0],
           l.poll_start[1]);
}

/* A stand-in thread whose first poll found no worker, then the worker
 * another thread showed before: its id is given back (not listed), its
 * later polls are that worker's. */
static void test_thread_id_given_back_when_worker_known(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        wpoll(&r, 101, 1, RT_A, 0);
        wpoll(&r, 103, 2, RT_A, -1);
        wpoll(&r, 103, 3, RT_A, 0);
        uint64_t by_thread = r.tr.polls_by_thread, ids_by_thread = r.tr.ids_by_thread;
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0") && l.poll_start[0] == 2 && by_thread == 1 && ids_by_thread == 1,
           "the stand-in's own id given back: '%s', %d polls on 0, %llu by thread (%llu ids)", workers,
           l.poll_start[0], (unsigned long long)by_thread, (unsigned long long)ids_by_thread);
}

/* Park probes and worker indexes: a park of a thread whose loop BPF knows
 * ties the core's key to the worker, so the stand-in that takes that core
 * and parks before it polls is on the same lane; an idle worker that only
 * parks (attach mid-run) has its key's id until its polls show its index. */
static void test_park_key_and_index_agree(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, true);
        wpoll(&r, 101, 1, RT_A, 0);
        wpark(&r, 101, 0xA000, RT_A, 0);
        wpark(&r, 102, 0xB000, RT_A, -1);       /* idle worker, no poll yet */
        wpoll(&r, 103, 2, RT_A, -1);
        wpark(&r, 103, 0xA000, RT_A, -1);       /* 101's core, on a stand-in */
        wpoll(&r, 103, 3, RT_A, 0);
        wpoll(&r, 102, 4, RT_A, 1);
        wpark(&r, 102, 0xB000, RT_A, 1);
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(workers, "0,1"), "park keys and indexes name the same 2 workers: '%s'", workers);
        ok(l.park[0] == 2 && l.park[1] == 2 && l.poll_start[0] == 2 && l.poll_start[1] == 1 &&
           !strcmp(l.order[0], "pupu") && !strcmp(l.order[1], "pupu"),
           "parks 2 and 2, alternating ('%s', '%s'); polls of worker 0 on 0 (%d)", l.order[0], l.order[1],
           l.poll_start[0]);
}

/* Two multi-thread runtimes number their workers 0.. each: (runtime,
 * index) is the identity, and each runtime lists its own. */
static void test_worker_index_per_runtime(void)
{
        struct tr_runtimes rts;
        struct lane_log l;
        struct run r;
        char workers[64];
        const char *main_, *rt1;

        run_start(&r, false, false);
        for (int i = 0; i < 3; i++) {
                wpoll(&r, 101, 1, RT_A, 0);
                wpoll(&r, 201, 2, RT_B, 0);
                wpoll(&r, 102, 3, RT_A, 1);
                wpoll(&r, 202, 4, RT_B, 1);
        }
        translate_runtimes(&r.tr, &rts);
        main_ = rt_val(&rts, "runtime.main");
        rt1 = rt_val(&rts, "runtime.rt1");
        ok(rts.n == 2 && main_ && rt1 && !strcmp(main_, "0,2") && !strcmp(rt1, "1,3"),
           "two runtimes' workers 0 and 1: main '%s', rt1 '%s'", main_ ? main_ : "-", rt1 ? rt1 : "-");
        run_end(&r, &l, workers, sizeof(workers));
}
/* Entry-only poll end (the full set): BPF writes no POLL_END for a poll
 * the thread's next poll start ends; translate closes it there, at the
 * start's time, a blocking-pool poll too (its D9BlockingPollEvent lasts
 * until that start). A park still comes with BPF's POLL_END. */
static void test_entry_only_start_ends_open_poll(void)
{
        struct d9_rec_task end = { .task_id = 3, .cookie = C_TASK2, .why = D9_END_PARK };
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start_entry_only(&r);
        poll(&r, 101, C_TASK, 1, false);
        poll(&r, 101, C_TASK, 2, false);
        poll(&r, 101, C_TASK2, 3, false);
        hdr(&end.hdr, &r, D9_REC_POLL_END, 101);
        translate_record(&r.tr, &end, sizeof(end));
        park(&r, 101, 0xabc);
        poll(&r, 201, C_BLOCKING, 1000, false);
        poll(&r, 201, C_BLOCKING, 1001, false);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.poll_start[0] == 3 && l.poll_end[0] == 3 && l.park[0] == 1,
           "entry-only: 3 polls on worker 0, each ended (2 by the next start, 1 by the park): %d starts, "
           "%d ends", l.poll_start[0], l.poll_end[0]);
        ok(l.blocking_polls == 1 && l.blocking_ns == 1000 && l.poll_start[254] == 0,
           "entry-only: a blocking job ends at the thread's next poll start (%d events, %llu ns)",
           l.blocking_polls, (unsigned long long)l.blocking_ns);
}

/* Entry-only: the end of a task's poll is stamped at its thread's next
 * event, which can come after another worker took the task (it was queued
 * again as the poll returned; under CPU hogs the first thread was
 * preempted on its way out). Tokio never polls a task on two threads at
 * once: the other thread's start ends the open poll, when the first
 * thread's next record comes (task 7), or once the trace is 2 ms past it
 * (task 11: its thread sends nothing more). The task's third poll, back on
 * the first thread, finds its second already ended by its own thread. A
 * thread's next start that reaches the ring after the other thread's
 * start but happened before it (records of two CPUs, task 20) is the
 * end. */
static void test_task_on_one_lane_at_a_time(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t ended;

        run_start_entry_only(&r);
        poll(&r, 101, C_TASK, 7, false);
        poll(&r, 102, C_TASK, 9, false);
        poll(&r, 102, C_TASK, 7, false);
        poll(&r, 101, C_TASK, 8, false);
        poll(&r, 102, C_TASK, 10, false);
        poll(&r, 101, C_TASK, 7, false);
        poll(&r, 101, C_TASK, 20, false);
        poll(&r, 102, C_TASK, 20, false);
        r.ts -= 1500; /* thread 101's next start, 500 ns before 102's */
        poll(&r, 101, C_TASK, 21, false);
        r.ts += 1500;
        poll(&r, 102, C_TASK, 11, false);
        poll(&r, 101, C_TASK, 11, false);
        r.ts += 3000000;
        poll(&r, 101, C_TASK, 12, false);
        ended = r.tr.polls_ended_by_task;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.task_overlaps == 0 && ended == 2 && l.poll_start[0] == 7 && l.poll_start[1] == 5 &&
           l.poll_end[0] == 6 && l.poll_end[1] == 5,
           "a task's poll on another thread ends its open one: %d pairs of one task's polls overlap, %llu ended "
           "so; lane 0 %d starts %d ends, lane 1 %d starts %d ends", l.task_overlaps, (unsigned long long)ended,
           l.poll_start[0], l.poll_end[0], l.poll_start[1], l.poll_end[1]);
}

/* A full-detail window's close (default set, entry-only polls, park
 * points): the ring's records from before the close are drained first and
 * are the window's, so the polls they start end at the next start, not at
 * the close (each ended 0.5 ms late and a worker read 13 % busier); the one
 * still open ends at the close. A sleep begun inside the window and ended
 * after the close is the park probe's park (BPF unparks it at the resume),
 * not a second one; a switch-out after the close is a park again, and so
 * is a sleep begun before the opening (drained after it). */
static void test_window_close_drains_the_window_first(void)
{
        struct d9_rec_park p = { .cookie = C_PARK };
        struct d9_rec_offcpu o = { .prev_state = 1 };
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t open_ts, close_ts, park_ts;

        run_start(&r, true, false);
        r.tr.window_parks = true;
        r.tr.end_at_next_poll = true;
        translate_window(&r.tr, r.ts += 1000, true);
        open_ts = r.ts;
        poll(&r, 102, C_TASK2, 9, true);
        poll(&r, 103, C_TASK2, 10, true);
        /* Asleep since before the opening: no park probe saw it. */
        o.off_ts = open_ts - 500;
        hdr(&o.hdr, &r, D9_REC_OFFCPU, 103);
        translate_record(&r.tr, &o, sizeof(o));
        poll(&r, 101, C_TASK, 1, false);
        hdr(&p.hdr, &r, D9_REC_PARK, 102);
        translate_record(&r.tr, &p, sizeof(p));
        park_ts = r.ts;
        /* Off at close_ts; these were still in the ring. */
        close_ts = r.ts + 10000;
        translate_window_closing(&r.tr, close_ts);
        poll(&r, 101, C_TASK, 2, false);
        poll(&r, 101, C_TASK, 3, false);
        o.off_ts = close_ts + 100;
        hdr(&o.hdr, &r, D9_REC_OFFCPU, 103);
        o.hdr.ts = close_ts + 200;
        translate_record(&r.tr, &o, sizeof(o));
        translate_window(&r.tr, close_ts, false);
        r.ts = close_ts + 1000;
        hdr(&p.hdr, &r, D9_REC_UNPARK, 102);
        translate_record(&r.tr, &p, sizeof(p));
        o.off_ts = park_ts + 10;
        hdr(&o.hdr, &r, D9_REC_OFFCPU, 102);
        translate_record(&r.tr, &o, sizeof(o));
        offcpu(&r, 102, 1);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.n_polls == 5 && l.polls[2].end - l.polls[2].start == 2000 && l.polls[3].end - l.polls[3].start == 1000 &&
           l.polls[4].end == close_ts,
           "records drained at a window's close: their polls end at the next start (%llu, %llu ns), the last at "
           "the close (%lld ns off)", (unsigned long long)(l.polls[2].end - l.polls[2].start),
           (unsigned long long)(l.polls[3].end - l.polls[3].start), (long long)(l.polls[4].end - close_ts));
        ok(!strcmp(l.order[0], "pupu") && !strcmp(l.order[1], "pupu"),
           "a sleep begun in the window is its park probe's park only ('%s'); one begun before the opening or after "
           "the close is the scheduler's ('%s', '%s')", l.order[0], l.order[1], workers);
}

/* A POLL_START of task on tid after `lost` of the thread's own records
 * were lost (hdr.lost), 500 ms after its last record. */
static void poll_after_hole(struct run *r, uint32_t tid, uint64_t cookie, uint64_t task, uint32_t lost)
{
        struct d9_rec_task t = { .task_id = task, .cookie = cookie };

        r->ts += 500000000;
        hdr(&t.hdr, r, D9_REC_POLL_START, tid);
        t.hdr.lost = lost;
        translate_record(&r->tr, &t, sizeof(t));
}

/* A hole in a thread's own records (the ring was full; BPF says how many
 * of the thread's records were lost right before the next one written,
 * hdr.lost): the end of its open poll may be among them. Entry-only, the
 * next start came 500 ms later; the poll ends at its start, said by a
 * D9LostEventsEvent, not 500 ms later. With return probes, a POLL_END
 * after a hole ends the open poll only if it is that poll's own. */
static void test_poll_end_lost_in_a_hole(void)
{
        struct d9_rec_task t = { .task_id = 3, .cookie = C_TASK };
        uint64_t lost, first;
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start_entry_only(&r);
        poll(&r, 101, C_TASK, 1, false);
        poll(&r, 101, C_TASK, 2, false);
        poll_after_hole(&r, 101, C_TASK, 3, 4);
        poll(&r, 101, C_TASK, 4, false);
        lost = r.tr.poll_ends_lost;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.n_polls == 3 && l.polls[0].end - l.polls[0].start == 1000 && l.polls[1].end == l.polls[1].start &&
           l.polls[2].end - l.polls[2].start == 1000 && lost == 1 && l.poll_ends_lost == 1,
           "entry-only: the poll open at a hole of its thread's records ends at its start (%llu ns), said in the "
           "trace (%llu, %llu counted); the others end at the next start (%llu, %llu ns)",
           (unsigned long long)(l.polls[1].end - l.polls[1].start), (unsigned long long)l.poll_ends_lost,
           (unsigned long long)lost, (unsigned long long)(l.polls[0].end - l.polls[0].start),
           (unsigned long long)(l.polls[2].end - l.polls[2].start));

        run_start(&r, true, true);
        poll(&r, 101, C_TASK, 1, true);
        hdr(&t.hdr, &r, D9_REC_POLL_START, 101);
        translate_record(&r.tr, &t, sizeof(t));
        first = t.hdr.ts;
        r.ts += 500000000;
        hdr(&t.hdr, &r, D9_REC_POLL_END, 101);
        t.hdr.lost = 1;                         /* a wake inside it */
        t.start_ts = first;
        translate_record(&r.tr, &t, sizeof(t));
        lost = r.tr.poll_ends_lost;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.n_polls == 2 && l.polls[1].end - l.polls[1].start == 500001000 && lost == 0 && l.poll_ends_lost == 0,
           "return probes: a POLL_END after a hole ends its own poll (%llu ns, %llu ends lost)",
           (unsigned long long)(l.n_polls == 2 ? l.polls[1].end - l.polls[1].start : 0), (unsigned long long)lost);

        /* A spawn_blocking job: written at its end, so one whose end is in
         * the hole is not written (it read 500 ms long), but counted. */
        run_start_entry_only(&r);
        poll(&r, 201, C_BLOCKING, 1000, false);
        poll_after_hole(&r, 201, C_BLOCKING, 1001, 2);
        poll(&r, 201, C_BLOCKING, 1002, false);
        lost = r.tr.poll_ends_lost;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.blocking_polls == 1 && l.blocking_ns == 1000 && lost == 1 && l.poll_ends_lost == 1,
           "entry-only: a blocking job open at a hole is left out and counted (%d jobs of %llu ns, %llu and %llu "
           "counted)", l.blocking_polls, (unsigned long long)l.blocking_ns, (unsigned long long)lost,
           (unsigned long long)l.poll_ends_lost);
}

/* Sampled wakes: a D9WakeWindowEvent says when the wake points are on.
 * The segment's opening restated it and the session's start said it again:
 * every recording began with two attached=1. Once per change now, and a
 * new segment restates it. */
static void test_wake_window_said_once_per_change(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t before, restated;
        struct d9_enc *next;
        uint8_t *buf = malloc(1 << 16);

        run_start(&r, true, true);
        translate_wake_window(&r.tr, r.ts += 1000, true, 250, 2500);
        translate_wake_window(&r.tr, r.ts += 1000, true, 250, 2500);
        translate_wake_window(&r.tr, r.ts += 1000, false, 250, 2500);
        translate_wake_window(&r.tr, r.ts += 1000, true, 250, 2500);
        run_end(&r, &l, workers, sizeof(workers));
        ok(!strcmp(l.windows, "101"), "wake windows said once per change: '%s' (the repeated attached=1 left out)",
           l.windows);

        /* The next segment states it again. */
        run_start(&r, true, true);
        translate_wake_window(&r.tr, r.ts += 1000, true, 250, 2500);
        d9_enc_new(&next);
        d9_enc_set_output(next, buf, 1 << 16, NULL, NULL);
        translate_set_encoder(&r.tr, next);
        before = r.tr.events;
        translate_wake_window(&r.tr, r.ts += 1000, true, 250, 2500);
        restated = r.tr.events - before;
        r.tr.enc = r.enc;
        run_end(&r, &l, workers, sizeof(workers));
        ok(restated == 1, "a new segment restates the wake window (%llu events)", (unsigned long long)restated);
        d9_enc_free(next);
        free(buf);
}

/* Samples name their thread as BPF read it then (task->comm): no /proc
 * read on the drain path, and a thread that renames itself is seen. */
static void test_thread_names_from_the_samples(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        sample_named(&r, 101, "tokio-rt-worker");
        sample_named(&r, 101, "tokio-rt-worker");
        sample_named(&r, 101, "db-writer");
        sample_named(&r, 102, "");
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.n_names == 3 && !strcmp(l.names[0], "tokio-rt-worker") && !strcmp(l.names[1], "tokio-rt-worker") &&
           !strcmp(l.names[2], "db-writer"),
           "thread_name from the sample's comm, a rename seen: '%s', '%s', '%s' (%d named)", l.names[0],
           l.names[1], l.names[2], l.n_names);
}

/* The target's memory map as the sampler reads it: the executable (its
 * exec mapping placed by the plan's PT_LOADs at bias 0x55d0c0000000), a
 * library, and a file whose name starts with the executable's. */
#define BIAS 0x55d0c0000000ull
static const char maps_text[] =
        "55d0c0000000-55d0c0046000 r--p 00000000 fd:01 1234 /opt/app/d9-target\n"
        "55d0c0046000-55d0c0102000 r-xp 00045000 fd:01 1234 /opt/app/d9-target\n"
        "55d0c0103000-55d0c010b000 rw-p 00101000 fd:01 1234 /opt/app/d9-target\n"
        "55d0c1000000-55d0c1021000 rw-p 00000000 00:00 0 [heap]\n"
        "7f1200000000-7f1200020000 r-xp 00026000 fd:01 99 /usr/lib/x86_64-linux-gnu/libc.so.6\n"
        "7f1300000000-7f1300010000 r-xp 00000000 fd:01 77 /opt/app/d9-target2\n"
        "7ffd55d00000-7ffd55d02000 r-xp 00000000 00:00 0 [vdso]\n";
/* After an exec of a new build at the same path: another bias, the old
 * file deleted meanwhile. */
#define BIAS2 0x5600aa000000ull
static const char maps_text2[] =
        "5600aa046000-5600aa102000 r-xp 00045000 fd:01 1250 /opt/app/d9-target (deleted)\n";
/* record -- CMD before its exec: d9ctl's child. */
static const char maps_before_exec[] = "55aa00000000-55aa00100000 r-xp 00000000 fd:01 5 /usr/bin/d9ctl\n";

static void set_map(struct run *r, const char *text, int want)
{
        struct exe_map m;
        int e = exe_map_from_maps(text, "/opt/app/d9-target", plan.segments, plan.n_segments, &m);

        ok(e == want && (e < 0 ? m.n == 0 : m.n == 1 && m.r[0].bias_known),
           "the map's executable mappings: %d (%zu, bias 0x%llx, '%s')", e, m.n,
           (unsigned long long)m.r[0].bias, m.file);
        translate_set_exe_map(&r->tr, &m);
}

/* The frame's function: functions of 16 bytes. */
static int fn_of_16(const struct translate *tr, uint64_t addr, uint64_t *fn)
{
        *fn = addr & ~0xfull;
        return 0;
}

/* A boxed future's poll seen on a stack is named by the first of the 3
 * frames under the poll frame whose function the plan names: Tokio's
 * Core::poll, which calls it through the box's vtable, is not always
 * inlined into the poll function (npm grafbase, Tokio 1.47: every
 * default-set long poll of its hyper client connections unlabelled). */
static void test_boxed_poll_on_a_stack_named_under_core_poll(void)
{
        const uint64_t direct[] = { BIAS + 0x85dd4, BIAS + 0x50005 };
        const uint64_t under_core[] = { BIAS + 0x85dd4, BIAS + 0x70005, BIAS + 0x50005 };
        const uint64_t too_deep[] = { BIAS + 0x85dd4, BIAS + 0x71005, BIAS + 0x72005, BIAS + 0x70005,
                                      BIAS + 0x50005 };
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t c[4];

        run_start(&r, false, false);
        set_map(&r, maps_text, 0);
        r.tr.lp_fn_of = fn_of_16;
        c[0] = translate_stack_callee(&r.tr, C_BOXED, direct, 1, 0);
        c[1] = translate_stack_callee(&r.tr, C_BOXED, under_core, 2, 0);
        c[2] = translate_stack_callee(&r.tr, C_BOXED, too_deep, 4, 0);
        c[3] = translate_stack_callee(&r.tr, C_TASK, under_core, 2, 0);
        ok(c[0] == BIAS + 0x85dd4 && c[1] == BIAS + 0x85dd4 && c[2] == BIAS + 0x70005 && c[3] == BIAS + 0x70005,
           "the boxed future's poll: called directly, under Core::poll; 4 frames down it is not looked for, "
           "nor for a poll that is not a box's (0x%llx, 0x%llx, 0x%llx, 0x%llx)",
           (unsigned long long)(c[0] - BIAS), (unsigned long long)(c[1] - BIAS), (unsigned long long)(c[2] - BIAS),
           (unsigned long long)(c[3] - BIAS));
        ok(translate_stack_label_atom(&r.tr, C_BOXED, c[1]) != r.tr.empty_atom &&
                   translate_stack_label_atom(&r.tr, C_BOXED, c[2]) == r.tr.empty_atom,
           "labelled by the plan's name of the first, none by a frame it does not name");
        run_end(&r, &l, workers, sizeof(workers));
}

/* Boxed futures (`Pin<Box<dyn Future>>` tasks): BPF hands over the
 * concrete poll fn's runtime address; translate names it from the plan's
 * dyn_fns through the executable's map the session hands in and opens no
 * file: named; in the executable's code but not in the table (a stripped
 * build) "[unnamed] FILE 0xVADDR"; outside it, or before the map is known,
 * the poll instance's label, and named once the map lands; after an exec
 * the new map names them. */
static void test_boxed_futures_named_from_the_plan(void)
{
        static const char *const want[] = {
                BOXED_LABEL,                                            /* no map yet */
                "d9_target::mixed::boxed_batch::{{closure}}",          /* the same address, map known */
                "<app::Conn as core::future::future::Future>::poll",
                "[unnamed] d9-target 0x90000",                          /* exe code, not in the table */
                BOXED_LABEL,                                            /* libc */
                BOXED_LABEL,                                            /* d9-target2 */
                BOXED_LABEL,                                            /* the exe's data, not its code */
                "app::serve",                                           /* not boxed */
                "d9_target::mixed::boxed_batch::{{closure}}",          /* named once, again */
                "d9_target::mixed::boxed_batch::{{closure}}",          /* after the exec: new bias */
                BOXED_LABEL,                                            /* the old address: no code now */
                BOXED_LABEL,                                            /* a map without the exe */
        };
        size_t n = sizeof(want) / sizeof(*want), same = 0;
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        set_map(&r, maps_text, 0);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        poll_boxed(&r, 101, 2, BIAS + 0x86020);
        poll_boxed(&r, 101, 3, BIAS + 0x90000);
        poll_boxed(&r, 101, 4, 0x7f1200001000ull);
        poll_boxed(&r, 101, 5, 0x7f1300001000ull);
        poll_boxed(&r, 101, 6, BIAS + 0x104000);
        poll(&r, 101, C_TASK, 7, true);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        set_map(&r, maps_text2, 0);
        poll_boxed(&r, 101, 8, BIAS2 + 0x85dd0);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        set_map(&r, maps_before_exec, -ENOENT);
        poll_boxed(&r, 101, 8, BIAS2 + 0x85dd0);
        run_end(&r, &l, workers, sizeof(workers));
        for (size_t i = 0; i < n && (int)i < l.n_labels; i++) {
                same += !strcmp(l.labels[i], want[i]);
                if (strcmp(l.labels[i], want[i]))
                        diag("poll %zu: '%s', want '%s'", i, l.labels[i], want[i]);
        }
        ok(l.n_labels == (int)n && same == n, "boxed futures: %zu of %zu polls labelled as the plan and map say",
           same, n);

        /* A stripped build: its plan names none, its exe's code is unnamed. */
        plan.n_dyn_fns = 0;
        run_start(&r, false, false);
        set_map(&r, maps_text, 0);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        poll_boxed(&r, 101, 2, 0x7f1200001000ull);
        run_end(&r, &l, workers, sizeof(workers));
        plan.n_dyn_fns = 2;
        ok(l.n_labels == 2 && !strcmp(l.labels[0], "[unnamed] d9-target 0x85dd0") && !strcmp(l.labels[1], BOXED_LABEL),
           "stripped: '%s' in the executable, '%s' outside it", l.labels[0], l.labels[1]);
}

/* record -- CMD: boxed polls before any map read was handed in carry where
 * the kernel put the executable's code (exe_code, mm->start_code: the PF_X
 * PT_LOAD's vaddr 0x46c50 plus the bias), which places the executable: the
 * first polls are named too (they had the erased type: 5 of 692 in a CI
 * run), the map read that lands later agrees, and an exe_code that places
 * no code at the address names nothing. */
static void test_boxed_futures_named_before_the_map(void)
{
        static const char *const want[] = {
                "d9_target::mixed::boxed_batch::{{closure}}",          /* from exe_code alone */
                "[unnamed] d9-target 0x90000",                          /* exe code, not in the table */
                BOXED_LABEL,                                            /* libc */
                "d9_target::mixed::boxed_batch::{{closure}}",          /* the map read agrees */
        };
        size_t n = sizeof(want) / sizeof(*want), same = 0;
        struct d9_rec_task t = { .cookie = C_BOXED, .exe_code = BIAS + 0x46c50 };
        const uint64_t at[] = { BIAS + 0x85dd0, BIAS + 0x90000, 0x7f1200001000ull };
        struct lane_log l;
        struct run r;
        char workers[64];

        plan.exe_path = (char *)"/opt/app/d9-target";
        run_start(&r, false, false);
        for (size_t i = 0; i < sizeof(at) / sizeof(*at); i++) {
                t.task_id = i + 1;
                t.future_poll = at[i];
                hdr(&t.hdr, &r, D9_REC_POLL_START, 101);
                translate_record(&r.tr, &t, sizeof(t));
                hdr(&t.hdr, &r, D9_REC_POLL_END, 101);
                translate_record(&r.tr, &t, sizeof(t));
        }
        set_map(&r, maps_text, 0);
        poll_boxed(&r, 101, 1, BIAS + 0x85dd0);
        run_end(&r, &l, workers, sizeof(workers));
        plan.exe_path = NULL;
        for (size_t i = 0; i < n && (int)i < l.n_labels; i++) {
                same += !strcmp(l.labels[i], want[i]);
                if (strcmp(l.labels[i], want[i]))
                        diag("poll %zu: '%s', want '%s'", i, l.labels[i], want[i]);
        }
        ok(l.n_labels == (int)n && same == n,
           "boxed futures before any map read: %zu of %zu polls named from where the kernel put the code", same, n);
}

/* record -- CMD: spawns before any map read was handed in carry where the
 * kernel put the executable's code too (17 of 34,340 spawns unlabelled in
 * a CI run, the first of churn, ticker and ping_pong): the task's vtable,
 * in the executable's data, names its poll<T,S> at once; a spawn of a
 * boxed future stays unlabelled (its polls name it); one without exe_code
 * cannot be placed. */
static void test_spawns_named_before_the_map(void)
{
        static const char *const want[] = { "app::serve", "", "" };
        const uint64_t code[] = { BIAS + 0x46c50, BIAS + 0x46c50, 0 };
        const uint64_t vt[] = { BIAS + 0x104000, BIAS + 0x104100, BIAS + 0x104000 };
        size_t n = sizeof(want) / sizeof(*want), same = 0;
        struct lane_log l;
        struct run r;
        char workers[64];

        plan.exe_path = (char *)"/opt/app/d9-target";
        points[C_TASK].vtable_vaddr = 0x104000;
        points[C_BOXED].vtable_vaddr = 0x104100;
        for (size_t i = 0; i < n; i++) {
                struct d9_rec_task t = { .task_id = i + 1, .exe_code = code[i], .vtable = vt[i] };

                /* Each run from no map: the first spawn places the code. */
                run_start(&r, false, false);
                hdr(&t.hdr, &r, D9_REC_SPAWN, 101);
                translate_record(&r.tr, &t, sizeof(t));
                run_end(&r, &l, workers, sizeof(workers));
                same += l.n_spawn_labels == 1 && !strcmp(l.spawn_labels[0], want[i]);
                if (l.n_spawn_labels != 1 || strcmp(l.spawn_labels[0], want[i]))
                        diag("spawn %zu: %d labels, '%s', want '%s'", i, l.n_spawn_labels,
                             l.n_spawn_labels ? l.spawn_labels[0] : "", want[i]);
        }
        points[C_TASK].vtable_vaddr = points[C_BOXED].vtable_vaddr = 0;
        plan.exe_path = NULL;
        ok(same == n, "spawns before any map read: %zu of %zu labelled from where the kernel put the code", same, n);
}

static void exec_rec(struct run *r, uint64_t dev, uint64_t ino)
{
        struct d9_rec_proc p = { .exec_dev = (uint32_t)dev, .exec_ino = ino };

        hdr(&p.hdr, r, D9_REC_EXEC, 1);
        translate_record(&r->tr, &p, sizeof(p));
}

/* An attach can land while the target is still inside the execve that made
 * the image it planned (the kernel's exec event comes at its end): an EXEC
 * into the planned file before any uprobe joined is that one, not a new
 * program; after they joined, or into another file, it is. */
static void test_exec_into_the_planned_file(void)
{
        struct lane_log l;
        struct run r;
        char workers[64];
        uint64_t kdev = (8ull << 20) | 3, udev = makedev(8, 3);

        run_start(&r, false, false);
        translate_set_exe_file(&r.tr, udev, 4242);
        exec_rec(&r, kdev, 4242);
        uint64_t planned = r.tr.exec_planned, seen = r.tr.exec_seen;
        exec_rec(&r, kdev, 777);
        uint64_t other = r.tr.exec_seen;
        translate_uprobes_from(&r.tr, r.ts + 1);
        exec_rec(&r, kdev, 4242);
        uint64_t after = r.tr.exec_seen;
        sample(&r, 1);
        run_end(&r, &l, workers, sizeof(workers));
        ok(planned == 1 && seen == 0 && other == 1 && after == 2,
           "exec into the planned file before uprobes: the attach's own (%llu, seen %llu); another file (%llu) "
           "or after uprobes joined (%llu): a new program", (unsigned long long)planned, (unsigned long long)seen,
           (unsigned long long)other, (unsigned long long)after);
}

/* A CPU sample whose STACK record never came (dropped, ring full) says so:
 * in the kernel (no user address) its callchain was empty, in user code
 * one frame that read as a whole stack (npm codex under load). */
static void test_cpu_sample_without_its_stack_says_so(void)
{
        struct d9_rec_sample in_kernel = { .ip = 0, .stack_id = 77 }, in_user = { .ip = 0x4321, .stack_id = 78 };
        const uint64_t missing = stack_mark_addr(STACK_MARK_MISSING);
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, false, false);
        hdr(&in_kernel.hdr, &r, D9_REC_CPU_SAMPLE, 5);
        translate_record(&r.tr, &in_kernel, sizeof(in_kernel));
        hdr(&in_user.hdr, &r, D9_REC_CPU_SAMPLE, 5);
        translate_record(&r.tr, &in_user, sizeof(in_user));
        uint64_t counted = r.tr.cpu_no_stack;
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.n_chains == 2 && l.chain_len[0] == 1 && l.chain_outer[0] == missing,
           "a kernel-mode sample without its stack: the mark alone (%u frames, 0x%llx)", l.chain_len[0],
           (unsigned long long)l.chain_outer[0]);
        ok(l.n_chains == 2 && l.chain_len[1] == 2 && l.chain_leaf[1] == 0x4321 && l.chain_outer[1] == missing &&
           counted == 2,
           "a user-mode one: its address, then the mark (%u frames, 0x%llx); %llu counted", l.chain_len[1],
           (unsigned long long)l.chain_outer[1], (unsigned long long)counted);
}

/* Spawns (npm grafbase, Tokio 1.47): bind_inner's entry and then bind's
 * return both see a spawn made through an out-of-line bind, and neither
 * sees one where both are inlined into the spawn site. Each task gets
 * one TaskSpawnEvent: from the first probe that saw it (task 50 twice,
 * task 52 once), else at its first poll (task 51, and task 53, which ran
 * before the attach); its later polls add none. */
static void test_spawn_written_once(void)
{
        struct d9_rec_task sp = { .cookie = C_TASK };
        struct lane_log l;
        struct run r;
        char workers[64];

        run_start(&r, true, true);
        poll(&r, 101, C_TASK, 53, true);
        sp.task_id = 50;
        hdr(&sp.hdr, &r, D9_REC_SPAWN, 101);
        translate_record(&r.tr, &sp, sizeof(sp));
        hdr(&sp.hdr, &r, D9_REC_SPAWN, 101);
        translate_record(&r.tr, &sp, sizeof(sp));
        sp.task_id = 52;
        hdr(&sp.hdr, &r, D9_REC_SPAWN, 101);
        translate_record(&r.tr, &sp, sizeof(sp));
        poll(&r, 102, C_TASK, 50, true);
        poll(&r, 102, C_TASK, 51, true);
        poll(&r, 102, C_TASK, 52, true);
        poll(&r, 101, C_TASK, 50, true);
        poll(&r, 101, C_TASK, 53, true);
        run_end(&r, &l, workers, sizeof(workers));
        ok(l.spawns == 4, "one spawn per task, whether two probes, one or none saw it: %d for 4 tasks", l.spawns);
}

int main(void)
{
        plan_init();
        test_blocking_pool_never_workers();
        test_launch_poll_does_not_decide();
        test_launch_poll_ends_at_its_terminate();
        test_park_keys_mid_run();
        test_given_back_id_is_reused();
        test_parks_from_sched_switch();
        test_sleep_record_after_its_poll_end();
        test_no_sched_parks_with_probes();
        test_sched_parks_carry_cpu_and_wait();
        test_sched_parks_only_in_park_calls();
        test_sleep_from_before_the_trace_waits_within_it();
        test_current_thread();
        test_runtimes_told_apart(false);
        test_runtimes_told_apart(true);
        test_runtime_unknown_is_main();
        test_local_set_does_not_move_worker();
        test_idle_current_thread_runtimes_apart();
        test_worker_index_mid_run_any_order();
        test_block_in_place_stand_ins_take_the_worker();
        test_block_in_place_core_taken_back();
        test_thread_id_becomes_the_worker();
        test_thread_id_given_back_when_worker_known();
        test_park_key_and_index_agree();
        test_worker_index_per_runtime();
        test_entry_only_start_ends_open_poll();
        test_task_on_one_lane_at_a_time();
        test_poll_end_lost_in_a_hole();
        test_window_close_drains_the_window_first();
        test_wake_window_said_once_per_change();
        test_thread_names_from_the_samples();
        test_exec_into_the_planned_file();
        test_boxed_futures_named_from_the_plan();
        test_boxed_poll_on_a_stack_named_under_core_poll();
        test_boxed_futures_named_before_the_map();
        test_spawns_named_before_the_map();
        test_spawn_written_once();
        test_cpu_sample_without_its_stack_says_so();
        return tap_done();
}
