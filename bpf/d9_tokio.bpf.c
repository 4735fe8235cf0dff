/* d9_tokio.bpf.c: uprobes inside a Tokio runtime (see design.md §3).
 *
 * Loaded once; attached per target at the file offsets of that target's
 * probe plan, with a pid filter so other processes running the same
 * binary neither pay nor appear. The BPF cookie of every attachment is
 * the plan point's cookie, so records name the exact poll<T,S> instance.
 *
 * Which Tokio functions, and why:
 * - raw::poll<T,S> entry: one per future type, called through the task
 *   vtable so never inlined; arg0 is the task Header*. The task id is
 *   read here, at entry, because at return the task may be freed.
 * - poll end: a uretprobe (or uprobes on its return sites), or nothing at
 *   all in entry-only mode, where the next poll (in user space, from its
 *   POLL_START) or park (a POLL_END here) on the thread closes the open
 *   poll (the cheapest, see the loader's poll_end option).
 * - OwnedTasks::bind return (rax) or bind_inner entry (arg1): the new
 *   task's Header* (spawn).
 * - Harness::complete entry: arg0 is the Header* (terminate).
 * - waker::wake_by_val entry: arg0 is the woken task's Header*.
 * - the worker park function entry/return: a key that follows the
 *   worker's core (the Parker's Arc, or the Box<Core>).
 * Where each value is (rax, arg0, arg1, *arg0) is the plan's per-point
 * value_from, passed in the cookie's top bits.
 * If Tokio changes these signatures the ids read as 0 (a bad pointer
 * fails the user-memory read) rather than producing wrong records. */
#include "d9_maps.bpf.h"

/* What every hit needs, looked up once at its start (bench/hitcost: each
 * map lookup, clock read or cookie read is paid on the traced thread, and
 * a poll start in entry-only mode writes two records). */
struct d9_hit {
        struct pt_regs *ctx;
        struct d9_target_cfg *cfg;
        struct d9_thread *th;   /* only for the kinds that need it */
        void *ring;
        __u64 cookie;           /* the whole attach cookie */
        __u64 ts;               /* one clock read: all records of a hit share it */
        __u32 tgid, tid;
};

/* The offsets a task vtable holds (the task id's, the scheduler field's),
 * kept per thread for the last vtable seen: vtables are static data, and a
 * worker polls and wakes the same few task types over and over, so most
 * hits skip two user reads (30-60 ns each, bench/hitcost). th may be NULL
 * (spawn, terminate). */
struct d9_vt_offs {
        __u64 id, sched;
};

static __always_inline bool d9_vtable_offs(const struct d9_target_cfg *cfg, struct d9_thread *th,
                                           __u64 vtable, struct d9_vt_offs *o)
{
        if (th && vtable && th->vt == vtable) {
                o->id = th->vt_id_off;
                o->sched = th->vt_sched_off;
                return true;
        }
        o->id = 0;
        o->sched = 0;
        if (bpf_probe_read_user(&o->id, sizeof(o->id), (void *)(vtable + cfg->vtable_id_off_slot)))
                return false;
        /* Observed 32..136; anything huge means this was not a vtable. */
        if (o->id > 4096)
                return false;
        if (cfg->vtable_sched_off_slot &&
            (bpf_probe_read_user(&o->sched, sizeof(o->sched), (void *)(vtable + cfg->vtable_sched_off_slot)) ||
             o->sched > 4096))
                o->sched = 0;
        if (th) {
                th->vt = vtable;
                th->vt_id_off = o->id;
                th->vt_sched_off = o->sched;
        }
        return true;
}

/* id = *(u64*)(hdr + *(u64*)(*(u64*)(hdr + vtable_off) + id_off_slot)).
 * Both offsets come from the plan through d9_targets. With sched, also
 * the task's scheduler field, found the same way through the vtable read
 * once: for a runtime task the Arc of its runtime's Handle, which tells
 * the runtimes of one process apart (docs/probe-plan.md, "Worker
 * identity"); 0 if unreadable. */
