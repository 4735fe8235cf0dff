/* unwind_step: one unwinding step for a frame that has no CFI (internal
 * to daemon/record/unwind.c; docs/stacks.md, "Frames without CFI").
 *
 * libdw unwinds through .eh_frame and stops at a pc no FDE covers. Such a
 * frame is common in exactly the builds production ships: musl's syscall
 * stubs (`syscall; ret`, no FDE) are the leaf of every blocked thread of a
 * musl static-pie binary, and a binary built with frame pointers may have
 * no .eh_frame at all. These steps find the caller another way:
 *  - frameless leaf: the return address is at sp;
 *  - frame pointers: the return address at rbp+8, the caller's rbp at rbp;
 *  - fitting scan: a word above sp whose call went to the function pc is
 *    in (or to one that jumps on to it) and whose prologue took exactly
 *    that many bytes by pc; the registers it pushed are restored;
 *  - scan: the first word above sp that is a return address into code
 *    that has CFI (a function without CFI pushed registers / locals);
 *  - far fitting scan: as the fitting scan, further up, for a big frame.
 * A word is taken as a return address only if the bytes before it in the
 * target's code are a call instruction. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "bpf/d9_events.h"

/* What the unwinder knows about the code at a pc. */
enum unw_cfi {
        UNW_CFI_FDE,            /* an FDE covers it: libdw can unwind */
        UNW_CFI_NO_FDE,         /* its module has CFI, but not for this pc */
        UNW_CFI_NONE,           /* its module has no CFI at all (frame pointers?) */
        UNW_CFI_NO_MODULE,      /* outside every module */
};

struct unw_step_ops {
        /* A stack (or other data) word of the sample. */
        bool (*read_word)(void *ctx, uint64_t addr, uint64_t *val);
        /* 16 code bytes ending right before addr (code[15] at addr - 1). */
        bool (*read_code)(void *ctx, uint64_t addr, uint8_t code[16]);
        /* A code pointer the module holds at addr (a GOT slot), as the
         * process sees it; NULL: not read. */
        bool (*read_ptr)(void *ctx, uint64_t addr, uint64_t *val);
        enum unw_cfi (*cfi_at)(void *ctx, uint64_t pc);
        void *ctx;
};

enum unw_step_kind {
        UNW_STEP_NONE,
        UNW_STEP_FRAMELESS,
        UNW_STEP_FP,
        UNW_STEP_SCAN,
};

/* Bytes above sp the scan looks at: musl's C functions keep frames of a
 * few words; a bigger frame without CFI is not worth a guess. */
#define UNW_SCAN_BYTES 512
/* ... and, when nothing was found there, for a return address whose call
 * and prologue fit the frame exactly (a verified one): big frames of
 * functions without CFI, such as musl's posix_spawn (5.7 KiB). */
#define UNW_FIT_SCAN_BYTES (16u << 10)

/* One step from the frame in regs (regs[D9_DW_RIP] its pc, which has CFI
 * kind `cfi`; leaf: it is the sample's innermost frame, its pc exact):
 * on success regs hold the caller's pc, sp (and rbp for a frame-pointer
 * step; other registers are left as they were) and the kind of step is
 * returned. */
enum unw_step_kind unwind_step_no_cfi(const struct unw_step_ops *ops, uint64_t regs[D9_STACK_NREGS],
                                   enum unw_cfi cfi, bool leaf);

/* True if the code right before ra ends with a call instruction. */
bool unwind_call_ends_at(const uint8_t code[16]);

/* True if ra is in a module and the code right before it is a call. */
bool unwind_is_return_address(const struct unw_step_ops *ops, uint64_t ra);
