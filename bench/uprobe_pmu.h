/* uprobe_pmu: a uprobe as a plain perf event (no BPF), for the benchmarks
 * that measure what the trap alone costs (bench/uprobe_insn_cost.c,
 * bench/hitcost). */
#pragma once

#include <stdbool.h>
#include <stdint.h>

/* The kernel's uprobe PMU type, or -1 when it has none. */
int uprobe_pmu_type(void);
/* A uprobe on path at file offset, counting hits of this process on any
 * CPU; created disabled if asked (PERF_EVENT_IOC_ENABLE starts it).
 * Returns the fd, or -1 with errno set. */
int uprobe_pmu_open(const char *path, uint64_t offset, bool disabled);
