/* report_long_polls: the long polls a recording without poll probes holds
 * (the default set's D9LongPollEvent, daemon/record/long_poll.h): each at
 * least min_ns long, "running", "blocked" or "preempted". The report keeps
 * the longest, with future, worker and stack; without this section a
 * default-set recording's report said "Longest polls: none". */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>

#include "proto/d9proto.h"
#include "trace_read.h"

#define REPORT_FRAMES_MAX 48
#define REPORT_KERNEL_MIN 0xffff800000000000ull /* callchains: kernel frames first */

struct report_long_poll {
        uint64_t end, min_ns, ticks, tid;
        uint64_t waited_ns;             /* of min_ns, switched out still runnable */
        uint8_t worker, n;
        char future[160], how[16];
        uint64_t frames[REPORT_FRAMES_MAX];     /* leaf first, kernel ones first */
};

struct report_long_polls {
        struct report_long_poll *top;   /* longest first */
        unsigned n, cap;
        uint64_t total;
};

/* cap: how many to keep. 0 or -ENOMEM. */
int d9ctl_report_long_polls_init(struct report_long_polls *lp, unsigned cap);
void d9ctl_report_long_polls_free(struct report_long_polls *lp);
/* Takes ev if it is a D9LongPollEvent (true). */
bool d9ctl_report_long_polls_event(struct report_long_polls *lp, const struct d9_dec_event *ev);
/* [{"end_ns", "min_ns", "worker", "tid", "how", "ticks", "future", "stack", "kernel_frames"}], longest first. */
json_t *d9ctl_report_long_polls_json(const struct report_long_polls *lp, const struct trace_symbols *syms);
/* Frames leaf first, named where the segment names them, else 0x hex. */
json_t *d9ctl_report_frames_json(const struct trace_symbols *syms, const uint64_t *frames, unsigned n);
/* Leading kernel frames of a callchain. */
unsigned d9ctl_report_kernel_frames(const uint64_t *frames, unsigned n);
