/* d9ctl status: d9d's counters and, per target, state, events/s while
 * recording, drops, bytes and segments; --verbose adds what became of
 * the stacks and the probe plans;
 * --json prints d9d's answer as is (same data, same code path). */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

/* Missing probe kinds on one line, so the short form still says what is
 * not recorded. */
static void print_missing(const json_t *plan)
{
        const json_t *item;
        size_t i;

        json_array_foreach(json_object_get(plan, "missing"), i, item) {
                const char *kind = json_string_value(json_object_get(item, "kind"));

                printf("%s%s%s", i ? ", " : "  missing probes: ", kind,
                       kind && json_object_get(json_object_get(plan, "attached"), kind) ? " (some)" : "");
        }
        if (json_array_size(json_object_get(plan, "missing")))
                printf(" (reasons: d9ctl status --verbose)\n");
}

/* The default set's search for where worker loops keep their Worker:
 * until it is found, no stack names its worker. */
static void print_worker_search(const json_t *ws)
{
        if (!ws)
                return;
        const char *below = json_string_value(json_object_get(ws, "below"));

        if (json_integer_value(json_object_get(ws, "depth_bytes")))
                printf("  worker search: found, %lld bytes below the %s, after %lld ms\n",
                       (long long)json_integer_value(json_object_get(ws, "depth_bytes")),
                       below && !strcmp(below, "thread_pointer") ? "thread pointer (no plan yet)" : "TLS",
                       (long long)json_integer_value(json_object_get(ws, "found_after_ms")));
        else
                printf("  worker search: not found yet (%lld candidate depths, %lld ruled out); "
                       "until then no stack names its worker\n",
                       (long long)json_integer_value(json_object_get(ws, "candidate_depths")),
                       (long long)json_integer_value(json_object_get(ws, "ruled_out")));
}

static long long stack_count(const json_t *st, const char *key)
{
        return (long long)json_integer_value(json_object_get(st, key));
}

/* What became of the target's stacks: how many were unwound, and of
 * those how many end before the thread's start and why (docs/stacks.md). */
static void print_stacks(const json_t *st)
{
        if (!st || !stack_count(st, "unwound"))
                return;
        printf("  stacks: %lld unwound, %lld failed; cut: %lld at the copy's end (%lld of them by the deep "
               "copies' byte rate), %lld at the frame limit; %lld deep copies (%.1f MiB)\n",
               stack_count(st, "unwound"), stack_count(st, "failed"), stack_count(st, "cut_at_copy_end"),
               stack_count(st, "cut_by_byte_cap"), stack_count(st, "cut_at_frame_limit"),
               stack_count(st, "deep_copies"), (double)stack_count(st, "deep_bytes") / (1 << 20));
}

static void print_target(const json_t *t, bool verbose)
{
        const char *reason = json_string_value(json_object_get(t, "end_reason"));
        char dur[32];

        printf("pid %lld (%s): %s%s%s, %s\n", (long long)json_integer_value(json_object_get(t, "pid")),
               json_string_value(json_object_get(t, "service")), json_string_value(json_object_get(t, "state")),
               reason && *reason ? ", " : "", reason ? reason : "",
               d9ctl_format_duration((uint64_t)json_integer_value(json_object_get(t, "duration_ms")), dur, sizeof(dur)));
        printf("  ");
        if (d9ctl_target_live(t) && json_object_get(t, "events_per_s"))
                printf("events/s %.0f  ", json_real_value(json_object_get(t, "events_per_s")));
        printf("events %lld  drops %lld  bytes %lld  segments %lld sealed, %lld pending\n",
               (long long)json_integer_value(json_object_get(t, "events")),
               (long long)json_integer_value(json_object_get(t, "drops")),
               (long long)json_integer_value(json_object_get(t, "bytes")),
               (long long)json_integer_value(json_object_get(t, "segments")),
               (long long)json_integer_value(json_object_get(t, "segments_pending")));
        const json_t *sh = json_object_get(t, "offcpu_short");
        if (sh && json_integer_value(json_object_get(sh, "intervals")))
                printf("  off-CPU intervals under %lld us: %lld (%.1f ms in all), counted not recorded\n",
                       (long long)json_integer_value(json_object_get(sh, "min_us")),
                       (long long)json_integer_value(json_object_get(sh, "intervals")),
                       (double)json_integer_value(json_object_get(sh, "total_ns")) / 1e6);
        print_worker_search(json_object_get(json_object_get(t, "workers"), "search"));
        printf("  dir %s\n", json_string_value(json_object_get(t, "dir")));
        if (verbose) {
                print_stacks(json_object_get(t, "stacks"));
                d9ctl_print_plan(stdout, json_object_get(t, "probe_plan"));
        } else {
                print_missing(json_object_get(t, "probe_plan"));
        }
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

int d9ctl_cmd_status(int argc, char **argv)
{
        static const struct option opts[] = {
                { "json", no_argument, NULL, 'j' },
                { "pid", required_argument, NULL, 'p' },
                { "verbose", no_argument, NULL, 'v' },
                { "all", no_argument, NULL, 'a' },
                {},
        };
        json_t *req = d9c_request("status"), *resp, *t;
        bool as_json = false, verbose = false, all = false;
        int opt, pid = 0;
        size_t i, finished = 0;

        while ((opt = getopt_long(argc, argv, "jp:va", opts, NULL)) != -1) {
                if (opt == 'j') {
                        as_json = true;
                } else if (opt == 'v') {
                        verbose = true;
                } else if (opt == 'a') {
                        all = true;
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
                d9ctl_print_json(resp);
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
                /* Finished sessions only when asked for (--all, --pid). */
                json_array_foreach(json_object_get(resp, "targets"), i, t) {
                        if (all || pid || d9ctl_target_live(t))
                                print_target(t, verbose);
                        else
                                finished++;
                }
                if (finished)
                        printf("(%zu finished session%s: d9ctl status --all)\n", finished, finished == 1 ? "" : "s");
        }
        json_decref(resp);
        return 0;
}
