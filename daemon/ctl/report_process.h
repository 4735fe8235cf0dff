/* report_process: the process section of d9ctl report, from the samples d9d
 * takes next to the trace (docs/process.md): peaks of CPU, RSS, threads,
 * fds and involuntary switches, each listener's fullest accept queue, and
 * why a kind of sample stopped. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto/d9proto.h"

#define REPORT_LISTENERS_MAX 32

struct report_process {
        uint64_t samples, last_ts, last_cpu_ns, last_invol;
        double max_cores, max_invol_per_s;
        uint64_t max_rss, max_threads, max_fds;
        struct report_listener {
                uint64_t cookie, inode;
                char addr[48];
                unsigned port;
                uint64_t backlog, max_pending, samples, samples_full;
        } l[REPORT_LISTENERS_MAX];
        unsigned nl;
        uint64_t listeners_over;
        char resources_stopped[96], accept_queues_stopped[96]; /* D9SamplingStoppedEvent's reason, "" = none */
};

/* Takes ev if it is one of the process events (true). */
bool d9ctl_report_process_event(struct report_process *p, const struct d9_dec_event *ev);
/* {"resource_samples", "max_cores", ..., "accept_queues": [...]}. */
json_t *d9ctl_report_process_json(const struct report_process *p);
