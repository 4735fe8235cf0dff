/* plan_cli: the command line that prints a probe plan for a PID or an
 * executable, as text or JSON. Shared by uprobes/plan-dump (tests, offline
 * inspection) and `d9ctl plan`. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "uprobes.h"

static void usage(FILE *out, const char *prog)
{
        fprintf(out, "usage: %s (--pid PID | --exe PATH) [--json] [--all]\n"
                     "  --json  print the plan as JSON\n"
                     "  --all   also list optional poll return sites\n", prog);
}

int probe_plan_cli(int argc, char **argv, const char *prog)
{
        static const struct option opts[] = {
                { "pid", required_argument, NULL, 'p' },
                { "exe", required_argument, NULL, 'e' },
                { "json", no_argument, NULL, 'j' },
                { "all", no_argument, NULL, 'a' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        const char *exe = NULL;
        long pid = 0;
        bool json = false, all = false;
        int opt;

        while ((opt = getopt_long(argc, argv, "p:e:jah", opts, NULL)) != -1) {
                char *end;

                switch (opt) {
                case 'p':
                        pid = strtol(optarg, &end, 10);
                        if (*end || pid <= 0 || pid > 0x3fffffff) {
                                fprintf(stderr, "%s: invalid PID '%s'\n", prog, optarg);
                                return 2;
                        }
                        break;
                case 'e': exe = optarg; break;
                case 'j': json = true; break;
                case 'a': all = true; break;
                case 'h': usage(stdout, prog); return 0;
                default: usage(stderr, prog); return 2;
                }
        }
        if (!!pid == !!exe || optind != argc) {
                usage(stderr, prog);
                return 2;
        }

        struct probe_plan *plan = NULL;
        char *err = NULL;
        int r = pid ? probe_plan_for_pid((pid_t)pid, &plan, &err) : probe_plan_for_file(exe, &plan, &err);

        if (r < 0) {
                fprintf(stderr, "%s: %s\n", prog, err ? err : strerror(-r));
                free(err);
                return 1;
        }
        if (json) {
                char *s = probe_plan_to_json(plan);

                if (!s) {
                        fprintf(stderr, "%s: out of memory\n", prog);
                        probe_plan_free(plan);
                        return 1;
                }
                puts(s);
                free(s);
        } else {
                probe_plan_print(plan, stdout, all);
        }
        probe_plan_free(plan);
        return 0;
}
