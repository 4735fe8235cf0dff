/* long_poll.c: workers, parks' stacks and long polls from stacks and fast
 * run ticks, for the default probe set (rules in long_poll.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/d9_events.h"
#include "daemon/record/long_poll.h"
#include "daemon/record/stack_sites.h"
#include "daemon/record/translate.h"
#include "daemon/record/unwind.h"
#include "uprobes/uprobes.h"

/* A run with no tick for this long of trace time is written by
 * long_poll_flush: its thread was preempted that long, or exited. */
#define LONG_POLL_IDLE_NS (1000 * 1000000ull)
/* What the metadata and the report promise of each D9LongPollEvent: it
 * lasted at least this long (D9_LONG_POLL_ROUTE). Two ticks half a
 * millisecond of CPU apart prove only half of it. */
#define LONG_POLL_MIN_NS (1000 * 1000ull)

struct lp_range {
        uint64_t lo, hi;        /* [lo, hi): the poll function, link-time */
        uint32_t cookie;
        bool blocking;          /* a blocking-pool task's poll */
};

/* A long poll seen from outside, lasting at least min_ns: from its first
 * to its last tick ("running"; ticks counts them, and the poll began up to
 * a tick of the thread's CPU time earlier and ended up to one later), the
 * worker's voluntary off-CPU interval inside it ("blocked", ticks 0), or
 * its preemption inside it with fewer than two ticks ("preempted": the
 * poll had the worker that long, most of it waiting for a CPU; "yielded"
 * when the thread gave the CPU up itself, sched_yield: a spin-wait, npm
 * codex's longest poll, 35 ms, read "preempted"). waited_ns: how much of
 * it the thread spent switched out still runnable (preemptions of at
 * least offcpu_min; a "running" poll that mostly waited for a CPU, npm
 * codex-acp: 306 ms, 10 ticks, 11 runnable off-CPU samples in it). No upper
 * bound is claimed: the thread may have been preempted around the ends.
 * Written at its end (ts); dial9's readers skip it, d9's keep it. */
static const struct d9_field_def long_poll_fields[] = {
        { "worker_id", D9_T_VARINT },
        { "tid", D9_T_VARINT },
        { "spawn_loc", D9_T_POOLED_STRING },
        { "min_ns", D9_T_VARINT },
        { "ticks", D9_T_VARINT },
        { "how", D9_T_POOLED_STRING },
        { "stack", D9_T_POOLED_STACK },
        { "waited_ns", D9_T_VARINT },
};
static const struct d9_schema_def long_poll_schema = { "D9LongPollEvent", 8, long_poll_fields };

static int by_lo(const void *a, const void *b)
{
        const struct lp_range *x = a, *y = b;

        return x->lo < y->lo ? -1 : x->lo > y->lo;
}

static int unwinder_vaddr(void *ctx, uint64_t addr, uint64_t *vaddr)
{
        struct translate *tr = ctx;

        return tr->unw ? unwinder_link_vaddr(tr->unw, addr, tr->plan->build_id, vaddr) : -ENOENT;
}

static int unwinder_fn_of(const struct translate *tr, uint64_t addr, uint64_t *fn)
{
        return tr->unw ? unwinder_fn_start(tr->unw, addr, fn) : -ENOENT;
}

