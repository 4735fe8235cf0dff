/* report.c: the collecting pass and the analysis of d9ctl report.
 *
 * What it reads (docs/daemon.md, "What the trace holds"): PollStart/PollEnd
 * per worker (a poll is open on a worker until its end), WorkerPark/Unpark,
 * WakeEvent (woken task id), CpuSampleEvent (source 0 = running, 1 =
 * descheduled; worker_id says which worker's thread), SymbolTableEntry
 * (names for callchain addresses), D9LostEventsEvent and D9ShortOffCpuEvent
 * (what the trace does not hold). A sample belongs to the poll open on its
 * worker at its timestamp, as dial9's readers attach them. */
#include "report.h"
#include "report_long_polls.h"
#include "report_process.h"
#include "report_tasks.h"
#include "task_table.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "daemon/symbolize/stack_marks.h"
#include "trace_read.h"

#define NWORKERS 256          /* worker ids are u8-sized: 254 blocking, 255 other */
#define MAX_FRAMES REPORT_FRAMES_MAX
#define MIN_POLL_NS 1000000u  /* polls kept for the lists: >= 1 ms */
#define MAX_KEPT 1000000      /* bound on kept polls and samples; the rest counted */

struct poll {
        uint64_t start, end, task;
        uint8_t worker;
        bool open;    /* its end not recorded: end is the recording's last event */
        char *future; /* interned in the report's string list */
};

struct sample {
        uint64_t ts;
        uint8_t worker, source;
        uint8_t n;
        uint64_t frames[MAX_FRAMES];
};

struct wake {
        uint64_t delay, task, woken_at;
        uint8_t worker;
        char *future;
};

#define WORKER_TIDS 4

/* A worker id's row. Its threads: a worker's core moves between threads
 * (block_in_place), and ids are per recording, so one row of a report
 * over two recordings can be two threads (npm Deno: worker 0 was one
 * thread in the first and the main thread in the second). */
struct worker {
        bool seen, in_poll, parked, more_tids;
        uint64_t poll_start, poll_task, park_start;
        char *poll_future;
        uint64_t busy_ns, parked_ns, polls, sched_wait_ns;
        uint64_t parked_in_windows_ns;  /* the part inside full-detail windows */
        uint32_t tids[WORKER_TIDS], ntids;
};

/* task id -> time of its first wake since its last poll began (0 = none);
 * whether that wake came while the task was being polled, when its last
 * poll began, and when it ended (0: still open, or its end not seen). */
struct wake_slot {
        uint64_t task, ts, poll_start, poll_end;
        bool poll_open, woken_in_poll;
};

/* On-CPU samples of one thread, and whether any named a worker. */
struct thread_cpu {
        uint32_t tid;
        bool on_worker;
        uint64_t samples;
        char name[17];
};
#define MAX_THREADS 1024

struct lost_counts {
        uint64_t ring, stacks, sampler, poll_ends, other;
        uint64_t switches;      /* off-CPU intervals BPF saw no switch-out of */
};

struct report {
        unsigned top;
        struct worker w[NWORKERS];
        struct poll *polls;
        size_t npolls, cap_polls, polls_dropped;
        struct sample *samples;
        size_t nsamples, cap_samples, samples_dropped;
        /* CPU samples, and those whose stack ends in a mark that it was
         * cut short (stack_marks.h): the copy's end, or the frame cap. */
        uint64_t samples_seen, stacks_cut, stacks_capped;
        uint64_t stacks_cut_rate;       /* of stacks_cut: the deep copies' byte rate used up */
        uint64_t stacks_cut_room;       /* of stacks_cut: a deep copy would have filled the ring past half */
        struct trace_symbols syms;
        struct wake *wakes; /* the top longest, sorted descending */
        size_t nwakes;
        struct poll *jobs;  /* blocking-pool jobs: the top longest, descending */
        size_t njobs;
        uint64_t total_jobs;
        struct task_table slots;        /* of struct wake_slot */
        char **strings;
        size_t nstrings, cap_strings;
        uint64_t first_ts, last_ts, total_polls, short_offcpu, short_offcpu_ns;
        struct lost_counts lost;
        unsigned segments;
        /* Recordings (trace_read.h): another recording first closes what
         * is open, at the last event. */
        struct trace_recording recording;
        uint64_t rec_first, rec_last;   /* the current recording's events */
        uint64_t pend_first, pend_last; /* ... and the new file's, until told apart */
        uint64_t recorded_ns;           /* the closed recordings' spans, summed */
        unsigned recordings;
        json_t *probe_sets;             /* each "probes" metadata value, once */
        /* --full-on-stall: the windows the full set was attached in (its
         * D9ProbesEvents), what the poll-based numbers cover. */
        unsigned windows;
        uint64_t window_ns, window_open;
        /* Sampled wakes: the windows the wake probes were attached in
         * (D9WakeWindowEvents), the only time a wake-to-poll delay shows. */
        unsigned wake_windows;
        uint64_t wake_window_ns, wake_window_open;
        char *no_plan;                  /* why d9d had no probe plan, if it had none */
        struct thread_cpu threads[MAX_THREADS];
        size_t nthreads;
        uint64_t cpu_samples;
        json_t *meta;
        struct report_process process;
        struct report_long_polls long_polls;
        struct report_tasks *tasks;
        int error;              /* first allocation failure of a section */
};

