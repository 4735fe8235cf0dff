/* Encoder state shared by encoder.c (streams, frames, generic events),
 * enc_intern.c (atoms) and enc_tokio.c (dial9 event helpers). */
#pragma once

#include "bytes.h"
#include "d9proto.h"

/* Room the fast paths of enc_tokio.c need for one event: a reset frame (9),
 * the event header (6) and the largest fixed event body (CpuSample: 35). */
#define ENC_FAST_MAX 64

struct enc_schema {
        uint8_t *body;       /* schema frame after tag and type_id */
        size_t body_len;
        uint8_t *types;      /* field codes */
        uint16_t nfields;
        uint32_t gen;        /* == d9_enc.gen once declared in this stream */
        uint16_t wire_id;
};

enum atom_kind { ATOM_STRING, ATOM_STACK };

struct enc_atom {
        uint32_t gen;        /* == d9_enc.gen once defined in this stream */
        uint32_t pool_id;
        uint8_t kind;
        uint32_t len;        /* bytes (string) or frames (stack) */
        uint64_t hash;
        void *data;
};

struct d9_enc {
        uint8_t *buf;
        size_t cap, pos;
        d9_enc_flush_fn flush;
        void *flush_ctx;

        /* Stream state. gen changes with every header so "declared in this
         * stream" is one compare, and forgetting everything costs nothing. */
        uint32_t gen;
        bool in_stream;
        uint64_t base;
        uint32_t next_wire_id;
        uint32_t next_string_id;
        uint32_t next_stack_id;

        struct enc_schema *schemas;
        size_t nschemas, schemas_cap;

        struct enc_atom *atoms;
        size_t natoms, atoms_cap;
        uint32_t *atom_slots; /* open addressing: atom index + 1, 0 = empty */
        size_t nslots;
};

int d9_enc_reserve(struct d9_enc *e, size_t need);

static inline bool enc_atom_live(const struct d9_enc *e, uint32_t atom)
{
        return atom < e->natoms && e->atoms[atom].gen == e->gen;
}

/* Start of an event frame when schema and pools are already in the stream
 * and ENC_FAST_MAX bytes are free; NULL means "take the generic path". */
static inline uint8_t *enc_fast_begin(struct d9_enc *e, int schema, uint64_t ts)
{
        struct enc_schema *s = &e->schemas[schema];

        if (d9_unlikely(s->gen != e->gen || e->cap - e->pos < ENC_FAST_MAX))
                return NULL;
        uint8_t *p = e->buf + e->pos;
        uint64_t delta = ts - e->base; /* wraps when ts < base: reset too */

        if (d9_unlikely(delta > D9_MAX_DELTA)) {
                *p++ = D9_TAG_TS_RESET;
                p = put_u64(p, ts);
                delta = 0;
        }
        e->base = ts;
        *p++ = D9_TAG_EVENT;
        p = put_u16(p, s->wire_id);
        return put_u24(p, (uint32_t)delta);
}

static inline int enc_fast_end(struct d9_enc *e, uint8_t *p)
{
        e->pos = (size_t)(p - e->buf);
        return 0;
}

void d9_enc_atoms_free(struct d9_enc *e);
int d9_enc_declare_tokio(struct d9_enc *e);
