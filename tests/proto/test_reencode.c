/* Every event of dial9's fixture, re-encoded through the typed helpers
 * (Tokio events) or the generic path (spans), must decode to the same
 * names, timestamps and values. Exercises the helpers' fast paths, pool
 * interning and buffer flushes on real data, and measures our size. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

struct orig {
        char name[160];
        uint64_t ts;
        uint16_t n;
        struct d9_value *v;
};

static struct orig *evs;
static size_t nev, cap, checked, differ;
static struct d9_enc *enc;
static int failures;

static int keep(const struct d9_dec_event *e, void *ctx)
{
        struct orig *o;

        if (nev == cap) {
                cap = cap ? 2 * cap : 1 << 16;
                evs = realloc(evs, cap * sizeof(*evs));
        }
        o = &evs[nev++];
        snprintf(o->name, sizeof(o->name), "%s", e->schema->name);
        o->ts = e->ts;
        o->n = e->schema->nfields;
        o->v = malloc((o->n + 1) * sizeof(*o->v));
        memcpy(o->v, e->values, o->n * sizeof(*o->v));
        return 0;
}

static uint32_t atom_of(const struct d9_value *v)
{
        uint64_t addrs[1024];
        uint32_t a = D9_NO_ATOM;

        if (!v->present)
                return D9_NO_ATOM;
        if (v->type == D9_T_POOLED_STRING) {
                d9_enc_intern_string(enc, v->str.p, v->str.len, &a);
        } else {
                for (uint32_t i = 0; i < v->stack.n && i < 1024; i++)
                        addrs[i] = d9_value_stack_addr(v, i);
                d9_enc_intern_stack(enc, addrs, v->stack.n, &a);
        }
        return a;
}

/* Custom (span) schemas: declared once per name, from the decoded schema. */
static struct { char name[160]; int handle; } customs[64];
static int ncustoms;

static int generic(const struct d9_dec_event *e)
{
        const struct d9_dec_schema *s = e->schema;
        struct d9_field_def f[32];
        struct d9_enc_value v[32] = { 0 };
        int h = -1;

        if (s->nfields > 32)
                return -E2BIG;
        for (int i = 0; i < ncustoms; i++)
                if (strcmp(customs[i].name, s->name) == 0)
                        h = customs[i].handle;
        if (h < 0) {
                for (uint16_t i = 0; i < s->nfields; i++)
                        f[i] = (struct d9_field_def){ s->fields[i].name, s->fields[i].type };
                h = d9_enc_declare(enc, &(struct d9_schema_def){ s->name, s->nfields, f });
                if (h < 0 || ncustoms == 64)
                        return -ENOMEM;
                snprintf(customs[ncustoms].name, sizeof(customs[0].name), "%s", s->name);
                customs[ncustoms++].handle = h;
        }
        for (uint16_t i = 0; i < s->nfields; i++) {
                const struct d9_value *x = &e->values[i];

                v[i].present = x->present;
                switch (x->type) {
                case D9_T_POOLED_STRING:
                case D9_T_POOLED_STACK:
                        v[i].atom = atom_of(x);
                        break;
                case D9_T_STRING:
                case D9_T_BYTES:
                        v[i].bytes.data = x->str.p;
                        v[i].bytes.len = x->str.len;
                        break;
                case D9_T_I64: case D9_T_F64: case D9_T_BOOL: case D9_T_VARINT:
                case D9_T_U8: case D9_T_U16: case D9_T_U32:
                        v[i].u = x->u;
                        if (x->type == D9_T_BOOL)
                                v[i].b = x->b;
                        break;
                default:
                        return -ENOTSUP; /* the fixture's spans have none */
                }
        }
        return d9_enc_event(enc, h, e->ts, v);
}

static int metadata(const struct d9_dec_event *e)
{
        static char strs[64][256];
        struct d9_kv kv[32];
        struct d9_value_iter it;
        struct d9_value x;
        uint32_t n = 0;

        d9_value_iter_init(&it, &e->values[0]);
        while (n < 64 && d9_value_iter_next(&it, &x))
                snprintf(strs[n++], sizeof(strs[0]), "%.*s", (int)x.str.len, x.str.p);
        for (uint32_t i = 0; i < n / 2; i++)
                kv[i] = (struct d9_kv){ strs[2 * i], strs[2 * i + 1] };
        return d9_enc_segment_metadata(enc, e->ts, kv, n / 2);
}

#define U(i) (e->values[i].u)

