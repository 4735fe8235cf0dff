/* export_json.c: the trace event JSON of export.h, written as the segments
 * are decoded (nothing but per-worker state is kept, so a 2 M event
 * recording streams through in constant memory).
 *
 * Tracks: a worker is thread id worker+1 of the target's pid ("worker N";
 * ids 254 and 255, the blocking pool's and other threads' samples, become
 * their real thread ids, named from the sample), a blocking-pool job lands
 * on its real thread. Times are microseconds of the trace's monotonic
 * clock, with nanosecond decimals. */
#include "export.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "trace_read.h"

#define NWORKERS 256
#define BLOCKING_ID 254 /* worker id of samples of blocking-pool threads (docs/daemon.md) */
#define MAX_NAMED_TIDS 4096

struct json_worker {
        bool in_poll, parked, named;
        uint64_t poll_start, poll_task, park_start;
        /* The open poll's future type, copied: the segment it came from
         * is gone when the poll ends in the next one. */
        char *future;
        size_t future_len, future_cap;
        bool has_future;
};

struct json_export {
        FILE *out;
        struct export_stats *st;
        struct trace_symbols syms;
        long long pid;
        bool pid_named;
        struct json_worker w[NWORKERS];
        uint32_t named_tids[MAX_NAMED_TIDS];
        size_t n_named_tids;
        struct trace_recording recording;
};

static void put_ts(FILE *out, const char *key, uint64_t ns)
{
        fprintf(out, ",\"%s\":%" PRIu64 ".%03" PRIu64, key, ns / 1000, ns % 1000);
}

static void put_str(FILE *out, const struct d9_value *v)
{
        d9ctl_trace_json_string(out, v->str.p, v->str.len);
}

/* The opening of one event object; the caller adds fields and closes it. */
static void begin(struct json_export *x, const char *ph, uint64_t tid)
{
        fprintf(x->out, ",\n{\"ph\":\"%s\",\"pid\":%lld,\"tid\":%" PRIu64, ph, x->pid, tid);
        x->st->events++;
}

/* name is used when v is NULL, followed by the thread id when tid_suffix. */
static void thread_name(struct json_export *x, uint64_t tid, const char *name, const struct d9_value *v,
                        bool tid_suffix)
{
        fprintf(x->out, ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%lld,\"tid\":%" PRIu64 ",\"args\":{\"name\":",
                x->pid, tid);
        if (v)
                put_str(x->out, v);
        else if (tid_suffix)
                fprintf(x->out, "\"%s %" PRIu64 "\"", name, tid);
        else
                fprintf(x->out, "\"%s\"", name);
        /* workers first, in id order; other threads after them */
        fprintf(x->out, "}},\n{\"ph\":\"M\",\"name\":\"thread_sort_index\",\"pid\":%lld,\"tid\":%" PRIu64
                        ",\"args\":{\"sort_index\":%" PRIu64 "}}", x->pid, tid, tid);
}

/* The track of worker id, named at first use. */
static uint64_t worker_track(struct json_export *x, uint8_t id)
{
        if (!x->w[id].named) {
                char name[32];
                /* wakes from threads that are no worker carry these ids */
                if (id >= BLOCKING_ID)
                        snprintf(name, sizeof(name), "%s", id == BLOCKING_ID ? "blocking pool" : "other threads");
                else
                        snprintf(name, sizeof(name), "worker %u", id);
                thread_name(x, id + 1u, name, NULL, false);
                x->w[id].named = true;
        }
        return id + 1u;
}

/* A real thread's track (blocking pool, other threads), named at first use
 * while the table has room. */
static uint64_t thread_track(struct json_export *x, uint32_t tid, const struct d9_value *name, const char *fallback)
{
        for (size_t i = 0; i < x->n_named_tids; i++)
                if (x->named_tids[i] == tid)
                        return tid;
        if (x->n_named_tids < MAX_NAMED_TIDS) {
                x->named_tids[x->n_named_tids++] = tid;
                thread_name(x, tid, fallback, name, true);
        }
        return tid;
}

static void slice(struct json_export *x, uint64_t tid, const char *cat, uint64_t start, uint64_t end)
{
        begin(x, "X", tid);
        fprintf(x->out, ",\"cat\":\"%s\"", cat);
        put_ts(x->out, "ts", start);
        put_ts(x->out, "dur", end - start);
}

