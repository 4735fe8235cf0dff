/* d9ctl subcommands: each lives in its own file and is listed in main.c. */
#pragma once

struct d9ctl_command {
        const char *name;
        int (*run)(int argc, char **argv); /* argv[0] is the subcommand name */
        const char *usage;
};

/* Socket path from --socket, D9_SOCKET or the default. */
const char *d9ctl_socket_path(void);

int cmd_serve(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_attach(int argc, char **argv);
int cmd_detach(int argc, char **argv);
int cmd_list(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_record(int argc, char **argv);
int cmd_plan(int argc, char **argv);
