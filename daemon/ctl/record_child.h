/* record_child: the command `d9ctl record -- CMD` runs, and the Tokio
 * process inside it that gets traced. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

struct record_child {
        pid_t pid;              /* the forked CMD (a launcher with --follow-children) */
        int go_fd;              /* write 'g' to let it exec; -1 once released */
        bool exited;
        int status;             /* waitpid status once exited */
        char exe[PATH_MAX];     /* CMD resolved like execvp */
};

/* Resolve CMD like execvp would, to an absolute path d9d can open. */
int d9ctl_record_resolve_command(const char *cmd, char out[PATH_MAX]);
/* Why path cannot be traced directly (a script, not ELF, ...) as a
 * malloc'd sentence, or NULL when it is an ELF file. */
char *d9ctl_record_not_elf(const char *path);
/* Fork CMD held before exec; its stdout goes to our stderr. */
int d9ctl_record_child_spawn(struct record_child *c, char **argv);
void d9ctl_record_child_release(struct record_child *c);
/* Reap without blocking (block = true: wait); true once it has exited. */
bool d9ctl_record_child_reap(struct record_child *c, bool block);
/* The exit status d9ctl passes on: the code, or 128 + signal. */
int d9ctl_record_child_exit_code(const struct record_child *c);
/* --follow-children: a process in c's tree (c itself after exec, or a
 * descendant) whose executable is a Tokio binary, or 0 if none yet. Each
 * executable is judged once. */
pid_t d9ctl_record_child_find_tokio(struct record_child *c);
