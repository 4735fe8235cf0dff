/* task_table.c: see task_table.h. */
#include "task_table.h"

#include <stdlib.h>
#include <string.h>

static uint64_t *slot_at(void *slots, size_t size, size_t i)
{
        return (uint64_t *)((char *)slots + i * size);
}

static bool grow(struct task_table *t)
{
        size_t n = t->nslots ? t->nslots * 2 : 4096;
        void *s = calloc(n, t->size);

        if (!s)
                return false;
        for (size_t i = 0; i < t->nslots; i++) {
                uint64_t *from = slot_at(t->slots, t->size, i);
                if (!*from)
                        continue;
                size_t j = (*from * 0x9e3779b97f4a7c15ull) & (n - 1);
                while (*slot_at(s, t->size, j))
                        j = (j + 1) & (n - 1);
                memcpy(slot_at(s, t->size, j), from, t->size);
        }
        free(t->slots);
        t->slots = s;
        t->nslots = n;
        return true;
}

void *d9ctl_task_table_get(struct task_table *t, uint64_t task, bool insert)
{
        if (!task || (insert && (t->used + 1) * 2 > t->nslots && !grow(t)) || !t->nslots)
                return NULL;
        size_t j = (task * 0x9e3779b97f4a7c15ull) & (t->nslots - 1);
        uint64_t *s;
        while (*(s = slot_at(t->slots, t->size, j)) && *s != task)
                j = (j + 1) & (t->nslots - 1);
        if (!*s) {
                if (!insert)
                        return NULL;
                *s = task;
                t->used++;
        }
        return s;
}

void *d9ctl_task_table_next(const struct task_table *t, size_t *i)
{
        for (; *i < t->nslots; (*i)++) {
                uint64_t *s = slot_at(t->slots, t->size, *i);
                if (*s) {
                        (*i)++;
                        return s;
                }
        }
        return NULL;
}

void d9ctl_task_table_free(struct task_table *t)
{
        free(t->slots);
        *t = (struct task_table){ .size = t->size };
}
