/* stack_marks: one pseudo-frame in place of a stack a sample does not have,
 * naming why (docs/stacks.md, "Samples without a stack"). The callchain of
 * such a CpuSampleEvent is that single address; the sealer's symbolizer
 * names it, so dial9's viewer shows "[no stack: ...]", not "(unknown)",
 * and the reasons can be counted from the trace. The addresses are below
 * the kernel's mmap_min_addr (64 KiB): no code can be mapped there. */
#pragma once

#include <stdint.h>

#include "bpf/d9_events.h"

enum stack_mark {
        /* 1 .. D9_NOSTACK_MAX - 1: BPF's enum d9_no_stack */
        STACK_MARK_MISSING = 16,        /* a stack_id whose STACK record never came */
        STACK_MARK_UNWIND_BUDGET,       /* over d9d's unwind budget (daemon/record/unwind.h) */
        STACK_MARK_UNWIND_NONE,         /* unwinding gave no frame */
        STACK_MARK_NO_MODULES,          /* the target's modules could not be read */
        /* Outermost frame of a stack whose callers lie beyond the user
         * stack bytes BPF copies (unwind.h, unwinder_last_cut). */
        STACK_MARK_CUT,
        /* ... whose callers lie beyond the frames d9d unwinds (128). */
        STACK_MARK_FRAME_CAP,
        /* In place of the kernel frames of a sample taken in d9d's own
         * probes (docs/stacks.md, "d9d's own probes in the samples"). */
        STACK_MARK_D9_UPROBE = 24,      /* the uprobe trap and handler */
        STACK_MARK_D9_BPF,              /* another d9 BPF program */
        /* Leaf of an off-CPU stack whose thread switched out still
         * runnable (preempted, a cond_resched, a yield): the kernel leaves
         * its scheduler functions out of a sleeping thread's stack, so
         * the frames alone showed a cond_resched inside read() as the
         * thread blocking in filemap_read. */
        STACK_MARK_RUNNABLE,
        /* STACK_MARK_CUT, where BPF would have copied the stack whole but
         * the deep copies' byte rate was used up (D9_SREC_CAPPED). */
        STACK_MARK_CUT_RATE,
        /* Outermost frame of a stack whose next step needed a word in
         * stack pages not in memory (a sample in a page fault on the
         * stack; d9_rec_stack.unread_at, unwinder_last_unread). */
        STACK_MARK_CUT_UNREAD,
        /* STACK_MARK_CUT, where BPF would have copied the stack whole but
         * that would have left the ring over half full (D9_SREC_ROOM). */
        STACK_MARK_CUT_ROOM,
        STACK_MARK_END
};

#define STACK_MARK_BASE 0xd900ull

static inline uint64_t stack_mark_addr(unsigned mark)
{
        return STACK_MARK_BASE + mark;
}

/* The name of a mark address, or NULL if addr is not one. */
const char *stack_mark_name(uint64_t addr);

/* The mark for kernel frames (leaf first) named by `names` if they are
 * d9d's own probe path, else 0. */
unsigned stack_mark_probe_path(const char *const *names, unsigned n);
