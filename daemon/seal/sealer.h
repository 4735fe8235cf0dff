/* sealer: the thread that turns closed `.active` segments into sealed ones
 * (symbols appended, compressed, fsync'ed, renamed) and then enforces the
 * disk budget. The drain loop only ever enqueues. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto/d9proto.h"

struct d9d;
struct sealer;

struct seal_job {
        char active[4096];
        enum d9_compress compression;
        int root_fd;            /* the target's root, for its files (-1: ours; recovery) */
        char *maps;             /* /proc/PID/maps snapshot, owned by the job */
        uint64_t session_id;    /* 0 = nobody waits for this one */
        uid_t reader_uid;       /* may read the sealed file (0: root and d9d only) */
        pid_t target_nspid;     /* the target's own pid, for its JIT map (0: none) */
        uid_t target_uid;       /* who may own that map */
        /* Whose segment this is, for its S3 key: the session that wrote it
         * says so; recovery reads it off the folder the segment was found
         * in (seal_job_identity_from_path). service[0] == 0: not shipped. */
        char service[128];
        pid_t pid;
        uint64_t starttime;     /* with pid, the dial9 boot id */
        unsigned index;         /* N of trace.N.bin */
        /* Filled by the sealer: */
        char sealed[4096];
        uint64_t bytes;         /* size of the sealed file */
        uint64_t symbols;
        uint64_t start_realtime_ns;     /* first ClockSyncEvent, for S3 keys */
        struct d9_segment_span span;    /* written into the file's first stream */
        int error;
        struct seal_job *next;
};

struct shipper;

struct sealer_stats {
        uint64_t sealed, failed, queued;
        uint64_t evicted, evicted_bytes;
};

/* on_done runs on the main loop for every finished job (may be NULL). */
int sealer_start(struct d9d *d, void (*on_done)(struct d9d *d, struct seal_job *job), struct sealer **out);
/* Takes ownership of job. Never blocks on sealing work. */
void sealer_submit(struct sealer *s, struct seal_job *job);
/* Main loop side: call when the sealer's eventfd (registered by
 * sealer_start) fires; finished jobs are passed to fn, then freed. */
void sealer_collect(struct sealer *s, void (*fn)(struct d9d *d, struct seal_job *job));
void sealer_get_stats(struct sealer *s, struct sealer_stats *st);
/* Seal everything still queued, then join the thread. */
void sealer_stop(struct sealer *s);

/* Hand every sealed segment to the S3 shipper (NULL: keep them local). */
void sealer_set_shipper(struct sealer *s, struct shipper *sh);

/* Fill job's service, pid, starttime and index from a segment path laid
 * out as <traces>/<service>/<pid>-<starttime>/trace.N.bin*, for segments
 * nobody is left to describe (recovery). Returns 0 or -EINVAL. */
int seal_job_identity_from_path(struct seal_job *job, const char *path);

/* The work itself (also used by tests): returns 0 or a negative errno. */
int seal_segment(struct seal_job *job);
