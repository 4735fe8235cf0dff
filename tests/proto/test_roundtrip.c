/* Random event sequences through the generic path (every field type,
 * optional fields, pooled strings and stacks, containers, backwards and far
 * timestamps that force resets, new streams, tiny output buffers that force
 * flushes) must decode to exactly the values that went in. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "d9proto.h"
#include "../tap.h"

#define NSCHEMAS 4
#define MAXF 8
#define NEVENTS 4000

static uint64_t rng_state = 0x9e3779b97f4a7c15ULL;

static uint64_t rnd(void)
{
        rng_state ^= rng_state << 13;
        rng_state ^= rng_state >> 7;
        rng_state ^= rng_state << 17;
        return rng_state;
}

/* A varied unsigned value: small, medium or full width. */
static uint64_t rnd_u(void)
{
        switch (rnd() % 4) {
        case 0: return rnd() % 128;
        case 1: return rnd() % 100000;
        case 2: return rnd();
        default: return UINT64_MAX - rnd() % 3;
        }
}

struct rec {
        int schema;
        uint64_t ts;
        struct d9_enc_value v[MAXF];
        /* backing storage for pointers in v */
        char str[MAXF][24];
        uint64_t stack[MAXF][6];
        struct d9_kv kv[MAXF][3];
        char kvs[MAXF][6][16];
        struct d9_dyn_elem dyn[MAXF][6];
        char dstr[MAXF][8];
        bool new_stream_before;
};

static const char *pool_strings[] = { "", "src/main.rs:10:5", "worker-0", "ünïcode ✓", "x" };
static uint64_t pool_stacks[4][5];

static struct d9_field_def fields[NSCHEMAS][MAXF];
static struct d9_schema_def defs[NSCHEMAS];
static char field_names[NSCHEMAS][MAXF][40];
static char schema_names[NSCHEMAS][32];
static int handles[NSCHEMAS];
static uint32_t str_atoms[5], stack_atoms[4];

static void make_schemas(void)
{
        for (int s = 0; s < NSCHEMAS; s++) {
                snprintf(schema_names[s], sizeof(schema_names[s]), "Custom%dEvent", s);
                defs[s] = (struct d9_schema_def){ .name = schema_names[s], .nfields = MAXF, .fields = fields[s] };
                for (int f = 0; f < MAXF; f++) {
                        uint8_t t = (uint8_t)(1 + (s * MAXF + f) % 15);

                        if ((s + f) % 3 == 0)
                                t |= D9_T_OPTIONAL;
                        snprintf(field_names[s][f], sizeof(field_names[s][f]), "f%d_%s", f, d9_type_name(t));
                        fields[s][f] = (struct d9_field_def){ .name = field_names[s][f], .type = t };
                }
        }
}

static void rnd_scalar(struct rec *r, int f, uint8_t t, struct d9_enc_value *v, int slot)
{
        switch (t) {
        case D9_T_I64: v->i64 = (int64_t)rnd(); break;
        case D9_T_F64: v->f64 = (double)(int64_t)rnd() / 7.0; break;
        case D9_T_BOOL: v->b = rnd() & 1; break;
        case D9_T_U8: v->u = rnd() & 0xff; break;
        case D9_T_U16: v->u = rnd() & 0xffff; break;
        case D9_T_U32: v->u = rnd() & 0xffffffff; break;
        case D9_T_VARINT: v->u = rnd_u(); break;
        case D9_T_STRING:
        case D9_T_BYTES:
                snprintf(r->dstr[slot], sizeof(r->dstr[slot]), "s%u", (unsigned)(rnd() % 1000));
                v->bytes.data = r->dstr[slot];
                v->bytes.len = (uint32_t)strlen(r->dstr[slot]);
                break;
        }
        (void)f;
}

