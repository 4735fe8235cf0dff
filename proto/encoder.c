/* Streaming dial9 encoder: output buffer, stream headers, schema
 * registration, timestamp deltas and the generic (schema-driven) event path.
 * Frame order per event follows dial9's writer (trace-format.md section 5):
 * new pool entries, schema if new in this stream, reset if needed, event. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "enc_int.h"

int d9_enc_new(struct d9_enc **out)
{
        struct d9_enc *e = calloc(1, sizeof(*e));
        int r;

        if (!e)
                return -ENOMEM;
        e->gen = 1;
        r = d9_enc_declare_tokio(e);
        if (r < 0) {
                d9_enc_free(e);
                return r;
        }
        *out = e;
        return 0;
}

void d9_enc_free(struct d9_enc *e)
{
        if (!e)
                return;
        for (size_t i = 0; i < e->nschemas; i++) {
                free(e->schemas[i].body);
                free(e->schemas[i].types);
        }
        free(e->schemas);
        d9_enc_atoms_free(e);
        free(e);
}

void d9_enc_set_output(struct d9_enc *e, uint8_t *buf, size_t cap,
                       d9_enc_flush_fn flush, void *ctx)
{
        e->buf = buf;
        e->cap = cap;
        e->pos = 0;
        e->flush = flush;
        e->flush_ctx = ctx;
        /* A new destination is usually a new file, which must start with a
         * header: the next event opens a stream. */
        e->in_stream = false;
        e->gen++;
}

const uint8_t *d9_enc_output(const struct d9_enc *e, size_t *len)
{
        *len = e->pos;
        return e->buf;
}

void d9_enc_drain(struct d9_enc *e)
{
        e->pos = 0;
}

int d9_enc_flush(struct d9_enc *e)
{
        int r;

        if (!e->flush || e->pos == 0)
                return 0;
        r = e->flush(e->flush_ctx, e->buf, e->pos);
        if (r < 0)
                return r;
        e->pos = 0;
        return 0;
}

int d9_enc_reserve(struct d9_enc *e, size_t need)
{
        if (e->cap - e->pos >= need)
                return 0;
        if (need > e->cap)
                return e->buf ? -E2BIG : -ENOSPC;
        if (!e->flush)
                return -ENOSPC;
        return d9_enc_flush(e);
}

int d9_enc_new_stream(struct d9_enc *e)
{
        int r = d9_enc_reserve(e, D9_HEADER_LEN);

        if (r < 0)
                return r;
        memcpy(e->buf + e->pos, D9_MAGIC, 4);
        e->buf[e->pos + 4] = D9_VERSION_BYTE;
        e->pos += D9_HEADER_LEN;
        e->gen++;
        e->in_stream = true;
        e->base = 0;
        e->next_wire_id = 0;
        e->next_string_id = 0;
        e->next_stack_id = 0;
        return 0;
}

static bool type_known(uint8_t code)
{
        uint8_t base = D9_T_BASE(code);

        return base >= D9_T_I64 && base <= D9_T_DYN_MAP;
}