int long_poll_ranges(struct translate *tr, long_poll_vaddr_fn vaddr_of, void *ctx)
{
        const struct probe_plan *p = tr->plan;

        if (!p)
                return 0;
        long_poll_free(tr);
        tr->lp_ranges = calloc(p->n_points ? p->n_points : 1, sizeof(*tr->lp_ranges));
        tr->launch_polls = calloc(p->n_points ? p->n_points : 1, 1);
        if (!tr->lp_ranges || !tr->launch_polls) {
                long_poll_free(tr);
                return -ENOMEM;
        }
        for (size_t i = 0; i < p->n_points; i++) {
                const struct probe_point *pt = &p->points[i];

                uint64_t lo = pt->func_start ? pt->func_start : pt->vaddr;

                if (pt->kind == PROBE_POLL && pt->func_end > lo)
                        tr->lp_ranges[tr->n_lp_ranges++] = (struct lp_range){
                                lo, pt->func_end, (uint32_t)pt->cookie, pt->blocking_task };
        }
        qsort(tr->lp_ranges, tr->n_lp_ranges, sizeof(*tr->lp_ranges), by_lo);
        tr->lp_vaddr_of = vaddr_of ? vaddr_of : unwinder_vaddr;
        tr->lp_ctx = vaddr_of ? ctx : tr;
        tr->lp_fn_of = unwinder_fn_of;
        return 0;
}

int long_poll_enable(struct translate *tr, uint64_t period_ns, long_poll_vaddr_fn vaddr_of, void *ctx)
{
        int r = long_poll_ranges(tr, vaddr_of, ctx);

        if (r < 0 || !tr->plan)
                return r;
        tr->run_period_ns = period_ns;
        tr->stack_workers = true;
        return 0;
}

void long_poll_free(struct translate *tr)
{
        free(tr->lp_ranges);
        free(tr->launch_polls);
        tr->lp_ranges = NULL;
        tr->launch_polls = NULL;
        tr->n_lp_ranges = 0;
        stack_sites_free(tr);
}

int long_poll_declare(struct translate *tr)
{
        int r = d9_enc_declare(tr->enc, &long_poll_schema);

        if (r >= 0)
                tr->long_poll_schema = r;
        return r < 0 ? r : 0;
}

static const struct lp_range *range_of(const struct translate *tr, uint64_t vaddr)
{
        size_t lo = 0, hi = tr->n_lp_ranges;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;

                if (tr->lp_ranges[mid].lo <= vaddr)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        if (!lo || vaddr >= tr->lp_ranges[lo - 1].hi)
                return NULL;
        return &tr->lp_ranges[lo - 1];
}

/* The poll function a frame lies in, or NULL; *v: the frame's link-time
 * address. */
static const struct lp_range *frame_range(const struct translate *tr, uint64_t addr, uint64_t *v)
{
        return tr->lp_vaddr_of(tr->lp_ctx, addr, v) < 0 ? NULL : range_of(tr, *v);
}

/* Whether the task poll frame frames[i] called into Tokio's own code
 * around the future (the plan's harness_sites), so the thread is not in
 * the future: after it returned, rescheduling a task that woke itself
 * (npm endform-proxy-network, 236 of 257 "preempted" long polls at
 * Schedule::yield_now <- Harness::poll), or before it. v is the frame's
 * link-time address; a caller's frame is its return address - 1; the leaf
 * (i == n_kern) is where the poll function itself ran, which may be the
 * future inlined. */
static bool in_harness(const struct translate *tr, uint64_t v, uint32_t i, uint32_t n_kern)
{
        return i > n_kern && probe_plan_harness_site(tr->plan, v + 1);
}

uint32_t long_poll_task_frame(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern)
{
        for (uint32_t i = n_kern; tr->n_lp_ranges && i < n; i++) {
                uint64_t v;
                const struct lp_range *r = frame_range(tr, frames[i], &v);

                if (r && !r->blocking)
                        return in_harness(tr, v, i, n_kern) ? 0 : r->cookie + 1;
        }
        return 0;
}

/* Blocking poll launch (cookie + 1) launches worker loops: a stack shows
 * a task poll above it. */
static void launch_seen(struct translate *tr, uint32_t launch)
{
        tr->launch_polls[launch - 1] |= LAUNCH_SEEN;
        tr->launch_known = true;
}

