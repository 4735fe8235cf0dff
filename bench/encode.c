/* Encode benchmark: replays the Tokio events of dial9's recorded fixture
 * through proto/'s typed encoder helpers on one core, and reports events/s
 * and bytes/event raw, zstd and gzip next to dial9's own file.
 * usage: encode_bench FIXTURE [SECONDS] */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "d9proto.h"

enum kind { K_POLL_START, K_POLL_END, K_PARK, K_UNPARK, K_WAKE, K_SPAWN, K_TERMINATE,
            K_QUEUE, K_CPU, K_DUMP, K_CLOCK, K_COUNT };
static const char *const kind_names[K_COUNT] = {
        "PollStartEvent", "PollEndEvent", "WorkerParkEvent", "WorkerUnparkEvent", "WakeEventEvent",
        "TaskSpawnEvent", "TaskTerminateEvent", "QueueSampleEvent", "CpuSampleEvent", "TaskDumpEvent",
        "ClockSyncEvent",
};

/* One recorded event, as the daemon would hold it after translating a BPF record. */
struct bev {
        uint8_t kind, small; /* small: local_queue / target_worker / source / global_queue / instrumented */
        uint32_t tid, atom, atom2, cpu;
        uint64_t ts, a, b, c, d;
};

struct load {
        struct d9_enc *enc; /* owns the atoms the events refer to */
        struct bev *ev;
        size_t n, cap;
        uint64_t per_kind[K_COUNT], skipped;
};

static const struct d9_value *field(const struct d9_dec_event *e, const char *name)
{
        for (uint16_t i = 0; i < e->schema->nfields; i++)
                if (strcmp(e->schema->fields[i].name, name) == 0)
                        return &e->values[i];
        return NULL;
}

static uint64_t u(const struct d9_dec_event *e, const char *name)
{
        const struct d9_value *v = field(e, name);

        return v && v->present ? v->u : 0;
}

static uint32_t str_atom(struct load *l, const struct d9_dec_event *e, const char *name)
{
        const struct d9_value *v = field(e, name);
        uint32_t atom;

        if (!v || !v->present)
                return D9_NO_ATOM;
        d9_enc_intern_string(l->enc, v->str.p, v->str.len, &atom);
        return atom;
}

static uint32_t stack_atom(struct load *l, const struct d9_dec_event *e)
{
        const struct d9_value *v = field(e, "callchain");
        uint64_t addrs[512];
        uint32_t n = v->stack.n < 512 ? v->stack.n : 512, atom;

        for (uint32_t i = 0; i < n; i++)
                addrs[i] = d9_value_stack_addr(v, i);
        d9_enc_intern_stack(l->enc, addrs, n, &atom);
        return atom;
}

static int collect(const struct d9_dec_event *e, void *ctx)
{
        struct load *l = ctx;
        struct bev b = { .ts = e->ts };
        int k;

        for (k = 0; k < K_COUNT && strcmp(e->schema->name, kind_names[k]); k++)
                ;
        if (k < K_COUNT && getenv("EXCLUDE") && strstr(getenv("EXCLUDE"), kind_names[k]))
                k = K_COUNT;
        if (k == K_COUNT) {
                l->skipped++; /* spans, symbols, metadata: not part of the hot mix */
                return 0;
        }
        b.kind = (uint8_t)k;
        switch (k) {
        case K_POLL_START:
                b.a = u(e, "worker_id"), b.small = (uint8_t)u(e, "local_queue"), b.b = u(e, "task_id");
                b.atom = str_atom(l, e, "spawn_loc");
                break;
        case K_POLL_END: b.a = u(e, "worker_id"); break;
        case K_PARK:
        case K_UNPARK:
                b.a = u(e, "worker_id"), b.small = (uint8_t)u(e, "local_queue");
                b.b = u(e, "cpu_time_ns"), b.c = u(e, "sched_wait_ns"), b.tid = (uint32_t)u(e, "tid");
                break;
        case K_WAKE:
                b.a = u(e, "waker_task_id"), b.b = u(e, "woken_task_id");
                b.small = (uint8_t)u(e, "target_worker");
                break;
        case K_SPAWN:
                b.a = u(e, "task_id"), b.atom = str_atom(l, e, "spawn_loc");
                b.small = field(e, "instrumented")->b;
                break;
        case K_TERMINATE: b.a = u(e, "task_id"); break;
        case K_QUEUE: b.small = (uint8_t)u(e, "global_queue"); break;
        case K_CPU:
                b.a = u(e, "worker_id"), b.tid = (uint32_t)u(e, "tid"), b.small = (uint8_t)u(e, "source");
                b.atom = str_atom(l, e, "thread_name"), b.atom2 = stack_atom(l, e);
                b.cpu = field(e, "cpu")->present ? (uint32_t)u(e, "cpu") : D9_NO_CPU;
                break;
        case K_DUMP: b.a = u(e, "task_id"), b.atom2 = stack_atom(l, e); break;
        case K_CLOCK: b.a = u(e, "realtime_ns"); break;
        }
        if (l->n == l->cap) {
                l->cap = l->cap ? 2 * l->cap : 1 << 16;
                l->ev = realloc(l->ev, l->cap * sizeof(*l->ev));
                if (!l->ev)
                        return -ENOMEM;
        }
        l->ev[l->n++] = b;
        l->per_kind[k]++;
        return 0;
}