int d9_enc_declare(struct d9_enc *e, const struct d9_schema_def *def)
{
        size_t name_len = strlen(def->name), len = 2 + name_len + 1 + 2;
        struct enc_schema *s;
        uint8_t *p;

        if (name_len > UINT16_MAX)
                return -EINVAL;
        for (uint16_t i = 0; i < def->nfields; i++) {
                size_t n = strlen(def->fields[i].name);

                if (n > UINT16_MAX || !type_known(def->fields[i].type))
                        return -EINVAL;
                len += 2 + n + 1;
        }
        if (e->nschemas == e->schemas_cap) {
                size_t cap = e->schemas_cap ? 2 * e->schemas_cap : 32;
                struct enc_schema *n = realloc(e->schemas, cap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                e->schemas = n;
                e->schemas_cap = cap;
        }
        s = &e->schemas[e->nschemas];
        *s = (struct enc_schema){ .body_len = len, .nfields = def->nfields };
        s->body = malloc(len);
        s->types = malloc(def->nfields + 1);
        if (!s->body || !s->types) {
                free(s->body);
                free(s->types);
                return -ENOMEM;
        }
        p = put_u16(s->body, (uint16_t)name_len);
        memcpy(p, def->name, name_len);
        p += name_len;
        *p++ = 1; /* has_timestamp: dial9's readers need it on every event */
        p = put_u16(p, def->nfields);
        for (uint16_t i = 0; i < def->nfields; i++) {
                size_t n = strlen(def->fields[i].name);

                p = put_u16(p, (uint16_t)n);
                memcpy(p, def->fields[i].name, n);
                p += n;
                *p++ = def->fields[i].type;
                s->types[i] = def->fields[i].type;
        }
        return (int)e->nschemas++;
}

/* ---- sizes ---------------------------------------------------------------- */

static size_t value_size(const struct d9_enc *e, uint8_t base, const struct d9_enc_value *v);

static size_t dyn_size(const struct d9_enc *e, const struct d9_dyn_elem *el, size_t n)
{
        size_t sz = 0;

        for (size_t i = 0; i < n; i++)
                sz += 1 + value_size(e, el[i].type, &el[i].v);
        return sz;
}

static size_t value_size(const struct d9_enc *e, uint8_t base, const struct d9_enc_value *v)
{
        size_t sz;

        switch (base) {
        case D9_T_I64:
        case D9_T_F64:
                return 8;
        case D9_T_BOOL:
        case D9_T_U8:
                return 1;
        case D9_T_U16:
                return 2;
        case D9_T_U32:
        case D9_T_POOLED_STACK:
        case D9_T_POOLED_STRING:
                return 4;
        case D9_T_VARINT:
                return uleb_len(v->u);
        case D9_T_STRING:
        case D9_T_BYTES:
                return 4 + (size_t)v->bytes.len;
        case D9_T_STACK:
                return 4 + 8 * (size_t)v->stack.n;
        case D9_T_STRING_MAP:
                sz = 4;
                for (uint32_t i = 0; i < v->map.n; i++)
                        sz += 8 + strlen(v->map.kv[i].key) + strlen(v->map.kv[i].value);
                return sz;
        case D9_T_DYN_LIST:
                return 4 + dyn_size(e, v->dyn.elems, v->dyn.n);
        case D9_T_DYN_MAP:
                return 4 + dyn_size(e, v->dyn.elems, 2 * (size_t)v->dyn.n);
        }
        return 0;
}

/* Pool frame bytes needed for an atom, or 0 when it is already defined. */
static size_t pool_frame_size(const struct d9_enc *e, uint32_t atom)
{
        const struct enc_atom *a = &e->atoms[atom];

        if (a->gen == e->gen)
                return 0;
        return a->kind == ATOM_STRING ? 1 + 4 + 4 + 4 + (size_t)a->len
                                      : 1 + 4 + 4 + 4 + 8 * (size_t)a->len;
}

static int check_dyn(const struct d9_dyn_elem *el, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                uint8_t t = el[i].type;

                if (t & D9_T_OPTIONAL || t < D9_T_I64 || t > D9_T_DYN_MAP ||
                    t == D9_T_POOLED_STACK || t == D9_T_POOLED_STRING)
                        return -EINVAL;
                if (t == D9_T_DYN_LIST && check_dyn(el[i].v.dyn.elems, el[i].v.dyn.n) < 0)
                        return -EINVAL;
                if (t == D9_T_DYN_MAP && check_dyn(el[i].v.dyn.elems, 2 * (size_t)el[i].v.dyn.n) < 0)
                        return -EINVAL;
        }
        return 0;
}