/* D9LostEventsEvent by source: only "ring" is records lost; "stack_unwind"
 * samples were kept without their stack, "sampler" is process resource
 * samples, "poll_end" polls whose end was among a thread's lost records
 * (each ends at its start). Summed into one "events lost (ring full)" they overstated the
 * loss (deltachat-rpc-server: 2549 said, 1305 lost, 1244 stacks). */
static void on_lost(struct lost_counts *c, const struct d9_dec_event *ev)
{
        const struct d9_value *src = d9ctl_trace_field(ev, "source");
        uint64_t n = d9ctl_trace_field_u(ev, "lost");

        if (!src || !src->resolved)
                c->other += n;
        else if (src->str.len == 4 && !memcmp(src->str.p, "ring", 4))
                c->ring += n;
        else if (src->str.len == 12 && !memcmp(src->str.p, "stack_unwind", 12))
                c->stacks += n;
        else if (src->str.len == 7 && !memcmp(src->str.p, "sampler", 7))
                c->sampler += n;
        else if (src->str.len == 8 && !memcmp(src->str.p, "poll_end", 8))
                c->poll_ends += n;
        else if (src->str.len == 6 && !memcmp(src->str.p, "switch", 6))
                c->switches += n;
        else
                c->other += n;
}

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
        if (need <= *cap)
                return true;
        size_t n = *cap ? *cap * 2 : 1024;
        void *q = realloc(*p, n * size);
        if (!q)
                return false;
        *p = q;
        *cap = n;
        return true;
}

/* Future types repeat in every poll: one copy each (a linear scan of the
 * last few hits would miss; the list is small, a few hundred types). */
static char *intern(struct report *r, const struct d9_value *v)
{
        if (!v || !v->resolved)
                return NULL;
        for (size_t i = r->nstrings; i-- > 0;)
                if (strlen(r->strings[i]) == v->str.len && !memcmp(r->strings[i], v->str.p, v->str.len))
                        return r->strings[i];
        if (!grow((void **)&r->strings, &r->cap_strings, r->nstrings + 1, sizeof(char *)))
                return NULL;
        char *s = strndup(v->str.p, v->str.len);
        if (s)
                r->strings[r->nstrings++] = s;
        return s;
}

static struct wake_slot *slot_of(struct report *r, uint64_t task, bool insert)
{
        return d9ctl_task_table_get(&r->slots, task, insert);
}

static void keep_wake(struct report *r, const struct wake *w)
{
        if (r->nwakes == r->top && (r->top == 0 || w->delay <= r->wakes[r->nwakes - 1].delay))
                return;
        size_t i = r->nwakes < r->top ? r->nwakes++ : r->nwakes - 1;
        while (i > 0 && r->wakes[i - 1].delay < w->delay) {
                r->wakes[i] = r->wakes[i - 1];
                i--;
        }
        r->wakes[i] = *w;
}

/* D9BlockingPollEvent: a spawn_blocking job, written at its end. */
static void on_blocking_poll(struct report *r, const struct d9_dec_event *ev)
{
        uint64_t d = d9ctl_trace_field_u(ev, "duration_ns");
        struct poll p = { .start = ev->ts > d ? ev->ts - d : 0, .end = ev->ts,
                          .task = d9ctl_trace_field_u(ev, "task_id"), .worker = 254,
                          .future = intern(r, d9ctl_trace_field(ev, "spawn_loc")) };

        r->total_jobs++;
        if (r->njobs == r->top && (r->top == 0 || d <= r->jobs[r->njobs - 1].end - r->jobs[r->njobs - 1].start))
                return;
        size_t i = r->njobs < r->top ? r->njobs++ : r->njobs - 1;
        while (i > 0 && r->jobs[i - 1].end - r->jobs[i - 1].start < d) {
                r->jobs[i] = r->jobs[i - 1];
                i--;
        }
        r->jobs[i] = p;
}

static void on_poll_start(struct report *r, const struct d9_dec_event *ev)
{
        uint8_t id = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        struct worker *w = &r->w[id];
        uint64_t task = d9ctl_trace_field_u(ev, "task_id");

        w->seen = true;
        w->in_poll = true;
        w->poll_start = ev->ts;
        w->poll_task = task;
        w->poll_future = intern(r, d9ctl_trace_field(ev, "spawn_loc"));
        r->total_polls++;
        w->polls++;
        struct wake_slot *s = slot_of(r, task, true);
        if (!s)
                return;
        /* A task woken while it was being polled (by itself, or by another
         * thread) is queued again only when that poll returns: it waited
         * from that poll's end. While that end is unknown (the poll before
         * is still open: its end is stamped late without return probes),
         * so is the wait, and none is listed. */
        uint64_t from = s->woken_in_poll ? (s->poll_open ? 0 : s->poll_end) : s->ts;
        if (s->ts && from && ev->ts >= from) {
                struct wake wk = { ev->ts - from, task, from, id, w->poll_future };
                keep_wake(r, &wk);
        }
        s->ts = 0;
        s->woken_in_poll = false;
        s->poll_open = true;
        s->poll_start = ev->ts;
        s->poll_end = 0;
}

