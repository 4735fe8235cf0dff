/* d9ctl report [--json] [--top N] SEGMENT...|DIR...: the culprits of a
 * recording on one screen (report.c). A directory stands for the trace
 * files under it; all are read in version order (trace.0, trace.1, ...,
 * trace.10 of one session), whatever order they were given in. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9ctl.h"
#include "report.h"
#include "trace_read.h"

#define USAGE "usage: d9ctl report [--json] [--top N] SEGMENT...|DIR...\n"

int d9ctl_cmd_report(int argc, char **argv)
{
        static const struct option opts[] = {
                { "json", no_argument, NULL, 'j' },
                { "top", required_argument, NULL, 't' },
                { "help", no_argument, NULL, 'h' },
                {},
        };
        bool json = false;
        unsigned long top = 10;
        char *end, why[4200];
        int opt;

        while ((opt = getopt_long(argc, argv, "jt:h", opts, NULL)) != -1) {
                switch (opt) {
                case 'j':
                        json = true;
                        break;
                case 't':
                        top = strtoul(optarg, &end, 10);
                        if (*end || !*optarg || top == 0 || top > 10000) {
                                fprintf(stderr, "d9ctl report: --top takes 1..10000, got '%s'\n", optarg);
                                return 2;
                        }
                        break;
                case 'h':
                        fputs(USAGE, stdout);
                        return 0;
                default:
                        fputs(USAGE, stderr);
                        return 2;
                }
        }
        if (optind >= argc) {
                fprintf(stderr, "d9ctl report: no segment or directory given\n" USAGE);
                return 2;
        }
        struct report *r = d9ctl_report_new((unsigned)top);
        if (!r) {
                fprintf(stderr, "d9ctl report: out of memory\n");
                return 1;
        }
        char **paths = NULL;
        size_t npaths = 0;
        int e = 0;
        for (int i = optind; i < argc && !e; i++)
                e = d9ctl_trace_paths_add(argv[i], &paths, &npaths, why, sizeof(why));
        d9ctl_trace_paths_sort(paths, npaths);
        for (size_t i = 0; i < npaths && !e; i++)
                e = d9ctl_report_add_file(r, paths[i], why, sizeof(why));
        d9ctl_trace_paths_free(paths, npaths);
        if (e) {
                fprintf(stderr, "d9ctl report: %s\n", why);
                d9ctl_report_free(r);
                return 1;
        }
        json_t *doc = d9ctl_report_result(r);
        if (!doc) {
                fprintf(stderr, "d9ctl report: out of memory\n");
                d9ctl_report_free(r);
                return 1;
        }
        if (json)
                json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_SORT_KEYS), fputc('\n', stdout);
        else
                d9ctl_report_print_text(stdout, doc);
        json_decref(doc);
        d9ctl_report_free(r);
        return 0;
}
