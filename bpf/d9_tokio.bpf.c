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

/* A blocking-pool task's future, read at its poll's entry (the task still
 * holds it: BlockingTask::poll takes the closure out only then). Its cell
 * is repr(C) Core { scheduler, task_id, stage }, so the stage starts right
 * after the id. A worker loop's task (Tokio's Launch and block_in_place
 * both spawn `move || run(worker)`) holds one Arc<Worker>. Its stage
 * `Stage::Running(BlockingTask(Some(closure)))` starts with a tag word
 * and the Arc follows at +8: Tokio 1.43 (a NonZero task id) tags Stage
 * directly, Running = 0 in the word's low bytes, the rest padding (seen
 * holding stale bytes: 0x7f0e00000000); 1.24 (a plain u64 id) gives
 * Result<(), JoinError> a tag word and Stage takes its next value,
 * Running = 2 (checked in gdb on both builds). So the key is the second
 * word if the first's low byte is a tag (0..3) and the second a user
 * address. Every worker loop of one worker carries the same Arc,
 * whichever thread runs it, so it is the
 * core's identity on a build without park probes (docs/probe-plan.md,
 * "Worker identity"). For any other job it is just a word of its closure:
 * translate uses it only when runtime tasks are polled inside the job. */
static __always_inline __u64 d9_run_key(__u64 stage)
{
        __u64 w[2] = {};

        if (bpf_probe_read_user(w, sizeof(w), (void *)stage) || (w[0] & 0xff) > 3)
                return 0;
        return w[1] >= 4096 && w[1] < (1ull << 47) && !(w[1] & 7) ? w[1] : 0;
}

/* id = *(u64*)(hdr + *(u64*)(*(u64*)(hdr + vtable_off) + id_off_slot)).
 * Both offsets come from the plan through d9_targets. With sched, also
 * the task's scheduler field, found the same way through the vtable read
 * once: for a runtime task the Arc of its runtime's Handle, which tells
 * the runtimes of one process apart (docs/probe-plan.md, "Worker
 * identity"); 0 if unreadable. */
static __always_inline __u64 d9_task_id_sched(const struct d9_target_cfg *cfg, struct d9_thread *th, __u64 hdr,
                                              __u64 *sched, __u64 *run_key)
{
        struct d9_vt_offs o;
        __u64 vtable = 0, id = 0;

        if (!hdr || bpf_probe_read_user(&vtable, sizeof(vtable),
                                        (void *)(hdr + cfg->header_vtable_off)))
                return 0;
        if (!d9_vtable_offs(cfg, th, vtable, &o))
                return 0;
        bpf_probe_read_user(&id, sizeof(id), (void *)(hdr + o.id));
        if (sched && o.sched)
                bpf_probe_read_user(sched, sizeof(*sched), (void *)(hdr + o.sched));
        if (run_key)
                *run_key = d9_run_key(hdr + o.id + 8);
        return id;
}

static __always_inline __u64 d9_task_id(const struct d9_target_cfg *cfg, struct d9_thread *th, __u64 hdr)
{
        return d9_task_id_sched(cfg, th, hdr, NULL, NULL);
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
        __u64 header = d9_point_value(h), sched = 0, run_key = 0;
        struct d9_thread *th = h->th;
        struct d9_rec_task *r;

        /* Entry-only: this start also ends the poll open on the thread, at
         * the same time, so no POLL_END is written for it (one ring record
         * per poll instead of two): user space closes that poll here. */
        if (h->cfg->unpark_at_resume)
                d9_unpark_pending(h);
        th->header = header;
        th->task_id = d9_task_id_sched(h->cfg, th, header, &sched, blocking ? &run_key : NULL);
        /* The loop a runtime task is polled in is the thread's last
         * blocking-pool poll (a worker runs task polls only inside its
         * loop, `run`): every task poll carries that loop's key, so the
         * worker is known even if the ring dropped the loop's own record. */
        if (blocking) {
                th->run_key = run_key;
                th->run_key_ts = h->ts;
        }
        th->cookie = h->cookie & D9_COOKIE_MASK;
        th->poll_ts = h->ts;
        r = D9_HIT_RESERVE(h, D9_REC_POLL_START, struct d9_rec_task);
        if (r) {
                r->task_id = th->task_id;
                r->cookie = th->cookie;
                r->header = header;
                r->future_poll = d9_boxed_future_poll(h, header);
                r->sched = sched;
                r->run_key = blocking ? run_key : th->run_key;
                r->start_ts = blocking ? 0 : th->run_key_ts;
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
        r->task_id = d9_task_id(h->cfg, NULL, header);
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
