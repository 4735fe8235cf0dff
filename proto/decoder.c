/* dial9 trace decoder: frames, stream state and timestamps
 * (trace-format.md sections 2, 3, 5, 6). Works on one raw buffer that holds
 * the whole input; values handed to callbacks point into it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dec_int.h"

struct dec_schema {
        struct d9_dec_schema pub;
        const uint8_t *raw; /* the frame after its tag, to spot redefinitions */
        size_t raw_len;
        struct d9_annotation *ann;
};

struct dec {
        const uint8_t *buf, *end;
        const struct d9_dec_opts *opts;
        struct d9_dec_result *res;
        /* type_id -> schema, as 256 lazily allocated pages of 256 so that a
         * decode (fuzzing, crash recovery) does not clear 512 KiB up front. */
        struct dec_schema **pages[256];
        uint16_t *used_ids;
        size_t nused, used_cap;
        struct pool strings, stacks;
        uint64_t base;
        struct d9_value *vals;
        size_t vals_cap;
        struct dec_err err;
        int stop; /* non-zero return of a callback */
};

static enum dec_status fail(struct dec *d, const uint8_t *at, const char *why)
{
        d->err.at = at;
        d->err.why = why;
        return DEC_BAD;
}

static size_t left(const struct dec *d, const uint8_t *p)
{
        return (size_t)(d->end - p);
}

static struct dec_schema *schema_get(const struct dec *d, uint16_t id)
{
        struct dec_schema **page = d->pages[id >> 8];

        return page ? page[id & 0xff] : NULL;
}

static int schema_set(struct dec *d, uint16_t id, struct dec_schema *s)
{
        struct dec_schema ***page = &d->pages[id >> 8];

        if (!*page && !(*page = calloc(256, sizeof(**page))))
                return -ENOMEM;
        if (s && d->nused == d->used_cap) {
                size_t cap = d->used_cap ? 2 * d->used_cap : 32;
                uint16_t *u = realloc(d->used_ids, cap * sizeof(*u));

                if (!u)
                        return -ENOMEM;
                d->used_ids = u;
                d->used_cap = cap;
        }
        (*page)[id & 0xff] = s;
        if (s)
                d->used_ids[d->nused++] = id;
        return 0;
}

static void schema_free(struct dec_schema *s)
{
        if (!s)
                return;
        for (uint32_t i = 0; i < s->pub.nannotations; i++) {
                free((char *)s->ann[i].key);
                free((char *)s->ann[i].value);
        }
        free(s->ann);
        free(s);
}

static void stream_reset(struct dec *d)
{
        for (size_t i = 0; i < d->nused; i++) {
                uint16_t id = d->used_ids[i];

                schema_free(d->pages[id >> 8][id & 0xff]);
                d->pages[id >> 8][id & 0xff] = NULL;
        }
        d->nused = 0;
        d9_dec_pool_clear(&d->strings);
        d9_dec_pool_clear(&d->stacks);
        d->base = 0;
}

/* name16: u16 length + bytes. */
static enum dec_status name16(struct dec *d, const uint8_t **pp, const uint8_t **name, uint16_t *len)
{
        const uint8_t *p = *pp;

        if (left(d, p) < 2)
                return DEC_TRUNC;
        *len = get_u16(p);
        if (left(d, p + 2) < *len)
                return DEC_TRUNC;
        *name = p + 2;
        *pp = p + 2 + *len;
        return DEC_OK;
}

/* One allocation per schema: struct, field table, NUL-terminated names. */
static enum dec_status schema_build(struct dec *d, const uint8_t *body, const uint8_t *fields_at,
                                    uint16_t nfields, size_t names_len, struct dec_schema **out)
{
        size_t size = sizeof(struct dec_schema) + nfields * sizeof(struct d9_dec_field) + names_len;
        struct dec_schema *s = calloc(1, size);
        struct d9_dec_field *f;
        const uint8_t *p = body + 2, *name = NULL;
        char *str;
        uint16_t len;

        if (!s)
                return fail(d, body, "out of memory");
        f = (struct d9_dec_field *)(s + 1);
        str = (char *)(f + nfields);
        s->pub.type_id = get_u16(body);
        name16(d, &p, &name, &len);
        memcpy(str, name, len);
        s->pub.name = str;
        str += len + 1;
        s->pub.has_timestamp = *p != 0;
        s->pub.nfields = nfields;
        s->pub.fields = f;
        p = fields_at;
        for (uint16_t i = 0; i < nfields; i++) {
                name16(d, &p, &name, &len); /* validated by frame_schema() */
                memcpy(str, name, len);
                f[i].name = str;
                str += len + 1;
                f[i].type = *p++;
        }
        *out = s;
        return DEC_OK;
}