static inline int encode_one(struct d9_enc *e, const struct bev *b)
{
        switch (b->kind) {
        case K_POLL_START: return d9_enc_poll_start(e, b->ts, b->a, b->small, b->b, b->atom);
        case K_POLL_END: return d9_enc_poll_end(e, b->ts, b->a);
        case K_PARK: return d9_enc_worker_park(e, b->ts, b->a, b->small, b->b, b->tid);
        case K_UNPARK: return d9_enc_worker_unpark(e, b->ts, b->a, b->small, b->b, b->c, b->tid);
        case K_WAKE: return d9_enc_wake(e, b->ts, b->a, b->b, b->small);
        case K_SPAWN: return d9_enc_task_spawn(e, b->ts, b->a, b->atom, b->small);
        case K_TERMINATE: return d9_enc_task_terminate(e, b->ts, b->a);
        case K_QUEUE: return d9_enc_queue_sample(e, b->ts, b->small);
        case K_CPU: return d9_enc_cpu_sample(e, b->ts, b->a, b->tid, b->small, b->atom, b->atom2, b->cpu);
        case K_DUMP: return d9_enc_task_dump(e, b->ts, b->a, b->atom2);
        default: return d9_enc_clock_sync(e, b->ts, b->a);
        }
}

struct sink {
        uint8_t *p;
        size_t len, cap;
        bool keep;
};

static int sink_flush(void *ctx, const uint8_t *data, size_t len)
{
        struct sink *s = ctx;

        if (s->keep) {
                if (s->len + len > s->cap) {
                        s->cap = 2 * (s->len + len);
                        s->p = realloc(s->p, s->cap);
                        if (!s->p)
                                return -ENOMEM;
                }
                memcpy(s->p + s->len, data, len);
        }
        s->len += len;
        return 0;
}

/* CPU time of this thread: the machine is shared, and wall time would
 * charge us for other processes' time slices. */
