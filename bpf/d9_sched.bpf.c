/* d9_sched.bpf.c: scheduler-side view of every target, shared by all
 * targets (loaded and attached once by d9_bpf_open).
 *
 * - tp_btf/sched_switch: off-CPU intervals of target threads (dial9
 *   CpuSample source 1), those shorter than the target's offcpu_min_ns
 *   only counted; without Tokio symbols a worker's park/unpark can be
 *   derived from these.
 * - no sched_wakeup program: a thread's wait for a CPU is read from the
 *   kernel's sched_info at its switch-in (d9_run_delay_at_switch_in), and
 *   threads asleep since before the attach are found by a task iterator
 *   (d9_seed_sleepers); a tracepoint program costs every process of the
 *   machine on every hit, even one that returns at once (bench/switch_tax).
 * - perf_event CPU-clock: on-CPU samples of target threads (source 0).
 * - a BPF timer per CPU, the run ticks (D9_PROBE_RUNS): every 500 us while
 *   a thread of such a target runs there (d9_run_timer_fired).
 * - sched_process_exit / sched_process_exec: the target went away or
 *   replaced its image (its uprobes no longer mean anything).
 *
 * Filtering is by tgid (d9_tgid_bits, then d9_targets), so other
 * processes never produce a record; their cost is a word read per event. */
#include "d9_maps.bpf.h"
#include "d9_stack.bpf.h"
#include "d9_task_work.bpf.h"

/* Which tgids may be targets: bit (tgid mod 65536) of a bitmap that d9d
 * sets (mmapped) before it inserts a target's config and clears once no
 * target on that bit is left. Every switch, sample and exit of the
 * machine asks; nearly all are other processes', and one word read costs
 * them less than a hash walk of d9_targets. A set bit only sends the
 * question on to d9_targets, so a stale one costs a lookup, nothing more. */
__u64 d9_tgid_bits[D9_TGID_BITS_WORDS];

static __always_inline struct d9_target_cfg *d9_sched_target_of(__u32 tgid)
{
        if (!(d9_tgid_bits[(tgid / 64) % D9_TGID_BITS_WORDS] & (1ull << (tgid % 64))))
                return NULL;
        return d9_target_of(tgid);
}

static __always_inline struct d9_target_cfg *d9_target_with(__u32 tgid, __u32 bit)
{
        struct d9_target_cfg *cfg = d9_sched_target_of(tgid);

        return cfg && (cfg->probes & bit) ? cfg : NULL;
}

/* Whether cfg's threads take run ticks (D9_PROBE_RUNS, not turned off). */
static __always_inline bool d9_run_ticks_on(const struct d9_target_cfg *cfg)
{
        return cfg && (cfg->probes & D9_PROBE_RUNS) && !cfg->run_ticks_off;
}

/* d9_rec_offcpu.syscall from a thread's user registers: orig_ax is the
 * system call it entered the kernel with, -1 in an exception (a page
 * fault) or an interrupt. What the default set tells a worker's park (an
 * epoll or futex wait) from its other sleeps outside a task poll by. */
static __always_inline __u32 d9_syscall_of(const struct pt_regs *regs)
{
        long nr;

        if (!regs)
                return 0;
        nr = (long)regs->orig_ax;
        return nr < 0 || nr >= 0xfffffffe ? D9_OFFCPU_NO_SYSCALL : (__u32)nr + 1;
}

/* A new stretch of run ticks at now if the thread switched out voluntarily
 * (task->nvcsw moved) since its stretch began, or has none: the one rule
 * the switch-out, the switch-in and the tick apply. Returns whether one
 * began. */
static __always_inline bool d9_run_stretch_new(struct d9_thread *th, __u64 nv, __u64 now)
{
        if (th->run_since && th->run_nvcsw == nv)
                return false;
        th->run_nvcsw = nv;
        th->run_since = now;
        th->run_ticks = 0;
        return true;
}

static __always_inline void d9_switch_in_missed(const struct d9_target_cfg *cfg, struct task_struct *task,
                                                struct d9_thread *th, __u64 now);

/* Whether th is off the CPU since a switch-out of this recording (one from
 * an earlier recording of the target says nothing of now). */
static __always_inline bool d9_off_in_recording(const struct d9_target_cfg *cfg, const struct d9_thread *th)
{
        return th->off_ts && th->off_ts >= cfg->since_ts;
}

