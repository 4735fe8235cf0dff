/* bpf_loader.h: load d9's BPF programs once, attach them to targets.
 *
 * d9_bpf_open() loads everything shared by all targets (sched_switch,
 * sched_exit_tp where the kernel needs it, process exit/exec, perf CPU
 * sampling, the Tokio uprobe program); the first d9_bpf_attach_target()
 * attaches the system-wide ones, and they go again with the last target
 * (its detach, or the reap of its background teardown).
 * d9_bpf_attach_target() adds one process: its config in d9_targets, its
 * own ring buffer in the d9_rings map-in-map, and the Tokio uprobes of its
 * probe plan with a pid filter. Records arrive through the callback given
 * at attach time whenever the caller drains (d9_bpf_target_consume, after
 * epoll on d9_bpf_target_epoll_fd). BPF wakes that fd only once 64 KiB of
 * records are pending (a wakeup per record would cost the traced machine a
 * context switch each), so also drain on a timer (<= 100 ms), as
 * d9_bpf_target_poll does. Record layouts: bpf/d9_events.h.
 *
 * Everything created here is named d9_*; after d9_bpf_detach_target (and,
 * for a stopped target, its background teardown) and d9_bpf_close no
 * program, link or map of ours remains. Functions return
 * 0 or a negative errno. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "d9_events.h"

struct probe_plan;
struct d9_bpf;
struct d9_bpf_target;

/* D9_PROBE_RUNS tick period (CPU time): a poll of 1 ms or more is ticked
 * at least twice. */
#define D9_RUN_SAMPLE_US_DEFAULT 500

struct d9_bpf_opts {
        size_t ring_bytes;      /* per-target ring size (power of 2); 0: 8 MiB */
        unsigned sample_hz;     /* perf CPU-clock frequency; 0: 99 */
        unsigned run_sample_us; /* D9_PROBE_RUNS tick, CPU-time us; 0: the default */
        bool no_cpu_sampling;   /* don't open perf events at all */
        bool force_per_probe;   /* classic uprobes even if uprobe_multi works */
        bool libbpf_log;        /* let libbpf print its warnings (verifier log)
                                 * to stderr; off: errors are ours, one line */
};

/* How a poll's end is observed.
 * ENTRY_ONLY: no probe on the return; the next poll or park on the same
 *   thread closes the open poll. Cheapest (one uprobe per poll instead of
 *   uprobe + uretprobe) and exact for the interesting case, a long poll,
 *   but the scheduler's own work between polls is charged to the previous
 *   poll; needs park probes (symbols) to close the last poll before a park.
 * URETPROBE: exact end, ≈ 2x the per-poll cost (design.md §3).
 * RETSITES: uprobes on the plan's PROBE_POLL_RETURN points (ret
 *   instructions): exact, but only as good as the plan's disassembly.
 * AUTO: ENTRY_ONLY when park probes are attached, URETPROBE otherwise. */
enum d9_poll_end {
        D9_POLL_END_AUTO = 0,
        D9_POLL_END_ENTRY_ONLY,
        D9_POLL_END_URETPROBE,
        D9_POLL_END_RETSITES,
};

/* Called for every record drained; return non-zero to stop draining. */
typedef int (*d9_bpf_record_fn)(void *ctx, const void *rec, size_t size);

struct d9_bpf_target_opts {
        unsigned probes;                /* enum d9_probe_bits */
        enum d9_poll_end poll_end;
        /* Task-id layout (see d9_target_cfg); 0: take the plan's
         * hdr_vtable_off / vtable_id_off. */
        uint64_t header_vtable_off;
        uint64_t vtable_id_off_slot;
        /* Stack capture (docs/stacks.md); all zero: no stacks. */
        struct d9_stack_cfg stack;
        /* Off-CPU intervals shorter than this are counted, not recorded
         * (0: every one is recorded). */
        uint64_t offcpu_min_ns;
        /* Wake points in a link of their own, which d9_bpf_target_set_wakes
         * attaches and detaches (sampled wakes); false: with the others. */
        bool wakes_switchable;
        /* Park probes without the uretprobe on the park functions: unparks
         * at the parked thread's switch-in (needs D9_PROBE_SCHED to be
         * timely), else at its next poll or park. */
        bool unpark_at_resume;
        /* Install the ring, config and system-wide probes now, the plan's
         * uprobes later (d9_bpf_target_add_uprobes): recording starts
         * before a long plan is built. plan is then NULL. */
        bool uprobes_later;
        /* D9_PROBE_RUNS without the run ticks (d9_target_cfg.run_ticks_off). */
        bool run_ticks_off;
        d9_bpf_record_fn on_record;
        void *ctx;
};

int d9_bpf_open(const struct d9_bpf_opts *opts, struct d9_bpf **out);
/* d9_bpf_attach_target, d9_bpf_target_stop, d9_bpf_detach_target and the
 * teardown queries may run on different threads, one call per target at a
 * time; d9_bpf_close only once no other call runs. */