static double now(void)
{
        struct timespec t;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
        return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* One segment: a new stream, every event once. */
static int encode_pass(struct d9_enc *e, const struct bev *ev, size_t n)
{
        int r = d9_enc_new_stream(e);

        for (size_t i = 0; i < n && r == 0; i++)
                r = encode_one(e, &ev[i]);
        return r ? r : d9_enc_flush(e);
}

static int by_ts(const void *x, const void *y)
{
        const struct bev *a = x, *b = y;

        return a->ts < b->ts ? -1 : a->ts > b->ts;
}

/* The thread an event happened on, as far as the event tells. */
static uint64_t worker_of(const struct bev *b)
{
        switch (b->kind) {
        case K_POLL_START: case K_POLL_END: case K_PARK: case K_UNPARK: case K_CPU: return b->a;
        case K_WAKE: return b->small;
        default: return 1000;
        }
}

static int by_worker_ts(const void *x, const void *y)
{
        uint64_t wa = worker_of(x), wb = worker_of(y);

        return wa < wb ? -1 : wa > wb ? 1 : by_ts(x, y);
}

static void report(const char *label, struct d9_enc *e, struct bev *ev, size_t n, double secs)
{
        static uint8_t out[1 << 20];
        struct sink keep = { .keep = true }, count = { 0 };
        uint8_t *z;
        size_t zstd3, zstd9, zstd19, gz;
        double t0, dt;
        uint64_t events = 0;

        d9_enc_set_output(e, out, sizeof(out), sink_flush, &keep);
        if (encode_pass(e, ev, n) < 0) {
                fprintf(stderr, "encode_bench: encoding failed\n");
                exit(1);
        }
        if (getenv("D9_BENCH_SAVE")) { /* for trying other compressors by hand */
                FILE *f = fopen(getenv("D9_BENCH_SAVE"), "wb");

                if (f) {
                        fwrite(keep.p, 1, keep.len, f);
                        fclose(f);
                }
        }
        d9_compress_buf(keep.p, keep.len, D9_COMPRESS_ZSTD, 3, &z, &zstd3), free(z);
        d9_compress_buf(keep.p, keep.len, D9_COMPRESS_ZSTD, 9, &z, &zstd9), free(z);
        d9_compress_buf(keep.p, keep.len, D9_COMPRESS_ZSTD, 19, &z, &zstd19), free(z);
        d9_compress_buf(keep.p, keep.len, D9_COMPRESS_GZIP, 6, &z, &gz), free(z);

        d9_enc_set_output(e, out, sizeof(out), sink_flush, &count);
        t0 = now();
        do {
                encode_pass(e, ev, n);
                events += n;
                dt = now() - t0;
        } while (dt < secs);
        printf("%-34s %8.1f M/s %7.2f %7.2f %7.2f %7.2f %7.2f\n", label, (double)events / dt / 1e6,
               (double)keep.len / (double)n, (double)zstd3 / (double)n, (double)zstd9 / (double)n,
               (double)zstd19 / (double)n, (double)gz / (double)n);
        free(keep.p);
}

int main(int argc, char **argv)
{
        struct load l = { 0 };
        struct d9_dec_opts opts = { .on_event = collect, .ctx = &l };
        struct d9_dec_result res;
        double secs = argc > 2 ? atof(argv[2]) : 2.0;
        uint8_t *raw, *z;
        size_t raw_len, gz, zs;
        cpu_set_t one;

        if (argc < 2) {
                fprintf(stderr, "usage: encode_bench FIXTURE [SECONDS]\n");
                return 2;
        }
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu(), &one);
        sched_setaffinity(0, sizeof(one), &one); /* one core, no migrations */
        if (d9_read_trace_file(argv[1], &raw, &raw_len, NULL) < 0 || d9_enc_new(&l.enc) < 0) {
                fprintf(stderr, "encode_bench: cannot read %s\n", argv[1]);
                return 1;
        }
        if (d9_decode(raw, raw_len, &opts, &res) < 0) {
                fprintf(stderr, "encode_bench: %s: %s\n", argv[1], res.error);
                return 1;
        }
        printf("event mix (%zu Tokio events of dial9's fixture, %llu span/symbol/metadata events left out):\n",
               l.n, (unsigned long long)l.skipped);
        for (int k = 0; k < K_COUNT; k++)
                printf("  %6.2f%%  %s\n", 100.0 * (double)l.per_kind[k] / (double)l.n, kind_names[k]);

        d9_compress_buf(raw, raw_len, D9_COMPRESS_GZIP, 6, &z, &gz), free(z);
        d9_compress_buf(raw, raw_len, D9_COMPRESS_ZSTD, 9, &z, &zs), free(z);
        printf("\n%-34s %10s %7s %7s %7s %7s %7s\n", "", "encode", "raw", "zstd-3", "zstd-9", "zstd-19", "gzip-6");
        printf("%-34s %10s %7.2f %7s %7.2f %7s %7.2f   (bytes/event, all %llu events)\n",
               "dial9 recorder's file (reference)", "-", (double)raw_len / (double)res.events, "-",
               (double)zs / (double)res.events, "-", (double)gz / (double)res.events,
               (unsigned long long)res.events);
        report("d9proto, fixture order", l.enc, l.ev, l.n, secs);
        qsort(l.ev, l.n, sizeof(*l.ev), by_ts);
        report("d9proto, time order (d9d drain)", l.enc, l.ev, l.n, secs);
        qsort(l.ev, l.n, sizeof(*l.ev), by_worker_ts);
        report("d9proto, per-worker time order", l.enc, l.ev, l.n, secs);
        printf("\ngoal: >= 50 M events/s on one core, <= 2.5 bytes/event with zstd (dial9: ~48 M/s, ~3 B/event gzip)\n");
        d9_enc_free(l.enc);
        free(l.ev);
        free(raw);
        return 0;
}
