/* bpf_sleepers.h: give a new target's threads that are asleep at the
 * attach their off-CPU interval from the recording's start. */
#pragma once
#include <sys/types.h>

struct d9_sched;

/* Runs the d9_seed_sleepers task iterator over pid's threads (pid in
 * d9d's pid namespace; every task of the machine where the kernel cannot
 * scope an iterator to one process, the program keeps the target's).
 * Call once the target's config is in d9_targets. 0 or a negative errno. */
int d9_bpf_seed_sleepers(struct d9_sched *skel, pid_t pid);
