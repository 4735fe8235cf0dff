/* report_tasks.c: tasks alive, queued and being polled over a recording,
 * as step functions: +1/-1 at instants, sorted, summed; the report gives
 * each one's peak and when it was reached (definitions in report_tasks.h,
 * the same as the viewer's chart so the numbers agree).
 *
 * A task alive before the attach is counted only from what the recording
 * shows of it: its first poll, or (only its end seen) from the start. One
 * neither polled nor terminated while recording is invisible; the JSON
 * says how many tasks were first seen polling rather than spawned (alive
 * before the recording, spawned where no probe saw it, or a build without
 * spawn points, where d9d writes a task's spawn at its first poll: those
 * are not counted spawned, as a spawn point saw none of them). A
 * blocking-pool job (D9BlockingPollEvent) ends with its one poll, which
 * runs it to completion: builds often have no terminate point for them. */
#include "report_tasks.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "task_table.h"
#include "trace_read.h"

#define MAX_STEPS (8u << 20)    /* per series: 64 MiB; beyond, counted */

/* A step: ts << 1 | (1 for +1, 0 for -1): at one instant a -1 sorts
 * first, as in tasks.js (a poll that ends as another starts is one). */
struct steps {
        uint64_t *v;
        size_t n, cap;
};

struct task_slot {
        uint64_t task;
        uint64_t first_ts;      /* spawn, else earliest poll start; 0 = none */
        uint64_t spawn_ts, terminate_ts;
        uint64_t wake_ts;       /* first wake since the last poll started */
        uint64_t last_end;      /* end of its last poll */
        uint64_t job_end;       /* a blocking-pool job: its poll's end */
        bool polled;
        bool spawn_at_poll;     /* its spawn written at its first poll */
};

struct open_poll {
        bool open;
        uint64_t start, task;
};

struct report_tasks {
        struct task_table slots;        /* of struct task_slot */
        struct steps alive, queued, running;
        struct open_poll w[256];
        uint64_t spawned, terminated, steps_not_kept;
};

struct report_tasks *d9ctl_report_tasks_new(void)
{
        struct report_tasks *t = calloc(1, sizeof(*t));

        if (t)
                t->slots.size = sizeof(struct task_slot);
        return t;
}

void d9ctl_report_tasks_free(struct report_tasks *t)
{
        if (!t)
                return;
        d9ctl_task_table_free(&t->slots);
        free(t->alive.v);
        free(t->queued.v);
        free(t->running.v);
        free(t);
}

static int step_add(struct report_tasks *t, struct steps *s, uint64_t ts, int delta)
{
        if (s->n == s->cap) {
                if (s->cap >= MAX_STEPS) {
                        t->steps_not_kept++;
                        return 0;
                }
                size_t cap = s->cap ? s->cap * 2 : 4096;
                uint64_t *v = realloc(s->v, cap * sizeof(*v));
                if (!v)
                        return -ENOMEM;
                s->v = v;
                s->cap = cap;
        }
        s->v[s->n++] = ts << 1 | (delta > 0);
        return 0;
}

static struct task_slot *slot_of(struct report_tasks *t, uint64_t task)
{
        return d9ctl_task_table_get(&t->slots, task, true);
}

static void seen_at(struct task_slot *s, uint64_t ts)
{
        if (!s->first_ts || ts < s->first_ts)
                s->first_ts = ts;
}

/* A poll starts: it was queued since the wake that scheduled it (counted
 * from the end of the poll before, if it came during that one), or since
 * the spawn for a first poll without a wake. */
static int on_poll_start(struct report_tasks *t, struct task_slot *s, uint64_t ts)
{
        uint64_t from = 0;
        int r = 0;

        if (s->wake_ts && s->wake_ts <= ts)
                from = s->wake_ts > s->last_end ? s->wake_ts : s->last_end;
        else if (!s->polled && s->spawn_ts && s->spawn_ts <= ts)
                from = s->spawn_ts;
        if (from && from <= ts && !(r = step_add(t, &t->queued, from, 1)))
                r = step_add(t, &t->queued, ts, -1);
        s->wake_ts = 0;
        if (!s->polled && s->spawn_ts == ts)
                s->spawn_at_poll = true;
        s->polled = true;
        seen_at(s, ts);
        return r;
}

static int on_poll_end(struct report_tasks *t, struct open_poll *w, uint64_t ts)
{
        struct task_slot *s = slot_of(t, w->task);
        int r;

        if (!w->open || ts < w->start)
                return 0;
        w->open = false;
        if (!s)
                return -ENOMEM;
        /* An end written late (decided by the task's start on another
         * worker) is older than the task's latest one. */
        if (ts > s->last_end)
                s->last_end = ts;
        r = step_add(t, &t->running, w->start, 1);
        return r < 0 ? r : step_add(t, &t->running, ts, -1);
}

