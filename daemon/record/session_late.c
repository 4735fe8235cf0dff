/* session_late.c: a session that records before its probe plan is built.
 *
 * The plan of a big binary takes 0.6-2.5 s (a child process scans it); an
 * attach waited for all of it. Now a running process records at once what
 * needs no plan (sched_switch, CPU and run sampling, process resources),
 * while the planner builds the plan:
 *   - its ring records are held in order (record_hold.h), since translating
 *     them needs the plan (workers and long polls by stack, task labels);
 *   - the plan lands: the held records are translated with it, a
 *     D9ProbesEvent and the restated metadata say when;
 *   - the plan's uprobes (a set with Tokio probes) are attached on the BPF
 *     thread; a D9ProbesEvent attached=1 marks the first moment they record.
 * A session that ends first translates its held records without a plan.
 * Nothing here runs concurrently with another change of the target's BPF
 * links: the wake sampler waits, and an end waits for the attach. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpf/bpf_loader.h"
#include "daemon/core/cleanup.h"
#include "daemon/core/log.h"
#include "daemon/record/long_poll.h"
#include "daemon/record/plan_child.h"
#include "daemon/record/planner.h"
#include "daemon/record/session_int.h"
#include "uprobes/uprobes.h"

struct session_late {
        struct plan_job job;            /* first: the planner hands this back */
        struct session *s;              /* NULL once the session let go */
        struct d9d *d;
        bool uprobes;                   /* the second job: attaching the uprobes */
        bool landed;                    /* planned before the session attached */
        int pidfd;                      /* the job's own: the session may close its */
        pid_t pid;
        uint64_t begun_ms;
        struct probe_plan *plan;
        int r;
        char *why;
};

static void late_free(struct session_late *l)
{
        if (l->pidfd >= 0)
                close(l->pidfd);
        if (l->plan)
                probe_plan_free(l->plan);
        free(l->why);
        free(l);
}

/* On the planner thread: reads only the job's own fields. */
static void late_plan_run(struct plan_job *job)
{
        struct session_late *l = (struct session_late *)job;
        _cleanup_free_ char *display = NULL, *err = NULL;
        _cleanup_close_ int fd = -1;
        char root[64];

        fd = probe_target_exe_open(l->pidfd, l->pid, &display, &err);
        if (fd < 0) {
                l->r = fd;
                l->why = err ? d9_strdupf("PID %d: %s", l->pid, err)
                             : d9_strdupf("no probe plan for pid %d: %s", l->pid, strerror(-fd));
                return;
        }
        snprintf(root, sizeof(root), "/proc/%d/root", l->pid);
        l->r = planner_child_build(fd, display, root, l->d->cfg.plan_timeout_ms, planner_abort_fd(l->d->planner),
                                   &l->plan, &err);
        if (l->r < 0)
                l->why = err ? d9_strdupf("PID %d: %s", l->pid, err)
                             : d9_strdupf("no probe plan for pid %d: %s", l->pid, strerror(-l->r));
}

/* Held records into the trace, with the plan or without: privileges
 * gained meanwhile end the session as a drain would. all: at once (the
 * session ends); else a part of at most REPLAY_SLICE_NS, so that the loop
 * that drains every other target is not held up by 8 MiB of stacks to
 * unwind; records that arrive meanwhile are held behind them. */
#define REPLAY_SLICE_NS (5 * 1000000ull)

static void late_replay_run(struct session *s, bool all)
{
        uint64_t left = 0;
        bool more = false;

        if (!s->plan_pending)
                return;
        s->in_replay = true;
        if (all)
                left = record_hold_replay(&s->hold, session_record, s);
        else
                more = record_hold_replay_some(&s->hold, session_record, s, d9_now_ns() + REPLAY_SLICE_NS, &left);
        s->in_replay = false;
        s->discarded += left;
        if (more)
                return;
        s->plan_pending = false;
        s->replaying = false;
        /* Status shows the plan from this copy: still "pending" after the
         * replay, a finished session said so for good (npm rari). */
        session_plan_json_refresh(s);
        if (s->hold.dropped && s->tr.enc)
                translate_lost(&s->tr, s->hold.first_ts, s->hold.dropped, "plan_hold");
        if (s->hold.dropped)
                log_info("pid %d: %llu records not held while the plan was built (hold full)", s->pid,
                         (unsigned long long)s->hold.dropped);
        /* A whole replay comes from an end already under way: ending
         * again from inside it would queue a second stop. */
        if (!all && s->privileged && s->state == SESSION_RECORDING && !s->stopping)
                session_end_privileged(s);
}