static void rnd_value(struct rec *r, int f, uint8_t code)
{
        struct d9_enc_value *v = &r->v[f];
        uint8_t t = D9_T_BASE(code);

        v->present = !(code & D9_T_OPTIONAL) || (rnd() % 3) != 0;
        switch (t) {
        case D9_T_STRING:
        case D9_T_BYTES: {
                int n = (int)(rnd() % sizeof(r->str[f]));

                for (int i = 0; i < n; i++)
                        r->str[f][i] = (char)(t == D9_T_BYTES ? rnd() : 'a' + rnd() % 26);
                v->bytes.data = r->str[f];
                v->bytes.len = (uint32_t)n;
                break;
        }
        case D9_T_POOLED_STRING: v->atom = str_atoms[rnd() % 5]; break;
        case D9_T_POOLED_STACK: v->atom = stack_atoms[rnd() % 4]; break;
        case D9_T_STACK:
                v->stack.n = (uint32_t)(rnd() % 7);
                for (uint32_t i = 0; i < v->stack.n; i++)
                        r->stack[f][i] = rnd();
                v->stack.addrs = r->stack[f];
                break;
        case D9_T_STRING_MAP:
                v->map.n = (uint32_t)(rnd() % 4);
                for (uint32_t i = 0; i < v->map.n; i++) {
                        snprintf(r->kvs[f][2 * i], 16, "k%u", i);
                        snprintf(r->kvs[f][2 * i + 1], 16, "%u", (unsigned)(rnd() % 99999));
                        r->kv[f][i] = (struct d9_kv){ r->kvs[f][2 * i], r->kvs[f][2 * i + 1] };
                }
                v->map.kv = r->kv[f];
                break;
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP: {
                static const uint8_t scalars[] = { D9_T_I64, D9_T_F64, D9_T_BOOL, D9_T_STRING,
                                                   D9_T_BYTES, D9_T_VARINT, D9_T_U8, D9_T_U16, D9_T_U32 };
                uint32_t n = (uint32_t)(rnd() % 4), elems = t == D9_T_DYN_MAP ? 2 * n : n;

                for (uint32_t i = 0; i < elems; i++) {
                        r->dyn[f][i].type = scalars[rnd() % sizeof(scalars)];
                        rnd_scalar(r, f, r->dyn[f][i].type, &r->dyn[f][i].v, f);
                }
                /* all string elements of one field share r->dstr[f]: fine, same text */
                v->dyn.elems = r->dyn[f];
                v->dyn.n = n;
                break;
        }
        default:
                rnd_scalar(r, f, t, v, f);
        }
}

static struct rec recs[NEVENTS];
static int checked, mismatches;

static int flush_to(void *ctx, const uint8_t *data, size_t len)
{
        struct { uint8_t *p; size_t len, cap; } *o = ctx;

        if (o->len + len > o->cap)
                return -ENOBUFS;
        memcpy(o->p + o->len, data, len);
        o->len += len;
        return 0;
}

static bool same_value(const struct d9_enc_value *in, uint8_t code, const struct d9_value *out);

static bool same_scalar(const struct d9_enc_value *in, uint8_t t, const struct d9_value *out)
{
        switch (t) {
        case D9_T_I64: return out->i64 == in->i64;
        case D9_T_F64: return memcmp(&out->f64, &in->f64, 8) == 0;
        case D9_T_BOOL: return out->b == in->b;
        case D9_T_STRING:
        case D9_T_BYTES:
                return out->str.len == in->bytes.len && memcmp(out->str.p, in->bytes.data, in->bytes.len) == 0;
        default: return out->u == in->u;
        }
}

static bool same_container(const struct d9_enc_value *in, uint8_t t, const struct d9_value *out)
{
        struct d9_value_iter it;
        struct d9_value el;
        uint32_t n = t == D9_T_STRING_MAP ? in->map.n : in->dyn.n, i = 0;

        if (out->container.count != n)
                return false;
        d9_value_iter_init(&it, out);
        while (d9_value_iter_next(&it, &el)) {
                if (t == D9_T_STRING_MAP) {
                        const char *want = (i % 2) ? in->map.kv[i / 2].value : in->map.kv[i / 2].key;

                        if (el.str.len != strlen(want) || memcmp(el.str.p, want, el.str.len))
                                return false;
                } else if (el.type != in->dyn.elems[i].type ||
                           !same_scalar(&in->dyn.elems[i].v, el.type, &el)) {
                        return false;
                }
                i++;
        }
        return i == (t == D9_T_DYN_LIST ? n : 2 * n);
}

static bool same_value(const struct d9_enc_value *in, uint8_t code, const struct d9_value *out)
{
        uint8_t t = D9_T_BASE(code);

        if ((code & D9_T_OPTIONAL) && out->present != in->present)
                return false;
        if (!out->present)
                return true;
        switch (t) {
        case D9_T_POOLED_STRING: {
                int k = 0;

                while (str_atoms[k] != in->atom)
                        k++;
                return out->resolved && out->str.len == strlen(pool_strings[k]) &&
                       memcmp(out->str.p, pool_strings[k], out->str.len) == 0;
        }
        case D9_T_POOLED_STACK:
        case D9_T_STACK: {
                const uint64_t *want = t == D9_T_STACK ? in->stack.addrs : NULL;
                uint32_t n = t == D9_T_STACK ? in->stack.n : 0;

                if (t == D9_T_POOLED_STACK) {
                        int k = 0;

                        while (stack_atoms[k] != in->atom)
                                k++;
                        want = pool_stacks[k];
                        n = (uint32_t)(k + 1);
                }
                if (out->stack.n != n)
                        return false;
                for (uint32_t i = 0; i < n; i++)
                        if (d9_value_stack_addr(out, i) != want[i])
                                return false;
                return true;
        }
        case D9_T_STRING_MAP:
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP:
                return same_container(in, t, out);
        default:
                return same_scalar(in, t, out);
        }
}

