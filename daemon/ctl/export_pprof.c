/* export_pprof.c: the pprof profile of export.h (profile.proto, gzipped as
 * `go tool pprof` expects).
 *
 * One pprof sample per d9d sample. A CPU sample's value is [1, period]
 * where the period comes from the segment's cpu_sample_hz; an off-CPU
 * sample stands for one interval of at least offcpu_min whose length the
 * trace does not hold (dial9's schema has no field for it), so its value
 * is a count only. Labels: worker (number), thread (name), future (the type
 * of the poll open on that worker at the sample's time). The samples and
 * polls are collected first, because a sample may be written after the end
 * of the poll it fell in. */
#include "export.h"

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "pb_writer.h"
#include "trace_read.h"

#define NWORKERS 256
#define MAX_FRAMES 128
#define MAX_KEPT 4000000 /* samples and polls each; more is an error, not a silent cut */

struct pp_sample {
        uint64_t ts;
        uint32_t thread;  /* string index */
        uint32_t first, n; /* frames[first .. first+n): location ids */
        uint8_t worker;
};

struct pp_poll {
        uint64_t start, end;
        uint32_t future; /* string index, 0 = none */
};

struct pp_location {
        uint64_t addr;
        uint32_t function;
};

struct pp_worker {
        struct pp_poll *polls;
        size_t n, cap;
        bool in_poll;
        uint64_t start;
        uint32_t future;
};

/* A hash of key -> value with open addressing; keys are never 0 (string
 * hashes are made odd, addresses of 0 are not kept). */
struct pp_map {
        uint64_t *keys;
        uint32_t *vals;
        size_t cap, used;
};

struct pp_export {
        enum export_profile profile;
        struct export_stats *st;
        struct trace_symbols syms;
        struct pb_strings strings;
        struct pp_map locations;     /* address -> location id */
        struct pp_location *locs;    /* location id - 1 -> its address and function */
        size_t n_locations, cap_locations;
        struct pp_map functions;     /* name string index -> function id */
        uint32_t *function_name;     /* function id - 1 -> string index */
        size_t n_functions, cap_functions;
        uint32_t *frames;
        size_t n_frames, cap_frames;
        struct pp_sample *samples;
        size_t n_samples, cap_samples;
        struct pp_worker w[NWORKERS];
        struct trace_recording recording;
        uint64_t hz, first_ts, last_ts, sync_ts, sync_realtime;
        char exe[512];
};

static bool grow(void **p, size_t *cap, size_t need, size_t size)
{
        if (need <= *cap)
                return true;
        size_t n = *cap ? *cap * 2 : 1024;
        while (n < need)
                n *= 2;
        void *q = realloc(*p, n * size);
        if (!q)
                return false;
        *p = q;
        *cap = n;
        return true;
}

static uint32_t *map_slot(struct pp_map *m, uint64_t key)
{
        size_t j = (key * 0x9e3779b97f4a7c15ull) & (m->cap - 1);

        while (m->keys[j] && m->keys[j] != key)
                j = (j + 1) & (m->cap - 1);
        if (!m->keys[j]) {
                m->keys[j] = key;
                m->vals[j] = 0;
                m->used++;
        }
        return &m->vals[j];
}

/* The value slot of key (0 when new), or NULL on ENOMEM. */
static uint32_t *map_get(struct pp_map *m, uint64_t key)
{
        if ((m->used + 1) * 2 > m->cap) {
                struct pp_map n = { .cap = m->cap ? m->cap * 2 : 4096 };
                n.keys = calloc(n.cap, sizeof(*n.keys));
                n.vals = calloc(n.cap, sizeof(*n.vals));
                if (!n.keys || !n.vals) {
                        free(n.keys);
                        free(n.vals);
                        return NULL;
                }
                for (size_t i = 0; i < m->cap; i++)
                        if (m->keys[i])
                                *map_slot(&n, m->keys[i]) = m->vals[i];
                free(m->keys);
                free(m->vals);
                *m = n;
        }
        return map_slot(m, key);
}

static void map_free(struct pp_map *m)
{
        free(m->keys);
        free(m->vals);
}

/* The function id of name (a string index), made at first use. */
static int function_of(struct pp_export *x, uint32_t name, uint32_t *id)
{
        uint32_t *slot = map_get(&x->functions, ((uint64_t)name << 1) | 1);

        if (!slot)
                return -ENOMEM;
        if (!*slot) {
                if (!grow((void **)&x->function_name, &x->cap_functions, x->n_functions + 1, sizeof(uint32_t)))
                        return -ENOMEM;
                x->function_name[x->n_functions++] = name;
                *slot = (uint32_t)x->n_functions;
        }
        *id = *slot;
        return 0;
}

