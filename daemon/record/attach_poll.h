/* attach_poll: with poll uprobes (the full set) every poll that starts
 * after they attach is recorded, but one already running then has no start,
 * and until it ends no event at all: a worker stuck in one poll, the very
 * thing one attaches to a slow service to find, did not show (npm anvil: a
 * 10 s poll, "longest poll 7.4 ms", the worker not even counted).
 *
 * Seen from the CPU samples instead: a thread that has written no poll
 * start, poll end or park since the uprobes went live, sampled inside a
 * runtime task's poll frame, has been in that one poll since before they
 * did (a poll begun later would have written its start). Written as a
 * D9LongPollEvent, how "at attach", lasting at least from the uprobes'
 * start to its last such sample (ticks: its samples), when the thread's
 * first own record comes or at the segment's end; one still running then is
 * written again in the next segment, longer. Needs the plan's poll function
 * bounds (probe_plan_poll_bodies). Used by translate.c. */
#pragma once

#include <stdint.h>

#include "daemon/record/long_poll.h"

struct translate;
struct tr_thread;

/* Turn it on for tr (after translate_init, with a plan); vaddr_of NULL:
 * the session's unwinder (long_poll_ranges). 0 or -ENOMEM. */
int attach_poll_enable(struct translate *tr, long_poll_vaddr_fn vaddr_of, void *ctx);
/* Frames of a stack just unwound on t (leaf first, n_kern kernel ones first). */
void attach_poll_on_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, const uint64_t *frames,
                          uint32_t n, uint32_t n_kern);
/* A CPU sample of t at ts whose stack was stack_id (its atom: stack_atom). */
void attach_poll_on_sample(struct translate *tr, struct tr_thread *t, uint64_t ts, uint64_t stack_id,
                           uint32_t stack_atom);
/* A poll start, poll end or park of t's own, translated (so t's worker is
 * known if it names one): a poll t was in since the attach ended before
 * it; written now, on that worker. 0 or a negative errno. */
int attach_poll_own_record(struct translate *tr, struct tr_thread *t);
/* Records were lost from the ring: a poll start among them would make a
 * later poll look like one running since the attach, so no sample from now
 * on counts as one (those already seen still do). */
void attach_poll_records_lost(struct translate *tr);
/* The segment ends: write each such poll still running. */
int attach_poll_flush(struct translate *tr);
