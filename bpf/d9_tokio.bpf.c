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
 *   all in entry-only mode, where the next poll or park on the thread
 *   closes the open poll (the cheapest, see the loader's poll_end option).
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

/* id = *(u64*)(hdr + *(u64*)(*(u64*)(hdr + vtable_off) + id_off_slot)).
 * Both offsets come from the plan through d9_targets. */
static __always_inline __u64 d9_task_id(const struct d9_target_cfg *cfg, __u64 hdr)
{
        __u64 vtable = 0, id_off = 0, id = 0;

        if (!hdr || bpf_probe_read_user(&vtable, sizeof(vtable),
                                        (void *)(hdr + cfg->header_vtable_off)))
                return 0;
        if (bpf_probe_read_user(&id_off, sizeof(id_off),
                                (void *)(vtable + cfg->vtable_id_off_slot)))
                return 0;
        /* Observed 32..136; anything huge means this was not a vtable. */
        if (id_off > 4096)
                return 0;
        bpf_probe_read_user(&id, sizeof(id), (void *)(hdr + id_off));
        return id;
}

/* The value this attachment is about, as the plan said (cookie top bits). */
static __always_inline __u64 d9_point_value(struct pt_regs *ctx)
{
        __u64 how = bpf_get_attach_cookie(ctx) >> D9_COOKIE_ARG_SHIFT, v = 0;

        switch (how) {
        case D9_ARG_RET:
                return PT_REGS_RC(ctx);
        case D9_ARG_0:
                return PT_REGS_PARM1(ctx);
        case D9_ARG_1:
                return PT_REGS_PARM2(ctx);
        case D9_ARG_0_DEREF:
                bpf_probe_read_user(&v, sizeof(v), (void *)PT_REGS_PARM1(ctx));
                return v;
        default:
                return 0;
        }
}

static __always_inline __u64 d9_point_cookie(struct pt_regs *ctx)
{
        return bpf_get_attach_cookie(ctx) & D9_COOKIE_MASK;
}

/* For a poll of a Pin<Box<dyn Future>> task: the concrete future's poll
 * function, read through the box's dyn vtable (its pointer sits at the
 * offset the plan found in the poll's code), so the poll can be labelled
 * with the real future, not "a boxed future". 0 if not boxed. */
static __always_inline __u64 d9_boxed_future_poll(struct pt_regs *ctx,
                                                  const struct d9_target_cfg *cfg,
                                                  __u64 header)
{
        __u64 off = (bpf_get_attach_cookie(ctx) >> D9_COOKIE_DYN_SHIFT) & 0xffff;
        __u64 vtable = 0, fn = 0;

        if (!off || bpf_probe_read_user(&vtable, sizeof(vtable), (void *)(header + off)))
                return 0;
        bpf_probe_read_user(&fn, sizeof(fn), (void *)(vtable + 8 * (__u64)cfg->dyn_poll_slot));
        return fn;
}

static __always_inline struct d9_target_cfg *d9_current_target(__u32 *tgid, __u32 *tid)
{
        __u64 id = bpf_get_current_pid_tgid();

        *tgid = id >> 32;
        *tid = (__u32)id;
        return d9_target_of(*tgid);
}

static __always_inline struct d9_thread *d9_current_thread(void)
{
        return bpf_task_storage_get(&d9_threads, bpf_get_current_task_btf(), 0,
                                    BPF_LOCAL_STORAGE_GET_F_CREATE);
}

/* Write POLL_END for the poll open on this thread, and forget it. */
static __always_inline void d9_close_poll(struct d9_target_cfg *cfg, __u32 tgid,
                                          __u32 tid, struct d9_thread *th, __u32 why)
{
        struct d9_rec_task *r;

        if (!th->task_id && !th->header)
                return;
        r = D9_RESERVE_CUR(cfg, tgid, tid, D9_REC_POLL_END, struct d9_rec_task);
        if (r) {
                r->task_id = th->task_id;
                r->cookie = th->cookie;
                r->header = th->header;
                r->start_ts = th->poll_ts;
                r->why = why;
                d9_submit(tgid, r);
        }
        th->task_id = 0;
        th->header = 0;
}

static __always_inline int d9_poll_start(struct pt_regs *ctx)
{
        __u64 header = d9_point_value(ctx);
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_thread *th;
        struct d9_rec_task *r;

        if (!cfg || !(th = d9_current_thread()))
                return 0;
        if (cfg->entry_only)
                d9_close_poll(cfg, tgid, tid, th, D9_END_NEXT_POLL);
        r = D9_RESERVE_CUR(cfg, tgid, tid, D9_REC_POLL_START, struct d9_rec_task);
        th->header = header;
        th->task_id = d9_task_id(cfg, header);
        th->cookie = d9_point_cookie(ctx);
        th->poll_ts = r ? r->hdr.ts : bpf_ktime_get_ns();
        if (r) {
                r->task_id = th->task_id;
                r->cookie = th->cookie;
                r->header = th->header;
                r->future_poll = d9_boxed_future_poll(ctx, cfg, header);
                d9_submit(tgid, r);
        }
        return 0;
}

/* A uretprobe on raw::poll or a uprobe on one of its return sites. */
static __always_inline int d9_poll_end(struct pt_regs *ctx)
{
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_thread *th;

        if (!cfg || !(th = d9_current_thread()))
                return 0;
        d9_close_poll(cfg, tgid, tid, th, D9_END_RETURN);
        return 0;
}

/* Spawn (header = bind's return value, or bind_inner's argument) and
 * terminate (header = arg0 of complete). */
static __always_inline int d9_task_event(struct pt_regs *ctx, __u16 type)
{
        __u64 header = d9_point_value(ctx);
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_rec_task *r;

        if (!cfg)
                return 0;
        r = D9_RESERVE_CUR(cfg, tgid, tid, type, struct d9_rec_task);
        if (!r)
                return 0;
        r->header = header;
        r->task_id = d9_task_id(cfg, header);
        r->cookie = d9_point_cookie(ctx);
        d9_submit(tgid, r);
        return 0;
}

static __always_inline int d9_spawn(struct pt_regs *ctx)
{
        return d9_task_event(ctx, D9_REC_SPAWN);
}

static __always_inline int d9_terminate(struct pt_regs *ctx)
{
        return d9_task_event(ctx, D9_REC_TERMINATE);
}

static __always_inline int d9_wake(struct pt_regs *ctx)
{
        __u64 header = d9_point_value(ctx);
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_thread *th;
        struct d9_rec_wake *r;

        if (!cfg || !(th = d9_current_thread()))
                return 0;
        r = D9_RESERVE_CUR(cfg, tgid, tid, D9_REC_WAKE, struct d9_rec_wake);
        if (!r)
                return 0;
        r->woken_task_id = d9_task_id(cfg, header);
        r->waker_task_id = th->task_id;
        r->cookie = d9_point_cookie(ctx);
        d9_submit(tgid, r);
        return 0;
}

static __always_inline void d9_park_event(struct pt_regs *ctx, __u16 type, struct d9_thread *th,
                                          struct d9_target_cfg *cfg, __u32 tgid, __u32 tid)
{
        struct task_struct *task = bpf_get_current_task_btf();
        struct d9_rec_park *r;

        r = D9_RESERVE_CUR(cfg, tgid, tid, type, struct d9_rec_park);
        if (!r)
                return;
        r->park_key = th->park_key;
        r->cpu_ns = BPF_CORE_READ(task, se.sum_exec_runtime);
        r->run_delay_ns = BPF_CORE_READ(task, sched_info.run_delay);
        r->cookie = d9_point_cookie(ctx);
        d9_submit(tgid, r);
}

static __always_inline int d9_park(struct pt_regs *ctx)
{
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_thread *th;

        if (!cfg || !(th = d9_current_thread()))
                return 0;
        if (cfg->entry_only)
                d9_close_poll(cfg, tgid, tid, th, D9_END_PARK);
        th->park_key = d9_point_value(ctx);
        d9_park_event(ctx, D9_REC_PARK, th, cfg, tgid, tid);
        return 0;
}

/* A uretprobe on the park function. */
static __always_inline int d9_unpark(struct pt_regs *ctx)
{
        __u32 tgid, tid;
        struct d9_target_cfg *cfg = d9_current_target(&tgid, &tid);
        struct d9_thread *th;

        if (!cfg || !(th = d9_current_thread()))
                return 0;
        d9_park_event(ctx, D9_REC_UNPARK, th, cfg, tgid, tid);
        return 0;
}

/* One program for every Tokio probe point, so a target needs just two
 * uprobe_multi links (entries, returns): each link costs a synchronous
 * RCU-tasks grace period when it is destroyed, and detach must stay fast.
 * The cookie's kind bits say what the point is. */
SEC("uprobe")
int d9_tokio_probe(struct pt_regs *ctx)
{
        switch ((bpf_get_attach_cookie(ctx) >> D9_COOKIE_KIND_SHIFT) & 0xff) {
        case D9_POINT_POLL:
                return d9_poll_start(ctx);
        case D9_POINT_POLL_END:
                return d9_poll_end(ctx);
        case D9_POINT_SPAWN:
                return d9_spawn(ctx);
        case D9_POINT_TERMINATE:
                return d9_terminate(ctx);
        case D9_POINT_WAKE:
                return d9_wake(ctx);
        case D9_POINT_PARK:
                return d9_park(ctx);
        case D9_POINT_UNPARK:
                return d9_unpark(ctx);
        }
        return 0;
}