/* Worker w's poll ends at `end` (open: the recording ended first). */
static void poll_closed(struct report *r, struct worker *w, uint64_t end, bool open)
{
        if (!w->in_poll || end < w->poll_start)
                return;
        uint64_t d = end - w->poll_start;
        struct wake_slot *s = slot_of(r, w->poll_task, false);
        w->in_poll = false;
        /* Only the end of the task's latest poll: an end decided by the
         * task's start on another worker is written after that start, and
         * after the new poll's own events (npm postgrestools: such an end,
         * stamped 74 ms before the next start, made a 12 us wait read
         * 74 ms). */
        if (s && s->poll_open && s->poll_start == w->poll_start) {
                s->poll_open = false;
                s->poll_end = open ? 0 : end;
        }
        w->busy_ns += d;
        if (d < MIN_POLL_NS)
                return;
        if (r->npolls >= MAX_KEPT ||
            !grow((void **)&r->polls, &r->cap_polls, r->npolls + 1, sizeof(*r->polls))) {
                r->polls_dropped++;
                return;
        }
        r->polls[r->npolls++] = (struct poll){ .start = w->poll_start, .end = end, .task = w->poll_task,
                                               .worker = (uint8_t)(w - r->w), .open = open,
                                               .future = w->poll_future };
}

static void on_poll_end(struct report *r, const struct d9_dec_event *ev)
{
        poll_closed(r, &r->w[(uint8_t)d9ctl_trace_field_u(ev, "worker_id")], ev->ts, false);
}

static void worker_thread_seen(struct worker *w, uint32_t tid)
{
        for (uint32_t i = 0; i < w->ntids; i++)
                if (w->tids[i] == tid)
                        return;
        if (w->ntids < WORKER_TIDS)
                w->tids[w->ntids++] = tid;
        else
                w->more_tids = true;
}

/* A sample or a long poll names worker on its thread (254: blocking pool,
 * 255: none). A worker only those name is a worker still (one stuck in a
 * poll the whole recording never parks or starts a poll): the table said
 * "no event names a worker" while 1,429 samples named worker 0 (npm anvil). */
static void worker_named(struct report *r, const struct d9_dec_event *ev, uint64_t worker)
{
        if (worker >= 254)
                return;
        r->w[worker].seen = true;
        worker_thread_seen(&r->w[worker], (uint32_t)d9ctl_trace_field_u(ev, "tid"));
}

/* A park's time from its start to ts, where inside an open full-detail
 * window: the polls' busy time comes only from windows, so with windows the
 * shares are of the windows' time (else they mixed 40 ms of polls a second
 * with the whole recording's parks). */
static void parked_in_window_until(const struct report *r, struct worker *w, uint64_t ts)
{
        uint64_t from = w->park_start > r->window_open ? w->park_start : r->window_open;

        if (r->window_open && ts > from)
                w->parked_in_windows_ns += ts - from;
}

static void parked_until(struct report *r, struct worker *w, uint64_t ts)
{
        w->parked_ns += ts - w->park_start;
        parked_in_window_until(r, w, ts);
}

static void on_park(struct report *r, const struct d9_dec_event *ev, bool park)
{
        struct worker *w = &r->w[(uint8_t)d9ctl_trace_field_u(ev, "worker_id")];

        w->seen = true;
        worker_thread_seen(w, (uint32_t)d9ctl_trace_field_u(ev, "tid"));
        if (park) {
                w->parked = true;
                w->park_start = ev->ts;
        } else if (w->parked && ev->ts >= w->park_start) {
                w->parked = false;
                parked_until(r, w, ev->ts);
                w->sched_wait_ns += d9ctl_trace_field_u(ev, "sched_wait_ns");
        }
}

static void on_wake(struct report *r, const struct d9_dec_event *ev)
{
        struct wake_slot *s = slot_of(r, d9ctl_trace_field_u(ev, "woken_task_id"), true);

        if (s && !s->ts) {
                s->ts = ev->ts;
                s->woken_in_poll = s->poll_open;
        }
}

/* Sample ev's thread: its entry (NULL: the table is full), named by the
 * first sample that carries a name, on-CPU or off (an idle worker has only
 * off-CPU samples: the Workers table showed it without a name), and marked
 * if a sample names a worker on it. */
static struct thread_cpu *thread_seen(struct report *r, const struct d9_dec_event *ev, uint8_t worker)
{
        uint32_t tid = (uint32_t)d9ctl_trace_field_u(ev, "tid");
        const struct d9_value *name = d9ctl_trace_field(ev, "thread_name");
        struct thread_cpu *t;
        size_t i;

        for (i = 0; i < r->nthreads && r->threads[i].tid != tid; i++) {}
        if (i == r->nthreads && r->nthreads < MAX_THREADS)
                r->threads[r->nthreads++] = (struct thread_cpu){ .tid = tid };
        if (i == r->nthreads)
                return NULL;
        t = &r->threads[i];
        t->on_worker |= worker < 254;
        if (name && name->resolved && !t->name[0])
                snprintf(t->name, sizeof(t->name), "%.*s", (int)name->str.len, name->str.p);
        return t;
}

/* Where CPU went on threads that are no worker: the future block_on
 * polls (tombi's and ast-grep's language servers do all their work
 * there), or code outside the runtime. */
static void count_thread_cpu(struct report *r, const struct d9_dec_event *ev, uint8_t worker)
{
        struct thread_cpu *t = thread_seen(r, ev, worker);

        r->cpu_samples++;
        if (t)
                t->samples++;
}

