/* stack_marks.c: names of the "no stack" pseudo-frames (stack_marks.h). */
#include <stdbool.h>
#include <stddef.h>
#include <string.h>

#include "daemon/symbolize/stack_marks.h"

static const char *const mark_names[STACK_MARK_END] = {
        [D9_NOSTACK_OFF] = "[no stack: off-CPU stacks not enabled]",
        [D9_NOSTACK_SHORT] = "[no stack: interval below the stack minimum]",
        [D9_NOSTACK_RATE] = "[no stack: thread's stack rate cap reached]",
        [D9_NOSTACK_PENDING] = "[no stack: no task_work for the thread]",
        [D9_NOSTACK_RING] = "[no stack: stack record dropped, ring full]",
        [D9_NOSTACK_GONE] = "[no stack: thread did not resume]",
        [STACK_MARK_MISSING] = "[no stack: stack record missing]",
        [STACK_MARK_UNWIND_BUDGET] = "[no stack: unwind budget used up]",
        [STACK_MARK_UNWIND_NONE] = "[no stack: unwinding found no frame]",
        [STACK_MARK_NO_MODULES] = "[no stack: target's modules unreadable]",
        [STACK_MARK_CUT] = "[stack cut: callers beyond the copied stack]",
        [STACK_MARK_FRAME_CAP] = "[stack cut: callers beyond 128 frames]",
        [STACK_MARK_D9_UPROBE] = "[d9d uprobe]",
        [STACK_MARK_D9_BPF] = "[d9d bpf]",
        [STACK_MARK_RUNNABLE] = "[runnable: preempted or yielded]",
        [STACK_MARK_CUT_RATE] = "[stack cut: callers beyond the copied stack, deep copies' byte rate used up]",
        [STACK_MARK_CUT_UNREAD] = "[stack cut: callers' frames in a stack page not in memory]",
        [STACK_MARK_CUT_ROOM] = "[stack cut: callers beyond the copied stack, the ring over half full]",
};

/* The uprobe path as x86-64 kernels 6.x take it: the breakpoint trap
 * (asm_exc_int3 -> exc_int3), then on the way back to user space
 * irqentry_exit_to_user_mode -> uprobe_notify_resume -> handle_swbp ->
 * handler_chain -> uprobe_prog_run / uprobe_multi_link_handler -> our
 * program; for a uretprobe uprobe_handle_trampoline or the uretprobe
 * syscall. Prefix matches, so .cold/.isra clones match too. */
static const char *const uprobe_path[] = {
        "asm_exc_int3", "exc_int3", "uprobe_notify_resume", "handle_swbp", "handler_chain",
        "uprobe_prog_run", "uprobe_multi_link_handler", "uprobe_dispatcher", "uretprobe_dispatcher",
        "uprobe_handle_trampoline", "handle_trampoline", "__x64_sys_uretprobe", "arch_uprobe_",
};

static bool starts_with(const char *s, const char *prefix)
{
        return !strncmp(s, prefix, strlen(prefix));
}

/* bpf_prog_<tag>_<name>: one of ours is named d9_... */
static bool is_d9_prog(const char *name)
{
        return starts_with(name, "bpf_prog_") && strstr(name, "_d9_");
}

unsigned stack_mark_probe_path(const char *const *names, unsigned n)
{
        bool d9_prog = false;

        for (unsigned i = 0; i < n; i++) {
                if (!names[i])
                        continue;
                for (size_t j = 0; j < sizeof(uprobe_path) / sizeof(uprobe_path[0]); j++)
                        if (starts_with(names[i], uprobe_path[j]))
                                return STACK_MARK_D9_UPROBE;
                d9_prog |= is_d9_prog(names[i]);
        }
        return d9_prog ? STACK_MARK_D9_BPF : 0;
}

const char *stack_mark_name(uint64_t addr)
{
        if (addr < STACK_MARK_BASE || addr >= STACK_MARK_BASE + STACK_MARK_END)
                return NULL;
        return mark_names[addr - STACK_MARK_BASE];
}