uint32_t long_poll_job_frame(struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern)
{
        uint32_t task = 0, outer = 0;

        for (uint32_t i = n_kern; tr->n_lp_ranges && i < n; i++) {
                uint64_t v;
                const struct lp_range *r = frame_range(tr, frames[i], &v);

                if (r && r->blocking)
                        outer = r->cookie + 1;
                else if (r && !task)
                        task = r->cookie + 1;
        }
        if (task && outer)
                launch_seen(tr, outer);
        if (task || !outer || !tr->launch_known || (tr->launch_polls[outer - 1] & LAUNCH_SEEN))
                return 0;
        return outer;
}

bool long_poll_blocking_frame(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern)
{
        for (uint32_t i = n_kern; tr->n_lp_ranges && i < n; i++) {
                uint64_t v;
                const struct lp_range *r = frame_range(tr, frames[i], &v);

                if (r && r->blocking)
                        return true;
        }
        return false;
}

/* No poll at all, inside the pool's loop: a pool thread between jobs, the
 * pool's (254) before its first job too (npm rari: 43 % of its pool
 * threads' samples read 255, idle since before the attach). A worker's
 * thread is in that loop too, but always under its launch's blocking
 * poll; told apart once the plan's launch frames are known to show (a
 * stack showed one under a task poll) or BPF has said the thread runs no
 * loop. */
static void pool_idle(const struct translate *tr, struct tr_thread *t, const uint64_t *frames, uint32_t n,
                      uint32_t n_kern)
{
        if (t->worker == D9_WORKER_NONE && !t->pool_thread && (tr->launch_known || t->stacks_unnamed) &&
            stack_sites_in_pool_run(tr, t, frames, n, n_kern))
                t->pool_thread = true;
}

void long_poll_on_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, const uint64_t *frames,
                        uint32_t n, uint32_t n_kern, bool cut)
{
        uint32_t task = 0, launch = 0, depth = 0, job = 0;
        uint64_t callee = 0;
        bool harness = false;

        /* Leaf first: the first task poll frame is the innermost (a nested
         * block_on inside a poll is still that worker's poll), the last
         * blocking one the outermost. */
        for (uint32_t i = n_kern; i < n; i++) {
                uint64_t v;
                const struct lp_range *r = frame_range(tr, frames[i], &v);

                if (!r)
                        continue;
                if (r->blocking) {
                        job = r->cookie + 1;
                        stack_sites_pool_learn(tr, frames, i, n);
                }
                if (!r->blocking && !task) {
                        task = r->cookie + 1;
                        depth = i - n_kern;
                        harness = in_harness(tr, v, i, n_kern);
                        callee = translate_stack_callee(tr, r->cookie, frames, i, n_kern);
                }
                else if (r->blocking && task)
                        launch = r->cookie + 1;
                else if (r->blocking && tr->launch_polls[r->cookie])
                        launch = r->cookie + 1;
        }
        /* A blocking poll below a task poll is the worker's launch; below a
         * worker BPF named by its index, a multi-thread worker's. */
        if (task && launch) {
                launch_seen(tr, launch);
                if (t->worker < TR_MAX_WORKERS && tr->ws.w[t->worker].index)
                        tr->launch_polls[launch - 1] |= LAUNCH_NAMED;
                /* The blocking poll taken for a job launched this loop
                 * after all: block_in_place's loops are launched by
                 * another function than the runtime's, at a depth BPF's
                 * Worker search may not read (npm sideseat: the thread
                 * holding worker 0 read as the pool's for a whole
                 * recording). */
                if (t->pool_job == launch) {
                        t->pool_thread = false;
                        t->pool_job = 0;
                }
        }
        t->lp_stack = stack_id;
        /* Still a worker's stack (below), but in no poll. */
        t->lp_poll = harness ? 0 : task;
        t->lp_depth = depth;
        t->lp_callee = callee;
        t->lp_launch = launch;
        /* A stack cut before its poll frame reads as none (stack_sites.h). */
        if (!cut)
                stack_sites_learn(tr, frames, n, n_kern, t->lp_poll, t->lp_callee);
        else if (!task && !job && stack_sites_poll(tr, frames, n, n_kern, &t->lp_poll, &t->lp_callee))
                tr->cut_in_poll_by_site++;
        /* A launch frame alone made a worker only where BPF does not say
         * which loop a thread runs: where it does, that says (a job whose
         * pool code looks like a worker's launch is no worker). With poll
         * uprobes (all,longpoll) the polls say which worker a thread is,
         * and ids by thread are theirs to give (poll_worker). */
        if (!tr->workers_from_polls && (task || (launch && !t->stacks_looked)))
                translate_thread_worker(tr, t);
        /* A blocking-pool poll with no task poll above it, on a thread BPF
         * says runs no worker loop, and not a loop's launch: a
         * spawn_blocking job. Its samples are the pool's (254), as with
         * poll uprobes, not "no worker" (255). While BPF has not answered
         * for the thread (still searching the build), an idle worker in its
         * launch looks the same: BPF's first answer decides
         * (translate_stack_worker). npm sandbox-agent: a pool thread's job
         * seen only in the search's first 9 ms left its next 86 samples,
         * idle between jobs for 0.7 s, on no worker. */
        if (!task && job && t->worker == D9_WORKER_NONE && !(tr->launch_polls[job - 1] & LAUNCH_SEEN)) {
                if (t->stacks_unnamed)
                        long_poll_pool_job(tr, t, job);
                else
                        t->job_unanswered = job;
        }
        if (!task && !job)
                pool_idle(tr, t, frames, n, n_kern);
}