static __always_inline __u64 d9_task_id_vt(const struct d9_target_cfg *cfg, struct d9_thread *th, __u64 hdr,
                                           __u64 *sched, __u64 *vtable_out)
{
        struct d9_vt_offs o;
        __u64 vtable = 0, id = 0;

        if (!hdr || bpf_probe_read_user(&vtable, sizeof(vtable),
                                        (void *)(hdr + cfg->header_vtable_off)))
                return 0;
        if (vtable_out)
                *vtable_out = vtable;
        if (!d9_vtable_offs(cfg, th, vtable, &o))
                return 0;
        bpf_probe_read_user(&id, sizeof(id), (void *)(hdr + o.id));
        if (sched && o.sched)
                bpf_probe_read_user(sched, sizeof(*sched), (void *)(hdr + o.sched));
        return id;
}

static __always_inline __u64 d9_task_id_sched(const struct d9_target_cfg *cfg, struct d9_thread *th, __u64 hdr,
                                              __u64 *sched)
{
        return d9_task_id_vt(cfg, th, hdr, sched, NULL);
}

static __always_inline __u64 d9_task_id(const struct d9_target_cfg *cfg, struct d9_thread *th, __u64 hdr)
{
        return d9_task_id_vt(cfg, th, hdr, NULL, NULL);
}

/* Which multi-thread worker a thread's loop runs, from the runtime's own
 * structure (docs/probe-plan.md, "Worker identity"). Tokio runs a worker as
 * `run(worker: Arc<Worker>)` (a blocking-pool task: at launch, and again on
 * the thread that takes the core when block_in_place hands it over), and
 * that Arc sits on the loop's stack a few words above every task poll it
 * makes (24-112 bytes above raw::poll's entry in the 1.24 and 1.43 test
 * builds, measured in gdb). Worker is { handle: Arc<Handle>, index: usize,
 * core: AtomicCell<Core> } behind the ArcInner's { strong, weak }, field
 * order left to rustc. So a stack word w with small strong and weak counts
 * at *w, followed by three words of which one is the polled task's own
 * scheduler (the runtime Handle's Arc, read from the task), one a small
 * integer and the third null or a user pointer (the core, taken while the
 * loop runs) is this worker's Arc, and the integer its index: 0..N-1 as
 * Tokio numbers its workers, whichever thread runs the loop, attached
 * mid-run or not, whatever order records arrive in. A Tokio whose Worker
 * changes shape finds none: translate then falls back to the thread
 * (and says so). A current-thread runtime has no Worker; neither has a
 * LocalSet's task (another scheduler): none is found for them. */
#define D9_WK_WORDS 256         /* 2 KiB of stack above the poll's entry */
#define D9_WK_READS 24          /* candidate words dereferenced, at most */
#define D9_WK_TRIES 8           /* scans per loop that may find nothing */
#define D9_WK_MAX_INDEX 4096

struct d9_wk_stack {
        __u64 w[D9_WK_WORDS];
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct d9_wk_stack);
} d9_wk_scratch SEC(".maps");

struct d9_wk_scan {
        struct d9_wk_stack *stk;
        __u64 sp, top, sched;   /* top: the thread pointer, above its stack */
        __u32 words, reads;
        __u32 index;            /* 1 + the worker's index once found */
};

/* v: ArcInner { strong, weak } and the three words of a Worker. */
static __always_inline __u32 d9_worker_index(const __u64 *v, __u64 sched)
{
        __u64 lo, hi, o[2] = {};
        __u32 n = 0;
        bool handle = false;

        if (v[0] - 1 >= (1 << 20) || v[1] - 1 >= (1 << 20))
                return 0;
        for (int j = 2; j < 5; j++) {
                if (v[j] == sched && !handle)
                        handle = true;
                else if (n < 2)
                        o[n++] = v[j];
        }
        if (!handle || n != 2)
                return 0;
        lo = o[0] < o[1] ? o[0] : o[1];
        hi = o[0] < o[1] ? o[1] : o[0];
        if (lo >= D9_WK_MAX_INDEX)
                return 0;
        /* Both small: the core is the null one. */
        if (hi < D9_WK_MAX_INDEX)
                return lo == 0 ? (__u32)hi + 1 : 0;
        return hi < (1ull << 47) && !(hi & 7) ? (__u32)lo + 1 : 0;
}

static long d9_wk_word(__u64 i, void *ctx)
{
        struct d9_wk_scan *s = ctx;
        __u64 w, v[5];

        if (i >= s->words || i >= D9_WK_WORDS || s->reads >= D9_WK_READS)
                return 1;
        w = s->stk->w[i];
        /* A heap pointer: not small, not kernel, aligned, not into the
         * thread's own stack (musl's heap can lie right next to it). */
        if (w < 0x10000 || w >= (1ull << 47) || (w & 7) || (w >= s->sp && w < s->top))
                return 0;
        s->reads++;
        if (bpf_probe_read_user(v, sizeof(v), (void *)w))
                return 0;
        s->index = d9_worker_index(v, s->sched);
        return s->index ? 1 : 0;
}