/* A thread's name from its samples; NULL: none seen. */
static const char *thread_name_of(const struct report *r, uint32_t tid)
{
        for (size_t i = 0; i < r->nthreads; i++)
                if (r->threads[i].tid == tid)
                        return r->threads[i].name[0] ? r->threads[i].name : NULL;
        return NULL;
}

static void on_sample(struct report *r, const struct d9_dec_event *ev)
{
        const struct d9_value *chain = d9ctl_trace_field(ev, "callchain");
        uint8_t worker = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        uint8_t source = (uint8_t)d9ctl_trace_field_u(ev, "source");

        if (source == 0)
                count_thread_cpu(r, ev, worker);
        else
                thread_seen(r, ev, worker);
        r->samples_seen++;
        if (chain && chain->stack.n) {
                uint64_t outer = d9_value_stack_addr(chain, chain->stack.n - 1);

                r->stacks_cut += outer == stack_mark_addr(STACK_MARK_CUT) ||
                                 outer == stack_mark_addr(STACK_MARK_CUT_RATE) ||
                                 outer == stack_mark_addr(STACK_MARK_CUT_ROOM) ||
                                 outer == stack_mark_addr(STACK_MARK_CUT_UNREAD);
                r->stacks_cut_rate += outer == stack_mark_addr(STACK_MARK_CUT_RATE);
                r->stacks_cut_room += outer == stack_mark_addr(STACK_MARK_CUT_ROOM);
                r->stacks_capped += outer == stack_mark_addr(STACK_MARK_FRAME_CAP);
        }
        worker_named(r, ev, worker);
        if (r->nsamples >= MAX_KEPT ||
            !grow((void **)&r->samples, &r->cap_samples, r->nsamples + 1, sizeof(*r->samples))) {
                r->samples_dropped++;
                return;
        }
        struct sample *s = &r->samples[r->nsamples++];
        s->ts = ev->ts;
        s->worker = worker;
        s->source = source;
        s->n = 0;
        for (uint32_t i = 0; chain && i < chain->stack.n && s->n < MAX_FRAMES; i++)
                s->frames[s->n++] = d9_value_stack_addr(chain, i);
}

/* "probe plan" not attached: d9d had none (not a Tokio binary to it:
 * Tokio in a shared library, or a Tokio it does not know), or the
 * recording ended before it was built. */
static void window_close(struct report *r, uint64_t ts)
{
        if (r->window_open && ts > r->window_open) {
                r->window_ns += ts - r->window_open;
                /* Parks still open: their part in the window ends here. */
                for (int i = 0; i < NWORKERS; i++)
                        if (r->w[i].parked)
                                parked_in_window_until(r, &r->w[i], ts);
        }
        r->window_open = 0;
}

static void wake_window_close(struct report *r, uint64_t ts)
{
        if (r->wake_window_open && ts > r->wake_window_open)
                r->wake_window_ns += ts - r->wake_window_open;
        r->wake_window_open = 0;
}

static void on_wake_window(struct report *r, const struct d9_dec_event *ev)
{
        if (!d9ctl_trace_field_u(ev, "attached")) {
                wake_window_close(r, ev->ts);
        } else if (!r->wake_window_open) {
                r->wake_window_open = ev->ts;
                r->wake_windows++;
        }
}

static void on_probes(struct report *r, const struct d9_dec_event *ev)
{
        const struct d9_value *probes = d9ctl_trace_field(ev, "probes"), *why = d9ctl_trace_field(ev, "reason");

        if (probes && probes->resolved && probes->str.len > 18 && !memcmp(probes->str.p, "full-detail window", 18)) {
                if (!d9ctl_trace_field_u(ev, "attached")) {
                        window_close(r, ev->ts);
                } else if (!r->window_open) {
                        r->window_open = ev->ts;
                        r->windows++;
                }
                return;
        }

        if (r->no_plan || !probes || !probes->resolved || probes->str.len != 10 ||
            memcmp(probes->str.p, "probe plan", 10) || d9ctl_trace_field_u(ev, "attached") || !why || !why->resolved)
                return;
        if (why->str.len > 8 && !memcmp(why->str.p, "no plan (", 9)) {
                /* "no plan (WHY); N records held ...": WHY. */
                const char *end = memmem(why->str.p, why->str.len, "); ", 3);
                size_t len = end ? (size_t)(end - why->str.p) : why->str.len;

                r->no_plan = strndup(why->str.p + 9, len > 9 ? len - 9 : 0);
        } else {
                r->no_plan = strndup(why->str.p, why->str.len);
        }
}

static bool probe_set_seen(const struct report *r, const struct d9_value *v)
{
        size_t i;
        json_t *e;

        json_array_foreach(r->probe_sets, i, e)
                if (json_string_length(e) == v->str.len && !memcmp(json_string_value(e), v->str.p, v->str.len))
                        return true;
        return false;
}

static void on_metadata(struct report *r, const struct d9_dec_event *ev)
{
        const struct d9_value *m = d9ctl_trace_field(ev, "entries");
        struct d9_value_iter it;
        struct d9_value k, v;

        if (!m)
                return;
        d9_value_iter_init(&it, m);
        while (d9_value_iter_next(&it, &k) && d9_value_iter_next(&it, &v)) {
                char *key = strndup(k.str.p, k.str.len);
                if (key)
                        json_object_set_new(r->meta, key, json_stringn(v.str.p, v.str.len));
                /* Recordings of different sets mix in one report: said. */
                if (key && !strcmp(key, "probes") && !probe_set_seen(r, &v))
                        json_array_append_new(r->probe_sets, json_stringn(v.str.p, v.str.len));
                free(key);
        }
}

