/* jit_map: names for a JIT's code from the map file it writes for perf
 * (`/tmp/perf-PID.map`, one "START SIZE NAME" line per compiled function,
 * hex numbers; V8 writes it under --perf-basic-prof, as do the JVM's
 * perf-map agents). The file belongs to the target: it is opened inside
 * the target's root, never through a symlink, only if it is a regular file
 * owned by the target's user, and read up to a bound. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct jit_map;

/* The map of the process whose pid in its own namespace is nspid, looked
 * up as tmp/perf-NSPID.map inside root_fd. -ENOENT when there is none,
 * -EPERM when it is not owner's (or root's), -EBADFD not a regular file. */
int jit_map_load(int root_fd, pid_t nspid, uid_t owner, struct jit_map **out);
/* The name of the function holding addr, or NULL; a later line of the file
 * wins where code was recompiled at the same address. */
const char *jit_map_lookup(const struct jit_map *m, uint64_t addr);
size_t jit_map_count(const struct jit_map *m);
void jit_map_free(struct jit_map *m);
