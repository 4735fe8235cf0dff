/* Decoder internals shared by decoder.c, dec_value.c and dec_pool.c. */
#pragma once

#include "bytes.h"
#include "d9proto.h"

enum dec_status {
        DEC_OK = 0,
        DEC_TRUNC = 1, /* input ended inside the item */
        DEC_BAD = 2,   /* malformed; *why and *at say what and where */
        DEC_STOP = 3,  /* a callback returned non-zero */
};

/* Containers nest; the limit keeps hostile input from exhausting the stack. */
#define DEC_MAX_DEPTH 32

struct dec_err {
        const char *why;
        const uint8_t *at;
};

/* Parses one value of base type `base` at *pp (advanced past it). Pooled
 * types yield their id only; the decoder resolves them. */
enum dec_status d9_dec_value_parse(const uint8_t **pp, const uint8_t *end, uint8_t base,
                            struct d9_value *out, unsigned depth, struct dec_err *err);

/* Pool: u32 id -> (pointer into the input, length). Separate instances for
 * strings (length in bytes) and stacks (length in frames). */
struct pool_slot {
        uint32_t id;
        uint32_t len;
        const uint8_t *data; /* NULL = empty slot */
};
struct pool {
        struct pool_slot *slots;
        size_t nslots, used;
};

int d9_dec_pool_put(struct pool *p, uint32_t id, const uint8_t *data, uint32_t len);
const struct pool_slot *d9_dec_pool_get(const struct pool *p, uint32_t id);
void d9_dec_pool_clear(struct pool *p);
void d9_dec_pool_free(struct pool *p);
