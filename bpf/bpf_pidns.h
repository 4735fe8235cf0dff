/* The kernel's tgid of a process d9d knows by its own pid namespace's pid. */
#pragma once
#include <stdint.h>
#include <sys/types.h>

struct d9_sched;

/* The tgid BPF programs see for pid (task->tgid): pid itself when d9d runs
 * in the initial pid namespace, else read through the d9_kernel_tgid task
 * iterator on a pidfd of pid. Returns 0 or a negative errno. */
int d9_bpf_kernel_tgid(struct d9_sched *skel, pid_t pid, uint32_t *tgid);
