/* d9ctl status: per target events/s, drops, bytes, segments and probe
 * plan; --json prints d9d's answer as is (same data, same code path). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

static void print_target(const json_t *t)
{
        printf("pid %lld (%s): %s%s%s\n", (long long)json_integer_value(json_object_get(t, "pid")),
               json_string_value(json_object_get(t, "service")), json_string_value(json_object_get(t, "state")),
               *json_string_value(json_object_get(t, "end_reason")) ? ", " : "",
               json_string_value(json_object_get(t, "end_reason")));
        printf("  events/s %.0f  events %lld  drops %lld  bytes %lld  segments %lld sealed, %lld pending\n",
               json_real_value(json_object_get(t, "events_per_s")),
               (long long)json_integer_value(json_object_get(t, "events")),
               (long long)json_integer_value(json_object_get(t, "drops")),
               (long long)json_integer_value(json_object_get(t, "bytes")),
               (long long)json_integer_value(json_object_get(t, "segments")),
               (long long)json_integer_value(json_object_get(t, "segments_pending")));
        const json_t *sh = json_object_get(t, "offcpu_short");
        if (sh)
                printf("  off-CPU intervals under %lld us: %lld (%.1f ms in all), counted not recorded\n",
                       (long long)json_integer_value(json_object_get(sh, "min_us")),
                       (long long)json_integer_value(json_object_get(sh, "intervals")),
                       (double)json_integer_value(json_object_get(sh, "total_ns")) / 1e6);
        printf("  dir %s\n", json_string_value(json_object_get(t, "dir")));
        d9ctl_print_plan(stdout, json_object_get(t, "probe_plan"));
}

/* The S3 shipper's counters; absent when no bucket is configured. */
static void print_shipper(json_t *s3)
{
        const char *err;

        if (!s3)
                return;
        printf("s3: %lld queued, %lld uploaded (%lld bytes), %lld failed attempts, %lld lost%s\n",
               (long long)json_integer_value(json_object_get(s3, "queue")),
               (long long)json_integer_value(json_object_get(s3, "uploads_ok")),
               (long long)json_integer_value(json_object_get(s3, "bytes")),
               (long long)json_integer_value(json_object_get(s3, "uploads_failed")),
               (long long)json_integer_value(json_object_get(s3, "lost")),
               json_is_true(json_object_get(s3, "breaker_open")) ? ", circuit open" : "");
        err = json_string_value(json_object_get(s3, "last_error"));
        if (err && *err)
                printf("  last error: %s\n", err);
}

int cmd_status(int argc, char **argv)
{
        static const struct option opts[] = {
                { "json", no_argument, NULL, 'j' },
                { "pid", required_argument, NULL, 'p' },
                {},
        };
        json_t *req = d9c_request("status"), *resp, *t;
        bool as_json = false;
        int opt, pid;
        size_t i;

        while ((opt = getopt_long(argc, argv, "jp:", opts, NULL)) != -1) {
                if (opt == 'j') {
                        as_json = true;
                } else if (opt == 'p' && (pid = d9ctl_parse_pid("status", optarg)) > 0) {
                        json_object_set_new(req, "pid", json_integer(pid));
                } else {
                        json_decref(req);
                        return 2;
                }
        }
        resp = d9ctl_call(req);
        if (!resp)
                return 1;
        if (as_json) {
                json_dumpf(resp, stdout, JSON_INDENT(2));
                putchar('\n');
        } else {
                json_t *dm = json_object_get(resp, "daemon");
                printf("d9d %s: traces in %s; %lld sealed, %lld queued, %lld evicted by the disk budget\n",
                       json_string_value(json_object_get(dm, "version")),
                       json_string_value(json_object_get(dm, "traces_dir")),
                       (long long)json_integer_value(json_object_get(dm, "sealed")),
                       (long long)json_integer_value(json_object_get(dm, "seal_queue")),
                       (long long)json_integer_value(json_object_get(dm, "evicted")));
                if (json_integer_value(json_object_get(dm, "bpf_teardowns_pending")))
                        printf("  %lld detached target(s) still removing their uprobes\n",
                               (long long)json_integer_value(json_object_get(dm, "bpf_teardowns_pending")));
                print_shipper(json_object_get(resp, "s3"));
                json_array_foreach(json_object_get(resp, "targets"), i, t)
                        print_target(t);
        }
        json_decref(resp);
        return 0;
}
