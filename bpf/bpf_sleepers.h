/* bpf_sleepers.h: what an attach learns from a new target's threads as
 * they are (task iterators over pid's threads; pid in d9d's pid
 * namespace; every task of the machine where the kernel cannot scope an
 * iterator to one process, the programs keep the target's). Call once the
 * target's config is in d9_targets. Each returns 0 or a negative errno. */
#pragma once
#include <sys/types.h>

struct d9_sched;

/* Threads asleep now get their off-CPU interval from the recording's
 * start (d9_seed_sleepers). */
int d9_bpf_seed_sleepers(struct d9_sched *skel, pid_t pid);

/* A default-set target's threads are each scanned once for their worker
 * loop's Worker (d9_wk_sweep; nothing for other sets, or before the
 * target's TLS size is known). */
int d9_bpf_sweep_workers(struct d9_sched *skel, pid_t pid);
