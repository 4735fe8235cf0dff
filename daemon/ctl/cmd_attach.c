/* d9ctl attach: start tracing a running process and show the probe plan. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

int d9ctl_cmd_attach(int argc, char **argv)
{
        static const struct option opts[] = {
                { "pid", required_argument, NULL, 'p' },
                { "duration", required_argument, NULL, 'd' },
                { "probes", required_argument, NULL, 'P' },
                { "offcpu-min", required_argument, NULL, 'O' },
                { "wakes", required_argument, NULL, 'W' },
                { "json", no_argument, NULL, 'j' },
                { "wait-plan", no_argument, NULL, 'w' },
                D9CTL_SAMPLE_OPTIONS,
                {},
        };
        json_t *req = d9c_request("attach"), *resp;
        uint64_t ms;
        int64_t us;
        bool as_json = false;
        int opt, pid = 0;

        while ((opt = getopt_long(argc, argv, "p:d:P:O:W:jwAR:F:", opts, NULL)) != -1) {
                switch (opt) {
                case 'p':
                        if ((pid = d9ctl_parse_pid("attach", optarg)) < 0)
                                goto bad;
                        break;
                case 'd':
                        if (d9_parse_duration_ms(optarg, &ms) < 0) {
                                fprintf(stderr, "d9ctl attach: bad --duration '%s' (e.g. 10s, 5m)\n", optarg);
                                goto bad;
                        }
                        json_object_set_new(req, "duration_ms", json_integer((json_int_t)ms));
                        break;
                case 'P':
                        if (d9c_parse_probes(optarg, NULL) < 0) {
                                fprintf(stderr, "d9ctl attach: bad --probes '%s' (any of sched,cpu,park,poll,spawn,wake,terminate,longpoll, default or all)\n", optarg);
                                goto bad;
                        }
                        json_object_set_new(req, "probes", json_string(optarg));
                        break;
                case 'O':
                        if ((us = d9ctl_parse_offcpu_min("attach", optarg)) < 0)
                                goto bad;
                        json_object_set_new(req, "offcpu_min_us", json_integer((json_int_t)us));
                        break;
                case 'W':
                        if (strcmp(optarg, "exact") && strcmp(optarg, "sampled")) {
                                fprintf(stderr, "d9ctl attach: bad --wakes '%s' (exact or sampled)\n", optarg);
                                goto bad;
                        }
                        json_object_set_new(req, "wakes", json_string(optarg));
                        break;
                case 'j':
                        as_json = true;
                        break;
                case 'w':
                        json_object_set_new(req, "wait_plan", json_true());
                        break;
                case 'A': case 'R': case 'F':
                        if (d9ctl_set_sample_option("attach", req, opt, optarg) < 0)
                                goto bad;
                        break;
                default:
                        goto bad;
                }
        }
        if (!pid) {
                fprintf(stderr, "d9ctl attach: --pid is required\n");
                goto bad;
        }
        json_object_set_new(req, "pid", json_integer(pid));
        resp = d9ctl_call(req);
        if (!resp)
                return 1;
        json_t *t = json_object_get(resp, "target");
        if (as_json) {
                json_dumpf(t, stdout, JSON_INDENT(2));
                putchar('\n');
        } else {
                printf("attached to pid %d (%s), writing %s\n", pid,
                       json_string_value(json_object_get(t, "service")), json_string_value(json_object_get(t, "dir")));
                d9ctl_print_plan(stdout, json_object_get(t, "probe_plan"));
        }
        json_decref(resp);
        return 0;
bad:
        json_decref(req);
        return 2;
}