/* Validates values against the schema and sums the bytes the event needs. */
static int event_size(const struct d9_enc *e, const struct enc_schema *s,
                      const struct d9_enc_value *vals, size_t *need)
{
        size_t sz = (e->in_stream ? 0 : D9_HEADER_LEN) + 9 + 6;

        if (s->gen != e->gen || !e->in_stream)
                sz += 3 + s->body_len;
        for (uint16_t i = 0; i < s->nfields; i++) {
                uint8_t code = s->types[i], base = D9_T_BASE(code);
                const struct d9_enc_value *v = &vals[i];

                if (code & D9_T_OPTIONAL) {
                        sz++;
                        if (!v->present)
                                continue;
                }
                if (base == D9_T_POOLED_STRING || base == D9_T_POOLED_STACK) {
                        uint8_t want = base == D9_T_POOLED_STRING ? ATOM_STRING : ATOM_STACK;

                        if (v->atom >= e->natoms || e->atoms[v->atom].kind != want)
                                return -EINVAL;
                        sz += e->in_stream ? pool_frame_size(e, v->atom)
                                           : 13 + (size_t)e->atoms[v->atom].len * 8;
                }
                if (base == D9_T_STRING_MAP) {
                        for (uint32_t k = 0; k < v->map.n; k++)
                                if (!v->map.kv[k].key || !v->map.kv[k].value)
                                        return -EINVAL;
                }
                if ((base == D9_T_DYN_LIST && check_dyn(v->dyn.elems, v->dyn.n) < 0) ||
                    (base == D9_T_DYN_MAP && check_dyn(v->dyn.elems, 2 * (size_t)v->dyn.n) < 0))
                        return -EINVAL;
                sz += value_size(e, base, v);
        }
        *need = sz;
        return 0;
}

/* ---- writers -------------------------------------------------------------- */

static uint8_t *write_value(const struct d9_enc *e, uint8_t *p, uint8_t base,
                            const struct d9_enc_value *v);

static uint8_t *write_dyn(const struct d9_enc *e, uint8_t *p, const struct d9_dyn_elem *el, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                *p++ = el[i].type;
                p = write_value(e, p, el[i].type, &el[i].v);
        }
        return p;
}

static uint8_t *write_blob32(uint8_t *p, const void *data, uint32_t len)
{
        p = put_u32(p, len);
        if (len)
                memcpy(p, data, len);
        return p + len;
}

static uint8_t *write_value(const struct d9_enc *e, uint8_t *p, uint8_t base,
                            const struct d9_enc_value *v)
{
        switch (base) {
        case D9_T_I64:
                return put_u64(p, (uint64_t)v->i64);
        case D9_T_F64: {
                uint64_t bits;

                memcpy(&bits, &v->f64, 8);
                return put_u64(p, bits);
        }
        case D9_T_BOOL:
                *p = v->b ? 1 : 0;
                return p + 1;
        case D9_T_U8:
                *p = (uint8_t)v->u;
                return p + 1;
        case D9_T_U16:
                return put_u16(p, (uint16_t)v->u);
        case D9_T_U32:
                return put_u32(p, (uint32_t)v->u);
        case D9_T_VARINT:
                return put_uleb(p, v->u);
        case D9_T_POOLED_STACK:
        case D9_T_POOLED_STRING:
                return put_u32(p, e->atoms[v->atom].pool_id);
        case D9_T_STRING:
        case D9_T_BYTES:
                return write_blob32(p, v->bytes.data, v->bytes.len);
        case D9_T_STACK:
                p = put_u32(p, v->stack.n);
                for (uint32_t i = 0; i < v->stack.n; i++)
                        p = put_u64(p, v->stack.addrs[i]);
                return p;
        case D9_T_STRING_MAP:
                p = put_u32(p, v->map.n);
                for (uint32_t i = 0; i < v->map.n; i++) {
                        p = write_blob32(p, v->map.kv[i].key, (uint32_t)strlen(v->map.kv[i].key));
                        p = write_blob32(p, v->map.kv[i].value, (uint32_t)strlen(v->map.kv[i].value));
                }
                return p;
        case D9_T_DYN_LIST:
                p = put_u32(p, v->dyn.n);
                return write_dyn(e, p, v->dyn.elems, v->dyn.n);
        case D9_T_DYN_MAP:
                p = put_u32(p, v->dyn.n);
                return write_dyn(e, p, v->dyn.elems, 2 * (size_t)v->dyn.n);
        }
        return p;
}

