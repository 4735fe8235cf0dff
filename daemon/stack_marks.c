/* stack_marks.c: names of the "no stack" pseudo-frames (stack_marks.h). */
#include <stddef.h>

#include "stack_marks.h"

static const char *const names[STACK_MARK_END] = {
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
};

const char *stack_mark_name(uint64_t addr)
{
        if (addr < STACK_MARK_BASE || addr >= STACK_MARK_BASE + STACK_MARK_END)
                return NULL;
        return names[addr - STACK_MARK_BASE];
}
