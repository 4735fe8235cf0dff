/* d9ctl: command-line front end of d9d. Parses global options and hands the
 * rest of argv to one subcommand from the table below; `--help` anywhere in
 * a subcommand's options prints that command's usage (help.c). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "d9ctl.h"

static const struct d9ctl_command commands[] = {
        { "serve", d9ctl_cmd_serve },
        { "report", d9ctl_cmd_report },
        { "export", d9ctl_cmd_export },
        { "dump", d9ctl_cmd_dump },
        { "attach", d9ctl_cmd_attach },
        { "detach", d9ctl_cmd_detach },
        { "list", d9ctl_cmd_list },
        { "status", d9ctl_cmd_status },
        { "plan", d9ctl_cmd_plan },
        { "symbolize", d9ctl_cmd_symbolize },
        { "record", d9ctl_cmd_record },
        { "help", d9ctl_help_command },
        { NULL, NULL },
};

static const char *socket_path;

const char *d9ctl_socket_path(void)
{
        if (socket_path)
                return socket_path;
        const char *env = getenv("D9_SOCKET");
        return env && *env ? env : D9CTL_DEFAULT_SOCKET;
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
                        d9ctl_usage(stdout);
                        return 0;
                case 'V':
                        printf("d9ctl %s\n", D9_VERSION);
                        return 0;
                default:
                        d9ctl_usage(stderr);
                        return 2;
                }
        }
        if (optind >= argc) {
                d9ctl_usage(stderr);
                return 2;
        }
        for (const struct d9ctl_command *c = commands; c->name; c++) {
                if (strcmp(c->name, argv[optind]) == 0) {
                        int first = optind;

                        if (d9ctl_wants_help(argc - first, argv + first)) {
                                fputs(d9ctl_help_for(c->name)->text, stdout);
                                return 0;
                        }
                        /* getopt names argv[0] in its one-line errors. */
                        char prog[64];
                        snprintf(prog, sizeof(prog), "d9ctl %s", c->name);
                        argv[first] = prog;
                        optind = 0; /* glibc: 0 re-initialises getopt for the subcommand */
                        return c->run(argc - first, argv + first);
                }
        }
        fprintf(stderr, "d9ctl: unknown command '%s' (try d9ctl --help)\n", argv[optind]);
        return 2;
}
