/* spawn_label.c: the plan's poll points by task vtable (spawn_label.h). */
#include "daemon/record/spawn_label.h"

#include <stdlib.h>

#include "uprobes/uprobes.h"

static int by_vaddr(const void *a, const void *b)
{
        const struct spawn_vtable *x = a, *y = b;

        return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

static int index_plan(struct spawn_labels *sl, const struct probe_plan *plan)
{
        size_t n = 0;

        spawn_labels_free(sl);
        sl->v = calloc(plan->n_points ? plan->n_points : 1, sizeof(*sl->v));
        if (!sl->v)
                return -1;
        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                if (p->kind == PROBE_POLL && p->vtable_vaddr)
                        sl->v[n++] = (struct spawn_vtable){ p->vtable_vaddr, p->cookie };
        }
        qsort(sl->v, n, sizeof(*sl->v), by_vaddr);
        sl->n = n;
        sl->plan = plan;
        return 0;
}

bool spawn_label_cookie(struct spawn_labels *sl, const struct probe_plan *plan, uint64_t vtable_vaddr,
                        uint64_t *cookie)
{
        const struct spawn_vtable key = { .vaddr = vtable_vaddr }, *hit;

        if (sl->plan != plan && index_plan(sl, plan) < 0)
                return false;
        hit = bsearch(&key, sl->v, sl->n, sizeof(*sl->v), by_vaddr);
        if (!hit)
                return false;
        *cookie = hit->cookie;
        return true;
}

void spawn_labels_free(struct spawn_labels *sl)
{
        free(sl->v);
        sl->v = NULL;
        sl->n = 0;
        sl->plan = NULL;
}
