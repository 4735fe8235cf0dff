/* client.c: one request, one response over d9d's control socket, with the
 * error reporting every subcommand shares. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"
#include "proto/d9proto.h"

json_t *d9ctl_call(json_t *req)
{
        char *why = NULL;
        json_t *resp = d9ctl_call_quiet(req, &why);

        if (!resp)
                fprintf(stderr, "d9ctl: %s\n", why ? why : "out of memory");
        free(why);
        return resp;
}

json_t *d9ctl_call_quiet(json_t *req, char **why)
{
        const char *path = d9ctl_socket_path();
        json_t *resp;
        int fd = d9c_connect(path), err = 0;

        *why = NULL;
        if (fd < 0) {
                *why = d9_strdupf("cannot reach d9d at %s: %s (is d9d running? see --socket or D9_SOCKET)",
                                  path, strerror(-fd));
                json_decref(req);
                return NULL;
        }
        resp = d9c_call(fd, req, &err);
        close(fd);
        json_decref(req);
        if (!resp) {
                *why = d9_strdupf("no valid answer from d9d at %s: %s", path, strerror(-err));
                return NULL;
        }
        if (!json_is_true(json_object_get(resp, "ok"))) {
                const char *e = json_string_value(json_object_get(resp, "error"));
                *why = strdup(e ? e : "d9d refused the request");
                json_decref(resp);
                return NULL;
        }
        return resp;
}

int64_t d9ctl_parse_offcpu_min(const char *cmd, const char *arg)
{
        uint64_t us;

        if (d9_parse_offcpu_min_us(arg, &us) < 0) {
                fprintf(stderr, "d9ctl %s: bad --offcpu-min '%s' (e.g. 1ms, 500us, 0 = every interval; at most 10s)\n",
                        cmd, arg);
                return -1;
        }
        return (int64_t)us;
}

int d9ctl_set_sample_option(const char *cmd, json_t *req, int opt, const char *arg)
{
        uint64_t ms;

        if (opt == 'A') {
                json_object_set_new(req, "accept_queues", json_true());
                return 0;
        }
        if (opt == 'F') {
                if (d9_parse_duration_ms(arg, &ms) < 0 || ms > 10000) {
                        fprintf(stderr, "d9ctl %s: bad --full-on-stall '%s' (a poll length up to 10s, e.g. 20ms; "
                                "0 = off)\n", cmd, arg);
                        return -1;
                }
                json_object_set_new(req, "full_on_stall_ms", json_integer((json_int_t)ms));
                return 0;
        }
        if (d9_parse_duration_ms(arg, &ms) < 0 || ms > 60000 || (ms && ms < 10)) {
                fprintf(stderr, "d9ctl %s: bad --resources-interval '%s' (10ms to 60s, e.g. 100ms; 0 = off)\n",
                        cmd, arg);
                return -1;
        }
        json_object_set_new(req, "resources_interval_ms", json_integer((json_int_t)ms));
        return 0;
}

int d9ctl_parse_pid(const char *cmd, const char *arg)
{
        char *end;
        long v = strtol(arg, &end, 10);

        if (*end || end == arg || v <= 0 || v > 0x3fffffff) {
                fprintf(stderr, "d9ctl %s: --pid expects a process id, got '%s'\n", cmd, arg);
                return -1;
        }
        return (int)v;
}

void d9ctl_print_plan(FILE *out, const json_t *plan)
{
        const char *key;
        json_t *v, *item;
        size_t i;

        if (!json_is_object(plan))
                return;
        fprintf(out, "probes: %s\n", json_string_value(json_object_get(plan, "probes")));
        if ((v = json_object_get(plan, "exe")))
                fprintf(out, "exe: %s\n", json_string_value(v));
        if ((v = json_object_get(plan, "tokio_version")))
                fprintf(out, "tokio: %s\n", json_string_value(v));
        if ((v = json_object_get(plan, "shape")))
                fprintf(out, "shape: %s\n", json_string_value(v));
        fprintf(out, "attached:\n");
        json_object_foreach((json_t *)json_object_get(plan, "attached"), key, v)
                fprintf(out, "  %-16s %lld\n", key, (long long)json_integer_value(v));
        json_object_foreach((json_t *)json_object_get(plan, "routes"), key, v)
                fprintf(out, "route: %-14s %s\n", key, json_string_value(v));
        if ((v = json_object_get(plan, "not_recorded")))
                fprintf(out, "not recorded: %s\n", json_string_value(v));
        if ((v = json_object_get(plan, "pending")))
                fprintf(out, "pending: %s\n", json_string_value(v));
        if ((v = json_object_get(plan, "full_on_stall")))
                fprintf(out, "full on stall: %s\n", json_string_value(v));
        if ((v = json_object_get(plan, "plan_error")))
                fprintf(out, "plan: %s\n", json_string_value(v));
        json_array_foreach(json_object_get(plan, "missing"), i, item)
                fprintf(out, "missing: %s: %s\n", json_string_value(json_object_get(item, "kind")),
                        json_string_value(json_object_get(item, "reason")));
        size_t optional = 0;
        json_array_foreach(json_object_get(plan, "skipped"), i, item) {
                const char *why = json_string_value(json_object_get(item, "reason"));
                /* Alternative poll-end points are listed only in --json. */
                if (why && strstr(why, "optional poll-end mode")) {
                        optional++;
                        continue;
                }
                fprintf(out, "skipped: %s %s: %s\n", json_string_value(json_object_get(item, "kind")),
                        json_string_value(json_object_get(item, "label")), why);
        }
        if (optional)
                fprintf(out, "not used: %zu poll return sites (poll end comes from the next poll or park)\n", optional);
}

const char *d9ctl_format_duration(uint64_t ms, char *buf, size_t n)
{
        uint64_t s = ms / 1000;

        if (s < 60)
                snprintf(buf, n, "%.1fs", (double)ms / 1000.0);
        else if (s < 3600)
                snprintf(buf, n, "%llum%02llus", (unsigned long long)(s / 60), (unsigned long long)(s % 60));
        else
                snprintf(buf, n, "%lluh%02llum", (unsigned long long)(s / 3600), (unsigned long long)(s / 60 % 60));
        return buf;
}

const char *d9ctl_format_wall(int64_t unix_ms, char *buf, size_t n)
{
        time_t t = (time_t)(unix_ms / 1000);
        struct tm tm;

        if (!unix_ms || !localtime_r(&t, &tm) || !strftime(buf, n, "%Y-%m-%d %H:%M:%S", &tm))
                snprintf(buf, n, "-");
        return buf;
}

bool d9ctl_target_live(const json_t *t)
{
        const char *st = json_string_value(json_object_get(t, "state"));

        return st && strcmp(st, "done") != 0;
}

void d9ctl_print_json(const json_t *j)
{
        json_dumpf(j, stdout, JSON_INDENT(2));
        putchar('\n');
}