/* The end of a recording: a poll or park still open counts up to its
 * last event (a poll as a lower bound, listed "open"); its span adds to
 * the time recorded, which the shares are of. */
static void recording_close(struct report *r)
{
        for (int i = 0; i < NWORKERS; i++) {
                struct worker *w = &r->w[i];

                poll_closed(r, w, r->rec_last, true);
                if (w->parked && r->rec_last >= w->park_start)
                        parked_until(r, w, r->rec_last);
                w->in_poll = w->parked = false;
        }
        d9ctl_report_tasks_segment(r->tasks);
        window_close(r, r->rec_last);
        wake_window_close(r, r->rec_last);
        r->recorded_ns += r->rec_last - r->rec_first;
        r->recordings += r->rec_last != 0;
        r->rec_first = r->rec_last = 0;
}

/* The first event of a file: the recording its metadata names goes on,
 * or another one begins. */
static void segment_begins(struct report *r, bool new_recording)
{
        if (new_recording)
                recording_close(r);
        /* Its ClockSyncEvent's time belongs to the recording it is in. */
        if (r->pend_first && (!r->rec_first || r->pend_first < r->rec_first))
                r->rec_first = r->pend_first;
        if (r->pend_last > r->rec_last)
                r->rec_last = r->pend_last;
        r->pend_first = r->pend_last = 0;
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct report *r = ctx;
        const char *name = ev->schema->name;

        /* A segment opens with a ClockSyncEvent and its span (filled in by
         * the sealer), then its metadata. */
        enum trace_recording_step step = d9ctl_trace_recording_event(&r->recording, ev);
        if (step != TRACE_RECORDING_INSIDE)
                segment_begins(r, step == TRACE_RECORDING_NEW);
        if (ev->has_timestamp && ev->ts) {
                bool boundary = !r->recording.file_begun;
                uint64_t *first = boundary ? &r->pend_first : &r->rec_first;
                uint64_t *last = boundary ? &r->pend_last : &r->rec_last;

                if (!r->first_ts || ev->ts < r->first_ts)
                        r->first_ts = ev->ts;
                if (ev->ts > r->last_ts)
                        r->last_ts = ev->ts;
                if (!*first || ev->ts < *first)
                        *first = ev->ts;
                if (ev->ts > *last)
                        *last = ev->ts;
        }
        if (d9ctl_report_process_event(&r->process, ev))
                return 0;
        if (d9ctl_report_long_polls_event(&r->long_polls, ev)) {
                worker_named(r, ev, d9ctl_trace_field_u(ev, "worker_id"));
                return 0;
        }
        d9ctl_report_tasks_event(r->tasks, ev, &r->error);
        if (r->error)
                return r->error;
        if (!strcmp(name, "PollStartEvent"))
                on_poll_start(r, ev);
        else if (!strcmp(name, "PollEndEvent"))
                on_poll_end(r, ev);
        else if (!strcmp(name, "WorkerParkEvent"))
                on_park(r, ev, true);
        else if (!strcmp(name, "WorkerUnparkEvent"))
                on_park(r, ev, false);
        else if (!strcmp(name, "D9BlockingPollEvent"))
                on_blocking_poll(r, ev);
        else if (!strcmp(name, "WakeEventEvent"))
                on_wake(r, ev);
        else if (!strcmp(name, "CpuSampleEvent"))
                on_sample(r, ev);
        else if (!strcmp(name, "SymbolTableEntry"))
                return d9ctl_trace_symbols_add(&r->syms, ev);
        else if (!strcmp(name, "SegmentMetadataEvent"))
                on_metadata(r, ev);
        else if (!strcmp(name, "D9LostEventsEvent"))
                on_lost(&r->lost, ev);
        else if (!strcmp(name, "D9ProbesEvent"))
                on_probes(r, ev);
        else if (!strcmp(name, "D9WakeWindowEvent"))
                on_wake_window(r, ev);
        else if (!strcmp(name, "D9ShortOffCpuEvent")) {
                r->short_offcpu += d9ctl_trace_field_u(ev, "intervals");
                r->short_offcpu_ns += d9ctl_trace_field_u(ev, "total_ns");
        }
        return 0;
}

struct report *d9ctl_report_new(unsigned top)
{
        struct report *r = calloc(1, sizeof(*r));

        if (!r)
                return NULL;
        r->top = top;
        r->slots.size = sizeof(struct wake_slot);
        r->wakes = calloc(top ? top : 1, sizeof(*r->wakes));
        r->jobs = calloc(top ? top : 1, sizeof(*r->jobs));
        r->meta = json_object();
        r->probe_sets = json_array();
        r->tasks = d9ctl_report_tasks_new();
        if (!r->wakes || !r->jobs || !r->meta || !r->probe_sets || !r->tasks || d9ctl_report_long_polls_init(&r->long_polls, top) < 0) {
                d9ctl_report_free(r);
                return NULL;
        }
        return r;
}