void session_late_hold(struct session *s, const void *rec, size_t size)
{
        const struct d9_rec_hdr *h = rec;
        const struct translate_held_stack *frames;
        ssize_t n;

        /* An 8 KiB copy (deep ones more) held as its frames: copies filled
         * the 8 MiB hold in about a second on a stack-heavy target, and a
         * plan under load takes seconds. */
        if (s->tr.enc && size >= sizeof(*h) && h->type == D9_REC_STACK &&
            (n = translate_stack_ahead(&s->tr, rec, size, &frames)) > 0) {
                record_hold_push(&s->hold, frames, (size_t)n);
                return;
        }
        record_hold_push(&s->hold, rec, size);
}

static void late_replay(struct session *s)
{
        late_replay_run(s, true);
}

void session_late_replay_step(struct session *s)
{
        if (s->replaying)
                late_replay_run(s, false);
}

static void late_event_at(struct session *s, uint64_t ts, const char *probes, bool attached, const char *why)
{
        if (s->tr.enc && s->state == SESSION_RECORDING)
                translate_probes_event(&s->tr, ts, probes, attached, why);
}

static void late_event(struct session *s, const char *probes, bool attached, const char *why)
{
        late_event_at(s, d9_now_ns(), probes, attached, why);
}

/* "uprobes: poll=28,wake=2,...": what the plan attaches for s's probe set. */
static void uprobe_names(const struct session *s, char *buf, size_t len)
{
        json_t *att = s->plan_json ? json_object_get(s->plan_json, "attached") : NULL;
        size_t off = (size_t)snprintf(buf, len, "uprobes:");
        const char *k;
        json_t *v;

        json_object_foreach(att, k, v) {
                if (!strcmp(k, "sched_switch") || !strcmp(k, "cpu_sampling") || !strcmp(k, "run_sampling"))
                        continue;
                if (off < len)
                        off += (size_t)snprintf(buf + off, len - off, " %s=%lld", k, (long long)json_integer_value(v));
        }
}

void session_uprobes_joined(struct session *s, const char *why)
{
        char names[256];

        uprobe_names(s, names, sizeof(names));
        /* The instant the config let them record, not now. */
        late_event_at(s, d9_bpf_target_uprobes_on_ns(s->bpf), names, true, why);
}

static void late_uprobes_done(struct d9d *d, struct plan_job *job);

static void late_uprobes_run(struct plan_job *job)
{
        struct session_late *l = (struct session_late *)job;
        struct d9_bpf_target_opts to;

        /* The session waits for this job before it stops (session_end). */
        session_bpf_opts(l->s, &to);
        l->r = d9_bpf_target_add_uprobes(l->s->bpf, l->s->plan, &to, &l->why);
}

/* The plan is here and the session records: translate what was held,
 * then (Tokio probes) attach its uprobes on the BPF thread. */
