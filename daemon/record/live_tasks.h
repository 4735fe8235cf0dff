/* live_tasks: the task ids a recording saw spawned or polled and has not
 * seen terminate, so that each task's spawn is written once (two spawn
 * probes may see it; one a probe missed gets its spawn at its first poll).
 *
 * Bounded: a task whose terminate is never seen (its complete was not
 * found, or the record was dropped) would otherwise stay for the whole
 * recording, 8-16 bytes per task of a server that spawns one per request.
 * Ids live in two generations; when the newer one holds gen_max ids the
 * older is forgotten. A task polled since then was moved to the newer one,
 * so only a task idle through gen_max other tasks' spawns is forgotten;
 * if it polls again its spawn is written a second time. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#define LIVE_TASKS_GEN_MAX (1u << 18)

struct live_gen {
        uint64_t *ids;                  /* open addressing, power-of-two cap, 0: empty */
        size_t cap, used;
};

struct live_tasks {
        struct live_gen cur, old;
        size_t gen_max;
        uint64_t forgotten;             /* ids dropped with the older generation */
};

/* gen_max 0: LIVE_TASKS_GEN_MAX. -ENOMEM. */
int live_tasks_init(struct live_tasks *l, size_t gen_max);
void live_tasks_free(struct live_tasks *l);
/* 1: id was not known (it is kept now), 0: known, -ENOMEM. */
int live_tasks_add(struct live_tasks *l, uint64_t id);
/* The task terminated. */
void live_tasks_remove(struct live_tasks *l, uint64_t id);
/* Ids kept now. */
size_t live_tasks_count(const struct live_tasks *l);