void long_poll_pool_on_stack(struct translate *tr, struct tr_thread *t, const uint64_t *frames, uint32_t n,
                             uint32_t n_kern)
{
        bool task = false, job = false;

        for (uint32_t i = n_kern; tr->n_lp_ranges && i < n; i++) {
                uint64_t v;
                const struct lp_range *r = frame_range(tr, frames[i], &v);

                if (r && r->blocking) {
                        job = true;
                        stack_sites_pool_learn(tr, frames, i, n);
                        if (task)
                                launch_seen(tr, r->cookie + 1);
                } else if (r) {
                        task = true;
                }
        }
        if (!task && !job)
                pool_idle(tr, t, frames, n, n_kern);
}

void long_poll_pool_job(const struct translate *tr, struct tr_thread *t, uint32_t job)
{
        if (tr->launch_polls[job - 1] & LAUNCH_SEEN)
                return;
        if (!t->pool_thread)
                t->pool_job = job;
        t->pool_thread = true;
}

/* A stall for full_on_stall: counted, the session's tick acts on it. */
static void long_poll_stall(struct translate *tr, uint64_t ns)
{
        if (!tr->stall_ns || ns < tr->stall_ns)
                return;
        tr->stalls++;
        tr->stalls_in_window += tr->window_open;
}

/* A run already past the stall threshold counts now, not at its end:
 * --full-on-stall opens its window while that poll still runs (a poll that
 * never ends opened none). */
static void run_stall_so_far(struct translate *tr, struct tr_thread *t)
{
        if (!t->run_stalled && tr->stall_ns && t->run_last - t->run_first >= tr->stall_ns &&
            (t->run_n >= 2 || t->run_preempted)) {
                long_poll_stall(tr, t->run_last - t->run_first);
                t->run_stalled = true;
        }
}

