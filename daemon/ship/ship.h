/* The shipper: uploads sealed segments to S3 on its own thread, so sealing
 * and the drain loop never wait on the network.
 *
 * A segment is "pending" from shipper_enqueue() until its upload is confirmed:
 * the job is first written durably to <state_dir>/<hash>.job, and that file
 * is removed only after S3 answered 200 (and, with delete_after_upload, after
 * the local segment is deleted). A restarted shipper picks every .job file
 * up again, so a sealed, enqueued segment is never lost to a crash or an
 * outage; re-uploading after a crash overwrites the same key (no duplicates).
 * Failures are retried with exponential backoff and jitter; after
 * breaker_threshold consecutive failures the circuit opens and no request is
 * made for breaker_cooldown_ms. A segment that disappears before upload
 * (evicted by the disk budget) is dropped, logged and counted. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "daemon/core/config.h"
#include "daemon/ship/s3/s3.h"

/* What the sealing path knows about a segment. */
struct segment_meta {
        const char *service;
        const char *boot_id;            /* dial9 style "abcd-1234"; see s3_dial9_boot_id() */
        int pid;
        uint64_t index;                 /* segment number N of trace.N.bin.* */
        int64_t start_realtime_ns;      /* first ClockSyncEvent's realtime_ns; 0 = file mtime */
};

struct ship_stats {
        uint64_t queue_len;             /* segments waiting for upload */
        uint64_t uploads_ok, uploads_failed; /* failed = failed attempts */
        uint64_t bytes_shipped;
        uint64_t segments_lost;         /* vanished before upload (budget eviction) */
        bool breaker_open;
        char last_error[256];           /* "" when the last attempt succeeded */
        char last_key[512];             /* key of the last confirmed upload */
};

struct shipper;

/* Starts the thread and re-queues every pending job found in state_dir.
 * cfg is copied. */
int shipper_start(const struct ship_config *cfg, struct shipper **out);
/* Durably records the job, then queues it. Never blocks on the network.
 * sealed_path must stay where it is until uploaded (or evicted). */
int shipper_enqueue(struct shipper *s, const char *sealed_path, const struct segment_meta *m);
void shipper_stats(struct shipper *s, struct ship_stats *out);
/* Blocks until every queued job was tried once and the queue is empty, or
 * timeout_ms passed; returns 0 when empty, -ETIMEDOUT otherwise. For tests
 * and orderly shutdown. */
int shipper_flush(struct shipper *s, unsigned timeout_ms);
/* Cancels an in-flight request, joins the thread, frees s. Pending jobs stay
 * on disk for the next start. NULL is fine. */
void shipper_stop(struct shipper *s);