static void late_apply(struct session *s, struct session_late *l)
{
        char why[256];
        int r = l->r;

        s->plan_ms = (int64_t)(d9_now_ms() - s->started_ms);
        if (r == 0) {
                s->plan = l->plan;
                l->plan = NULL;
                session_plan_cache_put(s->plan);
                if (!probe_plan_count(s->plan, PROBE_WAKE, false))
                        s->wakes_sampled = false; /* nothing to sample */
                r = translate_set_plan(&s->tr, s->plan,
                                       (s->probes & D9_PROBE_WAKE) && !s->wakes_sampled &&
                                       probe_plan_count(s->plan, PROBE_WAKE, false),
                                       (s->probes & D9_PROBE_PARK) && probe_plan_count(s->plan, PROBE_PARK, false));
                if (r == 0) {
                        session_exe_file_to_translate(s);
                        r = session_enable_long_polls(s);
                }
                if (r == 0) {
                        session_window_setup(s);
                        session_exe_map_update(s);
                }
                if (r == 0 && (s->tr.stack_workers || s->tr.attach_polls) && s->tr.enc)
                        r = long_poll_declare(&s->tr);
                if (r < 0) {
                        free(l->why);
                        l->why = d9_strdupf("cannot use the probe plan: %s", strerror(-r));
                }
        }
        /* The Worker search waited for this: below the TLS; without a plan,
         * from the thread pointer, as before there was one. */
        if (s->bpf && d9_bpf_target_set_tls(s->bpf, l->r == 0 && s->plan ? s->plan->tls_size : 0) < 0)
                log_warn("pid %d: the Worker search has no TLS size: it goes on waiting for one", s->pid);
        /* The run ticks ran while the plan was unknown; with no runtime
         * task poll body in it they could find nothing. */
        if (s->bpf && (s->probes & D9_PROBE_RUNS) && !session_run_ticks_on(s) &&
            d9_bpf_target_set_run_ticks(s->bpf, false) < 0)
                log_warn("pid %d: the run ticks could not be turned off", s->pid);
        if (r < 0)
                snprintf(s->plan_error, sizeof(s->plan_error), "%s", l->why ? l->why : strerror(-r));
        if (r == 0)
                snprintf(why, sizeof(why), "built %lld ms after the recording began; %llu records held meanwhile "
                         "translated with it", (long long)s->plan_ms, (unsigned long long)s->hold.kept);
        else
                snprintf(why, sizeof(why), "no plan (%.180s); %llu records held meanwhile translated without it",
                         s->plan_error, (unsigned long long)s->hold.kept);
        late_event(s, "probe plan", r == 0, why);
        /* The held records go in from now on, a part each loop turn, before
         * any record that follows (session_record holds those behind). */
        s->late = NULL;
        s->replaying = true;
        session_late_replay_step(s);
        if (s->state != SESSION_RECORDING || s->stopping) {
                late_free(l);
                return;
        }
        if (r == 0 && (s->probes & TOKIO_PROBES)) {
                /* The same job again, for the BPF thread. */
                l->uprobes = true;
                l->job = (struct plan_job){ .uid = s->starter_uid, .run = late_uprobes_run,
                                            .done = late_uprobes_done };
                s->late = l;
                planner_submit(s->d->bpf_worker, &l->job);
        } else {
                late_free(l);
        }
        session_plan_json_refresh(s);
        if (session_refresh_metadata(s) < 0)
                session_end(s, "encoder error");
        if (r < 0)
                log_warn("pid %d: recording without a probe plan: %s", s->pid, s->plan_error);
}

static void late_plan_done(struct d9d *d, struct plan_job *job)
{
        struct session_late *l = (struct session_late *)job;
        struct session *s = l->s;

        if (s && job->cancelled) {
                /* d9d stopping: the held records go in without a plan. */
                s->late = NULL;
                snprintf(s->plan_error, sizeof(s->plan_error), "no probe plan: d9d is stopping");
                if (s->plan_pending)
                        late_replay(s);
        }
        if (!s || job->cancelled) {
                if (!s && !job->cancelled && l->r == 0 && l->plan)
                        session_plan_cache_put(l->plan);        /* its recording ended first */
                late_free(l);
                return;
        }
        if (!s->started_ms) {
                l->landed = true;       /* applied at session_late_attached */
                return;
        }
        late_apply(s, l);
}

static void late_uprobes_done(struct d9d *d, struct plan_job *job)
{
        struct session_late *l = (struct session_late *)job;
        struct session *s = l->s;
        char why[320];

        s->late = NULL;
        if (job->cancelled) {
                /* d9d stopping before it ran: nothing attached. */
                snprintf(s->plan_error, sizeof(s->plan_error), "uprobes not attached: d9d is stopping");
        } else if (l->r == 0) {
                s->uprobes_ms = (int64_t)(d9_now_ms() - s->started_ms);
                session_plan_json_refresh(s);
                snprintf(why, sizeof(why), "attached %lld ms after the recording began (the plan took %lld ms): "
                         "none of these was recorded before", (long long)s->uprobes_ms, (long long)s->plan_ms);
                session_uprobes_joined(s, why);
                translate_uprobes_from(&s->tr, d9_bpf_target_uprobes_on_ns(s->bpf));
                if (s->state == SESSION_RECORDING)
                        session_wake_window_now(s);
                log_info("pid %d: %zu uprobes attached %lld ms after the recording began", s->pid,
                         d9_bpf_target_n_attached(s->bpf), (long long)s->uprobes_ms);
        } else {
                snprintf(s->plan_error, sizeof(s->plan_error), "uprobes not attached: %s",
                         l->why ? l->why : strerror(-l->r));
                late_event(s, "uprobes", false, s->plan_error);
                log_warn("pid %d: recording without uprobes: %s", s->pid, s->plan_error);
        }
        session_plan_json_refresh(s);
        if (s->tr.enc && s->state == SESSION_RECORDING && session_refresh_metadata(s) < 0)
                log_warn("pid %d: metadata not restated", s->pid);
        late_free(l);
        session_end_deferred(s);
}

