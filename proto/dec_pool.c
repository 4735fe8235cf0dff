/* String and stack pools of the decoder: ids are arbitrary u32s (dial9
 * numbers them densely, but readers must accept any), so an open-addressing
 * table rather than an array. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "dec_int.h"

static size_t slot_of(uint32_t id, size_t nslots)
{
        return (size_t)((id * 0x9E3779B1u) & (nslots - 1));
}

static int pool_grow(struct pool *p)
{
        size_t n = p->nslots ? 2 * p->nslots : 64;
        struct pool_slot *slots = calloc(n, sizeof(*slots));

        if (!slots)
                return -ENOMEM;
        for (size_t i = 0; i < p->nslots; i++) {
                if (!p->slots[i].data)
                        continue;
                size_t j = slot_of(p->slots[i].id, n);

                while (slots[j].data)
                        j = (j + 1) & (n - 1);
                slots[j] = p->slots[i];
        }
        free(p->slots);
        p->slots = slots;
        p->nslots = n;
        return 0;
}

int d9_dec_pool_put(struct pool *p, uint32_t id, const uint8_t *data, uint32_t len)
{
        size_t j;

        if (2 * (p->used + 1) > p->nslots) {
                int r = pool_grow(p);

                if (r < 0)
                        return r;
        }
        for (j = slot_of(id, p->nslots); p->slots[j].data; j = (j + 1) & (p->nslots - 1)) {
                if (p->slots[j].id == id)
                        break; /* redefinition overwrites */
        }
        if (!p->slots[j].data)
                p->used++;
        p->slots[j] = (struct pool_slot){ .id = id, .len = len, .data = data };
        return 0;
}

const struct pool_slot *d9_dec_pool_get(const struct pool *p, uint32_t id)
{
        if (!p->nslots)
                return NULL;
        for (size_t j = slot_of(id, p->nslots); p->slots[j].data; j = (j + 1) & (p->nslots - 1))
                if (p->slots[j].id == id)
                        return &p->slots[j];
        return NULL;
}

void d9_dec_pool_clear(struct pool *p)
{
        if (p->used)
                memset(p->slots, 0, p->nslots * sizeof(*p->slots));
        p->used = 0;
}

void d9_dec_pool_free(struct pool *p)
{
        free(p->slots);
        *p = (struct pool){ 0 };
}
