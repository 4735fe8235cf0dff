/* spawn_label: which poll<T,S> instance a task the spawn probe saw will be
 * polled by, so its TaskSpawnEvent carries the future type its polls do.
 * BPF reads the new task's vtable with its id (d9_rec_task.vtable); the
 * plan's vtable scan tied each vtable to the raw::poll in its first slot.
 * Before, such spawns had no label (npm vaulttools: 240 of 594 spawns),
 * since the label comes from a poll's probe cookie. Used by translate.c. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct probe_plan;

/* A plan's poll points by their vtable's link-time address, sorted. */
struct spawn_labels {
        const struct probe_plan *plan;  /* the plan indexed (NULL: none yet) */
        struct spawn_vtable {
                uint64_t vaddr;
                uint64_t cookie;
        } *v;
        size_t n;
};

/* The cookie of plan's poll point whose task vtable lies at vtable_vaddr
 * (link-time); indexes plan on first use, or again for another plan.
 * false: no such point (or no memory for the index). */
bool spawn_label_cookie(struct spawn_labels *sl, const struct probe_plan *plan, uint64_t vtable_vaddr,
                        uint64_t *cookie);
void spawn_labels_free(struct spawn_labels *sl);