/* The location id of a callchain address: one per address, named by the
 * segment's symbol table or by the address itself. */
static int location_of(struct pp_export *x, uint64_t addr, uint32_t *id)
{
        uint32_t *slot = map_get(&x->locations, addr ? addr : 1);

        if (!slot)
                return -ENOMEM;
        if (!*slot) {
                const char *n = d9ctl_trace_symbols_name(&x->syms, addr);
                char hex[24];
                uint32_t name, fn;
                if (!n) {
                        snprintf(hex, sizeof(hex), "0x%" PRIx64, addr);
                        n = hex;
                }
                int e = d9ctl_pb_strings_index(&x->strings, n, strlen(n), &name);
                if (!e)
                        e = function_of(x, name, &fn);
                if (e)
                        return e;
                if (!grow((void **)&x->locs, &x->cap_locations, x->n_locations + 1, sizeof(*x->locs)))
                        return -ENOMEM;
                x->locs[x->n_locations++] = (struct pp_location){ addr, fn };
                *slot = (uint32_t)x->n_locations;
        }
        *id = *slot;
        return 0;
}

static int string_of(struct pp_export *x, const struct d9_value *v, uint32_t *id)
{
        *id = 0;
        return v && v->resolved ? d9ctl_pb_strings_index(&x->strings, v->str.p, v->str.len, id) : 0;
}

static int on_sample(struct pp_export *x, const struct d9_dec_event *ev)
{
        bool off = d9ctl_trace_field_u(ev, "source") == 1;
        const struct d9_value *chain = d9ctl_trace_field(ev, "callchain");

        if (off != (x->profile == EXPORT_OFFCPU))
                return 0;
        if (x->n_samples >= MAX_KEPT)
                return -E2BIG;
        if (!grow((void **)&x->samples, &x->cap_samples, x->n_samples + 1, sizeof(*x->samples)) ||
            !grow((void **)&x->frames, &x->cap_frames, x->n_frames + MAX_FRAMES, sizeof(uint32_t)))
                return -ENOMEM;
        struct pp_sample *s = &x->samples[x->n_samples];
        *s = (struct pp_sample){ .ts = ev->ts, .worker = (uint8_t)d9ctl_trace_field_u(ev, "worker_id"),
                                 .first = (uint32_t)x->n_frames };
        int e = string_of(x, d9ctl_trace_field(ev, "thread_name"), &s->thread);
        for (uint32_t i = 0; !e && chain && i < chain->stack.n && s->n < MAX_FRAMES; i++)
                e = location_of(x, d9_value_stack_addr(chain, i), &x->frames[s->first + s->n++]);
        if (e)
                return e;
        x->n_frames += s->n;
        x->n_samples++;
        return 0;
}

static int on_poll(struct pp_export *x, const struct d9_dec_event *ev, bool start)
{
        struct pp_worker *w = &x->w[(uint8_t)d9ctl_trace_field_u(ev, "worker_id")];

        if (start) {
                w->in_poll = true;
                w->start = ev->ts;
                return string_of(x, d9ctl_trace_field(ev, "spawn_loc"), &w->future);
        }
        if (!w->in_poll || ev->ts < w->start)
                return 0;
        w->in_poll = false;
        if (w->n >= MAX_KEPT)
                return -E2BIG;
        if (!grow((void **)&w->polls, &w->cap, w->n + 1, sizeof(*w->polls)))
                return -ENOMEM;
        w->polls[w->n++] = (struct pp_poll){ w->start, ev->ts, w->future };
        return 0;
}

static void on_metadata(struct pp_export *x, const struct d9_dec_event *ev)
{
        struct d9_value v;

        if (d9ctl_trace_metadata_value(ev, "cpu_sample_hz", &v))
                x->hz = strtoull(strndupa(v.str.p, v.str.len), NULL, 10);
        if (!x->exe[0] && d9ctl_trace_metadata_value(ev, "exe", &v))
                snprintf(x->exe, sizeof(x->exe), "%.*s", (int)v.str.len, v.str.p);
}