/* Remember when a target thread left the CPU ... */
static __always_inline void d9_switch_out(struct task_struct *prev, __u32 state)
{
        struct d9_target_cfg *cfg = d9_target_with(prev->tgid, D9_PROBE_SCHED);
        struct d9_thread *th;
        struct pt_regs *regs;

        if (!cfg)
                return;
        th = bpf_task_storage_get(&d9_threads, prev, 0,
                                  BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (!th)
                return;
        /* Still off since its last switch-out: its switch-in came with no
         * sched_switch, and d9_sched_resumed did not end the interval
         * either (not loaded). Ended here, late, not overwritten. */
        if (d9_off_in_recording(cfg, th))
                d9_switch_in_missed(cfg, prev, th, bpf_ktime_get_ns());
        th->off_ts = bpf_ktime_get_ns();
        th->tid = prev->pid;
        regs = (struct pt_regs *)bpf_task_pt_regs(prev);
        th->off_bp = regs ? regs->bp : 0;
        th->off_syscall = d9_syscall_of(regs);
        th->off_state = state;
        th->off_cpu_ns = prev->se.sum_exec_runtime;
        th->off_run_delay = prev->sched_info.run_delay;
        th->off_since = 0;
        /* A preemption belongs to the stretch the run ticks see (d9_run_tick,
         * task->nvcsw unchanged): d9d extends a long poll over it only
         * within one stretch. Without, a worker that slept for microseconds
         * between polls of one future type (16 connections of one server
         * type, npm grafbase) joined preemptions 45 ms apart into one poll. */
        if (!state && (cfg->probes & D9_PROBE_RUNS)) {
                d9_run_stretch_new(th, prev->nvcsw, th->off_ts);
                th->off_since = th->run_since;
        }
}

/* Off-CPU intervals below the target's offcpu_min_ns, per target slot and
 * CPU: counted and summed instead of recorded, so a server that blocks
 * for microseconds a hundred thousand times a second does not pay a ring
 * record (and d9d a decoded event) for each. Read by user space with the
 * ring drops and written into the trace. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, struct d9_offcpu_short);
} d9_offcpu_short SEC(".maps");

/* A switch-in of a thread already switched in this recording with no
 * switch-out seen since: a switch d9_sched_switch missed, whose interval
 * is lost (counted, said in the trace; a CI run once lost a worker's 20 ms
 * sleep without a word). */
static __always_inline void d9_count_unseen(const struct d9_target_cfg *cfg)
{
        __u32 slot = cfg->slot;
        struct d9_offcpu_short *c = bpf_map_lookup_elem(&d9_offcpu_short, &slot);

        if (c)
                c->unseen++;
}

static __always_inline void d9_count_short(const struct d9_target_cfg *cfg, __u64 ns)
{
        __u32 slot = cfg->slot;
        struct d9_offcpu_short *c = bpf_map_lookup_elem(&d9_offcpu_short, &slot);

        if (c) {
                c->count++;
                c->ns += ns;
        }
}

static __always_inline void d9_offcpu_span_of(const struct d9_thread *th, __u64 now, struct d9_offcpu_span *s)
{
        s->off_ts = th->off_ts;
        s->on_ts = now;
        s->cpu_ns = th->off_cpu_ns;
        /* A sleeper runs again once woken: its wait on the run queue since
         * (a preempted thread's whole interval is such a wait: 0, as the
         * trace has always said). */
        s->wait_ns = th->off_state && th->on_run_delay > th->off_run_delay ?
                     th->on_run_delay - th->off_run_delay : 0;
        s->state = th->off_state;
        s->syscall = th->off_syscall;
        s->run_since = th->off_since;
}

static __always_inline void d9_offcpu_write(const struct d9_target_cfg *cfg, struct task_struct *task,
                                            __u32 tgid, __u32 tid, const struct d9_offcpu_span *s,
                                            __u64 stack_id, __u32 no_stack)
{
        void *ring = d9_ring_of(tgid);
        struct d9_rec_offcpu *r = D9_RING_RESERVE_CUR(ring, cfg, tgid, tid, D9_REC_OFFCPU,
                                                      struct d9_rec_offcpu, s->on_ts);

        if (!r)
                return;
        r->off_ts = s->off_ts;
        r->prev_state = s->state;
        r->stack_id = stack_id;
        r->cpu_ns = s->cpu_ns;
        r->sched_wait_ns = s->wait_ns;
        r->run_since = s->run_since;
        r->syscall = s->syscall;
        r->no_stack = stack_id ? D9_NOSTACK_NONE : no_stack;
        /* A thread that only sleeps gets no CPU sample, the other record
         * that names it: an idle worker would have no name in the trace. */
        if (task)
                bpf_probe_read_kernel_str(r->comm, sizeof(r->comm), task->comm);
        d9_ring_submit(ring, r);
}

/* An off-CPU interval whose record waits for the thread's user stack:
 * written by d9_offcpu_resumed, in the thread, as it returns to user
 * space. Keyed by tid; the entry lives from switch-in to that moment,
 * unless the kernel never runs the callback: task_work_add refuses a
 * thread past exit_task_work and leaves the entry behind, and tids come
 * back (pid_max 32768 here). d9_offcpu_defer takes such an entry over. */
#define D9_EBUSY 16     /* asm-generic/errno-base.h: vmlinux.h has no errno */
#define D9_EINVAL 22
#define D9_CLOCK_MONOTONIC 1   /* uapi/linux/time.h */

struct d9_offcpu_pending {
        struct bpf_task_work tw;
        struct d9_offcpu_span span;
        __u32 tgid;
        __u32 running;          /* d9_offcpu_resumed has begun with span */
};
_Static_assert(sizeof(struct d9_offcpu_pending) == sizeof(struct d9_offcpu_pending_entry) &&
               __builtin_offsetof(struct d9_offcpu_pending, span) ==
                       __builtin_offsetof(struct d9_offcpu_pending_entry, span) &&
               __builtin_offsetof(struct d9_offcpu_pending, tgid) ==
                       __builtin_offsetof(struct d9_offcpu_pending_entry, tgid),
               "d9_offcpu_pending_entry is this entry as user space sees it");

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __uint(max_entries, 65536);
        __type(key, __u32);
        __type(value, struct d9_offcpu_pending);
} d9_offcpu_pending SEC(".maps");