static __always_inline __u32 d9_worker_find(struct pt_regs *ctx, __u64 sched)
{
        __u32 zero = 0;
        struct d9_wk_scan s = { .sp = PT_REGS_SP(ctx), .sched = sched };

        s.top = bpf_get_current_task_btf()->thread.fsbase;
        if (s.top <= s.sp)
                s.top = s.sp + sizeof(s.stk->w);
        s.stk = bpf_map_lookup_elem(&d9_wk_scratch, &zero);
        if (!s.stk)
                return 0;
        /* The whole window, or less near the top of a small stack. */
        if (!bpf_probe_read_user(s.stk->w, sizeof(s.stk->w), (void *)s.sp))
                s.words = D9_WK_WORDS;
        else if (!bpf_probe_read_user(s.stk->w, 512, (void *)s.sp))
                s.words = 512 / 8;
        else
                return 0;
        bpf_loop(D9_WK_WORDS, d9_wk_word, &s, 0);
        return s.index;
}

/* The worker of the loop this thread runs: known from an earlier poll of
 * this loop, or looked for now (a few tries per loop, so a thread whose
 * stack holds no Worker costs a scan only at its first polls). State left
 * by an earlier recording is forgotten: the thread may have changed loops
 * while nobody watched. */
static __always_inline void d9_worker_learn(const struct d9_hit *h, struct d9_thread *th, __u64 sched)
{
        if (th->wk_ts < h->cfg->since_ts) {
                th->wk_index = 0;
                th->wk_tries = 0;
                th->wk_ts = h->ts;
        }
        if (th->wk_index || th->wk_tries >= D9_WK_TRIES || !sched)
                return;
        th->wk_index = d9_worker_find(h->ctx, sched);
        if (th->wk_index)
                th->wk_rt = sched;
        else
                th->wk_tries++;
}

/* The value this attachment is about, as the plan said (cookie top bits). */
static __always_inline __u64 d9_point_value(const struct d9_hit *h)
{
        __u64 rc = PT_REGS_RC(h->ctx), arg0 = PT_REGS_PARM1(h->ctx);
        __u64 arg1 = PT_REGS_PARM2(h->ctx), v = 0;

        /* Three plain loads, pinned: left to itself clang may turn the
         * switch into one load from ctx + a chosen offset, which the
         * verifier rejects ("dereference of modified ctx ptr"); seen when
         * the code around it changed. */
        barrier_var(rc);
        barrier_var(arg0);
        barrier_var(arg1);
        switch (h->cookie >> D9_COOKIE_ARG_SHIFT) {
        case D9_ARG_RET:
                return rc;
        case D9_ARG_0:
                return arg0;
        case D9_ARG_1:
                return arg1;
        case D9_ARG_0_DEREF:
                bpf_probe_read_user(&v, sizeof(v), (void *)arg0);
                return v;
        default:
                return 0;
        }
}

/* For a poll of a Pin<Box<dyn Future>> task: the concrete future's poll
 * function, read through the box's dyn vtable (its pointer sits at the
 * offset the plan found in the poll's code), so the poll can be labelled
 * with the real future, not "a boxed future". 0 if not boxed. */
static __always_inline __u64 d9_boxed_future_poll(const struct d9_hit *h, __u64 header)
{
        __u64 off = (h->cookie >> D9_COOKIE_DYN_SHIFT) & 0xffff;
        __u64 vtable = 0, fn = 0;

        if (!off || bpf_probe_read_user(&vtable, sizeof(vtable), (void *)(header + off)))
                return 0;
        bpf_probe_read_user(&fn, sizeof(fn),
                            (void *)(vtable + 8 * (__u64)h->cfg->dyn_poll_slot));
        return fn;
}

/* Reserve a record for this hit. A thread's records dropped for a full
 * ring are counted on the thread and the next one written says how many
 * (hdr.lost): user space then knows its own sequence of that thread has a
 * hole there (a worker loop's start, say), not only that the ring lost
 * some record somewhere. */