/* A poll still open when its recording ends is counted, not kept. */
static void close_open(struct pp_export *x)
{
        for (int w = 0; w < NWORKERS; w++) {
                x->st->unfinished += x->w[w].in_poll;
                x->w[w].in_poll = false;
        }
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        struct pp_export *x = ctx;
        const char *n = ev->schema->name;

        if (d9ctl_trace_recording_event(&x->recording, ev) == TRACE_RECORDING_NEW)
                close_open(x);
        if (ev->has_timestamp && ev->ts) {
                if (!x->first_ts || ev->ts < x->first_ts)
                        x->first_ts = ev->ts;
                if (ev->ts > x->last_ts)
                        x->last_ts = ev->ts;
        }
        if (!strcmp(n, "CpuSampleEvent"))
                return on_sample(x, ev);
        if (!strcmp(n, "PollStartEvent") || !strcmp(n, "PollEndEvent"))
                return on_poll(x, ev, n[4] == 'S');
        if (!strcmp(n, "SegmentMetadataEvent"))
                on_metadata(x, ev);
        else if (!strcmp(n, "ClockSyncEvent") && !x->sync_ts) {
                x->sync_ts = ev->ts;
                x->sync_realtime = d9ctl_trace_field_u(ev, "realtime_ns");
        }
        return 0;
}

/* The future type of the poll open on worker w at ts, 0 if none. Polls of
 * one worker do not overlap and are in time order. */
static uint32_t future_at(const struct pp_worker *w, uint64_t ts)
{
        size_t lo = 0, hi = w->n;

        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                if (w->polls[mid].start <= ts)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return lo && ts < w->polls[lo - 1].end ? w->polls[lo - 1].future : 0;
}

static int value_type(struct pp_export *x, struct pb *out, unsigned field, const char *type, const char *unit)
{
        struct pb vt = PB_INIT;
        uint32_t t, u;
        int e = d9ctl_pb_strings_index(&x->strings, type, strlen(type), &t);

        if (!e)
                e = d9ctl_pb_strings_index(&x->strings, unit, strlen(unit), &u);
        if (e)
                return e;
        d9ctl_pb_uint(&vt, 1, t);
        d9ctl_pb_uint(&vt, 2, u);
        return d9ctl_pb_message(out, field, &vt);
}

/* A string label (pprof drops numeric labels of value 0, so worker 0
 * would vanish as a number). */
static int label(struct pp_export *x, struct pb *s, const char *key, uint32_t str)
{
        struct pb l = PB_INIT;
        uint32_t k;
        int e = d9ctl_pb_strings_index(&x->strings, key, strlen(key), &k);

        if (e)
                return e;
        d9ctl_pb_uint(&l, 1, k);
        d9ctl_pb_uint(&l, 2, str);
        return d9ctl_pb_message(s, 3, &l);
}

/* Profile fields (profile.proto): 1 sample_type, 2 sample, 3 mapping,
 * 4 location, 5 function, 6 string_table, 9 time_nanos, 10 duration_nanos,
 * 11 period_type, 12 period, 13 comment. */