static enum dec_status frame_schema(struct dec *d, const uint8_t **pp)
{
        const uint8_t *body = *pp, *p = body + 2, *name, *fields_at;
        size_t names_len;
        uint16_t len, nfields, type_id;
        struct dec_schema *s, *old;
        enum dec_status st;

        if (left(d, body) < 2)
                return DEC_TRUNC;
        type_id = get_u16(body);
        if ((st = name16(d, &p, &name, &len)))
                return st;
        names_len = len + 1;
        if (left(d, p) < 3)
                return DEC_TRUNC;
        nfields = get_u16(p + 1);
        p += 3;
        fields_at = p;
        for (uint16_t i = 0; i < nfields; i++) {
                if ((st = name16(d, &p, &name, &len)))
                        return st;
                if (left(d, p) < 1)
                        return DEC_TRUNC;
                uint8_t base = D9_T_BASE(*p);

                if (base < D9_T_I64 || base > D9_T_DYN_MAP)
                        return fail(d, p, "unknown field type code in schema");
                names_len += len + 1;
                p++;
        }
        old = schema_get(d, type_id);
        if (old) {
                /* Byte-identical re-registration is allowed (section 3.1). */
                if (old->raw_len != (size_t)(p - body) || memcmp(old->raw, body, old->raw_len))
                        return fail(d, body - 1, "schema type_id redefined differently");
                *pp = p;
                return DEC_OK;
        }
        if ((st = schema_build(d, body, fields_at, nfields, names_len, &s)))
                return st;
        s->raw = body;
        s->raw_len = (size_t)(p - body);
        if (schema_set(d, type_id, s) < 0) {
                schema_free(s);
                return fail(d, body - 1, "out of memory");
        }
        *pp = p;
        if (d->opts->on_schema) {
                int r = d->opts->on_schema(&s->pub, d->opts->ctx);

                if (r) {
                        d->stop = r;
                        return DEC_STOP;
                }
        }
        return DEC_OK;
}

static enum dec_status resolve(struct dec *d, struct d9_value *v, const uint8_t *at)
{
        const struct pool_slot *slot;

        if (v->type == D9_T_POOLED_STRING) {
                slot = d9_dec_pool_get(&d->strings, v->pool_id);
                if (slot) {
                        v->str.p = (const char *)slot->data;
                        v->str.len = slot->len;
                }
        } else {
                slot = d9_dec_pool_get(&d->stacks, v->pool_id);
                if (slot) {
                        v->stack.le = slot->data;
                        v->stack.n = slot->len;
                }
        }
        v->resolved = slot != NULL;
        if (!slot && d->opts->strict)
                return fail(d, at, v->type == D9_T_POOLED_STRING ? "undefined string pool id"
                                                               : "undefined stack pool id");
        return DEC_OK;
}

static int ensure_vals(struct dec *d, size_t n)
{
        if (n <= d->vals_cap)
                return 0;
        struct d9_value *v = realloc(d->vals, n * sizeof(*v));

        if (!v)
                return -ENOMEM;
        d->vals = v;
        d->vals_cap = n;
        return 0;
}

static enum dec_status frame_event(struct dec *d, const uint8_t **pp, const uint8_t *frame)
{
        const uint8_t *p = *pp;
        const struct dec_schema *s;
        struct d9_dec_event ev = { .offset = (size_t)(frame - d->buf), .stream = d->res->streams - 1 };
        enum dec_status st;

