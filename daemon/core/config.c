/* config.c: d9d's settings. The file is key = value with '#' comments; every
 * key is documented in systemd/d9d.conf. Flags given on the command line are
 * applied after the file, so they win. */
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/cleanup.h"
#include "daemon/core/config.h"
#include "daemon/core/log.h"
#include "proto/d9control.h"

void d9d_config_defaults(struct d9d_config *cfg)
{
        memset(cfg, 0, sizeof(*cfg));
        snprintf(cfg->state_dir, sizeof(cfg->state_dir), "/var/lib/d9d");
        snprintf(cfg->socket_path, sizeof(cfg->socket_path), "/run/d9d/control.sock");
        /* Who may connect is decided by the file mode; what they may do is
         * decided per request from SO_PEERCRED. */
        cfg->socket_mode = 0660;
        /* d9ctl sends its request at once and reads the answer: only a
         * client holding a connection open for nothing waits this long. */
        cfg->control_idle_ms = 30 * 1000;
        /* Used only if it exists (systemd/sysusers.d creates it). */
        snprintf(cfg->trace_group, sizeof(cfg->trace_group), "d9d-traces");
        cfg->rotate_period_ms = 60 * 1000;
        cfg->finished_keep_ms = 60 * 60 * 1000;
        cfg->max_segment_bytes = 64ull << 20;
        cfg->max_segment_events = D9D_DEFAULT_SEGMENT_EVENTS;
        cfg->disk_budget_bytes = 1ull << 30;
        cfg->compression = D9_COMPRESS_ZSTD;
        cfg->sample_hz = 99;
        /* The kernel maps a ring's data twice (for wrap-around), so each
         * target costs d9d twice this in RSS: 2 MiB keeps 8 targets under
         * 64 MiB and still holds ~35 ms of a 1 M records/s target. */
        cfg->ring_bytes = 2ull << 20;
        /* A busy server blocks for microseconds thousands of times a
         * second; recording each costs it more than the 2 % we allow. */
        cfg->offcpu_min_us = 1000;
        /* Deep stacks copied whole (docs/stacks.md, "Deep stacks"): at most
         * this many bytes/s per target beyond each stack's 8 KiB. */
        cfg->stack_deep_rate = 16ull << 20;
        /* dial9's own periods: getrusage every 100 ms, sock_diag every 400 ms. */
        cfg->resources_every_ms = 100;
        cfg->accept_queues_every_ms = 400;
        /* Sealing waits for it: a segment is sealed late, never lost. */
        cfg->debuginfod_timeout_ms = 10 * 1000;
        cfg->plan_timeout_ms = 30 * 1000;
        cfg->full_window_ms = 2000;
        cfg->full_window_gap_ms = 8000;
        d9d_ship_config_init(&cfg->ship);
        /* Each target costs twice ring_size in RSS and a planner turn. */
        cfg->attach.max_targets = ATTACH_DEFAULT_MAX_TARGETS;
}

void d9d_config_free(struct d9d_config *cfg)
{
        d9d_ship_config_free(&cfg->ship);
        d9d_attach_rules_free(&cfg->attach);
        json_decref(cfg->settings);
        cfg->settings = NULL;
}

const char *d9d_compression_suffix(enum d9_compress c)
{
        switch (c) {
        case D9_COMPRESS_ZSTD: return ".zst";
        case D9_COMPRESS_GZIP: return ".gz";
        default: return "";
        }
}

static int set_path(char *dst, size_t n, const char *value)
{
        if (!*value || strlen(value) >= n)
                return -EINVAL;
        snprintf(dst, n, "%s", value);
        return 0;
}

