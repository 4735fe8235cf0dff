/* Field values (trace-format.md section 4): parsing one value of a given
 * type, and walking the elements of containers. */
#include <string.h>

#include "dec_int.h"

static enum dec_status bad(struct dec_err *err, const uint8_t *at, const char *why)
{
        err->at = at;
        err->why = why;
        return DEC_BAD;
}

static enum dec_status need(const uint8_t *p, const uint8_t *end, size_t n)
{
        return (size_t)(end - p) >= n ? DEC_OK : DEC_TRUNC;
}

static enum dec_status blob32(const uint8_t **pp, const uint8_t *end, struct d9_value *out)
{
        const uint8_t *p = *pp;
        uint32_t len;

        if (need(p, end, 4))
                return DEC_TRUNC;
        len = get_u32(p);
        if (need(p + 4, end, len))
                return DEC_TRUNC;
        out->str.p = (const char *)p + 4;
        out->str.len = len;
        *pp = p + 4 + len;
        return DEC_OK;
}

/* Elements of a container: count values, each preceded by its type code
 * (or, for StringMap, 2 * count blob32 strings). */
static enum dec_status container(const uint8_t **pp, const uint8_t *end, uint8_t base,
                                 struct d9_value *out, unsigned depth, struct dec_err *err)
{
        const uint8_t *p = *pp;
        uint64_t elems;

        if (depth >= DEC_MAX_DEPTH)
                return bad(err, p, "containers nested too deeply");
        if (need(p, end, 4))
                return DEC_TRUNC;
        out->container.count = get_u32(p);
        p += 4;
        out->container.body = p;
        elems = base == D9_T_DYN_LIST ? out->container.count : 2 * (uint64_t)out->container.count;
        for (uint64_t i = 0; i < elems; i++) {
                struct d9_value v;
                uint8_t code;
                enum dec_status st;

                if (base == D9_T_STRING_MAP) {
                        st = blob32(&p, end, &v);
                } else {
                        if (need(p, end, 1))
                                return DEC_TRUNC;
                        code = *p;
                        if (code < D9_T_I64 || code > D9_T_DYN_MAP)
                                return bad(err, p, "bad type code inside a container");
                        p++;
                        st = d9_dec_value_parse(&p, end, code, &v, depth + 1, err);
                }
                if (st)
                        return st;
        }
        out->container.end = p;
        *pp = p;
        return DEC_OK;
}

enum dec_status d9_dec_value_parse(const uint8_t **pp, const uint8_t *end, uint8_t base,
                            struct d9_value *out, unsigned depth, struct dec_err *err)
{
        const uint8_t *p = *pp;
        int n;

        out->type = base;
        out->present = true;
        out->resolved = true;
        switch (base) {
        case D9_T_I64:
        case D9_T_F64:
                if (need(p, end, 8))
                        return DEC_TRUNC;
                out->u = get_u64(p);
                if (base == D9_T_F64) {
                        uint64_t bits = out->u;

                        memcpy(&out->f64, &bits, 8);
                }
                *pp = p + 8;
                return DEC_OK;
        case D9_T_BOOL:
        case D9_T_U8:
                if (need(p, end, 1))
                        return DEC_TRUNC;
                out->u = 0;
                if (base == D9_T_BOOL)
                        out->b = *p != 0;
                else
                        out->u = *p;
                *pp = p + 1;
                return DEC_OK;
        case D9_T_U16:
                if (need(p, end, 2))
                        return DEC_TRUNC;
                out->u = get_u16(p);
                *pp = p + 2;
                return DEC_OK;
        case D9_T_U32:
        case D9_T_POOLED_STACK:
        case D9_T_POOLED_STRING:
                if (need(p, end, 4))
                        return DEC_TRUNC;
                out->u = get_u32(p);
                if (base != D9_T_U32) {
                        out->pool_id = (uint32_t)out->u;
                        out->resolved = false;
                        memset(&out->str, 0, sizeof(out->str));
                }
                *pp = p + 4;
                return DEC_OK;
        case D9_T_VARINT:
                n = get_uleb(p, (size_t)(end - p), &out->u);
                if (n == 0)
                        return DEC_TRUNC;
                if (n < 0)
                        return bad(err, p, "varint longer than 10 bytes");
                *pp = p + n;
                return DEC_OK;
        case D9_T_STRING:
        case D9_T_BYTES:
                return blob32(pp, end, out);
        case D9_T_STACK:
                if (need(p, end, 4))
                        return DEC_TRUNC;
                out->stack.n = get_u32(p);
                if (need(p + 4, end, 8 * (size_t)out->stack.n))
                        return DEC_TRUNC;
                out->stack.le = p + 4;
                *pp = p + 4 + 8 * (size_t)out->stack.n;
                return DEC_OK;
        case D9_T_STRING_MAP:
        case D9_T_DYN_LIST:
        case D9_T_DYN_MAP:
                return container(pp, end, base, out, depth, err);
        }
        return bad(err, p, "unknown field type");
}

uint64_t d9_value_stack_addr(const struct d9_value *v, uint32_t i)
{
        return get_u64(v->stack.le + 8 * (size_t)i);
}

void d9_value_iter_init(struct d9_value_iter *it, const struct d9_value *c)
{
        it->p = c->container.body;
        it->end = c->container.end;
        it->type = c->type;
        it->remaining = c->type == D9_T_DYN_LIST ? c->container.count : 2 * c->container.count;
        it->index = 0;
}

int d9_value_iter_next(struct d9_value_iter *it, struct d9_value *out)
{
        struct dec_err err;
        uint8_t code = D9_T_STRING;

        if (!it->remaining || it->p >= it->end)
                return 0;
        if (it->type != D9_T_STRING_MAP)
                code = *it->p++;
        if (d9_dec_value_parse(&it->p, it->end, code, out, 0, &err) != DEC_OK)
                return 0;
        it->remaining--;
        it->index++;
        return 1;
}
