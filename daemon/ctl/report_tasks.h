/* report_tasks: the tasks section of d9ctl report, with the definitions of
 * the viewer's task chart (viewer/web/tasks.js): tasks alive (from spawn,
 * else first poll; a task only seen terminating was alive when the
 * recording began), tasks queued (from the wake that scheduled a poll, or
 * the spawn for a first poll, until the poll starts: Tokio's own queue
 * depths cannot be read from another process) and tasks being polled. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto/d9proto.h"

struct report_tasks;

struct report_tasks *d9ctl_report_tasks_new(void);
void d9ctl_report_tasks_free(struct report_tasks *t);
/* Takes ev if it is a spawn, terminate, wake or poll event (true; still
 * seen by the rest of the report). -ENOMEM sets *err. */
void d9ctl_report_tasks_event(struct report_tasks *t, const struct d9_dec_event *ev, int *err);
/* A new segment: polls open at the end of the last one do not go on. */
void d9ctl_report_tasks_segment(struct report_tasks *t);
/* {"spawned", "terminated", "seen", "alive_at_start", "peak_alive", ...}. */
/* spawns_from_polls: the build had no spawn point, so every spawn event
 * was written at a task's first poll (none is a spawn seen). */
json_t *d9ctl_report_tasks_json(struct report_tasks *t, bool spawns_from_polls);
