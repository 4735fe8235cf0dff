/* autoattach: the attach = ... rules at work. At start every running
 * process is matched; from then on every exec is (exec_watch.h), and each
 * match is attached like a d9ctl attach by root, with the rule's probe
 * set, up to auto_attach_max targets at once. */
#pragma once

#include <jansson.h>

struct d9d;
struct autoattach;

/* Nothing to do (and *out NULL) without rules. */
int autoattach_start(struct d9d *d, struct autoattach **out);
/* SIGHUP: the rules (and cap) of a reloaded d9d.conf take the place of the
 * running ones; next is left empty. A rule kept (same text) keeps its
 * counters; running processes are rescanned for the added rules only;
 * sessions of a removed rule go on. Starts auto-attach if it did not run. */
int autoattach_reload(struct d9d *d, struct attach_rules *next);
/* Once a tick: a rescan when the cap freed up or the exec ring lost records. */
void autoattach_tick(struct autoattach *aa);
/* After the planner stopped (every attach under way has been answered). */
void autoattach_stop(struct autoattach *aa);
/* The rules, their counters and the cap, for status and list. */
json_t *autoattach_status_json(const struct autoattach *aa);
