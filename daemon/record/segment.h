/* segment: one target's sequence of trace files. The drain loop encodes into
 * the open segment (`trace.N.bin.active`); rotation closes it and hands it to
 * the sealer without waiting. */
#pragma once

#include <sys/types.h>

#include <limits.h>
#include <stdint.h>

#include "proto/d9proto.h"

struct segment_writer {
        char dir[PATH_MAX];             /* <traces>/<service>/<pid>-<starttime> */
        unsigned index;                 /* N of the open segment */
        int fd;                         /* -1 when no segment is open */
        char active_path[PATH_MAX];
        uint64_t bytes;                 /* flushed to the file so far */
        uint64_t opened_ms;
        uint64_t first_ts, last_ts;     /* event time range (monotonic ns) */
        struct d9_enc *enc;             /* fresh per segment: atoms are per file */
        uint8_t *buf;
        int error;                      /* first write error, sticky per segment */
        uint64_t start_at;              /* the next segment's start (segment_start_at) */
};

/* Prepare the target folder (created if needed; N continues after any
 * segment already there). */
int segment_writer_init(struct segment_writer *sw, const char *dir);
/* Let reader (the recording uid, 0 for none) list the target folder and
 * traverse the service folder above it (d9d_trace_access_grant). */
int segment_writer_grant(const struct segment_writer *sw, uid_t reader);
/* Open trace.N.bin.active and write its first streams: ClockSyncEvent and
 * an empty D9SegmentSpanEvent (the sealer fills it), then
 * SegmentMetadataEvent + ClockSyncEvent, so every file stands alone. */
int segment_open(struct segment_writer *sw, const struct d9_kv *meta, uint32_t n_meta);
/* The next segment opened starts at ts (monotonic ns, not after the open),
 * not at its open: its first ClockSyncEvent, and so its span, is stamped
 * then (with the realtime of that instant). A recording's first segment
 * starts when the ring began to record: its records are that old. */
void segment_start_at(struct segment_writer *sw, uint64_t ts);
/* Bytes in the file plus what is still buffered in the encoder. */
uint64_t segment_size(const struct segment_writer *sw);
/* Flush and close the open segment. Copies its .active path to path_out
 * (for the sealer). Returns 0, -ENOENT if none was open, or a write error. */
int segment_close(struct segment_writer *sw, char *path_out, size_t len);
void segment_writer_destroy(struct segment_writer *sw);

/* Write a ClockSyncEvent (monotonic now + realtime now) into enc. */
int segment_clock_sync(struct d9_enc *enc);