        if (left(d, p) < 2)
                return DEC_TRUNC;
        s = schema_get(d, get_u16(p));
        if (!s)
                return fail(d, p, "event references an undefined type_id");
        p += 2;
        ev.schema = &s->pub;
        ev.has_timestamp = s->pub.has_timestamp;
        if (ev.has_timestamp) {
                if (left(d, p) < 3)
                        return DEC_TRUNC;
                ev.ts = d->base + get_u24(p);
                p += 3;
        } else {
                ev.ts = d->base;
        }
        if (ensure_vals(d, s->pub.nfields ? s->pub.nfields : 1) < 0)
                return fail(d, frame, "out of memory");
        for (uint16_t i = 0; i < s->pub.nfields; i++) {
                uint8_t code = s->pub.fields[i].type, base = D9_T_BASE(code);
                struct d9_value *v = &d->vals[i];
                const uint8_t *at;

                if (code & D9_T_OPTIONAL) {
                        if (left(d, p) < 1)
                                return DEC_TRUNC;
                        if (!*p++) {
                                *v = (struct d9_value){ .type = base, .present = false };
                                continue;
                        }
                }
                at = p;
                if ((st = d9_dec_value_parse(&p, d->end, base, v, 0, &d->err)))
                        return st;
                if ((base == D9_T_POOLED_STRING || base == D9_T_POOLED_STACK) &&
                    (st = resolve(d, v, at)))
                        return st;
        }
        /* The frame is whole: only now does it move the timestamp base. */
        if (ev.has_timestamp)
                d->base = ev.ts;
        ev.values = d->vals;
        *pp = p;
        d->res->events++;
        if (d->opts->on_event) {
                int r = d->opts->on_event(&ev, d->opts->ctx);

                if (r) {
                        d->stop = r;
                        return DEC_STOP;
                }
        }
        return DEC_OK;
}

/* String (stack = false) or stack pool frame. */
static enum dec_status frame_pool(struct dec *d, const uint8_t **pp, bool stack)
{
        const uint8_t *p = *pp;
        uint32_t count;

        if (left(d, p) < 4)
                return DEC_TRUNC;
        count = get_u32(p);
        p += 4;
        for (uint32_t i = 0; i < count; i++) {
                uint32_t id, len;
                size_t bytes;

                if (left(d, p) < 8)
                        return DEC_TRUNC;
                id = get_u32(p);
                len = get_u32(p + 4);
                bytes = stack ? 8 * (size_t)len : len;
                if (left(d, p + 8) < bytes)
                        return DEC_TRUNC;
                if (d9_dec_pool_put(stack ? &d->stacks : &d->strings, id, p + 8, len) < 0)
                        return fail(d, p, "out of memory");
                p += 8 + bytes;
        }
        *pp = p;
        return DEC_OK;
}

static enum dec_status ann_entry(struct dec *d, const uint8_t **pp, struct dec_schema *s)
{
        const uint8_t *p = *pp, *key;
        uint16_t field, klen;
        uint32_t vlen;
        enum dec_status st;

        if (left(d, p) < 2)
                return DEC_TRUNC;
        field = get_u16(p);
        p += 2;
        if ((st = name16(d, &p, &key, &klen)))
                return st;
        if (left(d, p) < 4)
                return DEC_TRUNC;
        vlen = get_u32(p);
        if (left(d, p + 4) < vlen)
                return DEC_TRUNC;
        if (s) {
                struct d9_annotation *a = realloc(s->ann, (s->pub.nannotations + 1) * sizeof(*a));

                if (!a)
                        return fail(d, p, "out of memory");
                s->ann = a;
                a += s->pub.nannotations;
                a->field_index = field;
                a->key = strndup((const char *)key, klen);
                a->value = strndup((const char *)p + 4, vlen);
                s->pub.annotations = s->ann;
                s->pub.nannotations++;
                if (!a->key || !a->value)
                        return fail(d, p, "out of memory");
        }
        *pp = p + 4 + vlen;
        return DEC_OK;
}

/* Annotations for an unknown type_id are parsed and ignored (section 3.6).
 * A torn annotation frame may leave entries attached; the caller stops. */
static enum dec_status frame_annotations(struct dec *d, const uint8_t **pp)
{
        const uint8_t *p = *pp;
        uint64_t type_id;
        uint16_t count;
        struct dec_schema *s;
        enum dec_status st;
        int n = get_uleb(p, left(d, p), &type_id);

        if (n == 0)
                return DEC_TRUNC;
        if (n < 0)
                return fail(d, p, "varint longer than 10 bytes");
        p += n;
        if (left(d, p) < 2)
                return DEC_TRUNC;
        count = get_u16(p);
        p += 2;
        s = type_id <= UINT16_MAX ? schema_get(d, (uint16_t)type_id) : NULL;
        for (uint16_t i = 0; i < count; i++)
                if ((st = ann_entry(d, &p, s)))
                        return st;
        *pp = p;
        return DEC_OK;
}

