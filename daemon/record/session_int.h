/* session_int.h: what session.c shares with session_late.c, nothing else. */
#pragma once

#include "daemon/record/session.h"

/* The probe sets that need a plan of the target's executable. */
#define TOKIO_PROBES (D9_PROBE_PARK | D9_PROBE_POLL | D9_PROBE_SPAWN | D9_PROBE_WAKE | D9_PROBE_TERMINATE)
/* Probe sets that need a probe plan: long polls read its poll functions. */
#define PLANNED_PROBES (TOKIO_PROBES | D9_PROBE_RUNS)

struct d9_bpf_target_opts;

/* One ring record into the trace (or held while the plan is pending);
 * non-zero: stop draining (the target gained privileges). */
int session_record(void *ctx, const void *rec, size_t size);
/* The options s's BPF side is attached with. */
void session_bpf_opts(struct session *s, struct d9_bpf_target_opts *to);
/* s->plan_json again, from what is attached now. */
void session_plan_json_refresh(struct session *s);
/* Restate the segment metadata (a plan landed, workers showed up). */
int session_refresh_metadata(struct session *s);
/* The plan, for the next process of the same file. */
void session_plan_cache_put(const struct probe_plan *plan);
/* Tell translate which file the plan is of (an exec into it is no new program). */
void session_exe_file_to_translate(struct session *s);
/* Whether s's default-set derivations (workers, long polls by stack) can run. */
int session_enable_long_polls(struct session *s);
/* Whether the run ticks run: asked for, and (once the plan is known) a
 * runtime task's poll body to find in their stacks. */
bool session_run_ticks_on(const struct session *s);
void session_end_privileged(struct session *s);
/* Sampled wakes: a D9WakeWindowEvent saying whether they are attached now. */
void session_wake_window_now(struct session *s);

/* session_late.c. Begin building s's plan while it records (its pidfd is
 * checked, it is not linked yet). */
int session_late_begin(struct session *s, char **why);
/* s attached (its BPF side installed, recording): a plan already built is
 * applied now. */
void session_late_attached(struct session *s);
/* The trace says when s's uprobes began to record (a D9ProbesEvent at that
 * instant, its points by kind; why: what came before). */
void session_uprobes_joined(struct session *s, const char *why);
/* s ends, or is discarded: a plan still being built is dropped and the held
 * records are translated without it. False: its uprobes are being
 * attached; the end waits for them (s->end_deferred). */
bool session_late_end(struct session *s, const char *reason);
/* The plan landed: translate the next part of the held records (a few ms
 * of the loop), until none is left. */
void session_late_replay_step(struct session *s);
/* A ring record while the plan is built: held in order, a stack unwound
 * first (it needs no plan; its frames are a twentieth of its copy). */
void session_late_hold(struct session *s, const void *rec, size_t size);
/* "plan" object of status. */
json_t *session_late_json(const struct session *s);
/* A job on the BPF thread changes s's links: session_end waits for it. */
bool session_bpf_busy(const struct session *s);
/* An end asked for meanwhile, now. */
void session_end_deferred(struct session *s);
/* Translate what s's ring holds now, off the ring's wakeup. */
void session_drain_now(struct session *s);

/* session_window.c: full detail after a stall. */
#define WINDOW_PROBES TOKIO_PROBES
/* At attach and when the plan lands: whether windows can open (s->win_error). */
void session_window_setup(struct session *s);
/* Every tick: open a window after a stall, close it when its time is up. */
void session_window_tick(struct session *s, uint64_t now_ms);
json_t *session_window_json(const struct session *s);
