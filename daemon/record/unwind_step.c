/* unwind_step.c: steps for frames without CFI (see unwind_step.h). */
#include "daemon/record/unwind_step.h"

/* Thread stacks are at most this big: a frame pointer further above sp
 * than this is not one. */
#define FP_SPAN (8ull << 20)

/* Bytes a ModRM-addressed operand takes after the opcode (ModRM, SIB,
 * displacement). */
static int modrm_len(const uint8_t *p, int avail)
{
        uint8_t mod = p[0] >> 6, rm = p[0] & 7;
        int n = 1;

        if (mod == 3)
                return 1;
        if (rm == 4) {
                if (avail < 2)
                        return -1;
                n++;
                if (mod == 0 && (p[1] & 7) == 5)
                        n += 4;
        } else if (mod == 0 && rm == 5) {
                n += 4;                 /* rip-relative */
        }
        if (mod == 1)
                n += 1;
        else if (mod == 2)
                n += 4;
        return n;
}

bool unwind_call_ends_at(const uint8_t code[16])
{
        /* call rel32 */
        if (code[16 - 5] == 0xe8)
                return true;
        /* call r/m64: ff /2, 2 to 7 bytes from the opcode (a REX prefix
         * before it changes nothing here) */
        for (int len = 2; len <= 7; len++) {
                const uint8_t *op = code + 16 - len;
                if (op[0] == 0xff && ((op[1] >> 3) & 7) == 2 && modrm_len(op + 1, len - 1) == len - 1)
                        return true;
        }
        return false;
}

static bool is_return_address(const struct unw_step_ops *ops, uint64_t ra)
{
        uint8_t code[16];

        return ra > 16 && ops->cfi_at(ops->ctx, ra - 1) != UNW_CFI_NO_MODULE &&
               ops->read_code(ops->ctx, ra, code) && unwind_call_ends_at(code);
}

static bool step_frameless(const struct unw_step_ops *ops, uint64_t *regs)
{
        uint64_t sp = regs[D9_DW_RSP], ra;

        if (!ops->read_word(ops->ctx, sp, &ra) || !is_return_address(ops, ra))
                return false;
        regs[D9_DW_RIP] = ra;
        regs[D9_DW_RSP] = sp + 8;
        return true;
}

/* On the frame-pointer chain, a return address into a mapping whose code
 * d9d cannot read passes on the chain alone: a JIT's code (V8's, in a
 * memfd mapping) has no file to read it from, and d9d reads no target
 * memory (docs/stacks.md, "Modules off the loop"). */
static bool fp_return_address(const struct unw_step_ops *ops, uint64_t ra)
{
        uint8_t code[16];

        return ra > 16 && ops->cfi_at(ops->ctx, ra - 1) != UNW_CFI_NO_MODULE &&
               (!ops->read_code(ops->ctx, ra, code) || unwind_call_ends_at(code));
}

static bool step_fp(const struct unw_step_ops *ops, uint64_t *regs)
{
        uint64_t sp = regs[D9_DW_RSP], bp = regs[D9_DW_RBP], ra, next_bp;

        if (bp < sp || bp - sp > FP_SPAN || (bp & 7) || !ops->read_word(ops->ctx, bp + 8, &ra) ||
            !ops->read_word(ops->ctx, bp, &next_bp) || !fp_return_address(ops, ra))
                return false;
        regs[D9_DW_RIP] = ra;
        regs[D9_DW_RSP] = bp + 16;
        regs[D9_DW_RBP] = next_bp;
        return true;
}

/* Only return addresses into code with an FDE: from there libdw takes
 * over again, and a stale address left in an uninitialised slot is far
 * less likely to pass both checks. */
static bool step_scan(const struct unw_step_ops *ops, uint64_t *regs)
{
        uint64_t sp = regs[D9_DW_RSP], w;

        for (uint64_t off = 0; off < UNW_SCAN_BYTES; off += 8) {
                if (!ops->read_word(ops->ctx, sp + off, &w))
                        return false;
                if (w > 16 && ops->cfi_at(ops->ctx, w - 1) == UNW_CFI_FDE && is_return_address(ops, w)) {
                        regs[D9_DW_RIP] = w;
                        regs[D9_DW_RSP] = sp + off + 8;
                        return true;
                }
        }
        return false;
}

enum unw_step_kind unwind_step_no_cfi(const struct unw_step_ops *ops, uint64_t regs[D9_STACK_NREGS],
                                   enum unw_cfi cfi, bool leaf)
{
        /* A module without CFI was built with frame pointers or cannot be
         * unwound at all; elsewhere rbp is just another register. A leaf
         * may not have set up its frame yet: try it as frameless when the
         * frame pointer gives nothing. */
        if (cfi == UNW_CFI_NONE && step_fp(ops, regs))
                return UNW_STEP_FP;
        if (leaf && step_frameless(ops, regs))
                return UNW_STEP_FRAMELESS;
        if (step_scan(ops, regs))
                return UNW_STEP_SCAN;
        return UNW_STEP_NONE;
}