static enum dec_status frame_one(struct dec *d, const uint8_t **pp)
{
        const uint8_t *frame = *pp, *p = frame + 1;
        enum dec_status st;

        switch (*frame) {
        case D9_TAG_HEADER:
                if (left(d, frame) < 4)
                        return memcmp(frame, D9_MAGIC, left(d, frame)) ? fail(d, frame, "unknown frame tag 0x54")
                                                                         : DEC_TRUNC;
                if (memcmp(frame, D9_MAGIC, 4))
                        return fail(d, frame, "unknown frame tag 0x54");
                if (left(d, frame) < D9_HEADER_LEN)
                        return DEC_TRUNC;
                stream_reset(d);
                d->res->streams++;
                *pp = frame + D9_HEADER_LEN;
                return DEC_OK;
        case D9_TAG_SCHEMA:
                st = frame_schema(d, &p);
                break;
        case D9_TAG_EVENT:
                st = frame_event(d, &p, frame);
                break;
        case D9_TAG_STRING_POOL:
        case D9_TAG_STACK_POOL:
                st = frame_pool(d, &p, *frame == D9_TAG_STACK_POOL);
                break;
        case D9_TAG_TS_RESET:
                if (left(d, p) < 8)
                        return DEC_TRUNC;
                d->base = get_u64(p);
                p += 8;
                st = DEC_OK;
                break;
        case D9_TAG_ANNOTATIONS:
                st = frame_annotations(d, &p);
                break;
        default:
                return fail(d, frame, "unknown frame tag");
        }
        if (st == DEC_OK)
                *pp = p;
        return st;
}

static int decode_frames(struct dec *d)
{
        const uint8_t *p = d->buf;
        struct d9_dec_result *res = d->res;

        if (left(d, p) < 4 ? memcmp(p, D9_MAGIC, left(d, p)) != 0 : memcmp(p, D9_MAGIC, 4) != 0) {
                res->error_offset = 0;
                snprintf(res->error, sizeof(res->error), "not a dial9 trace (bad magic)");
                return -EBADMSG;
        }
        if (p == d->end) {
                res->truncated = true;
                if (d->opts->strict) {
                        snprintf(res->error, sizeof(res->error), "empty input, no stream header");
                        return -EBADMSG;
                }
                return 0;
        }
        while (p < d->end) {
                const uint8_t *frame = p;
                enum dec_status st = frame_one(d, &p);

                if (st == DEC_OK) {
                        res->frames += *frame != D9_TAG_HEADER;
                        res->consumed = (size_t)(p - d->buf);
                        if (d->opts->on_frame) {
                                int r = d->opts->on_frame(*frame, (size_t)(frame - d->buf),
                                                          (size_t)(p - frame), d->opts->ctx);
                                if (r)
                                        return r;
                        }
                        continue;
                }
                if (st == DEC_STOP)
                        return d->stop;
                if (st == DEC_TRUNC) {
                        res->truncated = true;
                        res->error_offset = (size_t)(frame - d->buf);
                        if (!d->opts->strict)
                                return 0;
                        snprintf(res->error, sizeof(res->error),
                                 "truncated frame (tag 0x%02x), input ends at %zu",
                                 *frame, left(d, d->buf));
                        return -EBADMSG;
                }
                res->error_offset = (size_t)(d->err.at - d->buf);
                snprintf(res->error, sizeof(res->error), "%s (byte 0x%02x)", d->err.why,
                         d->err.at < d->end ? *d->err.at : 0);
                return -EBADMSG;
        }
        return 0;
}

int d9_decode(const uint8_t *buf, size_t len, const struct d9_dec_opts *opts,
              struct d9_dec_result *res)
{
        static const struct d9_dec_opts no_opts;
        struct dec d = { .buf = buf, .end = buf + len, .opts = opts ? opts : &no_opts, .res = res };
        int r;

        *res = (struct d9_dec_result){ 0 };
        r = decode_frames(&d);
        stream_reset(&d);
        d9_dec_pool_free(&d.strings);
        d9_dec_pool_free(&d.stacks);
        free(d.vals);
        for (size_t i = 0; i < 256; i++)
                free(d.pages[i]);
        free(d.used_ids);
        return r;
}

size_t d9_valid_prefix_len(const uint8_t *buf, size_t len)
{
        struct d9_dec_result res;

        d9_decode(buf, len, NULL, &res);
        return res.consumed;
}