static int reencode(const struct d9_dec_event *e, void *ctx)
{
        const char *n = e->schema->name;
        const struct d9_value *v = e->values;
        int r;

        if (!strcmp(n, "PollStartEvent"))
                r = d9_enc_poll_start(enc, e->ts, U(0), (uint8_t)U(1), U(2), atom_of(&v[3]));
        else if (!strcmp(n, "PollEndEvent"))
                r = d9_enc_poll_end(enc, e->ts, U(0));
        else if (!strcmp(n, "WorkerParkEvent"))
                r = d9_enc_worker_park(enc, e->ts, U(0), (uint8_t)U(1), U(2), (uint32_t)U(3));
        else if (!strcmp(n, "WorkerUnparkEvent"))
                r = d9_enc_worker_unpark(enc, e->ts, U(0), (uint8_t)U(1), U(2), U(3), (uint32_t)U(4));
        else if (!strcmp(n, "WakeEventEvent"))
                r = d9_enc_wake(enc, e->ts, U(0), U(1), (uint8_t)U(2));
        else if (!strcmp(n, "TaskSpawnEvent"))
                r = d9_enc_task_spawn(enc, e->ts, U(0), atom_of(&v[1]), v[2].b);
        else if (!strcmp(n, "TaskTerminateEvent"))
                r = d9_enc_task_terminate(enc, e->ts, U(0));
        else if (!strcmp(n, "QueueSampleEvent"))
                r = d9_enc_queue_sample(enc, e->ts, (uint8_t)U(0));
        else if (!strcmp(n, "CpuSampleEvent"))
                r = d9_enc_cpu_sample(enc, e->ts, U(0), (uint32_t)U(1), (uint8_t)U(2), atom_of(&v[3]),
                                      atom_of(&v[4]), v[5].present ? (uint32_t)U(5) : D9_NO_CPU);
        else if (!strcmp(n, "TaskDumpEvent"))
                r = d9_enc_task_dump(enc, e->ts, U(0), atom_of(&v[1]));
        else if (!strcmp(n, "ClockSyncEvent"))
                r = d9_enc_clock_sync(enc, e->ts, U(0));
        else if (!strcmp(n, "SegmentMetadataEvent"))
                r = metadata(e);
        else if (!strcmp(n, "SymbolTableEntry"))
                r = d9_enc_symbol_entry(enc, e->ts, U(0), U(1), atom_of(&v[2]), U(3), atom_of(&v[4]), U(5));
        else
                r = generic(e);
        if (r < 0 && failures++ < 3)
                printf("#   re-encoding %s failed: %s\n", n, strerror(-r));
        return 0;
}

static bool same(const struct d9_value *a, const struct d9_value *b)
{
        if (a->present != b->present || a->type != b->type)
                return false;
        if (!a->present)
                return true;
        switch (a->type) {
        case D9_T_STRING:
        case D9_T_BYTES:
        case D9_T_POOLED_STRING:
                return a->str.len == b->str.len && !memcmp(a->str.p, b->str.p, a->str.len);
        case D9_T_STACK:
        case D9_T_POOLED_STACK:
                return a->stack.n == b->stack.n && !memcmp(a->stack.le, b->stack.le, 8 * (size_t)a->stack.n);
        case D9_T_STRING_MAP:
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP:
                return a->container.count == b->container.count &&
                       a->container.end - a->container.body == b->container.end - b->container.body &&
                       !memcmp(a->container.body, b->container.body, (size_t)(a->container.end - a->container.body));
        case D9_T_BOOL:
                return a->b == b->b;
        default:
                return a->u == b->u;
        }
}

static int compare(const struct d9_dec_event *e, void *ctx)
{
        const struct orig *o = checked < nev ? &evs[checked] : NULL;
        bool ok_ = o && !strcmp(o->name, e->schema->name) && o->ts == e->ts && o->n == e->schema->nfields;

        for (uint16_t i = 0; ok_ && i < o->n; i++)
                ok_ = same(&o->v[i], &e->values[i]);
        if (!ok_ && differ++ < 3)
                printf("#   event %zu (%s) differs\n", checked, e->schema->name);
        checked++;
        return 0;
}

struct out {
        uint8_t *p;
        size_t len, cap;
};

static int to_mem(void *ctx, const uint8_t *data, size_t len)
{
        struct out *o = ctx;

        if (o->len + len > o->cap) {
                o->cap = 2 * (o->len + len);
                o->p = realloc(o->p, o->cap);
                if (!o->p)
                        return -ENOMEM;
        }
        memcpy(o->p + o->len, data, len);
        o->len += len;
        return 0;
}

int main(int argc, char **argv)
{
        static uint8_t buf[4096]; /* small: flushes land between all kinds of frames */
        struct out out = { 0 };
        struct d9_dec_result res;
        uint8_t *raw, *z;
        size_t raw_len, zlen_ours, zlen_theirs;
        int r;

        if (argc != 2)
                bail("usage: test_reencode FIXTURE");
        r = d9_read_trace_file(argv[1], &raw, &raw_len, NULL);
        if (r < 0)
                bail("cannot read dial9 fixture %s: %s", argv[1], strerror(-r));
        d9_decode(raw, raw_len, &(struct d9_dec_opts){ .strict = true, .on_event = keep }, &res);
        ok(nev == 210639, "fixture gives 210639 events to re-encode");

        d9_enc_new(&enc);
        d9_enc_set_output(enc, buf, sizeof(buf), to_mem, &out);
        d9_decode(raw, raw_len, &(struct d9_dec_opts){ .strict = true, .on_event = reencode }, &res);
        ok(failures == 0 && d9_enc_flush(enc) == 0, "every event re-encodes (%d failures)", failures);

        r = d9_decode(out.p, out.len, &(struct d9_dec_opts){ .strict = true, .on_event = compare }, &res);
        ok(r == 0 && res.consumed == out.len, "re-encoded file decodes strictly, byte-complete (%s)", res.error);
        ok(checked == nev && differ == 0, "all %zu events have identical names, timestamps and values (%zu differ)",
           nev, differ);

        d9_compress_buf(raw, raw_len, D9_COMPRESS_ZSTD, 9, &z, &zlen_theirs), free(z);
        d9_compress_buf(out.p, out.len, D9_COMPRESS_ZSTD, 9, &z, &zlen_ours), free(z);
        printf("# same events: dial9's file %zu bytes raw / %zu zstd-9, ours %zu raw / %zu zstd-9\n",
               raw_len, zlen_theirs, out.len, zlen_ours);
        ok(out.len < raw_len, "our encoding of the same events is not larger than dial9's");

        for (size_t i = 0; i < nev; i++)
                free(evs[i].v);
        free(evs);
        free(out.p);
        free(raw);
        d9_enc_free(enc);
        return tap_done();
}