void d9_bpf_close(struct d9_bpf *bpf);
bool d9_bpf_uses_uprobe_multi(const struct d9_bpf *bpf);

/* On error, *err (if non-NULL) receives a malloc'd one-line message and
 * nothing stays attached. plan may be NULL when only D9_PROBE_SCHED /
 * D9_PROBE_CPU are asked for. */
int d9_bpf_attach_target(struct d9_bpf *bpf, pid_t pid, const struct probe_plan *plan,
                         const struct d9_bpf_target_opts *opts,
                         struct d9_bpf_target **out, char **err);
/* A target attached with uprobes_later: its plan's task-id layout into its
 * config, then the plan's uprobes of o->probes (o as given to the attach,
 * plan now set). Not concurrent with any other call on t. On error the
 * target records on without uprobes (none of this call stays attached)
 * and *err says why. */
int d9_bpf_target_add_uprobes(struct d9_bpf_target *t, const struct probe_plan *plan,
                              const struct d9_bpf_target_opts *o, char **err);
/* When the target's uprobes began to record (d9_now_ns): those attached
 * with its plan, or by add_uprobes. 0: none yet. */
uint64_t d9_bpf_target_uprobes_on_ns(const struct d9_bpf_target *t);
/* When the target's ring began to record (d9_now_ns): its records are no
 * older, but for off-CPU samples stamped with their interval's start. */
uint64_t d9_bpf_target_since_ns(const struct d9_bpf_target *t);
/* A bounded window of more uprobes on a live target (full detail after a
 * stall): on attaches the plan's points of `probes` while they may not
 * record yet, then lets them record at one instant; off stops them
 * recording at one instant and lets their links go on a thread of their
 * own. *ts (d9_now_ns) is that instant. Not concurrent with any other call
 * on t. On error the window stays closed. */
int d9_bpf_target_set_window(struct d9_bpf_target *t, const struct probe_plan *plan,
                             const struct d9_bpf_target_opts *o, unsigned probes, bool on,
                             uint64_t *ts, char **err);
bool d9_bpf_target_window_on(const struct d9_bpf_target *t);
/* Probe points the open (or last) window attached. */
size_t d9_bpf_target_window_points(const struct d9_bpf_target *t);
/* wakes_switchable targets: attach the wake points (on) or let them go (off;
 * the link dies on a thread of its own, like a detach's). Each hit costs the
 * target a trap, so off is the only way to make wakes cheaper. Returns 0 or
 * a negative errno (on: the wakes stay off). No-op without wake points. */
int d9_bpf_target_set_wakes(struct d9_bpf_target *t, bool on);
bool d9_bpf_target_wakes_on(const struct d9_bpf_target *t);

/* Stop recording: the target's config and ring leave the maps (the latter
 * waits for an RCU grace period, ≈ 10 ms, so that no program is still
 * writing) and the ring is drained; its links start going away on a
 * thread of their own. Drop counts stay readable until the detach. */
int d9_bpf_target_stop(struct d9_bpf_target *t);
/* The same without the final drain, for a worker thread while the caller's
 * loop keeps draining the ring: once it returns, nothing more is written
 * to the ring, and one more d9_bpf_target_consume gets the rest. */
int d9_bpf_target_quiesce(struct d9_bpf_target *t);
/* Drains what is left, then removes everything of this target. After
 * d9_bpf_target_stop this returns at once: the link teardown finishes in
 * the background (d9_bpf_teardowns_pending), and the slot and the pid are
 * reused only once it has (a new attach to the pid waits for it). */
void d9_bpf_detach_target(struct d9_bpf_target *t);
/* Background teardowns not finished yet (finished ones are reaped). */
size_t d9_bpf_teardowns_pending(struct d9_bpf *bpf);
/* Finish the background teardowns that are done; the last one releases
 * the system-wide programs. For a periodic tick. */
void d9_bpf_reap(struct d9_bpf *bpf);
/* The system-wide programs (sched_switch, exit/exec, CPU sampling)
 * are attached: from the first target to the end of the last. */
bool d9_bpf_armed(struct d9_bpf *bpf);
/* Whether one of them is pid's (an attach to pid now would wait for it). */
bool d9_bpf_teardown_pending_for(struct d9_bpf *bpf, pid_t pid);
/* (d9_bpf_close waits for the pending ones.) */

int d9_bpf_target_epoll_fd(const struct d9_bpf_target *t);
/* Drain without waiting; returns records consumed or negative errno. */
int d9_bpf_target_consume(struct d9_bpf_target *t);
/* Bytes written to the target's ring and not consumed yet; *size: the ring's. */
size_t d9_bpf_target_pending(const struct d9_bpf_target *t, size_t *size);
/* Wait up to timeout_ms for a wakeup, then drain whatever is pending. */
int d9_bpf_target_poll(struct d9_bpf_target *t, int timeout_ms);
/* Records lost because this target's ring was full (summed over CPUs). */
int d9_bpf_target_drops(const struct d9_bpf_target *t, uint64_t *dropped);
/* Deep stack copies (D9_STACK_DEEP) for thread tid from now on: one of its
 * stacks was cut at the end of the user_bytes copy (docs/stacks.md). */