int long_poll_write(struct translate *tr, const struct tr_thread *t, const struct long_poll_seen *lp)
{
        struct d9_enc_value v[8];
        int r;

        v[0] = (struct d9_enc_value){ .present = true, .u = t->worker < D9_WORKER_BLOCKING ? t->worker : 255 };
        v[1] = (struct d9_enc_value){ .present = true, .u = t->tid };
        /* A boxed future's is named by the function its poll frame called,
         * never the box (npm endform-proxy-network: 254 of 257 long polls
         * said Pin<Box<dyn Future>>, their stacks Instrumented<T>). */
        v[2] = (struct d9_enc_value){ .present = true, .atom = translate_stack_label_atom(tr, lp->cookie, lp->callee) };
        v[3] = (struct d9_enc_value){ .present = true, .u = lp->min_ns };
        v[4] = (struct d9_enc_value){ .present = true, .u = lp->ticks };
        v[5] = (struct d9_enc_value){ .present = true };
        v[6] = (struct d9_enc_value){ .present = true, .atom = lp->stack_atom };
        v[7] = (struct d9_enc_value){ .present = true, .u = lp->waited_ns };
        r = d9_enc_intern_string(tr->enc, lp->how, strlen(lp->how), &v[5].atom);
        if (r == 0)
                r = d9_enc_event(tr->enc, tr->long_poll_schema, lp->ts, v);
        tr->long_polls += r == 0;
        return r;
}

static int run_close(struct translate *tr, struct tr_thread *t)
{
        struct long_poll_seen lp = {
                .cookie = t->run_poll - 1, .callee = t->run_callee, .min_ns = t->run_last - t->run_first,
                .ticks = t->run_n,
                .waited_ns = t->run_off_ns,
                .how = t->run_n >= 2 ? "running" : t->run_yielded ? "yielded" : "preempted", .ts = t->run_last,
                .stack_atom = t->run_gen == tr->enc_gen ? t->run_stack_atom : tr->empty_stack,
        };
        int r;

        t->run_poll = 0;
        /* One tick in the poll says nothing about its length; a preemption
         * inside it does (from the tick, or the switch-out, to switch-in). */
        if ((t->run_n < 2 && !t->run_preempted) || lp.min_ns < LONG_POLL_MIN_NS)
                return 0;
        r = long_poll_write(tr, t, &lp);
        if (r < 0)
                return r;
        tr->events++;
        if (!t->run_stalled)
                long_poll_stall(tr, lp.min_ns);
        return 0;
}

int long_poll_on_run(struct translate *tr, struct tr_thread *t, const struct d9_rec_run *rec,
                     const uint64_t *frames, uint32_t n)
{
        bool same = t->lp_stack == rec->stack_id;
        uint32_t poll = same ? t->lp_poll : 0, launch = same ? t->lp_launch : 0;
        int r = 0;

        /* A stack that reaches neither a task poll nor the launch frame
         * (the unwind stopped early, e.g. in the vDSO) does not end a run:
         * only a new stretch, another poll frame, or the worker loop outside
         * any task poll (launch frame, no task frame) shows the poll ended. */
        if (!poll && !launch && rec->since_ts == t->run_since)
                return 0;
        if (t->run_poll && (poll != t->run_poll || rec->since_ts != t->run_since))
                r = run_close(tr, t);
        if (r < 0 || !poll)
                return r;
        if (!t->run_poll) {
                t->run_poll = poll;
                t->run_callee = t->lp_callee;
                t->run_since = rec->since_ts;
                t->run_first = rec->hdr.ts;
                t->run_n = 0;
                t->run_depth = 0;
                t->run_gen = 0;
                t->run_preempted = false;
                t->run_yielded = false;
                t->run_off_ns = 0;
                t->run_stalled = false;
        }
        t->run_last = rec->hdr.ts;
        t->run_n++;
        run_stall_so_far(tr, t);
        /* The run's stack is its tick deepest inside the poll: the work
         * that kept it running (a busy loop's body), not the poll's own few
         * instructions before or after it, where a tick lands now and then.
         * Its label too: a boxed future is named by what the poll frame
         * called, and a first tick in the box's own poll, before the call,
         * named nothing (a CI run under load: 2 of 20 spins of one boxed
         * future unlabelled, their deepest stacks those of the 18 others). */
        if ((t->lp_depth >= t->run_depth || t->run_gen != tr->enc_gen) &&
            d9_enc_intern_stack(tr->enc, frames, n, &t->run_stack_atom) == 0) {
                t->run_gen = tr->enc_gen;
                t->run_depth = t->lp_depth;
                if (t->lp_callee)
                        t->run_callee = t->lp_callee;
        }
        return 0;
}