static int write_profile(struct pp_export *x, struct pb *out)
{
        bool cpu = x->profile == EXPORT_CPU;
        uint64_t period = cpu && x->hz ? 1000000000ull / x->hz : 0;
        int e = value_type(x, out, 1, "samples", "count");

        if (!e && period)
                e = value_type(x, out, 1, "cpu", "nanoseconds");
        for (size_t i = 0; i < x->n_samples && !e; i++) {
                const struct pp_sample *s = &x->samples[i];
                struct pb m = PB_INIT;
                d9ctl_pb_packed(&m, 1, &x->frames[s->first], s->n);
                uint32_t v[2] = { 1, (uint32_t)period }; /* period <= 1 s */
                d9ctl_pb_packed(&m, 2, v, period ? 2 : 1);
                uint32_t fut = future_at(&x->w[s->worker], s->ts);
                char id[8];
                uint32_t worker;
                snprintf(id, sizeof(id), "%u", s->worker);
                e = d9ctl_pb_strings_index(&x->strings, id, strlen(id), &worker);
                if (!e)
                        e = label(x, &m, "worker", worker);
                if (!e && s->thread)
                        e = label(x, &m, "thread", s->thread);
                if (!e && fut)
                        e = label(x, &m, "future", fut);
                if (!e)
                        e = d9ctl_pb_message(out, 2, &m);
        }
        /* One mapping that says names are already there, so pprof does not
         * try to symbolize the addresses again. */
        uint32_t file = 0;
        if (!e && x->exe[0])
                e = d9ctl_pb_strings_index(&x->strings, x->exe, strlen(x->exe), &file);
        if (!e) {
                struct pb m = PB_INIT;
                d9ctl_pb_uint(&m, 1, 1);
                d9ctl_pb_uint(&m, 3, UINT64_MAX);
                d9ctl_pb_uint(&m, 5, file);
                d9ctl_pb_uint(&m, 7, 1);
                e = d9ctl_pb_message(out, 3, &m);
        }
        for (size_t i = 0; i < x->n_locations && !e; i++) {
                struct pb loc = PB_INIT, line = PB_INIT;
                d9ctl_pb_uint(&loc, 1, i + 1);
                d9ctl_pb_uint(&loc, 2, 1);
                d9ctl_pb_uint(&loc, 3, x->locs[i].addr);
                d9ctl_pb_uint(&line, 1, x->locs[i].function);
                e = d9ctl_pb_message(&loc, 4, &line);
                if (!e)
                        e = d9ctl_pb_message(out, 4, &loc);
        }
        for (size_t i = 0; i < x->n_functions && !e; i++) {
                struct pb f = PB_INIT;
                d9ctl_pb_uint(&f, 1, i + 1);
                d9ctl_pb_uint(&f, 2, x->function_name[i]);
                d9ctl_pb_uint(&f, 3, x->function_name[i]);
                e = d9ctl_pb_message(out, 5, &f);
        }
        uint32_t comment = 0;
        const char *what = cpu ? "d9ctl export: on-CPU samples"
                               : "d9ctl export: off-CPU intervals of at least offcpu_min, counted (no durations in the trace)";
        if (!e)
                e = d9ctl_pb_strings_index(&x->strings, what, strlen(what), &comment);
        if (!e && cpu && period)
                e = value_type(x, out, 11, "cpu", "nanoseconds");
        if (e)
                return e;
        if (cpu && period)
                d9ctl_pb_uint(out, 12, period);
        if (x->sync_ts && x->first_ts >= x->sync_ts)
                d9ctl_pb_uint(out, 9, x->sync_realtime + (x->first_ts - x->sync_ts));
        d9ctl_pb_uint(out, 10, x->last_ts - x->first_ts);
        d9ctl_pb_uint(out, 13, comment);
        return d9ctl_pb_strings_write(&x->strings, out, 6);
}

static void pp_free(struct pp_export *x)
{
        d9ctl_trace_symbols_clear(&x->syms);
        d9ctl_pb_strings_free(&x->strings);
        map_free(&x->locations);
        map_free(&x->functions);
        free(x->locs);
        free(x->function_name);
        free(x->frames);
        free(x->samples);
        for (int i = 0; i < NWORKERS; i++)
                free(x->w[i].polls);
        d9ctl_trace_recording_clear(&x->recording);
        free(x);
}

int d9ctl_export_pprof(FILE *out, char *const *paths, size_t n, enum export_profile profile,
                 struct export_stats *st, char *why, size_t why_len)
{
        struct pp_export *x = calloc(1, sizeof(*x));
        struct pb prof = PB_INIT;
        int e = x ? d9ctl_pb_strings_init(&x->strings) : -ENOMEM;

        if (x) {
                x->profile = profile;
                x->st = st;
        }
        for (size_t i = 0; i < n && !e; i++) {
                /* Names are per segment; locations made so far keep theirs. */
                d9ctl_trace_recording_file(&x->recording);
                e = d9ctl_trace_read_with_symbols(paths[i], &x->syms, on_event, x, why, why_len);
        }
        if (!e) {
                close_open(x);
                uint8_t *z = NULL;
                size_t zlen = 0;
                e = write_profile(x, &prof);
                if (!e)
                        e = d9_compress_buf(prof.buf.data, prof.buf.len, D9_COMPRESS_GZIP, 0, &z, &zlen);
                if (!e && (fwrite(z, 1, zlen, out) != zlen || fflush(out)))
                        e = -EIO;
                free(z);
                if (e)
                        snprintf(why, why_len, "%s", e == -EIO ? "write failed" : strerror(-e));
                st->events = x->n_samples;
        } else if (e == -E2BIG) {
                snprintf(why, why_len, "more than %d samples or polls of one worker: export fewer segments",
                         MAX_KEPT);
        } else if (e == -ENOMEM) {
                snprintf(why, why_len, "out of memory");
        }
        d9ctl_pb_free(&prof);
        if (x)
                pp_free(x);
        return e;
}
