/* task_table: task id -> a caller's record, open addressing on the id, for
 * the report's passes (wakes waiting for their poll, tasks' life times).
 * Records are `size` bytes and begin with their uint64_t task id (0 =
 * free slot); the table doubles at half full. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct task_table {
        void *slots;
        size_t nslots, used, size;
};

/* The record of task (0: none), NULL when it has none and !insert, or out of
 * memory; with insert a new one is zeroed but for its id. */
void *d9ctl_task_table_get(struct task_table *t, uint64_t task, bool insert);
void d9ctl_task_table_free(struct task_table *t);
/* Walks the records in use: *i starts at 0. NULL at the end. */
void *d9ctl_task_table_next(const struct task_table *t, size_t *i);
