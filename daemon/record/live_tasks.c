/* live_tasks.c: see live_tasks.h. Each generation is a linear-probing
 * table; deletion shifts entries back (no tombstones). */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "daemon/record/live_tasks.h"

#define GEN_FIRST_CAP 1024

static size_t home(const struct live_gen *g, uint64_t id)
{
        return (size_t)((id * 0x9e3779b97f4a7c15ull) >> 20) & (g->cap - 1);
}

static int gen_init(struct live_gen *g)
{
        g->ids = calloc(GEN_FIRST_CAP, sizeof(*g->ids));
        g->cap = GEN_FIRST_CAP;
        g->used = 0;
        return g->ids ? 0 : -ENOMEM;
}

static bool gen_has(const struct live_gen *g, uint64_t id)
{
        for (size_t i = home(g, id); g->ids[i]; i = (i + 1) & (g->cap - 1))
                if (g->ids[i] == id)
                        return true;
        return false;
}

/* id is not in g, and g has room. */
static void gen_put(struct live_gen *g, uint64_t id)
{
        size_t i = home(g, id);

        while (g->ids[i])
                i = (i + 1) & (g->cap - 1);
        g->ids[i] = id;
        g->used++;
}

static int gen_grow(struct live_gen *g)
{
        struct live_gen bigger = { calloc(g->cap * 2, sizeof(*g->ids)), g->cap * 2, 0 };

        if (!bigger.ids)
                return -ENOMEM;
        for (size_t i = 0; i < g->cap; i++)
                if (g->ids[i])
                        gen_put(&bigger, g->ids[i]);
        free(g->ids);
        *g = bigger;
        return 0;
}

static bool gen_remove(struct live_gen *g, uint64_t id)
{
        size_t mask = g->cap - 1, i = home(g, id), j;

        while (g->ids[i] && g->ids[i] != id)
                i = (i + 1) & mask;
        if (!g->ids[i])
                return false;
        g->ids[i] = 0;
        g->used--;
        for (j = (i + 1) & mask; g->ids[j]; j = (j + 1) & mask) {
                size_t h = home(g, g->ids[j]);
                /* Move j back into the hole if its home is not in (i, j]. */
                if ((j > i && (h <= i || h > j)) || (j < i && h <= i && h > j)) {
                        g->ids[i] = g->ids[j];
                        g->ids[j] = 0;
                        i = j;
                }
        }
        return true;
}

int live_tasks_init(struct live_tasks *l, size_t gen_max)
{
        *l = (struct live_tasks){ .gen_max = gen_max ? gen_max : LIVE_TASKS_GEN_MAX };
        if (gen_init(&l->cur) < 0)
                return -ENOMEM;
        return 0;
}

void live_tasks_free(struct live_tasks *l)
{
        free(l->cur.ids);
        free(l->old.ids);
        l->cur = l->old = (struct live_gen){ 0 };
}

/* The newer generation is full: the older one goes, with its ids. */
static int retire(struct live_tasks *l)
{
        struct live_gen fresh;

        if (gen_init(&fresh) < 0)
                return -ENOMEM;
        l->forgotten += l->old.used;
        free(l->old.ids);
        l->old = l->cur;
        l->cur = fresh;
        return 0;
}

int live_tasks_add(struct live_tasks *l, uint64_t id)
{
        bool known;

        if (!l->cur.ids)
                return -ENOMEM;
        if (gen_has(&l->cur, id))
                return 0;
        /* Polled again: it moves to the newer generation. */
        known = l->old.ids && gen_remove(&l->old, id);
        if (l->cur.used >= l->gen_max && retire(l) < 0)
                return -ENOMEM;
        if ((l->cur.used + 1) * 2 > l->cur.cap && gen_grow(&l->cur) < 0)
                return -ENOMEM;
        gen_put(&l->cur, id);
        return known ? 0 : 1;
}

void live_tasks_remove(struct live_tasks *l, uint64_t id)
{
        if (l->cur.ids && !gen_remove(&l->cur, id) && l->old.ids)
                gen_remove(&l->old, id);
}

size_t live_tasks_count(const struct live_tasks *l)
{
        return l->cur.used + l->old.used;
}