static int d9_offcpu_resumed(struct bpf_map *map, void *key, void *value)
{
        struct task_struct *task = bpf_get_current_task_btf();
        struct d9_offcpu_pending *p = value;
        struct d9_target_cfg *cfg;
        __u32 tid = *(__u32 *)key;
        __u32 no_stack = D9_NOSTACK_GONE;
        __u64 stack_id = 0;

        p->running = 1;
        cfg = d9_target_of(p->tgid);
        if (cfg) {
                if (task->pid == tid) {
                        stack_id = d9_stack_offcpu_user(cfg, task, p->tgid, tid);
                        no_stack = D9_NOSTACK_RING;
                }
                d9_offcpu_write(cfg, task->pid == tid ? task : NULL, p->tgid, tid, &p->span, stack_id,
                                no_stack);
        }
        /* An entry that stays (its bucket lock timed out) holds nothing
         * to write, and d9_offcpu_defer takes it over. */
        if (bpf_map_delete_elem(&d9_offcpu_pending, &tid)) {
                p->span.on_ts = 0;
                p->running = 0;
        }
        return 0;
}

/* How d9_offcpu_resumed runs (the loader probes the kernel, bpf_resume.c):
 * a task_work, or d9_sched_resumed where a tracepoint program may not
 * schedule one; D9_RESUME_NONE: long intervals are written stackless. */
const volatile __u32 d9_resume_by = D9_RESUME_TASK_WORK;

/* D9_RESUME_SCHED_EXIT: the thread each CPU has just switched in with its
 * interval left in d9_offcpu_pending (0: none); d9_sched_resumed, which
 * runs next on that CPU, in that thread, checks this before anything. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u32);
} d9_resume_tid SEC(".maps");

static __always_inline long d9_offcpu_resume_later(struct task_struct *next, struct d9_offcpu_pending *p)
{
        __u32 zero = 0, *slot;

        if (d9_resume_by == D9_RESUME_SCHED_EXIT) {
                slot = bpf_map_lookup_elem(&d9_resume_tid, &zero);
                if (!slot)
                        return -1;
                *slot = next->pid;
                return 0;
        }
        return bpf_task_work_schedule_resume_impl(next, &p->tw, &d9_offcpu_pending, d9_offcpu_resumed, NULL);
}

/* A long off-CPU interval that gets a stack: keep its kernel stack now
 * and leave the record to d9_offcpu_resumed. Otherwise returns why not
 * (enum d9_no_stack), and the caller writes the record now, stackless.
 * Preempted intervals too: where a thread waited in the run queue is as
 * much a question as where it blocked. */
static __always_inline __u32 d9_offcpu_defer(const struct d9_target_cfg *cfg, struct task_struct *next,
                                             const struct d9_thread *th, __u64 now)
{
        struct d9_offcpu_pending init = {}, *p;
        __u32 tid = next->pid, why;
        bool mine;
        long err;

        why = d9_stack_offcpu_begin(cfg, next, now - th->off_ts, now);
        if (why != D9_NOSTACK_NONE)
                return why;
        if (d9_resume_by == D9_RESUME_NONE ||
            (d9_resume_by == D9_RESUME_TASK_WORK && !bpf_ksym_exists(bpf_task_work_schedule_resume_impl)))
                return D9_NOSTACK_PENDING;
        /* An entry already there was never written: this thread blocked
         * again before it reached user space, or it is one the kernel
         * never ran (see d9_offcpu_pending). One of this recording keeps
         * its interval, the first, as before such entries were looked at
         * (the stack at the return is where that one blocked, unless the
         * thread ran in user space between), and this one is written now
         * without a stack; its callback is
         * scheduled again if none is due. Another process's, or an earlier
         * recording's, takes this interval. Not while its callback runs
         * (preempted in it): that one writes the entry's interval itself. */
        bpf_map_update_elem(&d9_offcpu_pending, &tid, &init, BPF_NOEXIST);
        p = bpf_map_lookup_elem(&d9_offcpu_pending, &tid);
        if (!p || p->running)
                return D9_NOSTACK_PENDING;
        mine = p->tgid == next->tgid && p->span.on_ts && p->span.on_ts >= cfg->since_ts;
        if (!mine) {
                d9_offcpu_span_of(th, now, &p->span);
                p->tgid = next->tgid;
        }
        /* -EBUSY: the entry's callback is due already. */
        err = d9_offcpu_resume_later(next, p);
        if (err && err != -D9_EBUSY) {
                if (mine)
                        d9_offcpu_write(cfg, next, p->tgid, tid, &p->span, 0, D9_NOSTACK_PENDING);
                bpf_map_delete_elem(&d9_offcpu_pending, &tid);
                return D9_NOSTACK_PENDING;
        }
        return mine ? D9_NOSTACK_PENDING : D9_NOSTACK_NONE;
}

