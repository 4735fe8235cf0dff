/* session_window.c: full detail when it matters (--full-on-stall T,
 * d9d.conf full_on_stall). The session records the default set; a poll of
 * at least T (a D9LongPollEvent from stacks and run ticks) opens a window:
 * the full set's uprobes (poll, spawn, terminate, wake, park) attach for
 * full_window, then go, and no window opens for full_window_gap after. So
 * the next occurrences of an intermittent stall within the window are
 * recorded with every event, at the default set's cost outside windows.
 * A window opens and closes at one instant each (d9_bpf_target_set_window),
 * marked by a D9ProbesEvent; the change runs on the BPF thread, and the
 * session's other link changes (sampled wakes, its end) wait for it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/bpf_loader.h"
#include "daemon/core/log.h"
#include "daemon/record/planner.h"
#include "daemon/record/session_int.h"
#include "uprobes/uprobes.h"

struct session_win {
        struct plan_job job;            /* first: the BPF thread hands this back */
        struct session *s;
        bool on;
        int r;
        char *why;
        uint64_t ts;                    /* when it took effect */
};

void session_window_setup(struct session *s)
{
        if (!s->full_on_stall_ms)
                return;
        s->win_error[0] = 0;
        s->tr.stall_ns = 0;
        if (s->probes & TOKIO_PROBES)
                snprintf(s->win_error, sizeof(s->win_error), "not used: this probe set has uprobes all the time");
        else if (!(s->probes & D9_PROBE_RUNS))
                snprintf(s->win_error, sizeof(s->win_error), "not possible: stalls are seen by longpoll, not in this set");
        else if (!s->plan)
                snprintf(s->win_error, sizeof(s->win_error), s->plan_pending ? "waiting for the probe plan"
                                                                             : "not possible: no probe plan");
        else if (!s->tr.stack_workers || !probe_plan_count(s->plan, PROBE_POLL, false))
                snprintf(s->win_error, sizeof(s->win_error), "not possible: no poll function of this build is known");
        if (s->win_error[0])
                return;
        s->tr.stall_ns = s->full_on_stall_ms * 1000000ull;
        s->tr.window_parks = probe_plan_count(s->plan, PROBE_PARK, false) > 0;
        s->tr.window_wakes = probe_plan_count(s->plan, PROBE_WAKE, false) > 0;
}

static void win_run(struct plan_job *job)
{
        struct session_win *w = (struct session_win *)job;
        struct d9_bpf_target_opts to;

        session_bpf_opts(w->s, &to);
        w->r = d9_bpf_target_set_window(w->s->bpf, w->s->plan, &to, WINDOW_PROBES, w->on, &w->ts, &w->why);
}

/* The kinds a window attaches that the plan has points for ("poll,
 * terminate, wake"): not the kinds it lacks (npm anvil has no spawn and no
 * park point). */
static void window_kinds(const struct probe_plan *p, char *buf, size_t len)
{
        static const struct {
                enum probe_kind kind;
                const char *name;
        } kinds[] = { { PROBE_POLL, "poll" }, { PROBE_SPAWN, "spawn" }, { PROBE_COMPLETE, "terminate" },
                      { PROBE_WAKE, "wake" }, { PROBE_PARK, "park" } };
        size_t off = 0;

        buf[0] = 0;
        for (size_t i = 0; p && i < sizeof(kinds) / sizeof(kinds[0]) && off < len; i++)
                if (probe_plan_count(p, kinds[i].kind, false))
                        off += (size_t)snprintf(buf + off, len - off, "%s%s", off ? ", " : "", kinds[i].name);
}

