/* d9ctl list: the targets d9d traces; --all adds the finished sessions d9d
 * still remembers (it forgets them after finished_keep). Targets that an
 * auto-attach rule of d9d.conf attached name it in the RULE column. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

/* One line per rule: what it matched and attached, and what it could not. */
static void print_auto_attach(json_t *aa)
{
        json_t *r;
        size_t i;

        if (!aa)
                return;
        printf("auto-attach: %lld of at most %lld targets, %lld refused at the cap, %lld exec notices lost%s\n",
               (long long)json_integer_value(json_object_get(aa, "targets")),
               (long long)json_integer_value(json_object_get(aa, "max_targets")),
               (long long)json_integer_value(json_object_get(aa, "cap_refused")),
               (long long)json_integer_value(json_object_get(aa, "execs_lost")),
               json_is_true(json_object_get(aa, "watching_execs")) ? "" : " (NOT watching execs)");
        json_array_foreach(json_object_get(aa, "rules"), i, r)
                printf("  %s: %lld matched, %lld attached, %lld exited first, %lld failed, %lld capped\n",
                       json_string_value(json_object_get(r, "rule")),
                       (long long)json_integer_value(json_object_get(r, "matched")),
                       (long long)json_integer_value(json_object_get(r, "attached")),
                       (long long)json_integer_value(json_object_get(r, "exited_first")),
                       (long long)json_integer_value(json_object_get(r, "failed")),
                       (long long)json_integer_value(json_object_get(r, "capped")));
}

int d9ctl_cmd_list(int argc, char **argv)
{
        static const struct option opts[] = {
                { "all", no_argument, NULL, 'a' },
                { "json", no_argument, NULL, 'j' },
                {},
        };
        bool all = false, as_json = false;
        json_t *resp, *t;
        size_t i, shown = 0, hidden = 0;
        int opt;

        while ((opt = getopt_long(argc, argv, "aj", opts, NULL)) != -1) {
                if (opt == 'a')
                        all = true;
                else if (opt == 'j')
                        as_json = true;
                else
                        return 2; /* getopt said which */
        }
        if (optind < argc)
                return d9ctl_usage_error("list", "unexpected argument '%s'", argv[optind]);
        resp = d9ctl_call(d9c_request("list"));
        if (!resp)
                return 1;
        json_t *targets = json_object_get(resp, "targets");
        if (!all) /* one filter for both outputs */
                for (i = json_array_size(targets); i-- > 0;)
                        if (!d9ctl_target_live(json_array_get(targets, i))) {
                                json_array_remove(targets, i);
                                hidden++;
                        }
        if (as_json) {
                d9ctl_print_json(targets);
                json_decref(resp);
                return 0;
        }
        int w = 7, rw = 0; /* the SERVICE and RULE columns fit the longest */
        json_array_foreach(targets, i, t) {
                int n = (int)json_string_length(json_object_get(t, "service"));
                int rn = (int)json_string_length(json_object_get(t, "rule"));
                w = n > w ? n : w;
                rw = rn > rw ? rn : rw;
        }
        if (rw && rw < 4)
                rw = 4;
        json_array_foreach(targets, i, t) {
                char started[32], dur[32];

                const char *rule = json_string_value(json_object_get(t, "rule"));

                if (!shown++)
                        printf("%-8s %-9s %-*s %-*s%s%-19s %8s %10s %6s  %s\n", "PID", "STATE", w, "SERVICE", rw,
                               rw ? "RULE" : "", rw ? " " : "", "STARTED", "DURATION", "EVENTS", "DROPS", "SEGMENTS IN");
                printf("%-8lld %-9s %-*s %-*s%s%-19s %8s %10lld %6lld  %s\n",
                       (long long)json_integer_value(json_object_get(t, "pid")),
                       json_string_value(json_object_get(t, "state")), w,
                       json_string_value(json_object_get(t, "service")), rw, rule ? rule : (rw ? "-" : ""),
                       rw ? " " : "",
                       d9ctl_format_wall(json_integer_value(json_object_get(t, "started_unix_ms")), started,
                                         sizeof(started)),
                       d9ctl_format_duration((uint64_t)json_integer_value(json_object_get(t, "duration_ms")), dur,
                                             sizeof(dur)),
                       (long long)json_integer_value(json_object_get(t, "events")),
                       (long long)json_integer_value(json_object_get(t, "drops")),
                       json_string_value(json_object_get(t, "dir")));
        }
        if (!shown)
                printf("no target is being traced\n");
        if (hidden)
                printf("(%zu finished session%s: d9ctl list --all)\n", hidden, hidden == 1 ? "" : "s");
        print_auto_attach(json_object_get(resp, "auto_attach"));
        json_decref(resp);
        return 0;
}