/* A parked worker resumes after sleeping: its park ends here, not at the
 * park function's return (no uretprobe: one trap less per park). Same
 * record as the tokio side's, read from the thread coming in. */
static __always_inline void d9_unpark_write(const struct d9_target_cfg *cfg, struct task_struct *next,
                                            struct d9_thread *th, __u64 now)
{
        void *ring = d9_ring_of(next->tgid);
        struct d9_rec_park *r = D9_RING_RESERVE_CUR(ring, cfg, next->tgid, next->pid, D9_REC_UNPARK,
                                                    struct d9_rec_park, now);

        th->parked = 0;
        if (!r)
                return;
        r->park_key = th->park_key;
        r->cpu_ns = next->se.sum_exec_runtime;
        /* With the wait that ends here (d9_run_delay_at_switch_in): the
         * kernel adds it only after this tracepoint, and without it the
         * unpark's wait read 0 (npm moon: 0.02 ms where perf saw 917 ms
         * over 285 wakeups). */
        r->run_delay_ns = th->on_run_delay;
        d9_ring_submit(ring, r);
}

/* next's run_delay as the kernel will have it once this switch completes
 * (sched_info_arrive runs after the tracepoint): the waits already closed
 * (a woken thread moved to another CPU had its wait there closed by the
 * dequeue) plus the one open since last_queued on this run queue's clock.
 * Read here instead of from a sched_wakeup program, which every wakeup of
 * the machine paid for (bench/switch_tax). */
/* The clock of the run queue task is on, which sched_info's stamps are
 * read from, through the group run queue it is on (this CPU's, kept for
 * every class by set_task_rq): `runqueues` itself is a per-CPU symbol that
 * kallsyms lists only with CONFIG_KALLSYMS_ALL. 0 on a kernel without
 * group scheduling. */
static __always_inline __u64 d9_rq_clock(struct task_struct *task)
{
        struct cfs_rq *cfs;

        if (!bpf_core_field_exists(task->se.cfs_rq))
                return 0;
        cfs = BPF_CORE_READ(task, se.cfs_rq);
        return cfs ? BPF_CORE_READ(cfs, rq, clock) : 0;
}

static __always_inline __u64 d9_run_delay_at_switch_in(struct task_struct *next)
{
        __u64 delay = next->sched_info.run_delay, queued = next->sched_info.last_queued, clock;

        /* Without a clock the open wait reads as 0. */
        if (!queued)
                return delay;
        clock = d9_rq_clock(next);
        return clock > queued ? delay + (clock - queued) : delay;
}

/* The end of th's off-CPU interval at on, as a switch-in writes it: the
 * park's unpark, then the short count, or the OFFCPU record (its stack
 * deferred to the thread's return when may_defer, else none). */
static __always_inline void d9_interval_end(const struct d9_target_cfg *cfg, struct task_struct *task,
                                            struct d9_thread *th, __u64 on, __u64 run_delay, bool may_defer)
{
        __u32 why = D9_NOSTACK_PENDING;

        th->on_run_delay = run_delay;
        if (th->parked && th->off_state)
                d9_unpark_write(cfg, task, th, on);
        if (on - th->off_ts < cfg->offcpu_min_ns)
                d9_count_short(cfg, on - th->off_ts);
        else if (!may_defer || (why = d9_offcpu_defer(cfg, task, th, on)) != D9_NOSTACK_NONE) {
                struct d9_offcpu_span s;

                d9_offcpu_span_of(th, on, &s);
                d9_offcpu_write(cfg, task, task->tgid, task->pid, &s, 0, why);
        }
        th->off_ts = 0;
        th->in_ts = on;
}