int d9_bpf_target_stack_deep(struct d9_bpf_target *t, uint32_t tid);
/* A target thread's last switch-out as the scheduler probes keep it in
 * its thread storage: off CPU since off_ts (0: on CPU, or not since this
 * recording began) in task state `state` (0: preempted), its CPU time
 * cpu_ns then; tid as BPF names it (the initial pid namespace's). ns_tid
 * names the thread in d9d's namespace. 0 or a negative errno (-ENOENT:
 * no storage for it). */
struct d9_thread_off {
        uint32_t tid, state;
        uint64_t off_ts, cpu_ns;
        uint64_t bp;            /* its user rbp at that switch-out */
        uint32_t syscall;       /* as d9_rec_offcpu's */
        /* The default set's Worker of its loop, as a STACK record carries
         * it (worker: index + 1, 0: none seen in this recording). */
        uint32_t worker;
        uint64_t worker_rt, worker_found_ts;
};
int d9_bpf_target_thread_off(const struct d9_bpf_target *t, pid_t ns_tid, struct d9_thread_off *out);
/* Off-CPU intervals shorter than the target's offcpu_min_ns: not
 * recorded, only counted here (summed over CPUs). */
int d9_bpf_target_offcpu_short(const struct d9_bpf_target *t, struct d9_offcpu_short *sum);
/* The default set's Worker search (bpf/d9_wk_search.h) for this target,
 * on d9_now_ns's clock: begun at its first full scan, depth 0 until a
 * depth is confirmed. */
struct d9_worker_search {
        bool begun;
        uint64_t depth;                 /* bytes below the static TLS, */
        bool from_thread_pointer;       /* ... or the thread pointer: no plan yet */
        uint64_t begun_ns, confirmed_ns;
        uint32_t candidates;            /* depths weighed now, ruled out ones included */
        uint32_t ruled_out;
        uint32_t misses;                /* scans that found nothing while none had */
};
int d9_bpf_target_worker_search(const struct d9_bpf_target *t, struct d9_worker_search *out);
/* The default set's sweep of the target's threads again (d9_wk_sweep): a
 * search still unconfirmed a while after its start, whose workers went to
 * sleep before any scan (bpf/bpf_sleepers.c). */
int d9_bpf_target_sweep_workers(struct d9_bpf_target *t);
/* Each depth the search weighs, for the log when none confirmed: "DEPTH
 * (workers 0+1, H finds, N objects; the first ARC, index I, runtime
 * HANDLE), ..." into buf (empty: none, or not readable). */
void d9_bpf_target_worker_candidates(const struct d9_bpf_target *t, char *buf, size_t size);
/* Which poll-end mode was chosen, and how many probe points attached. */
enum d9_poll_end d9_bpf_target_poll_end(const struct d9_bpf_target *t);
/* The mode the uprobes of this plan and probe set get (asked: AUTO unless
 * forced), known before they attach: translate must end polls at the next
 * poll start from the first entry-only record on. */
enum d9_poll_end d9_bpf_poll_end_for(const struct probe_plan *plan, unsigned probes, enum d9_poll_end asked);
/* The poll-end uretprobes that mode attaches: one per poll point, or
 * (entry-only) one per blocking-pool task's poll point. */
size_t d9_bpf_poll_end_uretprobes(const struct probe_plan *plan, unsigned probes);
size_t d9_bpf_target_n_attached(const struct d9_bpf_target *t);
/* The executable's static TLS size (probe_plan.tls_size), for the default
 * set's Worker search (bpf/d9_stack.bpf.h d9_wk_tls); set at the install
 * from the plan, and again when a late plan lands, which also sweeps the
 * target's threads for their Workers (bpf_sleepers.h). */
int d9_bpf_target_set_tls(struct d9_bpf_target *t, uint64_t tls_size);
/* A late plan's verdict on the run ticks (d9_target_cfg.run_ticks_off):
 * off at one instant, the Worker search going on. */
int d9_bpf_target_set_run_ticks(struct d9_bpf_target *t, bool on);
/* Wall time the uprobe attach took (ns), for benchmarks. */
uint64_t d9_bpf_target_attach_ns(const struct d9_bpf_target *t);
/* When the target's programs stopped writing (d9_bpf_target_quiesce), on
 * d9_now_ns's clock; 0 while they still write. */
uint64_t d9_bpf_target_quiesced_ns(const struct d9_bpf_target *t);
/* Of the attach, the insertion of its ring into the map of rings. */
uint64_t d9_bpf_target_ring_insert_ns(const struct d9_bpf_target *t);
