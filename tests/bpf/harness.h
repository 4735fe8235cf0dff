/* harness.h: what the bpf tests share: TAP output, starting real target
 * processes (with their stdout captured), and draining a target's ring. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/bpf_loader.h"

void tap_plan(int n);
bool tap_ok(bool cond, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void tap_diag(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tap_done_plan(void);       /* trailing plan: "1..<tests so far>" */
int tap_done(void);     /* exit status: 0 iff every test passed */

struct child {
        pid_t pid;
        int out_fd;             /* its stdout, or -1 */
        int status;
        bool reaped;
};

/* Start argv[0] with argv; stdout captured if capture. */
int child_start(struct child *c, char *const argv[], bool capture);
/* Has it exited (reaps it)? */
bool child_exited(struct child *c);
/* Read all of its stdout (after exit), malloc'd. */
char *child_read_all(struct child *c);
void child_kill(struct child *c);

/* Drain t until child exits, then a final drain. */
int drain_until_exit(struct d9_bpf_target *t, struct child *c);

/* Leak checks. A snapshot lists the BPF objects this process holds fds
 * to; after close, none of them may still exist in the kernel. */
#define BPF_IDS_MAX 4096
struct bpf_ids {
        size_t n;
        int kind[BPF_IDS_MAX];          /* 0 prog, 1 map, 2 link */
        uint32_t id[BPF_IDS_MAX];
};
int bpf_snapshot_self(struct bpf_ids *ids);
int bpf_count_alive(const struct bpf_ids *ids);
/* Runs the kernel skipped, summed over the snapshot's programs: a program
 * already running on a CPU is not run again there (recursion_misses).
 * Each program that missed any is named in a diagnostic line. */
unsigned long long bpf_recursion_misses(const struct bpf_ids *ids);