void d9ctl_report_free(struct report *r)
{
        if (!r)
                return;
        for (size_t i = 0; i < r->nstrings; i++)
                free(r->strings[i]);
        free(r->strings);
        d9ctl_trace_symbols_clear(&r->syms);
        free(r->polls);
        free(r->samples);
        free(r->wakes);
        free(r->jobs);
        d9ctl_trace_recording_clear(&r->recording);
        free(r->no_plan);
        d9ctl_task_table_free(&r->slots);
        json_decref(r->meta);
        json_decref(r->probe_sets);
        d9ctl_report_tasks_free(r->tasks);
        d9ctl_report_long_polls_free(&r->long_polls);
        free(r);
}

int d9ctl_report_add_file(struct report *r, const char *path, char *why, size_t why_len)
{
        struct d9_dec_opts opts = { .strict = false, .on_event = on_event, .ctx = r };
        uint8_t *buf;
        size_t len;
        int e = d9ctl_trace_load(path, &buf, &len, NULL, why, why_len);

        if (e < 0)
                return e;
        d9ctl_trace_recording_file(&r->recording);
        e = d9ctl_trace_decode(path, buf, len, &opts, NULL, why, why_len);
        free(buf);
        if (!e)
                r->segments++;
        return e;
}

/* ---- analysis ------------------------------------------------------------ */

static int sample_cmp(const void *a, const void *b)
{
        const struct sample *x = a, *y = b;
        if (x->worker != y->worker)
                return x->worker < y->worker ? -1 : 1;
        return x->ts < y->ts ? -1 : x->ts > y->ts;
}

static int poll_cmp_desc(const void *a, const void *b)
{
        const struct poll *x = a, *y = b;
        uint64_t dx = x->end - x->start, dy = y->end - y->start;
        return dx < dy ? 1 : dx > dy ? -1 : 0;
}

/* The samples of worker w in [from, to): indexes into the sorted array. */
static size_t first_sample(const struct report *r, uint8_t w, uint64_t from)
{
        size_t lo = 0, hi = r->nsamples;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                const struct sample *s = &r->samples[mid];
                if (s->worker < w || (s->worker == w && s->ts < from))
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo;
}

/* An off-CPU sample taken where the kernel preempted the thread (a timer or
 * reschedule interrupt, the way out of a syscall, a cond_resched): it still
 * wanted the CPU, so it was no blocking call. d9d marks such a stack's leaf
 * (STACK_MARK_RUNNABLE); traces without the mark show it by their kernel
 * frames, and then not for a cond_resched (the kernel leaves scheduler
 * functions out of a sleeping thread's stack) nor without kernel frames.
 * One taken in d9d's own uprobe handler ("[d9d uprobe]" stands for its
 * kernel frames) is no blocking call of the target's either: dprint under
 * CPU hogs had its only "blocking" sample there. */
static bool sample_preempted(const struct report *r, const struct sample *s)
{
        static const char *const marks[] = { "irqentry_exit", "exit_to_user_mode", "preempt_schedule",
                                             "cond_resched" };
        if (s->n && (s->frames[0] == stack_mark_addr(STACK_MARK_D9_UPROBE) ||
                     s->frames[0] == stack_mark_addr(STACK_MARK_RUNNABLE)))
                return true;

        for (uint8_t i = 0; i < s->n && s->frames[i] >= REPORT_KERNEL_MIN; i++) {
                const char *n = d9ctl_trace_symbols_name(&r->syms, s->frames[i]);
                for (size_t m = 0; n && m < sizeof(marks) / sizeof(marks[0]); m++)
                        if (strstr(n, marks[m]))
                                return true;
        }
        return false;
}

/* An off-CPU sample that can name the call a poll blocked in: one with
 * frames, not the mark of a stack it lacks, and not preempted. A poll of
 * npm bridge was listed as blocking on "[no stack: no task_work for the
 * thread]", its other sample a timer preemption. */
static bool sample_names_a_block(const struct report *r, const struct sample *s)
{
        if (s->n == 1 && stack_mark_name(s->frames[0]))
                return false;
        return !sample_preempted(r, s);
}

/* A poll with no CPU sample inside still has a stack when its thread was
 * switched out in it: the deepest such one says where the poll was. npm
 * endform and kanoniv, the full set under CPU hogs: their longest polls
 * said "0 CPU samples: (no stack)" while a preempted switch-out inside
 * each had a whole stack (its leaf the runnable mark). */
static const struct sample *stack_of_a_poll_with_no_cpu_sample(const struct sample *deepest_off)
{
        return deepest_off && !(deepest_off->n == 1 && stack_mark_name(deepest_off->frames[0])) ? deepest_off : NULL;
}