#define D9_HIT_RESERVE(h, type, T)                                              \
        ({                                                                      \
                T *__hr = D9_RING_RESERVE_CUR((h)->ring, (h)->cfg, (h)->tgid,   \
                                              (h)->tid, type, T, (h)->ts);      \
                if ((h)->th && __hr) {                                          \
                        __hr->hdr.lost = (h)->th->tokio_lost;                   \
                        (h)->th->tokio_lost = 0;                                \
                } else if ((h)->th) {                                           \
                        (h)->th->tokio_lost++;                                  \
                }                                                               \
                __hr;                                                           \
        })

/* Write POLL_END for the poll open on this thread, and forget it. */
static __always_inline void d9_close_poll(const struct d9_hit *h, __u32 why)
{
        struct d9_thread *th = h->th;
        struct d9_rec_task *r;

        if (!th->task_id && !th->header)
                return;
        r = D9_HIT_RESERVE(h, D9_REC_POLL_END, struct d9_rec_task);
        if (r) {
                r->task_id = th->task_id;
                r->cookie = th->cookie;
                r->header = th->header;
                r->start_ts = th->poll_ts;
                r->why = why;
                d9_ring_submit(h->ring, r);
        }
        th->task_id = 0;
        th->header = 0;
}

static __always_inline void d9_unpark_pending(const struct d9_hit *h);

static __always_inline int d9_poll_start(const struct d9_hit *h, bool blocking)
{
        __u64 header = d9_point_value(h), sched = 0;
        struct d9_thread *th = h->th;
        struct d9_rec_task *r;

        /* Entry-only: this start also ends the poll open on the thread, at
         * the same time, so no POLL_END is written for it (one ring record
         * per poll instead of two): user space closes that poll here. */
        if (h->cfg->unpark_at_resume)
                d9_unpark_pending(h);
        th->header = header;
        th->task_id = d9_task_id_sched(h->cfg, th, header, &sched);
        /* A blocking-pool poll begins a new loop or job on the thread: the
         * worker it ran (if any) is no longer known. */
        if (blocking) {
                th->wk_index = 0;
                th->wk_tries = 0;
                th->wk_ts = h->ts;
        } else {
                d9_worker_learn(h, th, sched);
        }
        th->cookie = h->cookie & D9_COOKIE_MASK;
        th->poll_ts = h->ts;
        r = D9_HIT_RESERVE(h, D9_REC_POLL_START, struct d9_rec_task);
        if (r) {
                r->task_id = th->task_id;
                r->cookie = th->cookie;
                r->header = header;
                r->future_poll = d9_boxed_future_poll(h, header);
                r->exe_code = r->future_poll ? BPF_CORE_READ(bpf_get_current_task_btf(), mm, start_code) : 0;
                r->sched = sched;
                if (!blocking && th->wk_index) {
                        r->worker = th->wk_index;
                        r->worker_rt = th->wk_rt;
                }
                d9_ring_submit(h->ring, r);
        }
        return 0;
}

/* Spawn (header = bind's return value, or bind_inner's argument) and
 * terminate (header = arg0 of complete). */
static __always_inline int d9_task_event(const struct d9_hit *h, __u16 type)
{
        __u64 header = d9_point_value(h);
        struct d9_rec_task *r = D9_HIT_RESERVE(h, type, struct d9_rec_task);

        if (!r)
                return 0;
        r->header = header;
        /* A spawn's vtable names its future type (translate.c), as its
         * polls' cookies do: the label at spawn, not only from the
         * first poll. */
        r->task_id = d9_task_id_vt(h->cfg, NULL, header, NULL, type == D9_REC_SPAWN ? &r->vtable : NULL);
        /* record -- CMD: the first spawns come before any read of the
         * target's map, and the vtable is named only where the code is. */
        if (type == D9_REC_SPAWN)
                r->exe_code = BPF_CORE_READ(bpf_get_current_task_btf(), mm, start_code);
        r->cookie = h->cookie & D9_COOKIE_MASK;
        d9_ring_submit(h->ring, r);
        return 0;
}

static __always_inline int d9_wake(const struct d9_hit *h)
{
        __u64 header = d9_point_value(h);
        struct d9_rec_wake *r = D9_HIT_RESERVE(h, D9_REC_WAKE, struct d9_rec_wake);

        if (!r)
                return 0;
        r->woken_task_id = d9_task_id(h->cfg, h->th, header);
        r->waker_task_id = h->th->task_id;
        r->cookie = h->cookie & D9_COOKIE_MASK;
        d9_ring_submit(h->ring, r);
        return 0;
}