/* A switch-in of a target thread that d9_sched_switch never saw: this
 * machine's kernel (6.18.44-fc) emits no sched_switch when it switches
 * away from some threads of its own (the sandbox agent's, PID 1's: in a
 * run of the mixed target, 27 switches to them, none from them), so the
 * target thread it switched to came in unseen and its interval stayed
 * open until its next switch-out overwrote it: a 20 ms sleep inside a poll
 * went missing with no record, no drop and no unseen count (tokio_trace
 * check 7 in CI rehearsals; 2-10 such intervals in each 5 s run here). The
 * thread still holds its switch-out when it runs again: its return from
 * __schedule (d9_sched_resumed) or its next switch-out ends the interval at
 * its arrival on the CPU, read from sched_info on the run queue's clock
 * (as d9_run_delay_at_switch_in does), else at now. A thread that arrived
 * before that switch-out never left after it (a sleeper seeded at the
 * attach that was still running): no interval. */
static __always_inline void d9_switch_in_missed(const struct d9_target_cfg *cfg, struct task_struct *task,
                                                struct d9_thread *th, __u64 now)
{
        __u64 on = now, arrived = task->sched_info.last_arrival, clock = arrived ? d9_rq_clock(task) : 0;

        if (clock >= arrived && arrived) {
                if (clock - arrived >= now - th->off_ts) {
                        th->off_ts = 0;
                        return;
                }
                on = now - (clock - arrived);
        }
        d9_interval_end(cfg, task, th, on, task->sched_info.run_delay, false);
}

/* A thread of a D9_PROBE_RUNS target back from a voluntary sleep
 * (task->nvcsw moved) starts a stretch of run ticks here, not at its first
 * tick: that tick can then keep a stack, so the timer need not fire within
 * the first period (d9_run_timer_arm). Returns whether one started. */
static __always_inline bool d9_run_stretch_at_switch_in(const struct d9_target_cfg *cfg, struct task_struct *next,
                                                        struct d9_thread *th, __u64 now)
{
        return (cfg->probes & D9_PROBE_RUNS) && d9_run_stretch_new(th, next->nvcsw, now);
}

/* ... and account for the whole interval when it comes back: a short one
 * is only counted, a long one becomes one record carrying both ends.
 * Returns whether a stretch of run ticks started (above). */
static __always_inline bool d9_switch_in(struct task_struct *next, struct d9_target_cfg *cfg)
{
        struct d9_thread *th;
        bool fresh;
        __u64 now;

        if (!cfg || !(cfg->probes & D9_PROBE_SCHED))
                return false;
        th = bpf_task_storage_get(&d9_threads, next, 0, 0);
        if (!th)
                return false;
        now = bpf_ktime_get_ns();
        fresh = d9_run_stretch_at_switch_in(cfg, next, th, now);
        /* No switch-out of it since the recording began (none seen, or one
         * while an earlier recording ran, after which it may have run
         * unseen), and not asleep at the attach (d9_seed_sleepers gives
         * such a thread an interval from the recording's start, so a worker
         * idle at the attach is parked from there: npm cortex-mcp, idle for
         * the first 4.2 s, 5 % parked, 95 % other): it was preempted,
         * waiting for a CPU; when that began is not known, and it is left. */
        if (!d9_off_in_recording(cfg, th)) {
                if (!th->off_ts && th->in_ts >= cfg->since_ts)
                        d9_count_unseen(cfg);
                th->parked = 0;
                th->off_ts = 0;
                th->in_ts = now;
                return fresh;
        }
        d9_interval_end(cfg, next, th, now, d9_run_delay_at_switch_in(next), true);
        return fresh;
}

/* The run ticks' period (d9_bpf_open sets it). */
const volatile __u64 d9_run_period_ns = 500000;

/* A run tick (D9_PROBE_RUNS): a tick on a thread that switched out
 * voluntarily since its previous tick (task->nvcsw moved) only starts a
 * new stretch; a tick on one that did not gets a RUN_SAMPLE with its
 * stack: every tick for the stretch's first 8 ticks (4 ms of CPU time),
 * then one at least 2 ms of wall time after the last kept, and past the
 * stretch's first 32 ms one at least 8 ms after. A worker that parks
 * between short polls pays one task-storage lookup per tick; one that
 * never sleeps (a busy server, a long poll) a stack per 8 ms, not per
 * 0.5 ms (at 2 000 stacks/s a busy worker filled the 2 MiB ring and kept
 * d9d unwinding). The spacing is wall time, not ticks: ticks count CPU
 * time, and on a loaded machine every 16th tick of a preempted thread
 * could come 20 ms apart, so a long poll's last kept tick came that long
 * before its end unless a preemption's off-CPU record (which a short one
 * or a stackless one is not) extended it (a 50 ms spin read 23.5 ms).
 * d9d finds the poll frame in the stacks (daemon/long_poll.c); a long
 * poll's end is seen up to 2 ms late before 32 ms, 8 ms after, plus the
 * CPU time of one tick. Returns the stretch's start, 0: no record. */
