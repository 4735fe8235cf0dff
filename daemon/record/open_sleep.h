/* open_sleep: the workers still asleep as a recording ends.
 *
 * BPF writes an off-CPU interval when its thread comes back (d9_sched.bpf.c),
 * so the last sleep of a worker idle at the end had no record: with parks
 * from the scheduler (the default set, stripped builds) no park either, and
 * the report read the idle tail as the worker's "other" time (npm
 * cortex-mcp, its load stopped 3.2 s into 8 s: 8.5 % parked, 91.5 % other).
 *
 * As the session stops, on the BPF thread after the quiesce (the drain
 * loop reads no /proc file and no target memory: a target's mmap lock or
 * a userfaultfd page would stall every session), each thread's last
 * switch-out (its BPF thread storage, read by pidfd), where it sleeps in
 * user space (/proc's syscall line: stack pointer and pc) and its stack
 * are captured. On the loop, after the last drain, the workers' among them
 * become a STACK and an OFFCPU record, translated as BPF's are: an off-CPU
 * sample with that stack and, where translate.c would write one (not
 * inside a task poll), a park, without the unpark that has not come. A
 * thread that ran meanwhile is left out: where it slept is gone. Used by
 * session.c. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

struct translate;
struct d9_bpf_target;
struct open_sleeps;

/* Off the drain loop, the target's BPF quiesced: the threads of pid
 * (proc_fd: its /proc directory) asleep since a switch-out of this
 * recording. maps: its /proc/PID/maps text, or NULL. NULL: none, or no
 * memory. */
struct open_sleeps *open_sleeps_capture(const struct d9_bpf_target *bt, int proc_fd, pid_t pid,
                                        const char *maps);
/* On the loop, after the last drain into tr: the workers' sleeps, as
 * ending at now. Returns how many were written, or a negative errno. */
int open_sleeps_write(struct translate *tr, const struct open_sleeps *os, uint64_t now);
void open_sleeps_free(struct open_sleeps *os);