/* x86-64's sched_yield: a thread that gives its CPU up itself switches
 * out still runnable, as a preempted one does (d9_rec_offcpu.syscall is
 * the number + 1). */
#define SYS_SCHED_YIELD 24

int long_poll_on_preempt(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o, uint32_t stack)
{
        bool yielded = o->syscall == SYS_SCHED_YIELD + 1;
        int r = 0;

        if (!o->stack_id || t->lp_stack != o->stack_id || !t->lp_poll)
                return 0;
        /* Its stack is the poll frame the run is in, and no voluntary
         * switch-out came between (same stretch): it was in that poll when
         * switched out, so it still is when switched back in. */
        if (t->run_poll == t->lp_poll && (!o->run_since || o->run_since == t->run_since)) {
                uint64_t from = o->off_ts > t->run_first ? o->off_ts : t->run_first;

                if (o->hdr.ts > t->run_last)
                        t->run_last = o->hdr.ts;
                t->run_off_ns += o->hdr.ts > from ? o->hdr.ts - from : 0;
                t->run_preempted = true;
                t->run_yielded |= yielded;
                run_stall_so_far(tr, t);
                return 0;
        }
        /* A poll with no tick yet (under a tick of CPU time, then preempted:
         * on a loaded machine or a CPU-throttled cgroup the usual way a short
         * poll holds its worker for milliseconds). Its run starts at the
         * switch-out, in the stretch BPF names: ticks of that stretch in the
         * same frame go on with it. (Without one, a tick after it ends it,
         * so a poll that then runs on is written twice, each piece a true
         * lower bound.) */
        if (t->run_poll)
                r = run_close(tr, t);
        if (r < 0)
                return r;
        t->run_poll = t->lp_poll;
        t->run_callee = t->lp_callee;
        t->run_since = o->run_since;
        t->run_first = o->off_ts;
        t->run_last = o->hdr.ts;
        t->run_n = 0;
        t->run_depth = t->lp_depth;
        t->run_stack_atom = stack;
        t->run_gen = tr->enc_gen;
        t->run_preempted = true;
        t->run_yielded = yielded;
        t->run_off_ns = o->hdr.ts - o->off_ts;
        t->run_stalled = false;
        run_stall_so_far(tr, t);
        return 0;
}

int long_poll_on_offcpu(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o, uint32_t stack)
{
        struct long_poll_seen lp = { .min_ns = o->hdr.ts - o->off_ts, .how = "blocked", .ts = o->hdr.ts,
                                     .stack_atom = stack };
        int r = 0;

        if (t->run_poll)
                r = run_close(tr, t);
        if (r < 0 || !o->stack_id || t->lp_stack != o->stack_id || !t->lp_poll)
                return r;
        lp.cookie = t->lp_poll - 1;
        lp.callee = t->lp_callee;
        r = long_poll_write(tr, t, &lp);
        if (r < 0)
                return r;
        long_poll_stall(tr, lp.min_ns);
        return 1;
}

int long_poll_flush(struct translate *tr, bool all)
{
        /* Idle by the trace's own clock (the newest record drained), not
         * the wall clock: a drain running behind on a loaded machine made
         * every open run look idle and split 50 ms polls into pieces.
         * Preempted threads tick no more until they run again, so the idle
         * time is long; a run's usual end is its thread's next tick or
         * sleep. */
        for (size_t i = 0; tr->stack_workers && i < tr->threads_cap; i++) {
                struct tr_thread *t = &tr->threads[i];
                int r;

                if (!t->tid || !t->run_poll || (!all && t->run_last + LONG_POLL_IDLE_NS > tr->last_ts))
                        continue;
                if ((r = run_close(tr, t)) < 0)
                        return r;
        }
        return 0;
}