static __always_inline __u64 d9_run_tick(struct task_struct *task, __u64 now)
{
        struct d9_thread *th = bpf_task_storage_get(&d9_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        __u64 gap;

        if (!th)
                return 0;
        if (d9_run_stretch_new(th, task->nvcsw, now))
                return 0;
        /* A stretch begun at a switch-in less than half a period ago (the
         * timer was already due from an earlier thread's run): too early
         * to say anything, as a stretch's first tick was before. */
        if (now - th->run_since < d9_run_period_ns / 2)
                return 0;
        /* Half a period of slack: a callback runs a little after its grid
         * point, and the next one is due a period later. */
        gap = now - th->run_kept_ts + d9_run_period_ns / 2;
        if (++th->run_ticks > 8 && gap < (now - th->run_since < 32000000 ? 2000000 : 8000000))
                return 0;
        th->run_kept_ts = now;
        return th->run_since;
}

/* The run ticks' clock: one BPF timer per CPU, armed when a thread of a
 * D9_PROBE_RUNS target comes on that CPU and re-armed by its callback only
 * while such a thread is still the one running there. The CPU-clock perf
 * events they were before fired on every CPU of the machine every 500 us
 * while such a target was attached, idle CPUs and other processes' alike
 * (1,600-1,800 interrupts a second on each idle CPU here). */
struct d9_run_timer {
        struct bpf_timer timer;
        __u32 armed;            /* a callback is due */
        __u32 ready;            /* bpf_timer_init and the callback done */
};

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, 1);         /* d9_bpf_open: one per possible CPU */
        __type(key, __u32);
        __type(value, struct d9_run_timer);
} d9_run_timers SEC(".maps");

/* From now to the next multiple of the period: the ticks of a CPU keep one
 * grid, as a CPU-clock event's did. A thread that shares its CPU in slices
 * shorter than the period gets the ticks that land in its slices; a timer
 * started afresh at each of its switch-ins could always fire in the other
 * thread's slice, and stop there. */
static __always_inline long d9_run_timer_start(struct d9_run_timer *rt, __u64 periods)
{
        __u64 now = bpf_ktime_get_ns(), next = (now / d9_run_period_ns + periods) * d9_run_period_ns;
        long err = bpf_timer_start(&rt->timer, next, BPF_F_TIMER_ABS | BPF_F_TIMER_CPU_PIN);

        /* Before Linux 6.7 (Debian 12's 6.1) neither flag exists: a relative
         * timer, started on this CPU, which is busy, so it stays here. */
        if (err == -D9_EINVAL)
                err = bpf_timer_start(&rt->timer, next - now, 0);
        return err;
}

/* The tick, in the softirq that runs the timer's callback on the CPU it
 * was armed on: the task it interrupted is current, its user registers
 * at the top of its kernel stack; the kernel part of its stack is the
 * softirq's own, not kept. */
static int d9_run_timer_fired(void *map, __u32 *key, struct d9_run_timer *rt)
{
        struct task_struct *task = bpf_get_current_task_btf();
        __u32 tgid = task->tgid, tid = task->pid;
        struct d9_target_cfg *cfg = d9_sched_target_of(tgid);
        __u64 now = bpf_ktime_get_ns(), since, stack_id;
        struct pt_regs *regs;
        struct d9_rec_run *r;
        void *ring;

        rt->armed = 0;
        /* Idle, another process, or ksoftirqd: no tick, and none till a
         * target thread comes on this CPU again. */
        if (!d9_run_ticks_on(cfg))
                return 0;
        if (!d9_run_timer_start(rt, 1))
                rt->armed = 1;
        since = d9_run_tick(task, now);
        if (!since)
                return 0;
        stack_id = d9_stack_tick(cfg, task, tgid, tid);
        ring = d9_ring_of(tgid);
        r = D9_RING_RESERVE_CUR(ring, cfg, tgid, tid, D9_REC_RUN_SAMPLE, struct d9_rec_run, now);
        if (!r)
                return 0;
        regs = (struct pt_regs *)bpf_task_pt_regs(task);
        r->ip = regs ? regs->ip : 0;
        r->stack_id = stack_id;
        r->since_ts = since;
        d9_ring_submit(ring, r);
        return 0;
}

/* From sched_switch, next a thread of a D9_PROBE_RUNS target: this CPU's
 * timer runs from now if it is not running already. A thread back from a
 * sleep (fresh: its stretch starts now) is first ticked at the grid point
 * after next, 0.5-1 ms on, where its first tick that can keep a stack was
 * anyway (the first tick of a stretch that began at a tick kept none).
 * Most such runs are a server's few microseconds per request: the timer,
 * due once for many of them, then fires once a millisecond, not once
 * every 500 us (a pinned echo server at 10 000 requests a second took
 * 2,080-2,110 timer interrupts a second on its CPU). A thread back from a
 * preemption is ticked at the next grid point, as it always was: it may
 * get the CPU for less than a period at a time. */