static int config_apply(struct d9d_config *cfg, const char *key, const char *value, const char **why)
{
        uint64_t v;

        *why = "bad value";
        if (!strcmp(key, "state_dir"))
                return set_path(cfg->state_dir, sizeof(cfg->state_dir), value);
        if (!strcmp(key, "socket"))
                return set_path(cfg->socket_path, sizeof(cfg->socket_path), value);
        if (!strcmp(key, "socket_mode")) {
                char *end;
                unsigned long m = strtoul(value, &end, 8);

                *why = "expected octal permission bits such as 0660";
                if (*end || !*value || m > 0777)
                        return -EINVAL;
                cfg->socket_mode = (unsigned)m;
                return 0;
        }
        if (!strcmp(key, "control_idle_timeout")) {
                *why = "expected a duration between 100ms and 1h such as 30s";
                if (d9_parse_duration_ms(value, &v) < 0 || v < 100 || v > 3600 * 1000)
                        return -EINVAL;
                cfg->control_idle_ms = v;
                return 0;
        }
        if (!strcmp(key, "trace_group")) {
                *why = "expected a group name";
                if (strlen(value) >= sizeof(cfg->trace_group) || strchr(value, ':'))
                        return -EINVAL;
                snprintf(cfg->trace_group, sizeof(cfg->trace_group), "%s", value);
                cfg->trace_group_set = true;
                return 0;
        }
        if (!strcmp(key, "service"))
                return strlen(value) < sizeof(cfg->service) && !strchr(value, '/') ?
                        (snprintf(cfg->service, sizeof(cfg->service), "%s", value), 0) : -EINVAL;
        if (!strcmp(key, "rotate_period")) {
                *why = "expected a duration such as 60s or 5m";
                if (d9_parse_duration_ms(value, &v) < 0 || v < 100)
                        return -EINVAL;
                cfg->rotate_period_ms = v;
                return 0;
        }
        if (!strcmp(key, "max_segment_events")) {
                char *end;
                errno = 0;
                unsigned long long n = strtoull(value, &end, 10);

                *why = "expected a count of events such as 500000 (0 = no limit)";
                if (errno || end == value || *end || value[0] == '-')
                        return -EINVAL;
                cfg->max_segment_events = n;
                return 0;
        }
        if (!strcmp(key, "finished_keep")) {
                *why = "expected a duration such as 1h or 10m";
                return d9_parse_duration_ms(value, &cfg->finished_keep_ms) < 0 ? -EINVAL : 0;
        }
        if (!strcmp(key, "max_segment_size") || !strcmp(key, "disk_budget")) {
                *why = "expected a size such as 64M or 1G";
                if (d9_parse_size(value, &v) < 0)
                        return -EINVAL;
                if (key[0] == 'm') {
                        if (v < 4096)
                                return -EINVAL;
                        cfg->max_segment_bytes = v;
                } else {
                        cfg->disk_budget_bytes = v;
                }
                return 0;
        }
        if (!strcmp(key, "ring_size")) {
                *why = "expected a power of two between 64K and 1G, such as 2M";
                if (d9_parse_size(value, &v) < 0 || v < (64 << 10) || v > (1ull << 30) || (v & (v - 1)))
                        return -EINVAL;
                cfg->ring_bytes = v;
                return 0;
        }
        if (!strcmp(key, "stack_deep_rate")) {
                *why = "expected bytes per second up to 1G, such as 16M (0: no deep copies)";
                if (d9_parse_size(value, &v) < 0 || v > (1ull << 30))
                        return -EINVAL;
                cfg->stack_deep_rate = v;
                return 0;
        }
        if (!strcmp(key, "compression")) {
                *why = "expected zstd, gzip or none";
                if (!strcmp(value, "zstd"))
                        cfg->compression = D9_COMPRESS_ZSTD;
                else if (!strcmp(value, "gzip"))
                        cfg->compression = D9_COMPRESS_GZIP;
                else if (!strcmp(value, "none"))
                        cfg->compression = D9_COMPRESS_NONE;
                else
                        return -EINVAL;
                return 0;
        }
        if (!strcmp(key, "offcpu_min")) {
                *why = "expected a duration up to 10s such as 1ms or 500us (0: record every off-CPU interval)";
                return d9_parse_offcpu_min_us(value, &cfg->offcpu_min_us) < 0 ? -EINVAL : 0;
        }
        if (!strcmp(key, "resources_interval") || !strcmp(key, "accept_queues_interval")) {
                *why = "expected a duration between 10ms and 60s such as 100ms (resources_interval: 0 = off)";
                if (d9_parse_duration_ms(value, &v) < 0 || v > 60000 || (v < 10 && (v || key[0] == 'a')))
                        return -EINVAL;
                *(key[0] == 'r' ? &cfg->resources_every_ms : &cfg->accept_queues_every_ms) = v;
                return 0;
        }
        if (!strcmp(key, "debug_dirs")) {
                *why = "expected absolute folders separated by ':'";
                if (strlen(value) >= sizeof(cfg->debug_dirs) || (*value && *value != '/') || strstr(value, "::"))
                        return -EINVAL;
                snprintf(cfg->debug_dirs, sizeof(cfg->debug_dirs), "%s", value);
                return 0;
        }
        if (!strcmp(key, "debuginfod_urls")) {
                *why = "expected server URLs separated by spaces";
                if (strlen(value) >= sizeof(cfg->debuginfod_urls))
                        return -EINVAL;
                snprintf(cfg->debuginfod_urls, sizeof(cfg->debuginfod_urls), "%s", value);
                return 0;
        }
        if (!strcmp(key, "debuginfod_timeout")) {
                *why = "expected a duration between 100ms and 5m such as 10s";
                if (d9_parse_duration_ms(value, &v) < 0 || v < 100 || v > 300 * 1000)
                        return -EINVAL;
                cfg->debuginfod_timeout_ms = v;
                return 0;
        }
        if (!strcmp(key, "full_on_stall")) {
                *why = "expected a duration up to 10s such as 20ms (0: off)";
                if (d9_parse_duration_ms(value, &v) < 0 || v > 10000)
                        return -EINVAL;
                cfg->full_on_stall_ms = v;
                return 0;
        }
        if (!strcmp(key, "full_window") || !strcmp(key, "full_window_gap")) {
                *why = "expected a duration between 100ms and 10m such as 2s (full_window_gap: 0 allowed)";
                if (d9_parse_duration_ms(value, &v) < 0 || v > 600 * 1000 || (v < 100 && (v || !key[11])))
                        return -EINVAL;
                *(key[11] ? &cfg->full_window_gap_ms : &cfg->full_window_ms) = v;
                return 0;
        }
        if (!strcmp(key, "plan_timeout")) {
                *why = "expected a duration between 1s and 10m such as 30s";
                if (d9_parse_duration_ms(value, &v) < 0 || v < 1000 || v > 600 * 1000)
                        return -EINVAL;
                cfg->plan_timeout_ms = v;
                return 0;
        }
        if (!strcmp(key, "sample_rate")) {
                char *end;
                unsigned long hz = strtoul(value, &end, 10);

                *why = "expected a rate in Hz between 1 and 10000";
                if (*end || hz < 1 || hz > 10000)
                        return -EINVAL;
                cfg->sample_hz = (unsigned)hz;
                return 0;
        }
        if (!strcmp(key, "attach"))
                return d9d_attach_rules_add(&cfg->attach, value, why);
        if (!strcmp(key, "auto_attach_max")) {
                char *end;
                unsigned long n = strtoul(value, &end, 10);

                *why = "expected a count of targets between 1 and 200";
                if (*end || !*value || n < 1 || n > 200)
                        return -EINVAL;
                cfg->attach.max_targets = (unsigned)n;
                return 0;
        }
        if (!strncmp(key, "s3_", 3)) {
                int r = d9d_ship_config_set(&cfg->ship, key, value, why);
                if (r == 0)
                        cfg->s3_enabled = true;
                if (r != -ENOENT)
                        return r;
        }
        *why = "unknown key";
        return -EINVAL;
}