static json_t *poll_json(const struct report *r, const struct poll *p, int source, const struct sample **picked)
{
        size_t on = 0, off = 0;
        const struct sample *first_on = NULL, *first_off = NULL, *deepest_off = NULL;

        for (size_t i = first_sample(r, p->worker, p->start);
             i < r->nsamples && r->samples[i].worker == p->worker && r->samples[i].ts < p->end; i++) {
                const struct sample *s = &r->samples[i];
                if (s->source == 0) {
                        on++;
                        /* The deepest stack says most about what ran. */
                        if (!first_on || s->n > first_on->n)
                                first_on = s;
                } else {
                        off++;
                        if (!deepest_off || s->n > deepest_off->n)
                                deepest_off = s;
                        /* Only a sample of the thread blocking names a blocking call. */
                        if (source == 1 && (!first_off || s->n > first_off->n) && sample_names_a_block(r, s))
                                first_off = s;
                }
        }
        *picked = source == 1 ? first_off : first_on ? first_on : stack_of_a_poll_with_no_cpu_sample(deepest_off);
        unsigned kernel = *picked ? d9ctl_report_kernel_frames((*picked)->frames, (*picked)->n) : 0;
        json_t *o = json_pack("{s:I, s:I, s:i, s:I, s:s?, s:I, s:I, s:b}", "start_ns", (json_int_t)p->start,
                              "duration_ns", (json_int_t)(p->end - p->start), "worker", (int)p->worker,
                              "task", (json_int_t)p->task, "future", p->future, "cpu_samples",
                              (json_int_t)on, "offcpu_samples", (json_int_t)off, "open", p->open);
        if (*picked) {
                json_object_set_new(o, "stack", d9ctl_report_frames_json(&r->syms, (*picked)->frames, (*picked)->n));
                json_object_set_new(o, "kernel_frames", json_integer(kernel));
                if (source == 0)
                        json_object_set_new(o, "stack_from", json_string((*picked)->source == 0 ? "cpu_sample"
                                                                         : sample_preempted(r, *picked) ? "preempted"
                                                                         : "switched_out"));
        }
        return o;
}

static int thread_cpu_desc(const void *a, const void *b)
{
        const struct thread_cpu *x = a, *y = b;
        return x->samples < y->samples ? 1 : x->samples > y->samples ? -1 : 0;
}

/* The metadata's probe_plan lists the uprobes attached by kind (before
 * 2026-12-03, the plan's points): polls probed and no spawn point means
 * d9d wrote each spawn at a task's first poll. */
static bool spawns_from_polls(const struct report *r)
{
        const char *plan = json_string_value(json_object_get(r->meta, "probe_plan"));

        return plan && strstr(plan, "poll=") && !strstr(plan, "spawn=");
}

/* The threads no sample names a worker of, busiest first (the top 3). */
static json_t *threads_off_workers_json(struct report *r)
{
        json_t *a = json_array();
        size_t shown = 0;

        qsort(r->threads, r->nthreads, sizeof(*r->threads), thread_cpu_desc);
        for (size_t i = 0; a && i < r->nthreads && shown < 3; i++) {
                const struct thread_cpu *t = &r->threads[i];

                if (t->on_worker || !t->samples)
                        continue;
                json_array_append_new(a, json_pack("{s:i, s:s, s:I, s:f}", "tid", (int)t->tid, "name", t->name,
                                                   "cpu_samples", (json_int_t)t->samples, "share",
                                                   r->cpu_samples ? (double)t->samples / (double)r->cpu_samples : 0.0));
                shown++;
        }
        return a;
}

struct name_cpu {
        const char *name;
        uint64_t samples, threads;
};

static int name_cpu_desc(const void *a, const void *b)
{
        const struct name_cpu *x = a, *y = b;
        return x->samples < y->samples ? 1 : x->samples > y->samples ? -1 : 0;
}

/* The on-CPU samples of threads no sample names a worker of, by thread
 * name, busiest first (the top 5): short-lived threads, each too small to
 * list alone, can hold most of the CPU (npm codex: 86 % of the samples on
 * 74 file walkers named like the runtime's threads, none over 2.7 %). */
static json_t *cpu_off_workers_by_name_json(const struct report *r)
{
        struct name_cpu groups[64];
        size_t n = 0, k;
        json_t *a = json_array();

        for (size_t i = 0; i < r->nthreads; i++) {
                const struct thread_cpu *t = &r->threads[i];

                if (t->on_worker || !t->samples)
                        continue;
                for (k = 0; k < n && strcmp(groups[k].name, t->name); k++) {}
                if (k == n && n == sizeof(groups) / sizeof(groups[0]))
                        continue;
                if (k == n)
                        groups[n++] = (struct name_cpu){ .name = t->name };
                groups[k].samples += t->samples;
                groups[k].threads++;
        }
        qsort(groups, n, sizeof(groups[0]), name_cpu_desc);
        for (k = 0; a && k < n && k < 5; k++)
                json_array_append_new(a, json_pack("{s:s, s:I, s:I, s:f}", "name", groups[k].name, "threads",
                                                   (json_int_t)groups[k].threads, "cpu_samples",
                                                   (json_int_t)groups[k].samples, "share",
                                                   r->cpu_samples ? (double)groups[k].samples / (double)r->cpu_samples
                                                                  : 0.0));
        return a;
}