static __always_inline void d9_run_timer_arm(bool fresh)
{
        __u32 cpu = bpf_get_smp_processor_id();
        struct d9_run_timer *rt = bpf_map_lookup_elem(&d9_run_timers, &cpu);

        if (!rt || rt->armed)
                return;
        if (!rt->ready) {
                long err = bpf_timer_init(&rt->timer, &d9_run_timers, D9_CLOCK_MONOTONIC);

                if (err && err != -D9_EBUSY)
                        return;
                if (bpf_timer_set_callback(&rt->timer, d9_run_timer_fired))
                        return;
                rt->ready = 1;
        }
        if (!d9_run_timer_start(rt, fresh ? 2 : 1))
                rt->armed = 1;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(d9_sched_switch, bool preempt, struct task_struct *prev,
             struct task_struct *next, unsigned int prev_state)
{
        /* One lookup for both: this runs at every switch of the machine. */
        struct d9_target_cfg *cfg = d9_sched_target_of(next->tgid);
        bool fresh;

        d9_switch_out(prev, preempt ? 0 : prev_state);
        fresh = d9_switch_in(next, cfg);
        if (d9_run_ticks_on(cfg))
                d9_run_timer_arm(fresh);
        return 0;
}

/* D9_RESUME_SCHED_EXIT: a thread whose switch-in left its interval in
 * d9_offcpu_pending comes back from __schedule here, in its own context and
 * before it leaves the kernel: its user registers and stack are still
 * those it blocked with, as at a task_work. Every return from __schedule on
 * the machine runs this: a thread d9_resume_tid does not name returns at once,
 * after one word read (d9_tgid_bits) unless it is a target's. A target
 * thread still off since its last switch-out came in without a
 * sched_switch: its interval ends here (d9_switch_in_missed), in order
 * before anything it writes once back in user space.
 * Not loaded unless the loader asks ("?"): older kernels lack the
 * tracepoint, and where task_work works it would only cost. */
SEC("?tp_btf/sched_exit_tp")
int BPF_PROG(d9_sched_resumed, bool is_switch)
{
        __u32 zero = 0, tid, *slot = bpf_map_lookup_elem(&d9_resume_tid, &zero);
        struct task_struct *task = bpf_get_current_task_btf();
        struct d9_target_cfg *cfg = d9_target_with(task->tgid, D9_PROBE_SCHED);
        struct d9_offcpu_pending *p;
        struct d9_thread *th;

        if (cfg && (th = bpf_task_storage_get(&d9_threads, task, 0, 0)) && d9_off_in_recording(cfg, th))
                d9_switch_in_missed(cfg, task, th, bpf_ktime_get_ns());

        if (!slot || !(tid = *slot) || tid != (__u32)bpf_get_current_pid_tgid())
                return 0;
        *slot = 0;
        p = bpf_map_lookup_elem(&d9_offcpu_pending, &tid);
        if (p && !p->running)
                d9_offcpu_resumed((struct bpf_map *)&d9_offcpu_pending, &tid, p);
        return 0;
}

/* The 99 Hz CPU samples of target threads. */
SEC("perf_event")
int d9_cpu_sample(struct bpf_perf_event_data *ctx)
{
        __u64 id = bpf_get_current_pid_tgid(), now = bpf_ktime_get_ns();
        __u32 tgid = id >> 32;
        struct d9_target_cfg *cfg = d9_target_with(tgid, D9_PROBE_CPU);
        struct d9_rec_sample *r;
        __u64 ip, stack_id;
        void *ring;

        if (!cfg)
                return 0;
        stack_id = d9_stack_sample(ctx, cfg, tgid, (__u32)id);
        ring = d9_ring_of(tgid);
        /* x86-64 user addresses are the lower half; a kernel IP means the
         * sample hit a syscall or interrupt of this thread. */
        ip = ctx->regs.ip;
        ip = ip < (1ull << 47) ? ip : 0;
        r = D9_RING_RESERVE_CUR(ring, cfg, tgid, (__u32)id, D9_REC_CPU_SAMPLE, struct d9_rec_sample, now);
        if (!r)
                return 0;
        r->ip = ip;
        r->stack_id = stack_id;
        bpf_get_current_comm(r->comm, sizeof(r->comm));
        d9_ring_submit(ring, r);
        return 0;
}

static __always_inline void d9_proc_event(struct task_struct *p, __u16 type, struct file *image)
{
        __u32 tgid = p->tgid;
        struct d9_target_cfg *cfg = d9_sched_target_of(tgid);
        struct d9_rec_proc *r;

        if (!cfg)
                return;
        r = d9_reserve(cfg, tgid, sizeof(*r));
        if (!r)
                return;
        d9_fill_hdr(&r->hdr, type, p->pid, tgid);
        r->exit_code = type == D9_REC_EXIT ? p->exit_code : 0;
        r->exec_dev = image ? BPF_CORE_READ(image, f_inode, i_sb, s_dev) : 0;
        r->exec_ino = image ? BPF_CORE_READ(image, f_inode, i_ino) : 0;
        /* The consumer should learn at once that the target is gone. */
        bpf_ringbuf_submit(r, BPF_RB_FORCE_WAKEUP);
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(d9_proc_exit, struct task_struct *p)
{
        if (p->pid == p->tgid)
                d9_proc_event(p, D9_REC_EXIT, NULL);
        return 0;
}

/* Which file the new image is: an attach that landed while the target was
 * still inside the execve that made the image d9d planned (the kernel
 * fires this at its end) sees this record after its own attach. */
SEC("tp_btf/sched_process_exec")
int BPF_PROG(d9_proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
        d9_proc_event(p, D9_REC_EXEC, bprm->file);
        return 0;
}

/* At the attach, after the target's config went in (d9_bpf_seed_sleepers,
 * on a task iterator of the target): a thread asleep then has not switched
 * out since the recording began, and its switch-in would not know it had
 * slept. It gets an interval from the recording's start, as if it had
 * switched out then. One that is runnable (preempted, waiting for a CPU)
 * or running gets none. A thread that switched out since is left as it
 * is. off_ts is written last: a switch-in on another CPU reads it first. */
#define D9_PF_EXITING 0x00000004u      /* include/linux/sched.h */

SEC("iter/task")
int d9_seed_sleepers(struct bpf_iter__task *ctx)
{
        struct task_struct *task = ctx->task;
        struct d9_target_cfg *cfg;
        struct d9_thread *th;
        struct pt_regs *regs;
        __u32 state;

        if (!task)
                return 0;
        cfg = d9_target_with(task->tgid, D9_PROBE_SCHED);
        state = task->__state;
        if (!cfg || !state || (task->flags & D9_PF_EXITING))
                return 0;
        th = bpf_task_storage_get(&d9_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (!th || d9_off_in_recording(cfg, th))
                return 0;
        th->tid = task->pid;
        th->parked = 0;
        th->off_state = state | D9_OFFCPU_BEGAN_BEFORE;
        th->off_cpu_ns = task->se.sum_exec_runtime;
        th->off_run_delay = task->sched_info.run_delay;
        th->off_since = 0;
        /* The user rbp it entered the kernel with, as a switch-out keeps it:
         * the open-sleep unwind at the stop needs it (daemon/record/
         * open_sleep.h), and a worker idle for the whole recording now has
         * such a sleep. */
        regs = (struct pt_regs *)bpf_task_pt_regs(task);
        th->off_bp = regs ? regs->bp : 0;
        th->off_syscall = d9_syscall_of(regs);
        asm volatile("" ::: "memory");
        *(volatile __u64 *)&th->off_ts = cfg->since_ts;
        return 0;
}

/* At the attach of a default-set target, and again when a late plan gives
 * its TLS size (d9_bpf_sweep_workers): each of its threads scanned once for
 * its loop's Worker, idle ones included. Without, a worker was scanned only
 * when it ran or woke, and a runtime idle at the attach confirmed its
 * Worker's depth late (npm moon 2.5.5, workers asleep in 1 s tasks: 1.7 s,
 * its workers' stacks and parks on no worker for 1.1 s of that). At most
 * d9_wk_sweep_budget threads (d9d sets it before each sweep): a scan
 * costs up to 16 KiB of copy and 256 reads. Sleepable: it reads another
 * task's memory (bpf_copy_from_user_task). */
__u32 d9_wk_sweep_budget;

SEC("iter.s/task")
int d9_wk_sweep(struct bpf_iter__task *ctx)
{
        struct task_struct *task = ctx->task;
        struct d9_target_cfg *cfg;

        if (!task || !d9_wk_sweep_budget || (task->flags & D9_PF_EXITING))
                return 0;
        cfg = d9_target_with(task->tgid, D9_PROBE_RUNS);
        if (!cfg)
                return 0;
        d9_wk_sweep_budget--;
        d9_wk_scan_task(cfg, task);
        return 0;
}

/* The maps above are keyed by the kernel's tgid (task->tgid, the initial
 * pid namespace's number). A d9d in a child pid namespace (a container,
 * systemd-nspawn) only knows its own number for a target; iterating the
 * target's tasks through a pidfd prints the kernel's. */
SEC("iter/task")
int d9_kernel_tgid(struct bpf_iter__task *ctx)
{
        struct task_struct *task = ctx->task;

        if (task)
                BPF_SEQ_PRINTF(ctx->meta->seq, "%d\n", task->tgid);
        return 0;
}