static bool key_reloadable(const char *key)
{
        return !strcmp(key, "attach") || !strcmp(key, "auto_attach_max");
}

int d9d_config_set(struct d9d_config *cfg, const char *key, const char *value, const char **why)
{
        int r = config_apply(cfg, key, value, why);

        /* The last value of every key a reload cannot apply, to name the
         * ones that changed (d9d_config_restart_keys). */
        if (r == 0 && !key_reloadable(key)) {
                if (!cfg->settings)
                        cfg->settings = json_object();
                json_object_set_new(cfg->settings, key, json_string_nocheck(value));
        }
        return r;
}

size_t d9d_config_restart_keys(const struct d9d_config *running, const struct d9d_config *next, char *out, size_t n)
{
        json_t *a = running->settings, *b = next->settings, *v;
        const char *key;
        size_t changed = 0, len = 0;

        out[0] = 0;
        for (int pass = 0; pass < 2; pass++) {
                json_object_foreach(pass ? b : a, key, v) {
                        json_t *other = json_object_get(pass ? a : b, key);
                        if (pass && other)
                                continue;       /* seen in the first pass */
                        if (other && json_equal(v, other))
                                continue;
                        changed++;
                        if (len < n)
                                len += (size_t)snprintf(out + len, n - len, "%s%s", len ? ", " : "", key);
                }
        }
        return changed;
}

