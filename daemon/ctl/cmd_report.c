/* d9ctl report [--json] [--top N] SEGMENT...|DIR...: the culprits of a
 * recording on one screen (report.c). A directory stands for the trace
 * files under it, in name order (trace.0, trace.1, ... of one session). */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "d9ctl.h"
#include "report.h"

#define USAGE "usage: d9ctl report [--json] [--top N] SEGMENT...|DIR...\n"

static bool is_trace_name(const char *n)
{
        size_t len = strlen(n);
        static const char *const ends[] = { ".bin", ".bin.gz", ".bin.zst" };

        for (size_t i = 0; i < sizeof(ends) / sizeof(ends[0]); i++) {
                size_t e = strlen(ends[i]);
                if (len > e && !strcmp(n + len - e, ends[i]))
                        return true;
        }
        return false;
}

static int name_cmp(const void *a, const void *b)
{
        return strverscmp(*(char *const *)a, *(char *const *)b);
}

/* Adds the trace files directly in dir, in version order. */
static int add_dir(struct report *r, const char *dir, char *why, size_t why_len)
{
        DIR *d = opendir(dir);
        struct dirent *de;
        char **names = NULL;
        size_t n = 0;
        int e = 0;

        if (!d) {
                snprintf(why, why_len, "%s: %s", dir, strerror(errno));
                return -errno;
        }
        while ((de = readdir(d)))
                if (is_trace_name(de->d_name)) {
                        char **more = realloc(names, (n + 1) * sizeof(*names));
                        if (!more || !(more[n] = strdup(de->d_name))) {
                                names = more ? more : names;
                                e = -ENOMEM;
                                break;
                        }
                        names = more;
                        n++;
                }
        closedir(d);
        if (!e && !n) {
                snprintf(why, why_len, "%s: no trace files (*.bin, *.bin.gz, *.bin.zst) in it", dir);
                e = -ENOENT;
        }
        if (!e)
                qsort(names, n, sizeof(*names), name_cmp);
        for (size_t i = 0; i < n; i++) {
                char path[4096];
                snprintf(path, sizeof(path), "%s/%s", dir, names[i]);
                if (!e)
                        e = report_add_file(r, path, why, why_len);
                free(names[i]);
        }
        free(names);
        return e;
}

int cmd_report(int argc, char **argv)
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
        struct report *r = report_new((unsigned)top);
        if (!r) {
                fprintf(stderr, "d9ctl report: out of memory\n");
                return 1;
        }
        int e = 0;
        for (int i = optind; i < argc && !e; i++) {
                struct stat st;
                if (stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode))
                        e = add_dir(r, argv[i], why, sizeof(why));
                else
                        e = report_add_file(r, argv[i], why, sizeof(why));
        }
        if (e) {
                fprintf(stderr, "d9ctl report: %s\n", why);
                report_free(r);
                return 1;
        }
        json_t *doc = report_result(r);
        if (!doc) {
                fprintf(stderr, "d9ctl report: out of memory\n");
                report_free(r);
                return 1;
        }
        if (json)
                json_dumpf(doc, stdout, JSON_INDENT(2) | JSON_SORT_KEYS), fputc('\n', stdout);
        else
                report_print_text(stdout, doc);
        json_decref(doc);
        report_free(r);
        return 0;
}
