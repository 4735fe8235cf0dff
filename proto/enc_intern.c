/* Atoms: encoder-lifetime handles for interned strings and call stacks.
 * Interning hashes once; events then refer to an atom by index, and the
 * per-stream pool id is found without hashing (trace-format.md 3.3, 3.4). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "enc_int.h"

static uint64_t mix64(uint64_t h)
{
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        h *= 0xc4ceb9fe1a85ec53ULL;
        return h ^ (h >> 33);
}

static uint64_t hash_bytes(const void *data, size_t len, uint64_t seed)
{
        const uint8_t *p = data;
        uint64_t h = 0xcbf29ce484222325ULL ^ seed;

        for (size_t i = 0; i < len; i++)
                h = (h ^ p[i]) * 0x100000001b3ULL;
        return mix64(h ^ len);
}

static bool atom_equal(const struct enc_atom *a, uint8_t kind, const void *data, uint32_t len)
{
        size_t bytes = kind == ATOM_STRING ? len : (size_t)len * 8;

        return a->kind == kind && a->len == len && (bytes == 0 || memcmp(a->data, data, bytes) == 0);
}

static int slots_grow(struct d9_enc *e)
{
        size_t n = e->nslots ? 2 * e->nslots : 256;
        uint32_t *slots = calloc(n, sizeof(*slots));

        if (!slots)
                return -ENOMEM;
        for (size_t i = 0; i < e->natoms; i++) {
                size_t j = e->atoms[i].hash & (n - 1);

                while (slots[j])
                        j = (j + 1) & (n - 1);
                slots[j] = (uint32_t)i + 1;
        }
        free(e->atom_slots);
        e->atom_slots = slots;
        e->nslots = n;
        return 0;
}

static int atom_add(struct d9_enc *e, uint8_t kind, const void *data, uint32_t len,
                    uint64_t hash, uint32_t *out)
{
        size_t bytes = kind == ATOM_STRING ? len : (size_t)len * 8;
        struct enc_atom *a;
        int r;

        if (e->natoms >= UINT32_MAX - 1)
                return -E2BIG;
        if (2 * (e->natoms + 1) > e->nslots) {
                r = slots_grow(e);
                if (r < 0)
                        return r;
        }
        if (e->natoms == e->atoms_cap) {
                size_t cap = e->atoms_cap ? 2 * e->atoms_cap : 64;
                struct enc_atom *n = realloc(e->atoms, cap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                e->atoms = n;
                e->atoms_cap = cap;
        }
        a = &e->atoms[e->natoms];
        *a = (struct enc_atom){ .kind = kind, .len = len, .hash = hash };
        a->data = malloc(bytes ? bytes : 1);
        if (!a->data)
                return -ENOMEM;
        if (bytes)
                memcpy(a->data, data, bytes);

        size_t j = hash & (e->nslots - 1);

        while (e->atom_slots[j])
                j = (j + 1) & (e->nslots - 1);
        e->atom_slots[j] = (uint32_t)e->natoms + 1;
        *out = (uint32_t)e->natoms++;
        return 0;
}

static int atom_intern(struct d9_enc *e, uint8_t kind, const void *data, uint32_t len, uint32_t *out)
{
        size_t bytes = kind == ATOM_STRING ? len : (size_t)len * 8;
        uint64_t hash = hash_bytes(data, bytes, kind);

        if (e->nslots) {
                for (size_t j = hash & (e->nslots - 1); e->atom_slots[j]; j = (j + 1) & (e->nslots - 1)) {
                        const struct enc_atom *a = &e->atoms[e->atom_slots[j] - 1];

                        if (a->hash == hash && atom_equal(a, kind, data, len)) {
                                *out = e->atom_slots[j] - 1;
                                return 0;
                        }
                }
        }
        return atom_add(e, kind, data, len, hash, out);
}

int d9_enc_intern_string(struct d9_enc *e, const char *s, size_t len, uint32_t *atom)
{
        if (len > UINT32_MAX / 2)
                return -E2BIG;
        return atom_intern(e, ATOM_STRING, s, (uint32_t)len, atom);
}

int d9_enc_intern_stack(struct d9_enc *e, const uint64_t *addrs, uint32_t n, uint32_t *atom)
{
        if (n > UINT32_MAX / 16)
                return -E2BIG;
        return atom_intern(e, ATOM_STACK, addrs, n, atom);
}

size_t d9_enc_atom_count(const struct d9_enc *e)
{
        return e->natoms;
}

void d9_enc_atoms_free(struct d9_enc *e)
{
        for (size_t i = 0; i < e->natoms; i++)
                free(e->atoms[i].data);
        free(e->atoms);
        free(e->atom_slots);
}