static char *trim(char *s)
{
        while (isspace((unsigned char)*s))
                s++;
        char *e = s + strlen(s);
        while (e > s && isspace((unsigned char)e[-1]))
                *--e = 0;
        return s;
}

int d9d_config_read(struct d9d_config *cfg, const char *path, bool required, char *err, size_t errlen)
{
        _cleanup_fclose_ FILE *f = fopen(path, "re");
        char line[PATH_MAX + 128];
        unsigned lineno = 0;

        if (!f) {
                if (errno == ENOENT && !required)
                        return 0;
                int r = -errno;
                snprintf(err, errlen, "cannot read config %s: %s", path, strerror(errno));
                return r;
        }
        while (fgets(line, sizeof(line), f)) {
                char *s = trim(line), *eq;
                const char *why;

                lineno++;
                if (!*s || *s == '#')
                        continue;
                eq = strchr(s, '=');
                if (!eq) {
                        snprintf(err, errlen, "%s:%u: expected key = value", path, lineno);
                        return -EINVAL;
                }
                *eq = 0;
                if (d9d_config_set(cfg, trim(s), trim(eq + 1), &why) < 0) {
                        snprintf(err, errlen, "%s:%u: %s: %s", path, lineno, trim(s), why);
                        return -EINVAL;
                }
        }
        if (ferror(f)) {
                snprintf(err, errlen, "cannot read config %s: %s", path, strerror(EIO));
                return -EIO;
        }
        return 0;
}

int d9d_config_load(struct d9d_config *cfg, const char *path, bool required)
{
        char err[PATH_MAX + 256];
        int r = d9d_config_read(cfg, path, required, err, sizeof(err));

        if (r < 0)
                log_error("%s", err);
        return r;
}

void d9d_ship_config_init(struct ship_config *cfg)
{
        *cfg = (struct ship_config){
                .queue_max = 4096, .retry_base_ms = 500, .retry_max_ms = 60000,
                .breaker_threshold = 5, .breaker_cooldown_ms = 30000,
        };
        s3_config_init(&cfg->s3);
}

void d9d_ship_config_free(struct ship_config *cfg)
{
        s3_config_free(&cfg->s3);
        free(cfg->state_dir);
        cfg->state_dir = NULL;
}

int d9d_ship_config_set(struct ship_config *cfg, const char *key, const char *value, const char **why)
{
        static const struct {
                const char *key;
                size_t offset;
        } numbers[] = {
                { "s3_queue_max", offsetof(struct ship_config, queue_max) },
                { "s3_retry_base_ms", offsetof(struct ship_config, retry_base_ms) },
                { "s3_retry_max_ms", offsetof(struct ship_config, retry_max_ms) },
                { "s3_breaker_threshold", offsetof(struct ship_config, breaker_threshold) },
                { "s3_breaker_cooldown_ms", offsetof(struct ship_config, breaker_cooldown_ms) },
        };
        int err = s3_config_set(&cfg->s3, key, value, why);
        if (err != -ENOENT)
                return err;
        if (!strcmp(key, "s3_state_dir")) {
                free(cfg->state_dir);
                return (cfg->state_dir = strdup(value)) ? 0 : -ENOMEM;
        }
        if (!strcmp(key, "s3_delete_after_upload")) {
                bool yes = !strcmp(value, "yes") || !strcmp(value, "true") || !strcmp(value, "1");
                bool no = !strcmp(value, "no") || !strcmp(value, "false") || !strcmp(value, "0");
                if (!yes && !no)
                        return *why = "expected yes or no", -EINVAL;
                cfg->delete_after_upload = yes;
                return 0;
        }
        for (size_t i = 0; i < sizeof numbers / sizeof numbers[0]; i++) {
                if (strcmp(key, numbers[i].key))
                        continue;
                char *end;
                unsigned long n = strtoul(value, &end, 10);
                if (end == value || *end || n == 0 || n > UINT_MAX)
                        return *why = "expected a positive integer", -EINVAL;
                *(unsigned *)((char *)cfg + numbers[i].offset) = (unsigned)n;
                return 0;
        }
        return -ENOENT;
}