static void win_done(struct d9d *d, struct plan_job *job)
{
        struct session_win *w = (struct session_win *)job;
        struct session *s = w->s;
        uint64_t now = d9_now_ms();
        char what[160], why[320], kinds[64];

        /* The window's last records are still in the ring: translated as
         * the window's before its close (each of the polls they start ended
         * at the close instead, 0.5 ms late: a worker read 13 % busier).
         * An end asked for by this drain waits for the job's end below. */
        if (!job->cancelled && w->r == 0 && !w->on && s->tr.enc && s->state == SESSION_RECORDING) {
                translate_window_closing(&s->tr, w->ts);
                session_drain_now(s);
        }
        s->win_job = NULL;
        if (job->cancelled) {
                w->r = -ECANCELED;      /* d9d stopping: it never ran */
        } else if (w->r == 0 && s->tr.enc && s->state == SESSION_RECORDING) {
                window_kinds(s->plan, kinds, sizeof(kinds));
                snprintf(what, sizeof(what), "full-detail window: %zu uprobes (%s)",
                         d9_bpf_target_window_points(s->bpf), kinds);
                if (w->on)
                        snprintf(why, sizeof(why), "a poll of at least %llu ms was seen: every %s event is recorded "
                                 "for %llu ms", (unsigned long long)s->full_on_stall_ms, kinds,
                                 (unsigned long long)s->d->cfg.full_window_ms);
                else
                        snprintf(why, sizeof(why), "window over: polls still open end here; the next window opens "
                                 "no sooner than %llu ms from now", (unsigned long long)s->d->cfg.full_window_gap_ms);
                translate_probes_event(&s->tr, w->ts, what, w->on, why);
                translate_window(&s->tr, w->ts, w->on);
        }
        if (w->r == 0 && w->on) {
                s->windows++;
                s->win_opened_ms = now;
        } else {
                s->win_next_ms = now + s->d->cfg.full_window_gap_ms;
                s->win_stalls_seen = s->tr.stalls;
        }
        if (w->r < 0 && w->r != -ECANCELED) {
                snprintf(s->win_error, sizeof(s->win_error), "window not %s: %.120s", w->on ? "opened" : "closed",
                         w->why ? w->why : strerror(-w->r));
                log_warn("pid %d: %s", s->pid, s->win_error);
        }
        free(w->why);
        free(w);
        session_end_deferred(s);
}

static void win_submit(struct session *s, bool on)
{
        struct session_win *w = calloc(1, sizeof(*w));

        if (!w)
                return;
        w->s = s;
        w->on = on;
        /* Before the window's uprobes can record, and never back: its
         * last records may still be in the ring after it closes. */
        if (on && d9_bpf_poll_end_for(s->plan, WINDOW_PROBES, D9_POLL_END_AUTO) == D9_POLL_END_ENTRY_ONLY)
                s->tr.end_at_next_poll = true;
        w->job = (struct plan_job){ .uid = s->starter_uid, .run = win_run, .done = win_done };
        s->win_job = w;
        planner_submit(s->d->bpf_worker, &w->job);
}

void session_window_tick(struct session *s, uint64_t now_ms)
{
        if (!s->tr.stall_ns || s->win_job || session_bpf_busy(s) || !s->bpf || s->state != SESSION_RECORDING ||
            s->stopping)
                return;
        if (d9_bpf_target_window_on(s->bpf)) {
                if (now_ms - s->win_opened_ms >= s->d->cfg.full_window_ms)
                        win_submit(s, false);
                return;
        }
        /* Stalls in the gap after a window do not open the next one. */
        if (now_ms < s->win_next_ms)
                s->win_stalls_seen = s->tr.stalls;
        else if (s->tr.stalls > s->win_stalls_seen)
                win_submit(s, true);
}

json_t *session_window_json(const struct session *s)
{
        if (!s->full_on_stall_ms)
                return json_null();
        return json_pack("{s:I,s:I,s:I,s:b,s:I,s:I,s:I,s:s}", "threshold_ms", (json_int_t)s->full_on_stall_ms,
                         "window_ms", (json_int_t)s->d->cfg.full_window_ms,
                         "gap_ms", (json_int_t)s->d->cfg.full_window_gap_ms,
                         "open", s->bpf && !s->win_job && d9_bpf_target_window_on(s->bpf),
                         "windows", (json_int_t)s->windows, "stalls", (json_int_t)s->tr.stalls,
                         "stalls_in_windows", (json_int_t)s->tr.stalls_in_window, "error", s->win_error);
}
