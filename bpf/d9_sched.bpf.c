/* d9_sched.bpf.c: scheduler-side view of every target, shared by all
 * targets (loaded and attached once by d9_bpf_open).
 *
 * - tp_btf/sched_switch: off-CPU intervals of target threads (dial9
 *   CpuSample source 1); without Tokio symbols user space also derives a
 *   worker's park/unpark from these.
 * - tp_btf/sched_wakeup: who made a target thread runnable.
 * - perf_event CPU-clock: on-CPU samples of target threads (source 0).
 * - sched_process_exit / sched_process_exec: the target went away or
 *   replaced its image (its uprobes no longer mean anything).
 *
 * Filtering is by tgid in d9_targets, so other processes never produce a
 * record; their cost is one hash lookup per event. */
#include "d9_maps.bpf.h"
#include "d9_stack.bpf.h"

static __always_inline struct d9_target_cfg *d9_target_with(__u32 tgid, __u32 bit)
{
        struct d9_target_cfg *cfg = d9_target_of(tgid);

        return cfg && (cfg->probes & bit) ? cfg : NULL;
}

/* Remember when a target thread left the CPU ... */
static __always_inline void d9_switch_out(struct task_struct *prev, __u32 state)
{
        struct d9_target_cfg *cfg = d9_target_with(prev->tgid, D9_PROBE_SCHED);
        struct d9_thread *th;

        if (!cfg)
                return;
        th = bpf_task_storage_get(&d9_threads, prev, 0,
                                  BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (!th)
                return;
        th->off_ts = bpf_ktime_get_ns();
        th->off_state = state;
        d9_stack_switch_out(cfg, prev, state);
}

/* ... and write the whole off-CPU interval when it comes back, so one
 * record carries both ends. */
static __always_inline void d9_switch_in(struct task_struct *next)
{
        __u32 tgid = next->tgid, tid = next->pid;
        struct d9_target_cfg *cfg = d9_target_with(tgid, D9_PROBE_SCHED);
        struct d9_rec_offcpu *r;
        struct d9_thread *th;
        __u64 stack_id;

        if (!cfg)
                return;
        th = bpf_task_storage_get(&d9_threads, next, 0, 0);
        if (!th || !th->off_ts)
                return;
        stack_id = d9_stack_switch_in(cfg, next, th->off_ts);
        r = d9_reserve(cfg, tgid, sizeof(*r));
        if (r) {
                __builtin_memset(r, 0, sizeof(*r));
                d9_fill_hdr(&r->hdr, D9_REC_OFFCPU, tid, tgid);
                r->off_ts = th->off_ts;
                r->prev_state = th->off_state;
                r->stack_id = stack_id;
                d9_submit(tgid, r);
        }
        th->off_ts = 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(d9_sched_switch, bool preempt, struct task_struct *prev,
             struct task_struct *next, unsigned int prev_state)
{
        d9_switch_out(prev, preempt ? 0 : prev_state);
        d9_switch_in(next);
        return 0;
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(d9_sched_wakeup, struct task_struct *p)
{
        __u32 tgid = p->tgid;
        struct d9_target_cfg *cfg = d9_target_with(tgid, D9_PROBE_SCHED);
        __u64 waker = bpf_get_current_pid_tgid();
        struct d9_rec_wakeup *r;

        if (!cfg)
                return 0;
        r = d9_reserve(cfg, tgid, sizeof(*r));
        if (!r)
                return 0;
        d9_fill_hdr(&r->hdr, D9_REC_WAKEUP, p->pid, tgid);
        r->waker_tid = (__u32)waker;
        r->waker_tgid = waker >> 32;
        d9_submit(tgid, r);
        return 0;
}

SEC("perf_event")
int d9_cpu_sample(struct bpf_perf_event_data *ctx)
{
        __u64 id = bpf_get_current_pid_tgid();
        __u32 tgid = id >> 32;
        struct d9_target_cfg *cfg = d9_target_with(tgid, D9_PROBE_CPU);
        struct d9_rec_sample *r;
        __u64 ip, stack_id;

        if (!cfg)
                return 0;
        stack_id = d9_stack_sample(ctx, cfg, tgid, (__u32)id);
        r = D9_RESERVE_CUR(cfg, tgid, (__u32)id, D9_REC_CPU_SAMPLE,
                           struct d9_rec_sample);
        if (!r)
                return 0;
        /* x86-64 user addresses are the lower half; a kernel IP means the
         * sample hit a syscall or interrupt of this thread. */
        ip = ctx->regs.ip;
        r->ip = ip < (1ull << 47) ? ip : 0;
        r->stack_id = stack_id;
        d9_submit(tgid, r);
        return 0;
}

static __always_inline void d9_proc_event(struct task_struct *p, __u16 type)
{
        __u32 tgid = p->tgid;
        struct d9_target_cfg *cfg = d9_target_of(tgid);
        struct d9_rec_proc *r;

        if (!cfg)
                return;
        r = d9_reserve(cfg, tgid, sizeof(*r));
        if (!r)
                return;
        d9_fill_hdr(&r->hdr, type, p->pid, tgid);
        r->exit_code = type == D9_REC_EXIT ? p->exit_code : 0;
        r->_pad = 0;
        /* The consumer should learn at once that the target is gone. */
        bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

/* Only the leader's exit ends the process (other threads come and go). */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(d9_proc_exit, struct task_struct *p)
{
        if (p->pid == p->tgid)
                d9_proc_event(p, D9_REC_EXIT);
        return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(d9_proc_exec, struct task_struct *p)
{
        d9_proc_event(p, D9_REC_EXEC);
        return 0;
}
