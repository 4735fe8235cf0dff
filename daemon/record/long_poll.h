/* long_poll: the default probe set's view of workers and long polls, with
 * no uprobe at all (docs/performance.md, "The default set").
 *
 * - A worker is a thread whose stack (a CPU sample, an off-CPU interval, a
 *   fast run tick) shows a frame inside a runtime task's raw::poll<T,S>;
 *   the outermost blocking-pool poll frame below it is the worker's own
 *   launch task, and a thread whose stack shows such a launch frame is a
 *   worker too (an idle worker's park stack has only that one).
 * - A running long poll: fast ticks (bpf d9_run_sample, RUN_SAMPLE) of one
 *   thread that did not switch out voluntarily in between, all inside the
 *   same task poll frame (ticks whose stack shows neither a task poll nor
 *   the launch frame, a truncated unwind, do not end it): written as one
 *   D9LongPollEvent when the run ends, lasting at least from its first
 *   tick to its last one (or to the switch-in after a preemption whose
 *   stack shows the same frame: ticks count CPU time, and a busy poll on
 *   a loaded machine spends most of its wall time preempted). Ticks carry
 *   stacks sparsely after the first 4 ms (bpf d9_run_tick): the last one
 *   can be 2-8 ms of wall time before the poll's end.
 *   Back-to-back polls of one future type without a sleep between read as
 *   one: the ticks cannot see a poll boundary.
 * - A blocked long poll: an off-CPU interval (>= offcpu_min, with its stack)
 *   of a worker whose stack shows a task poll frame: the poll blocked the
 *   worker, which is not a park.
 * - A preempted long poll: a preemption (>= offcpu_min, with its stack)
 *   inside a task poll frame with fewer than two ticks in the poll: the
 *   poll held the worker from its tick (or the switch-out) to switch-in.
 * Used by translate.c; the frame -> plan lookup is a hook so tests can feed
 * synthetic stacks. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct translate;
struct tr_thread;
struct d9_rec_run;
struct d9_rec_offcpu;

/* Link-time address of a user address in the planned executable; 0 or <0. */
typedef int (*long_poll_vaddr_fn)(void *ctx, uint64_t addr, uint64_t *vaddr);

/* The plan's poll functions, for finding poll frames in stacks (vaddr_of
 * NULL: the session's unwinder), without turning the derivations on (the
 * full set's polls at attach, attach_poll.h). 0 or -ENOMEM. */
int long_poll_ranges(struct translate *tr, long_poll_vaddr_fn vaddr_of, void *ctx);
/* cookie + 1 of the innermost runtime-task poll frame in frames (leaf
 * first, n_kern kernel ones first), 0: none. */
uint32_t long_poll_task_frame(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern);
/* cookie + 1 of a spawn_blocking job's poll frame in frames: a
 * blocking-pool poll with no task poll above it, and not a worker loop's
 * launch, which stacks with a task poll above it taught (all of one
 * build's runtimes launch their workers by one function); 0 while no
 * launch is known. */
uint32_t long_poll_job_frame(struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern);
/* t runs spawn_blocking jobs (cookie + 1 of the one seen), unless a stack
 * has shown that blocking poll launching a loop: its samples are the
 * pool's until a task poll above that blocking poll shows it was one. */
void long_poll_pool_job(const struct translate *tr, struct tr_thread *t, uint32_t job);
/* Whether frames show a blocking-pool poll (a worker loop's launch, or a
 * spawn_blocking job). */
bool long_poll_blocking_frame(const struct translate *tr, const uint64_t *frames, uint32_t n, uint32_t n_kern);

/* One D9LongPollEvent: at least min_ns long, written at ts, how it was seen. */
struct long_poll_seen {
        uint32_t cookie;                /* the poll point's */
        uint64_t callee;                /* what its frame called (tr_thread.lp_callee) */
        uint64_t min_ns, ticks, ts;
        uint64_t waited_ns;             /* switched out still runnable inside it */
        const char *how;
        uint32_t stack_atom;
};
/* Written on t's worker (255: none known) and tid; counted in long_polls,
 * not in events (the caller's). 0 or a negative errno from the encoder. */
int long_poll_write(struct translate *tr, const struct tr_thread *t, const struct long_poll_seen *lp);

/* Turn the derivations on for tr (after translate_init, with a plan):
 * period_ns is the run tick's period. vaddr_of NULL: the session's
 * unwinder. Returns 0 or -ENOMEM. */
int long_poll_enable(struct translate *tr, uint64_t period_ns, long_poll_vaddr_fn vaddr_of, void *ctx);
void long_poll_free(struct translate *tr);
/* New segment: declare D9LongPollEvent in it. */
int long_poll_declare(struct translate *tr);
/* Frames of a stack just unwound on t (leaf first, n_kern kernel ones
 * first); cut: the walk stopped before the thread's start (the copy's end,
 * pages not in memory, the frame limit), so its poll frame may be missing. */
void long_poll_on_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, const uint64_t *frames,
                        uint32_t n, uint32_t n_kern, bool cut);
/* The full set's part of long_poll_on_stack: the pool's loop learnt from
 * blocking-pool poll frames, launches from task polls above them, and a
 * thread no poll has named a worker, waiting in that loop with no poll on
 * its stack, made the pool's (npm grafbase: its pool threads read 255
 * until their first job). */
void long_poll_pool_on_stack(struct translate *tr, struct tr_thread *t, const uint64_t *frames, uint32_t n,
                             uint32_t n_kern);
/* A run tick whose stack unwound to frames (as long_poll_on_stack saw them). */
int long_poll_on_run(struct translate *tr, struct tr_thread *t, const struct d9_rec_run *r,
                     const uint64_t *frames, uint32_t n);
/* A preemption of t (an involuntary off-CPU interval >= offcpu_min with
 * its stack; stack: its callchain atom): inside the open run's poll frame,
 * it extends the run to its switch-in (under load a busy poll gets few
 * ticks, as they count CPU time, and spends most of its wall time
 * preempted); inside another task poll frame, it opens a run of that
 * poll, from its switch-out. 0 or a negative errno from the encoder. */
int long_poll_on_preempt(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o, uint32_t stack);
/* 1: the interval was a poll blocking the worker (written with stack, the
 * off-CPU sample's callchain; not a park). */
int long_poll_on_offcpu(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o, uint32_t stack);
/* Write the runs no tick has extended for LONG_POLL_IDLE_NS (1 s) of trace
 * time, the newest record drained (all: every run, at a segment's end). */
int long_poll_flush(struct translate *tr, bool all);