/* dial9's writer emits one pool frame per new entry. */
static uint8_t *write_pool_entry(struct d9_enc *e, uint8_t *p, uint32_t atom)
{
        struct enc_atom *a = &e->atoms[atom];

        if (a->gen == e->gen)
                return p;
        a->gen = e->gen;
        if (a->kind == ATOM_STRING) {
                a->pool_id = e->next_string_id++;
                *p++ = D9_TAG_STRING_POOL;
                p = put_u32(p, 1);
                p = put_u32(p, a->pool_id);
                return write_blob32(p, a->data, a->len);
        }
        a->pool_id = e->next_stack_id++;
        *p++ = D9_TAG_STACK_POOL;
        p = put_u32(p, 1);
        p = put_u32(p, a->pool_id);
        p = put_u32(p, a->len);
        for (uint32_t i = 0; i < a->len; i++)
                p = put_u64(p, ((const uint64_t *)a->data)[i]);
        return p;
}

static uint8_t *write_schema(struct d9_enc *e, uint8_t *p, struct enc_schema *s)
{
        if (s->gen == e->gen)
                return p;
        s->gen = e->gen;
        s->wire_id = (uint16_t)e->next_wire_id++;
        *p++ = D9_TAG_SCHEMA;
        p = put_u16(p, s->wire_id);
        memcpy(p, s->body, s->body_len);
        return p + s->body_len;
}

int d9_enc_event(struct d9_enc *e, int schema, uint64_t ts, const struct d9_enc_value *vals)
{
        struct enc_schema *s;
        size_t need;
        uint64_t delta;
        uint8_t *p;
        int r;

        if (schema < 0 || (size_t)schema >= e->nschemas)
                return -EINVAL;
        s = &e->schemas[schema];
        r = event_size(e, s, vals, &need);
        if (r < 0)
                return r;
        if (s->gen != e->gen && e->in_stream && e->next_wire_id > UINT16_MAX)
                return -E2BIG;
        r = d9_enc_reserve(e, need);
        if (r < 0)
                return r;
        if (!e->in_stream) {
                r = d9_enc_new_stream(e);
                if (r < 0)
                        return r;
        }
        p = e->buf + e->pos;
        for (uint16_t i = 0; i < s->nfields; i++) {
                uint8_t base = D9_T_BASE(s->types[i]);

                if ((base == D9_T_POOLED_STRING || base == D9_T_POOLED_STACK) &&
                    (!(s->types[i] & D9_T_OPTIONAL) || vals[i].present))
                        p = write_pool_entry(e, p, vals[i].atom);
        }
        p = write_schema(e, p, s);
        delta = ts - e->base;
        if (delta > D9_MAX_DELTA) {
                *p++ = D9_TAG_TS_RESET;
                p = put_u64(p, ts);
                delta = 0;
        }
        e->base = ts;
        *p++ = D9_TAG_EVENT;
        p = put_u16(p, s->wire_id);
        p = put_u24(p, (uint32_t)delta);
        for (uint16_t i = 0; i < s->nfields; i++) {
                if (s->types[i] & D9_T_OPTIONAL) {
                        *p++ = vals[i].present ? 1 : 0;
                        if (!vals[i].present)
                                continue;
                }
                p = write_value(e, p, D9_T_BASE(s->types[i]), &vals[i]);
        }
        e->pos = (size_t)(p - e->buf);
        return 0;
}