bool session_bpf_busy(const struct session *s)
{
        return (s->late && s->late->uprobes) || s->win_job || s->wake_job || s->sweep_job;
}

int session_late_begin(struct session *s, char **why)
{
        struct session_late *l = calloc(1, sizeof(*l));

        if (!l)
                return -ENOMEM;
        l->pidfd = fcntl(s->pidfd_w.fd, F_DUPFD_CLOEXEC, 3);
        if (l->pidfd < 0) {
                int r = -errno;

                free(l);
                *why = d9_strdupf("cannot plan pid %d: %s", s->pid, strerror(-r));
                return r;
        }
        l->s = s;
        l->d = s->d;
        l->pid = s->pid;
        l->begun_ms = d9_now_ms();
        l->job = (struct plan_job){ .uid = s->starter_uid, .run = late_plan_run, .done = late_plan_done };
        s->late = l;
        s->plan_pending = true;
        planner_submit(s->d->planner, &l->job);
        return 0;
}

void session_late_attached(struct session *s)
{
        struct session_late *l = s->late;
        char why[160];

        snprintf(why, sizeof(why), "recording began; the probe plan is being built: records held until it lands");
        late_event(s, "sched_switch, cpu and run sampling, process samples", true, why);
        if (l && l->landed)
                late_apply(s, l);
}

bool session_late_end(struct session *s, const char *reason)
{
        struct session_late *l = s->late;

        if (reason && s->replaying)
                late_replay(s);         /* the plan landed: the rest of the held records, now */
        if (!l)
                return true;
        if (l->uprobes)
                return false;
        /* Still planning: the plan is not waited for. One being built is
         * finished for the plan cache: on a loaded machine a big binary's
         * plan can take longer than a short recording, and each attempt
         * began again from nothing (npm restate-server: 3 plans of 7-17 s
         * for one process, each recording over first). */
        s->late = NULL;
        l->s = NULL;
        if (l->landed)
                late_free(l);
        else
                planner_cancel_queued(s->d->planner, &l->job);
        if (!reason) {
                record_hold_free(&s->hold);
                s->plan_pending = false;
                return true;
        }
        snprintf(s->plan_error, sizeof(s->plan_error), "the recording ended (%.100s) before its probe plan was built",
                 reason);
        if (s->plan_pending) {
                late_event(s, "probe plan", false, s->plan_error);
                late_replay(s);
        }
        return true;
}

json_t *session_late_json(const struct session *s)
{
        json_t *j = json_object();

        json_object_set_new(j, "state", json_string(s->plan_pending ? "pending" : s->plan || s->had_plan ? "ready" : "none"));
        if (s->plan_ms >= 0)
                json_object_set_new(j, "landed_ms", json_integer(s->plan_ms));
        if (s->uprobes_ms >= 0)
                json_object_set_new(j, "uprobes_ms", json_integer(s->uprobes_ms));
        else if (s->late && s->late->uprobes)
                json_object_set_new(j, "uprobes", json_string("attaching"));
        if (s->plan_pending) {
                json_object_set_new(j, "held", json_integer((json_int_t)s->hold.kept));
                json_object_set_new(j, "held_bytes", json_integer((json_int_t)(s->hold.len - s->hold.pos)));
        }
        if (s->hold.dropped)
                json_object_set_new(j, "held_dropped", json_integer((json_int_t)s->hold.dropped));
        if (s->plan_error[0])
                json_object_set_new(j, "error", json_string(s->plan_error));
        return j;
}
