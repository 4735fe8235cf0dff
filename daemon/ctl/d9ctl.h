/* d9ctl subcommands: each lives in its own file and is listed in main.c. */
#pragma once

#include <stdbool.h>
#include <stdio.h>

#define D9CTL_DEFAULT_SOCKET "/run/d9d/control.sock"

struct d9ctl_command {
        const char *name;
        int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
};

/* Socket path from --socket, D9_SOCKET or the default. */
const char *d9ctl_socket_path(void);

/* help.c: usage texts. */
struct d9ctl_help {
        const char *name;
        const char *summary;    /* one line for `d9ctl --help` */
        const char *text;       /* `d9ctl CMD --help` */
};
const struct d9ctl_help *d9ctl_help_for(const char *cmd);
void d9ctl_usage(FILE *out);
/* argv holds --help / -h before any "--". */
bool d9ctl_wants_help(int argc, char **argv);
/* A usage error: one line naming the problem and where to find the usage; returns 2. */
int d9ctl_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int d9ctl_help_command(int argc, char **argv);

int d9ctl_cmd_serve(int argc, char **argv);
int d9ctl_cmd_dump(int argc, char **argv);
int d9ctl_cmd_report(int argc, char **argv);
int d9ctl_cmd_export(int argc, char **argv);
int d9ctl_cmd_attach(int argc, char **argv);
int d9ctl_cmd_detach(int argc, char **argv);
int d9ctl_cmd_list(int argc, char **argv);
int d9ctl_cmd_status(int argc, char **argv);
int d9ctl_cmd_record(int argc, char **argv);
int d9ctl_cmd_plan(int argc, char **argv);
int d9ctl_cmd_symbolize(int argc, char **argv);
