/* d9d configuration: /etc/d9d/d9d.conf (key = value), then command-line flags. */
#pragma once

#include <jansson.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/core/attach_rules.h"
#include "daemon/ship/s3/s3.h"
#include "proto/d9proto.h"

/* The s3_* keys: where and how sealed segments are shipped
 * (daemon/ship/ship.h). Parsed here with every other key. */
struct ship_config {
        struct s3_config s3;            /* resolved (s3_config_resolve) */
        char *state_dir;                /* where .job files live, e.g. /var/lib/d9d/ship */
        bool delete_after_upload;
        unsigned queue_max;             /* jobs held in memory; more wait on disk */
        unsigned retry_base_ms, retry_max_ms;
        unsigned breaker_threshold, breaker_cooldown_ms;
};

void d9d_ship_config_init(struct ship_config *cfg);
void d9d_ship_config_free(struct ship_config *cfg);
/* d9d.conf keys: every s3_* key of s3_config_set(), plus s3_state_dir,
 * s3_delete_after_upload (yes/no), s3_queue_max, s3_retry_base_ms,
 * s3_retry_max_ms, s3_breaker_threshold, s3_breaker_cooldown_ms.
 * Returns 0, -ENOENT for a key that is not ours, -EINVAL with *why. */
int d9d_ship_config_set(struct ship_config *cfg, const char *key, const char *value, const char **why);

struct d9d_config {
        char state_dir[PATH_MAX];       /* segments go to <state_dir>/traces */
        char socket_path[PATH_MAX];
        unsigned socket_mode;           /* permission bits of the socket we bind */
        uint64_t control_idle_ms;       /* close control connections idle this long */
        uint64_t rotate_period_ms;
        uint64_t finished_keep_ms;      /* finished sessions stay in list/status this long */
        uint64_t max_segment_bytes;
        uint64_t max_segment_events;    /* rotate at this many events (0 = no limit) */
        uint64_t disk_budget_bytes;     /* 0 = unlimited */
        enum d9_compress compression;
        unsigned sample_hz;             /* on-CPU stack sampling rate */
        uint64_t ring_bytes;            /* per-target BPF ring buffer (power of 2) */
        uint64_t stack_deep_rate;       /* bytes/s of deep stack copies per target (0: none) */
        uint64_t offcpu_min_us;         /* shorter off-CPU intervals: counted, not recorded */
        uint64_t resources_every_ms;    /* process resource samples (0 = none) */
        uint64_t accept_queues_every_ms; /* accept-queue samples, for attaches that ask */
        char service[128];              /* "" = derive from the executable name */
        char debug_dirs[4096];          /* ':'-separated extra debug file folders */
        char debuginfod_urls[4096];     /* "" = ask no debuginfod server */
        uint64_t debuginfod_timeout_ms; /* longest wait for one download */
        uint64_t plan_timeout_ms;       /* a plan child still working this long is killed */
        /* Full detail when it matters (session_window.c): a poll this long
         * (0 = off) opens a window of the full set's uprobes for
         * full_window_ms, and the next opens full_window_gap_ms after it closed. */
        uint64_t full_on_stall_ms, full_window_ms, full_window_gap_ms;
        char trace_group[64];           /* may read every trace ("" = none) */
        bool trace_group_set;           /* named in the config (warned about if missing) */
        bool foreground;
        bool s3_enabled;                /* some s3_* key was set: ship sealed segments */
        struct ship_config ship;        /* s3_* keys, see daemon/ship/ship.h */
        struct attach_rules attach;     /* attach = ... lines and auto_attach_max */
        json_t *settings;               /* every other key set: its last value (d9d_config_restart_keys) */
};

#define D9D_DEFAULT_CONFIG "/etc/d9d/d9d.conf"
/* Events per segment before rotating: what dial9's viewer opens in under
 * 10 s here (bench/dial9-viewer, docs/performance.md "Segments dial9's
 * viewer opens"). */
#define D9D_DEFAULT_SEGMENT_EVENTS 100000ull

void d9d_config_defaults(struct d9d_config *cfg);
void d9d_config_free(struct d9d_config *cfg);
/* Apply one key = value setting. Returns 0, or -EINVAL with *why set. */
int d9d_config_set(struct d9d_config *cfg, const char *key, const char *value, const char **why);
/* Read a config file. A missing file is fine only when !required.
 * Returns 0 or a negative errno; logs the offending line. */
int d9d_config_load(struct d9d_config *cfg, const char *path, bool required);
/* The same, without logging: on failure err holds one line saying what
 * is wrong and where (for a reload, which keeps the running settings). */
int d9d_config_read(struct d9d_config *cfg, const char *path, bool required, char *err, size_t errlen);
/* A reload (SIGHUP) applies attach and auto_attach_max only. How many other
 * keys next sets differently from running (or sets where running does not,
 * or the reverse); their names, ", "-separated, in out. */
size_t d9d_config_restart_keys(const struct d9d_config *running, const struct d9d_config *next, char *out, size_t n);
const char *d9d_compression_suffix(enum d9_compress c);
