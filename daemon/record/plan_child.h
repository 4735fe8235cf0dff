/* plan_child: a probe plan built in a process of its own.
 *
 * Planning reads an executable the target's owner controls: a file that is
 * truncated while mapped faults (SIGBUS), a crafted one can make the code
 * sweeps slow, and the scan of a 300 MB binary peaks near its size in
 * memory. In a child none of that reaches d9d: a fault ends the child, a
 * stall is killed at the deadline, and the memory is returned when it
 * exits. The child is d9d itself, run again with PLAN_CHILD_ARG. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct probe_plan;

#define PLAN_CHILD_ARG "--plan-child"

/* The plan of the file open as fd (kept open by the caller; the plan gets
 * its own copy of it for the attach). display names it in messages and the
 * plan, root ("" for none) is where separate debug files are looked for.
 * The child is killed after timeout_ms, or once abort_fd is readable.
 * 0, or a negative errno with *why (malloc'd) saying what went wrong. */
int planner_child_build(int fd, const char *display, const char *root, uint64_t timeout_ms, int abort_fd,
                     struct probe_plan **out, char **why);

/* main() of the child: argv is d9d PLAN_CHILD_ARG DISPLAY ROOT, the file
 * is fd 3, the answer goes to fd 4. Returns the exit status. */
int planner_child_main(int argc, char **argv);