static int on_event(const struct d9_dec_event *ev, void *ctx)
{
        const struct rec *r = &recs[checked];
        bool same = ev->has_timestamp && ev->ts == r->ts && strcmp(ev->schema->name, schema_names[r->schema]) == 0;

        int f = 0;

        for (; same && f < MAXF; f++)
                same = same_value(&r->v[f], fields[r->schema][f].type, &ev->values[f]);
        if (!same && mismatches++ < 5)
                printf("#   event %d (%s) differs after round trip (field %d)\n", checked,
                       schema_names[r->schema], f - 1);
        checked++;
        return 0;
}

static void run(size_t bufcap, const char *what)
{
        static uint8_t file[8 << 20];
        struct { uint8_t *p; size_t len, cap; } o = { file, 0, sizeof(file) };
        uint8_t *buf = malloc(bufcap);
        struct d9_enc *e;
        int bad = 0;
        uint32_t streams = 1;

        d9_enc_new(&e);
        d9_enc_set_output(e, buf, bufcap, flush_to, &o);
        for (int s = 0; s < NSCHEMAS; s++)
                handles[s] = d9_enc_declare(e, &defs[s]);
        /* Atoms are handed out in interning order; main() relied on that. */
        for (int k = 0; k < 5; k++) {
                uint32_t a;

                d9_enc_intern_string(e, pool_strings[k], strlen(pool_strings[k]), &a);
                bad += a != str_atoms[k];
        }
        for (int k = 0; k < 4; k++) {
                uint32_t a;

                d9_enc_intern_stack(e, pool_stacks[k], (uint32_t)k + 1, &a);
                bad += a != stack_atoms[k];
        }
        for (int i = 0; i < NEVENTS; i++) {
                if (recs[i].new_stream_before && i > 0) {
                        d9_enc_new_stream(e);
                        streams++;
                }
                int r = d9_enc_event(e, handles[recs[i].schema], recs[i].ts, recs[i].v);

                if (r < 0 && bad++ < 3)
                        printf("#   event %d: %s\n", i, strerror(-r));
        }
        ok(bad == 0 && d9_enc_flush(e) == 0, "%s: %d random events encode", what, NEVENTS);

        struct d9_dec_opts opts = { .strict = true, .on_event = on_event };
        struct d9_dec_result res;

        checked = mismatches = 0;
        int r = d9_decode(file, o.len, &opts, &res);

        ok(r == 0 && res.consumed == o.len, "%s: strict decode of %zu bytes succeeds (%s at %zu)", what,
           o.len, res.error, res.error_offset);
        ok(checked == NEVENTS && mismatches == 0, "%s: all %d events decode to identical values (%d checked, %d differ)",
           what, NEVENTS, checked, mismatches);
        ok(res.streams == streams, "%s: %u streams come back (got %u)", what, streams, res.streams);
        d9_enc_free(e);
        free(buf);
}

int main(void)
{
        uint64_t ts = 1000;

        make_schemas();
        for (uint32_t k = 0; k < 5; k++)
                str_atoms[k] = k;
        for (uint32_t k = 0; k < 4; k++)
                stack_atoms[k] = 5 + k;
        for (int k = 0; k < 4; k++)
                for (int i = 0; i < 5; i++)
                        pool_stacks[k][i] = rnd();
        for (int i = 0; i < NEVENTS; i++) {
                struct rec *r = &recs[i];

                switch (rnd() % 8) {
                case 0: ts -= rnd() % 5000; break;          /* backwards: reset */
                case 1: ts += 16777216 + rnd() % 1000; break; /* too far for u24: reset */
                case 2: ts += 16777215; break;               /* largest delta, no reset */
                default: ts += rnd() % 20000;
                }
                r->ts = ts;
                r->schema = (int)(rnd() % NSCHEMAS);
                r->new_stream_before = rnd() % 200 == 0;
                for (int f = 0; f < MAXF; f++)
                        rnd_value(r, f, fields[r->schema][f].type);
        }
        run(1024, "1 KiB output buffer");
        run(1 << 20, "1 MiB output buffer");
        return tap_done();
}