/* The thread's CPU time and run-queue wait so far. task is a trusted BTF
 * pointer: plain (CO-RE relocated) loads, not a probe_read each. */
static __always_inline void d9_park_event(const struct d9_hit *h, __u16 type)
{
        struct task_struct *task = bpf_get_current_task_btf();
        struct d9_rec_park *r = D9_HIT_RESERVE(h, type, struct d9_rec_park);

        if (!r)
                return;
        r->park_key = h->th->park_key;
        r->cpu_ns = task->se.sum_exec_runtime;
        r->run_delay_ns = task->sched_info.run_delay;
        r->cookie = h->cookie & D9_COOKIE_MASK;
        if (h->th->wk_index && h->th->wk_ts >= h->cfg->since_ts) {
                r->worker = h->th->wk_index;
                r->worker_rt = h->th->wk_rt;
        }
        d9_ring_submit(h->ring, r);
}

/* unpark_at_resume: a park the scheduler did not end (it never slept, or
 * the sched side is off) ends at the thread's next poll or park. */
static __always_inline void d9_unpark_pending(const struct d9_hit *h)
{
        if (h->th->parked) {
                h->th->parked = 0;
                d9_park_event(h, D9_REC_UNPARK);
        }
}

static __always_inline int d9_park(const struct d9_hit *h)
{
        if (h->cfg->entry_only)
                d9_close_poll(h, D9_END_PARK);
        if (h->cfg->unpark_at_resume)
                d9_unpark_pending(h);
        h->th->park_key = d9_point_value(h);
        d9_park_event(h, D9_REC_PARK);
        h->th->parked = h->cfg->unpark_at_resume;
        return 0;
}

/* One program for every Tokio probe point, so a target needs just two
 * uprobe_multi links (entries, returns): each link costs a synchronous
 * RCU-tasks grace period when it is destroyed, and detach must stay fast.
 * The cookie's kind bits say what the point is. */
SEC("uprobe")
int d9_tokio_probe(struct pt_regs *ctx)
{
        __u64 id = bpf_get_current_pid_tgid();
        struct d9_hit h = {
                .ctx = ctx,
                .cookie = bpf_get_attach_cookie(ctx),
                .tgid = id >> 32,
                .tid = (__u32)id,
        };
        __u32 kind = (h.cookie >> D9_COOKIE_KIND_SHIFT) & 0xff;

        h.cfg = d9_target_of(h.tgid);
        if (!h.cfg || h.cfg->uprobes_off)
                return 0;
        h.ring = d9_ring_of(h.tgid);
        /* Spawn and terminate are the only kinds without thread state of
         * their own (they use it only to count drops, if the thread has it). */
        if (kind == D9_POINT_SPAWN || kind == D9_POINT_TERMINATE) {
                h.th = bpf_task_storage_get(&d9_threads, bpf_get_current_task_btf(), 0, 0);
                h.ts = bpf_ktime_get_ns();
                return d9_task_event(&h, kind == D9_POINT_SPAWN ? D9_REC_SPAWN : D9_REC_TERMINATE);
        }
        h.th = bpf_task_storage_get(&d9_threads, bpf_get_current_task_btf(), 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (!h.th)
                return 0;
        h.ts = bpf_ktime_get_ns();
        /* The kinds with thread state test it again, for the verifier:
         * clang may test kind through another register than the one above,
         * and the verifier then cannot tell that th is set. */
        switch (kind) {
        case D9_POINT_POLL:
                return h.th ? d9_poll_start(&h, false) : 0;
        case D9_POINT_POLL_BLOCKING:
                return h.th ? d9_poll_start(&h, true) : 0;
        case D9_POINT_POLL_END:
                if (!h.th)
                        return 0;
                /* A uretprobe on raw::poll or a uprobe on one of its return sites. */
                d9_close_poll(&h, D9_END_RETURN);
                return 0;
        case D9_POINT_WAKE:
                return h.th ? d9_wake(&h) : 0;
        case D9_POINT_PARK:
                return h.th ? d9_park(&h) : 0;
        case D9_POINT_UNPARK:
                if (!h.th)
                        return 0;
                /* A uretprobe on the park function. */
                d9_park_event(&h, D9_REC_UNPARK);
                return 0;
        }
        return 0;
}
