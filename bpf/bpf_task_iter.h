/* bpf_task_iter.h: run a BPF task iterator over one process's threads. */
#pragma once
#include <stdbool.h>
#include <sys/types.h>

struct bpf_program;

/* Attaches prog (SEC("iter/task")) to pid's threads through a pidfd (pid
 * in d9d's pid namespace) and opens the iterator: reading the fd runs
 * prog over them. Before Linux 6.1 a task iterator cannot be scoped to a
 * process; with or_all_tasks it then runs over every task of the machine
 * (the program must pick the target's), else that is -EINVAL. The link
 * is not kept: the open iterator holds it. Returns the fd (the caller
 * closes it) or a negative errno. */
int d9_bpf_task_iter_open(struct bpf_program *prog, pid_t pid, bool or_all_tasks);

/* d9_bpf_task_iter_open, then reads the iterator to its end, which runs
 * prog over every thread (a program that prints nothing). 0 or a
 * negative errno. */
int d9_bpf_task_iter_run(struct bpf_program *prog, pid_t pid, bool or_all_tasks);
