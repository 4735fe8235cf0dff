/* resymbolize: name what a sealed segment left unnamed, from debug files
 * found by build-id now (d9ctl symbolize). The segment's D9MappingEvent
 * records say which file and link-time address each "[unnamed] FILE 0x..."
 * symbol is, D9TaskLabelAddrEvent which poll instance a "0x..." task label
 * is; the names come from the debug file (frames) and from the probe
 * planner run on the executable with that debug file (labels), so they
 * are the names an unstripped build gets. Nothing else in the segment
 * changes: only those pooled strings are replaced. */
#pragma once

#include <stddef.h>
#include <stdint.h>

#include "proto/d9proto.h"

struct resym_stats {
        uint64_t frames, frames_named;          /* unnamed symbol entries; now named */
        uint64_t labels, labels_named;          /* address task labels; now named */
        uint64_t modules, modules_found;        /* build-ids needed; debug file found */
        uint64_t no_mapping;                    /* unnamed entries outside every mapping record */
        uint64_t mappings;                      /* D9MappingEvent records */
        char missing[160];                      /* the first build-id without a debug file */
};

/* Decodes raw (an uncompressed trace), names what it can and writes the
 * result to out (only when something was named: stats->frames_named +
 * labels_named > 0). Returns 0 or a negative errno with *why a one-line
 * reason (static text or res-derived, valid until the next call). */
int resymbolize(const uint8_t *raw, size_t len, d9_enc_flush_fn out, void *octx,
                struct resym_stats *stats, const char **why);