json_t *d9ctl_report_result(struct report *r)
{
        recording_close(r);
        d9ctl_trace_symbols_sort(&r->syms);
        qsort(r->samples, r->nsamples, sizeof(*r->samples), sample_cmp);
        qsort(r->polls, r->npolls, sizeof(*r->polls), poll_cmp_desc);

        json_t *longest = json_array(), *blocking = json_array(), *wakes = json_array();
        for (size_t i = 0; i < r->npolls; i++) {
                const struct sample *s;
                if (json_array_size(longest) < r->top)
                        json_array_append_new(longest, poll_json(r, &r->polls[i], 0, &s));
                /* A poll that was descheduled with a stack: the blocking call. */
                if (json_array_size(blocking) < r->top) {
                        json_t *b = poll_json(r, &r->polls[i], 1, &s);
                        if (s && s->n)
                                json_array_append_new(blocking, b);
                        else
                                json_decref(b);
                }
        }
        for (size_t i = 0; i < r->nwakes; i++) {
                const struct wake *w = &r->wakes[i];
                json_array_append_new(wakes, json_pack("{s:I, s:I, s:I, s:i, s:s?}", "delay_ns",
                                                       (json_int_t)w->delay, "woken_at_ns",
                                                       (json_int_t)w->woken_at, "task", (json_int_t)w->task,
                                                       "worker", (int)w->worker, "future", w->future));
        }
        json_t *jobs = json_array();
        for (size_t i = 0; i < r->njobs; i++) {
                const struct poll *p = &r->jobs[i];
                json_array_append_new(jobs, json_pack("{s:I, s:I, s:I, s:s?}", "start_ns", (json_int_t)p->start,
                                                      "duration_ns", (json_int_t)(p->end - p->start), "task",
                                                      (json_int_t)p->task, "future", p->future));
        }
        /* Polls only inside full-detail windows: the shares are of those. */
        uint64_t span = r->windows ? r->window_ns : r->recorded_ns;
        json_t *workers = json_array();
        for (int i = 0; i < NWORKERS; i++) {
                const struct worker *w = &r->w[i];
                json_t *threads = json_array();

                if (!w->seen) {
                        json_decref(threads);
                        continue;
                }
                for (uint32_t k = 0; k < w->ntids; k++)
                        json_array_append_new(threads, json_pack("{s:I, s:s?}", "tid", (json_int_t)w->tids[k],
                                                                 "name", thread_name_of(r, w->tids[k])));
                json_array_append_new(workers, json_pack("{s:i, s:I, s:I, s:I, s:I, s:f, s:f, s:o, s:b}", "worker", i,
                        "polls", (json_int_t)w->polls, "busy_ns", (json_int_t)w->busy_ns, "parked_ns",
                        (json_int_t)w->parked_ns, "sched_wait_ns", (json_int_t)w->sched_wait_ns,
                        "busy_share", span ? (double)w->busy_ns / (double)span : 0.0,
                        "parked_share", span ? (double)(r->windows ? w->parked_in_windows_ns : w->parked_ns) /
                                               (double)span : 0.0,
                        "threads", threads, "more_threads", w->more_tids));
        }
        json_t *missing = json_pack("{s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:I}",
                                    "samples", (json_int_t)r->samples_seen,
                                    "stacks_cut", (json_int_t)r->stacks_cut,
                                    "stacks_cut_by_byte_rate", (json_int_t)r->stacks_cut_rate,
                                    "stacks_cut_for_ring_room", (json_int_t)r->stacks_cut_room,
                                    "stacks_at_frame_cap", (json_int_t)r->stacks_capped,
                                    "lost_events", (json_int_t)r->lost.ring,
                                    "stacks_over_unwind_budget", (json_int_t)r->lost.stacks,
                                    "resource_samples_lost", (json_int_t)r->lost.sampler,
                                    "poll_ends_lost", (json_int_t)r->lost.poll_ends,
                                    "lost_other", (json_int_t)r->lost.other,
                                    "offcpu_intervals_unseen", (json_int_t)r->lost.switches,
                                    "short_offcpu_intervals", (json_int_t)r->short_offcpu,
                                    "short_offcpu_ns", (json_int_t)r->short_offcpu_ns,
                                    "polls_not_kept", (json_int_t)r->polls_dropped,
                                    "samples_not_kept", (json_int_t)r->samples_dropped);
        json_t *windows = r->windows ? json_pack("{s:i, s:I}", "windows", (int)r->windows, "covered_ns",
                                                 (json_int_t)r->window_ns) : NULL;
        json_t *wake_windows = r->wake_windows ? json_pack("{s:i, s:I}", "windows", (int)r->wake_windows,
                                                           "attached_ns", (json_int_t)r->wake_window_ns) : NULL;
        json_t *doc = json_pack("{s:i, s:i, s:I, s:I, s:O, s:I, s:I, s:I, s:O, s:o, s:o, s:I, s:o, s:o, s:o?, s:o, s:o, "
                                "s:o, s:o, s:o?, s:o, s:o, s:s?, s:o?}",
                         "segments", (int)r->segments, "recordings", (int)r->recordings,
                         "span_ns", (json_int_t)span, "first_to_last_ns",
                         (json_int_t)(r->last_ts > r->first_ts ? r->last_ts - r->first_ts : 0), "probe_sets",
                         r->probe_sets, "polls", (json_int_t)r->total_polls,
                         "polls_over_1ms", (json_int_t)(r->npolls + r->polls_dropped),
                         "blocking_pool_jobs", (json_int_t)r->total_jobs, "metadata", r->meta,
                         "longest_polls", longest, "long_polls_from_stacks",
                         d9ctl_report_long_polls_json(&r->long_polls, &r->syms), "long_polls_from_stacks_total",
                         (json_int_t)r->long_polls.total, "blocking_in_polls", blocking, "longest_wake_to_poll",
                         wakes, "wake_windows", wake_windows, "longest_blocking_pool_jobs", jobs, "workers", workers, "missing", missing,
                         "process", d9ctl_report_process_json(&r->process), "tasks",
                         d9ctl_report_tasks_json(r->tasks, spawns_from_polls(r)), "threads_off_workers", threads_off_workers_json(r),
                         "cpu_off_workers_by_name", cpu_off_workers_by_name_json(r),
                         "no_plan", r->no_plan, "full_detail_windows", windows);
        return doc;
}
