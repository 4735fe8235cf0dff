/* d9ctl export: a recording in formats other tools open.
 *  - trace event JSON ("perfetto"): what Perfetto's UI, chrome://tracing
 *    and Chrome DevTools load; one track per worker with its polls and
 *    parks as slices, blocking-pool jobs on their threads, samples and
 *    wakes as instants carrying their stacks.
 *  - pprof: a gzipped profile.proto of the CPU samples (source 0) or of the
 *    off-CPU intervals (source 1), labelled with worker, thread and the
 *    future type of the poll the sample fell in.
 * Both take the segments of one target in time order. */
#pragma once

#include <stddef.h>
#include <stdio.h>

enum export_profile {
        EXPORT_CPU,
        EXPORT_OFFCPU,
};

struct export_stats {
        unsigned long long events;   /* written (slices, instants, samples) */
        unsigned long long unfinished; /* polls or parks open at a recording's end: not written */
};

/* 0, or a negative errno with a one-line reason in why. */
int d9ctl_export_trace_json(FILE *out, char *const *paths, size_t n, struct export_stats *st, char *why,
                      size_t why_len);
int d9ctl_export_pprof(FILE *out, char *const *paths, size_t n, enum export_profile profile,
                 struct export_stats *st, char *why, size_t why_len);
