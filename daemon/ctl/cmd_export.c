/* d9ctl export --format perfetto|pprof [--profile cpu|offcpu] --output FILE
 * SEGMENT...|DIR...: a recording for other tools (export.h). The file is
 * written beside its final name and renamed into place when complete, so a
 * failed export never leaves half a file under the name asked for. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "d9ctl.h"
#include "export.h"
#include "trace_read.h"

enum export_format { FORMAT_NONE, FORMAT_JSON, FORMAT_PPROF };

static int run_export(enum export_format format, enum export_profile profile, FILE *out, char **paths,
                      size_t n, struct export_stats *st, char *why, size_t why_len)
{
        if (format == FORMAT_JSON)
                return d9ctl_export_trace_json(out, paths, n, st, why, why_len);
        return d9ctl_export_pprof(out, paths, n, profile, st, why, why_len);
}

/* Writes to OUTPUT.tmp.PID and renames it over output ("-": stdout). */
static int export_to(const char *output, enum export_format format, enum export_profile profile,
                     char **paths, size_t n, struct export_stats *st, char *why, size_t why_len)
{
        if (!strcmp(output, "-"))
                return run_export(format, profile, stdout, paths, n, st, why, why_len);

        char tmp[4096];
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.%d", output, (int)getpid()) >= sizeof(tmp)) {
                snprintf(why, why_len, "--output: path too long");
                return -ENAMETOOLONG;
        }
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
        if (fd < 0) {
                int e = -errno;
                snprintf(why, why_len, "%.4000s: cannot create: %s", tmp, strerror(-e));
                return e;
        }
        FILE *out = fdopen(fd, "w");
        if (!out) {
                close(fd);
                unlink(tmp);
                snprintf(why, why_len, "out of memory");
                return -ENOMEM;
        }
        int e = run_export(format, profile, out, paths, n, st, why, why_len);
        if (fclose(out) && !e) {
                e = -EIO;
                snprintf(why, why_len, "%.4000s: write failed", output);
        }
        if (!e && rename(tmp, output)) {
                e = -errno;
                snprintf(why, why_len, "%.4000s: cannot rename into place: %s", output, strerror(-e));
        }
        if (e)
                unlink(tmp);
        return e;
}

int d9ctl_cmd_export(int argc, char **argv)
{
        static const struct option opts[] = {
                { "format", required_argument, NULL, 'f' },
                { "profile", required_argument, NULL, 'p' },
                { "output", required_argument, NULL, 'o' },
                {},
        };
        enum export_format format = FORMAT_NONE;
        enum export_profile profile = EXPORT_CPU;
        const char *output = NULL;
        int opt;

        while ((opt = getopt_long(argc, argv, "f:p:o:", opts, NULL)) != -1) {
                switch (opt) {
                case 'f':
                        if (!strcmp(optarg, "perfetto") || !strcmp(optarg, "json"))
                                format = FORMAT_JSON;
                        else if (!strcmp(optarg, "pprof"))
                                format = FORMAT_PPROF;
                        else
                                return d9ctl_usage_error("export", "--format takes perfetto or pprof, got '%s'", optarg);
                        break;
                case 'p':
                        if (!strcmp(optarg, "cpu"))
                                profile = EXPORT_CPU;
                        else if (!strcmp(optarg, "offcpu"))
                                profile = EXPORT_OFFCPU;
                        else
                                return d9ctl_usage_error("export", "--profile takes cpu or offcpu, got '%s'", optarg);
                        break;
                case 'o':
                        output = optarg;
                        break;
                default:
                        return d9ctl_usage_error("export", "unknown option");
                }
        }
        if (format == FORMAT_NONE)
                return d9ctl_usage_error("export", "--format perfetto or --format pprof is needed");
        if (!output)
                return d9ctl_usage_error("export", "--output FILE is needed ('-' for stdout)");
        if (optind >= argc)
                return d9ctl_usage_error("export", "no segment or directory given");

        char why[4200] = "";
        char **paths = NULL;
        size_t n = 0;
        int e = 0;
        for (int i = optind; i < argc && !e; i++)
                e = d9ctl_trace_paths_add(argv[i], &paths, &n, why, sizeof(why));
        d9ctl_trace_paths_sort(paths, n);
        struct export_stats st = { 0 };
        if (!e)
                e = export_to(output, format, profile, paths, n, &st, why, sizeof(why));
        d9ctl_trace_paths_free(paths, n);
        if (e) {
                fprintf(stderr, "d9ctl export: %s\n", why);
                return 1;
        }
        fprintf(stderr, "d9ctl export: %llu %s from %zu segment%s to %s", st.events,
                format == FORMAT_JSON ? "events" : profile == EXPORT_CPU ? "CPU samples" : "off-CPU samples",
                n, n == 1 ? "" : "s", output);
        if (st.unfinished)
                fprintf(stderr, " (%llu polls or parks open at a recording's end left out)", st.unfinished);
        fputc('\n', stderr);
        return 0;
}