static void end_park(struct json_export *x, uint8_t id, uint64_t ts, const struct d9_dec_event *ev)
{
        struct json_worker *w = &x->w[id];

        if (!w->parked || ts < w->park_start)
                return;
        w->parked = false;
        slice(x, worker_track(x, id), "park", w->park_start, ts);
        fputs(",\"name\":\"parked\"", x->out);
        if (ev)
                fprintf(x->out, ",\"args\":{\"sched_wait_ns\":%" PRIu64 ",\"cpu_time_ns\":%" PRIu64 "}",
                        d9ctl_trace_field_u(ev, "sched_wait_ns"), d9ctl_trace_field_u(ev, "cpu_time_ns"));
        fputc('}', x->out);
}

static int keep_future(struct json_worker *w, const struct d9_value *f)
{
        if (f->str.len > w->future_cap) {
                char *p = realloc(w->future, f->str.len);
                if (!p)
                        return -ENOMEM;
                w->future = p;
                w->future_cap = f->str.len;
        }
        memcpy(w->future, f->str.p, f->str.len);
        w->future_len = f->str.len;
        return 0;
}

static int on_poll_start(struct json_export *x, const struct d9_dec_event *ev)
{
        uint8_t id = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        struct json_worker *w = &x->w[id];
        const struct d9_value *f = d9ctl_trace_field(ev, "spawn_loc");

        end_park(x, id, ev->ts, NULL); /* a poll ends any park the trace left open */
        w->in_poll = true;
        w->poll_start = ev->ts;
        w->poll_task = d9ctl_trace_field_u(ev, "task_id");
        w->has_future = f && f->resolved;
        return w->has_future ? keep_future(w, f) : 0;
}

static void on_poll_end(struct json_export *x, const struct d9_dec_event *ev)
{
        uint8_t id = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        struct json_worker *w = &x->w[id];

        if (!w->in_poll || ev->ts < w->poll_start)
                return;
        w->in_poll = false;
        slice(x, worker_track(x, id), "poll", w->poll_start, ev->ts);
        fputs(",\"name\":", x->out);
        if (w->has_future)
                d9ctl_trace_json_string(x->out, w->future, w->future_len);
        else
                fprintf(x->out, "\"task %" PRIu64 "\"", w->poll_task);
        fprintf(x->out, ",\"args\":{\"task\":%" PRIu64 ",\"worker\":%u}}", w->poll_task, id);
}

static void on_park(struct json_export *x, const struct d9_dec_event *ev, bool park)
{
        uint8_t id = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");

        if (!park) {
                end_park(x, id, ev->ts, ev);
                return;
        }
        x->w[id].parked = true;
        x->w[id].park_start = ev->ts;
}

static void on_blocking_job(struct json_export *x, const struct d9_dec_event *ev)
{
        uint64_t d = d9ctl_trace_field_u(ev, "duration_ns");
        const struct d9_value *f = d9ctl_trace_field(ev, "spawn_loc");
        uint64_t tid = thread_track(x, (uint32_t)d9ctl_trace_field_u(ev, "tid"), NULL, "blocking pool");

        slice(x, tid, "blocking_pool", ev->ts > d ? ev->ts - d : 0, ev->ts);
        fputs(",\"name\":", x->out);
        if (f && f->resolved)
                put_str(x->out, f);
        else
                fputs("\"spawn_blocking job\"", x->out);
        fprintf(x->out, ",\"args\":{\"task\":%" PRIu64 "}}", d9ctl_trace_field_u(ev, "task_id"));
}

/* Leaf first, one frame per line, named where the segment names it. */
static void put_stack(struct json_export *x, const struct d9_value *chain)
{
        fputs("\"", x->out);
        for (uint32_t i = 0; chain && i < chain->stack.n; i++) {
                uint64_t a = d9_value_stack_addr(chain, i);
                const char *n = d9ctl_trace_symbols_name(&x->syms, a);
                if (i)
                        fputs("\\n", x->out);
                if (n)
                        d9ctl_trace_json_chars(x->out, n, strlen(n));
                else
                        fprintf(x->out, "0x%" PRIx64, a);
        }
        fputs("\"", x->out);
}

static void on_sample(struct json_export *x, const struct d9_dec_event *ev)
{
        uint8_t id = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        bool off = d9ctl_trace_field_u(ev, "source") == 1;
        const struct d9_value *name = d9ctl_trace_field(ev, "thread_name");
        uint64_t tid = id < BLOCKING_ID ? worker_track(x, id)
                                        : thread_track(x, (uint32_t)d9ctl_trace_field_u(ev, "tid"),
                                                       name && name->resolved ? name : NULL, "thread");

        begin(x, "i", tid);
        fprintf(x->out, ",\"s\":\"t\",\"cat\":\"%s\",\"name\":\"%s\"", off ? "offcpu" : "cpu",
                off ? "off-CPU" : "CPU sample");
        put_ts(x->out, "ts", ev->ts);
        fputs(",\"args\":{\"stack\":", x->out);
        put_stack(x, d9ctl_trace_field(ev, "callchain"));
        fprintf(x->out, ",\"tid\":%" PRIu64 "}}", d9ctl_trace_field_u(ev, "tid"));
}

