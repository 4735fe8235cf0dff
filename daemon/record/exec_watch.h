/* exec_watch: tells d9d of every exec on the machine, within a loop turn
 * of it (bpf/d9_exec.bpf.c, a ring buffer on d9d's epoll loop). */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct d9d;
struct exec_watch;

/* pid is in d9d's pid namespace; ts_ns is CLOCK_MONOTONIC at the exec. */
typedef void (*exec_watch_fn)(void *ctx, pid_t pid, uint64_t ts_ns);

/* Load and attach the program, register its ring with d's loop. */
int exec_watch_start(struct d9d *d, exec_watch_fn fn, void *ctx, struct exec_watch **out);
void exec_watch_stop(struct exec_watch *w);
/* Execs the ring had no room for, since start (the caller rescans /proc
 * when this grows) and those outside d9d's pid namespace (never matched). */
uint64_t exec_watch_lost(const struct exec_watch *w);
uint64_t exec_watch_invisible(const struct exec_watch *w);
