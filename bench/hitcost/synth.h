/* synth.h: a synthetic "Tokio" inside the calling binary, for measuring and
 * testing d9's uprobe program without a real runtime: tiny functions that
 * start like Tokio's probe points (push %rbp), a fake task whose Header*
 * leads to id SYNTH_TASK_ID through the 1.24 layout, and a probe plan that
 * puts every Tokio probe kind on them. Used by bench/hitcost and
 * tests/bpf/synth_hits. */
#pragma once

#include <stdint.h>

#include "uprobes/uprobes.h"

#define SYNTH_TASK_ID 42
#define SYNTH_PARK_KEY 0x5eedu

typedef void (*synth_fn)(void *);

/* Probe targets. push: emulated first insn; nop5: the kernel may optimize
 * it into a call; mov: single-stepped. poll/wake/complete/park take the
 * Header* (park: a pointer to its key); bind returns its argument. */
void synth_push(void *), synth_nop5(void *), synth_mov(void *), synth_poll(void *),
        synth_wake(void *), synth_complete(void *), synth_park(void *), synth_bind(void *);

/* The fake task's Header* and the park key's address. */
void *synth_header(void);
void *synth_park_key(void);

/* File offset of one of this binary's functions (exits on failure). */
uint64_t synth_file_offset(synth_fn fn);

/* A plan for this process: poll, wake, complete, spawn (uretprobe on bind),
 * park + unpark-return. pts must have room for 8 points; exe is the path
 * of this binary (kept, not copied). */
void synth_plan(struct probe_plan *plan, struct probe_point *pts, char *exe);