static void on_wake(struct json_export *x, const struct d9_dec_event *ev)
{
        begin(x, "i", worker_track(x, (uint8_t)d9ctl_trace_field_u(ev, "target_worker")));
        fputs(",\"s\":\"t\",\"cat\":\"wake\",\"name\":\"wake\"", x->out);
        put_ts(x->out, "ts", ev->ts);
        fprintf(x->out, ",\"args\":{\"woken_task\":%" PRIu64 "}}", d9ctl_trace_field_u(ev, "woken_task_id"));
}

static void on_lost(struct json_export *x, const struct d9_dec_event *ev)
{
        begin(x, "i", 0);
        fputs(",\"s\":\"p\",\"cat\":\"d9d\",\"name\":\"events lost\"", x->out);
        put_ts(x->out, "ts", ev->ts);
        fprintf(x->out, ",\"args\":{\"lost\":%" PRIu64 "}}", d9ctl_trace_field_u(ev, "lost"));
}

/* The target's pid, and the segment's service as the process name. */
static void on_metadata(struct json_export *x, const struct d9_dec_event *ev)
{
        struct d9_value v;

        if (x->pid_named)
                return;
        if (d9ctl_trace_metadata_value(ev, "pid", &v))
                x->pid = strtoll(strndupa(v.str.p, v.str.len), NULL, 10);
        x->pid_named = true;
        fprintf(x->out, ",\n{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%lld,\"tid\":0,\"args\":{\"name\":", x->pid);
        if (d9ctl_trace_metadata_value(ev, "service", &v) && v.str.len)
                put_str(x->out, &v);
        else
                fputs("\"target\"", x->out);
        fputs("}}", x->out);
}

/* What is still open when its recording ends is not guessed at: counted,
 * not written. */
static void close_open(struct json_export *x)
{
        for (int w = 0; w < NWORKERS; w++) {
                x->st->unfinished += x->w[w].in_poll + x->w[w].parked;
                x->w[w].in_poll = x->w[w].parked = false;
        }
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct json_export *x = ctx;
        const char *n = ev->schema->name;

        if (d9ctl_trace_recording_event(&x->recording, ev) == TRACE_RECORDING_NEW)
                close_open(x);
        if (!strcmp(n, "SegmentMetadataEvent"))
                on_metadata(x, ev);
        else if (!strcmp(n, "PollStartEvent"))
                return on_poll_start(x, ev);
        else if (!strcmp(n, "PollEndEvent"))
                on_poll_end(x, ev);
        else if (!strcmp(n, "WorkerParkEvent"))
                on_park(x, ev, true);
        else if (!strcmp(n, "WorkerUnparkEvent"))
                on_park(x, ev, false);
        else if (!strcmp(n, "D9BlockingPollEvent"))
                on_blocking_job(x, ev);
        else if (!strcmp(n, "CpuSampleEvent"))
                on_sample(x, ev);
        else if (!strcmp(n, "WakeEventEvent"))
                on_wake(x, ev);
        else if (!strcmp(n, "D9LostEventsEvent"))
                on_lost(x, ev);
        return ferror(x->out) ? -EIO : 0;
}

int d9ctl_export_trace_json(FILE *out, char *const *paths, size_t n, struct export_stats *st, char *why,
                      size_t why_len)
{
        struct json_export *x = calloc(1, sizeof(*x));
        int e = 0;

        if (!x) {
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        x->out = out;
        x->st = st;
        x->pid = 1;
        /* The first element is metadata, so every event can start with ",". */
        fputs("{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n"
              "{\"ph\":\"M\",\"name\":\"d9d\",\"pid\":0,\"tid\":0,\"args\":{\"exported_by\":\"d9ctl export\"}}",
              out);
        for (size_t i = 0; i < n && !e; i++) {
                d9ctl_trace_recording_file(&x->recording);
                e = d9ctl_trace_read_with_symbols(paths[i], &x->syms, on_event, x, why, why_len);
        }
        close_open(x);
        fputs("\n]}\n", out);
        if (!e && (fflush(out) || ferror(out))) {
                e = -EIO;
                snprintf(why, why_len, "write failed: %s", strerror(errno));
        }
        d9ctl_trace_symbols_clear(&x->syms);
        for (int w = 0; w < NWORKERS; w++)
                free(x->w[w].future);
        d9ctl_trace_recording_clear(&x->recording);
        free(x);
        return e;
}
