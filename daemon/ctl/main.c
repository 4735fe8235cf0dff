/* d9ctl: command-line front end of d9d. Parses global options and hands the
 * rest of argv to one subcommand from the table below. */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9ctl.h"

static const struct d9ctl_command commands[] = {
        { "serve", cmd_serve, "serve [--dir DIR | --bucket B ...] [--listen HOST:PORT]  browse traces in the web viewer" },
        { "report", cmd_report, "report [--json] [--top N] SEGMENT...|DIR...  longest polls, blocking calls, wake delays, worker shares" },
        { "dump", cmd_dump, "dump [--summary | --json] [--strict] FILE...  print trace files (raw, .gz, .zst)" },
        { "attach", cmd_attach, "attach --pid N [--duration D] [--probes LIST] [--json]  start tracing a process" },
        { "detach", cmd_detach, "detach --pid N  stop tracing it and seal its segment" },
        { "list", cmd_list, "list  targets being traced" },
        { "status", cmd_status, "status [--pid N] [--json]  events/s, drops, bytes, segments, probe plan" },
        { "plan", cmd_plan, "plan (--pid N | --exe PATH) [--json] [--all]  probe plan for a Tokio binary (local)" },
        { "record", cmd_record, "record --pid N --duration D [--out DIR] [--probes LIST] | record --duration D [--out DIR] -- CMD [ARGS]" },
        { NULL, NULL, NULL },
};

static const char *socket_path;

const char *d9ctl_socket_path(void)
{
        if (socket_path)
                return socket_path;
        const char *env = getenv("D9_SOCKET");
        return env && *env ? env : "/run/d9d/control.sock";
}

static void usage(FILE *out)
{
        fprintf(out, "usage: d9ctl [--socket PATH] <command> [ARGS]\n\ncommands:\n");
        for (const struct d9ctl_command *c = commands; c->name; c++)
                fprintf(out, "  %s\n", c->usage);
}

int main(int argc, char **argv)
{
        static const struct option opts[] = {
                { "socket", required_argument, NULL, 's' },
                { "help", no_argument, NULL, 'h' },
                { "version", no_argument, NULL, 'V' },
                {},
        };
        int opt;

        /* '+' stops at the first non-option so subcommands parse their own flags. */
        while ((opt = getopt_long(argc, argv, "+s:hV", opts, NULL)) != -1) {
                switch (opt) {
                case 's':
                        socket_path = optarg;
                        break;
                case 'h':
                        usage(stdout);
                        return 0;
                case 'V':
                        printf("d9ctl %s\n", D9_VERSION);
                        return 0;
                default:
                        usage(stderr);
                        return 2;
                }
        }
        if (optind >= argc) {
                usage(stderr);
                return 2;
        }
        for (const struct d9ctl_command *c = commands; c->name; c++) {
                if (strcmp(c->name, argv[optind]) == 0) {
                        int first = optind;

                        optind = 0; /* glibc: 0 re-initialises getopt for the subcommand */
                        return c->run(argc - first, argv + first);
                }
        }
        fprintf(stderr, "d9ctl: unknown command '%s' (try --help)\n", argv[optind]);
        return 2;
}