void d9ctl_report_tasks_event(struct report_tasks *t, const struct d9_dec_event *ev, int *err)
{
        const char *name = ev->schema->name;
        struct task_slot *s = NULL;
        int r = 0;

        if (!strcmp(name, "PollStartEvent")) {
                struct open_poll *w = &t->w[(uint8_t)d9ctl_trace_field_u(ev, "worker_id")];
                uint64_t task = d9ctl_trace_field_u(ev, "task_id");
                if (!task)
                        return;
                if (!(s = slot_of(t, task)))
                        r = -ENOMEM;
                else
                        r = on_poll_start(t, s, ev->ts);
                *w = (struct open_poll){ true, ev->ts, task };
        } else if (!strcmp(name, "PollEndEvent")) {
                r = on_poll_end(t, &t->w[(uint8_t)d9ctl_trace_field_u(ev, "worker_id")], ev->ts);
        } else if (!strcmp(name, "TaskSpawnEvent")) {
                t->spawned++;
                if (!(s = slot_of(t, d9ctl_trace_field_u(ev, "task_id"))))
                        r = -ENOMEM;
                else if (!s->spawn_ts) {
                        s->spawn_ts = ev->ts;
                        seen_at(s, ev->ts);
                }
        } else if (!strcmp(name, "TaskTerminateEvent")) {
                t->terminated++;
                if (!(s = slot_of(t, d9ctl_trace_field_u(ev, "task_id"))))
                        r = -ENOMEM;
                else
                        s->terminate_ts = ev->ts;
        } else if (!strcmp(name, "D9BlockingPollEvent")) {
                uint64_t dur = d9ctl_trace_field_u(ev, "duration_ns");

                if (!(s = slot_of(t, d9ctl_trace_field_u(ev, "task_id")))) {
                        r = -ENOMEM;
                } else {
                        uint64_t start = dur <= ev->ts ? ev->ts - dur : ev->ts;

                        /* Its spawn written at its poll (no spawn point). */
                        if (!s->polled && s->spawn_ts == start)
                                s->spawn_at_poll = true;
                        s->polled = true;
                        seen_at(s, start);
                        s->job_end = ev->ts;
                }
        } else if (!strcmp(name, "WakeEventEvent")) {
                if (!(s = slot_of(t, d9ctl_trace_field_u(ev, "woken_task_id"))))
                        r = -ENOMEM;
                else if (!s->wake_ts)
                        s->wake_ts = ev->ts;
        } else {
                return;
        }
        if (r < 0)
                *err = r;
}

void d9ctl_report_tasks_segment(struct report_tasks *t)
{
        for (int i = 0; i < 256; i++)
                t->w[i].open = false;
}

static int u64_cmp(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Sorts and sums: the peak, when it was first reached, the value at the end. */
static json_t *series_json(struct steps *s, int64_t start)
{
        int64_t cur = start, peak = start;
        uint64_t peak_at = 0;

        qsort(s->v, s->n, sizeof(*s->v), u64_cmp);
        for (size_t i = 0; i < s->n; i++) {
                cur += (s->v[i] & 1) ? 1 : -1;
                if (cur > peak) {
                        peak = cur;
                        peak_at = s->v[i] >> 1;
                }
        }
        return json_pack("{s:I, s:I, s:I}", "peak", (json_int_t)peak, "peak_at_ns", (json_int_t)peak_at, "at_end",
                         (json_int_t)cur);
}

json_t *d9ctl_report_tasks_json(struct report_tasks *t, bool spawns_from_polls)
{
        uint64_t seen = 0, alive_at_start = 0, first_polled = 0, jobs_ended = 0, spawns_at_poll = 0;
        int r = 0;

        const struct task_slot *s;
        for (size_t i = 0; r == 0 && (s = d9ctl_task_table_next(&t->slots, &i));) {
                uint64_t end = s->terminate_ts ? s->terminate_ts : s->job_end;

                jobs_ended += !s->terminate_ts && s->job_end;
                spawns_at_poll += s->spawn_at_poll || (spawns_from_polls && s->spawn_ts);
                if (s->first_ts) {
                        seen++;
                        first_polled += !s->spawn_ts || s->spawn_at_poll || spawns_from_polls;
                        r = step_add(t, &t->alive, s->first_ts, 1);
                } else if (end) {
                        alive_at_start++; /* only its end seen */
                }
                if (!r && end)
                        r = step_add(t, &t->alive, end, -1);
        }
        if (r < 0)
                return NULL;
        return json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:o, s:o, s:o, s:I}", "spawned",
                         (json_int_t)(t->spawned - spawns_at_poll),
                         "terminated", (json_int_t)t->terminated, "blocking_jobs_ended", (json_int_t)jobs_ended,
                         "seen", (json_int_t)seen, "first_seen_polling",
                         (json_int_t)first_polled, "alive_at_start", (json_int_t)alive_at_start, "alive",
                         series_json(&t->alive, (int64_t)alive_at_start), "queued", series_json(&t->queued, 0),
                         "being_polled", series_json(&t->running, 0), "steps_not_kept",
                         (json_int_t)t->steps_not_kept);
}
