/* unwind_step.c: steps for frames without CFI (see unwind_step.h). */
#include "daemon/record/unwind_step.h"

#include <stddef.h>

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

bool unwind_is_return_address(const struct unw_step_ops *ops, uint64_t ra)
{
        uint8_t code[16];

        return ra > 16 && ops->cfi_at(ops->ctx, ra - 1) != UNW_CFI_NO_MODULE &&
               ops->read_code(ops->ctx, ra, code) && unwind_call_ends_at(code);
}

static bool step_frameless(const struct unw_step_ops *ops, uint64_t *regs)
{
        uint64_t sp = regs[D9_DW_RSP], ra;

        if (!ops->read_word(ops->ctx, sp, &ra) || !unwind_is_return_address(ops, ra))
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

static int64_t rel32_at(const uint8_t *p)
{
        return (int32_t)(p[0] | p[1] << 8 | p[2] << 16 | (uint32_t)p[3] << 24);
}

/* Prologue code a function runs before pc, at most this many bytes. */
#define PROLOGUE_BYTES 48
#define PROLOGUE_PUSHES 8

/* What a prologue did by pc: the bytes of stack it took, and which
 * registers it pushed (DWARF numbers), the first right below the return
 * address. */
struct prologue {
        int64_t frame;
        uint8_t n_pushed, pushed[PROLOGUE_PUSHES];
};

/* DWARF numbers of the registers push opcodes 0x50-0x57 name. */
static const uint8_t push_dwarf[8] = { 0, 2, 1, 3, 7, 6, 4, 5 };

static void pushed(struct prologue *pr, uint8_t dwarf)
{
        pr->frame += 8;
        if (pr->n_pushed < PROLOGUE_PUSHES)
                pr->pushed[pr->n_pushed++] = dwarf;
}

/* The prologue of the function at fn up to pc: pushes and `sub rsp, imm`
 * (endbr64 and register-to-register moves between them), up to the first
 * other instruction; frame -1 if its code cannot be read. */
static struct prologue prologue_of(const struct unw_step_ops *ops, uint64_t fn, uint64_t pc)
{
        uint8_t c[PROLOGUE_BYTES + 8] = { 0 };
        struct prologue pr = { 0 };
        size_t i = 0;

        for (size_t k = 0; k < PROLOGUE_BYTES; k += 16) {
                if (!ops->read_code(ops->ctx, fn + k + 16, c + k)) {
                        pr.frame = -1;
                        return pr;
                }
        }
        while (i < PROLOGUE_BYTES && fn + i < pc) {
                const uint8_t *p = c + i;

                if (p[0] == 0xf3 && p[1] == 0x0f && p[2] == 0x1e && p[3] == 0xfa) {
                        i += 4;                                 /* endbr64 */
                } else if (p[0] >= 0x50 && p[0] <= 0x57) {
                        pushed(&pr, push_dwarf[p[0] - 0x50]);   /* push r64 */
                        i += 1;
                } else if (p[0] == 0x41 && p[1] >= 0x50 && p[1] <= 0x57) {
                        pushed(&pr, (uint8_t)(8 + p[1] - 0x50)); /* push r8-r15 */
                        i += 2;
                } else if ((p[0] & 0xf0) == 0x40 && (p[1] == 0x89 || p[1] == 0x63 || p[1] == 0x31 ||
                                                     p[1] == 0x33) && (p[2] >> 6) == 3) {
                        i += 3;                 /* mov, movslq, xor: r64, r64 */
                } else if ((p[0] == 0x89 || p[0] == 0x31 || p[0] == 0x33) && (p[1] >> 6) == 3) {
                        i += 2;                 /* mov, xor: r32, r32 */
                } else if (p[0] >= 0xb8 && p[0] <= 0xbf && p[0] != 0xbc) {
                        i += 5;                 /* mov r32, imm32 (musl's __timedwait) */
                } else if (p[0] == 0x41 && p[1] >= 0xb8 && p[1] <= 0xbf) {
                        i += 6;                 /* mov r8d-r15d, imm32 */
                } else if (p[0] == 0x48 && p[1] == 0x83 && p[2] == 0xec && p[3] < 0x80) {
                        pr.frame += p[3], i += 4;               /* sub rsp, imm8 */
                } else if (p[0] == 0x48 && p[1] == 0x81 && p[2] == 0xec) {
                        pr.frame += rel32_at(p + 3), i += 7;    /* sub rsp, imm32 */
                } else {
                        break;
                }
        }
        return pr;
}

/* Whether the frame at pc may be that of the function at fn, off bytes
 * big by then; *pr: its prologue. No FDE covers pc (that is why this step
 * runs), so a function with one is another: a stale return address can
 * pass the size check, left by an earlier call at the very same sp (npm
 * sandbox-agent: form_urlencoded's Parse::next, 0x88 bytes, 0xdc5b6 bytes
 * below fstatat's pc, where fstatat's frame held 0x88 bytes of locals). */
static bool frame_of(const struct unw_step_ops *ops, uint64_t fn, uint64_t off, uint64_t pc, struct prologue *pr)
{
        if (fn > pc || pc - fn >= (1u << 20) || ops->cfi_at(ops->ctx, fn) == UNW_CFI_FDE)
                return false;
        *pr = prologue_of(ops, fn, pc);
        return pr->frame == (int64_t)off;
}

/* The caller's registers pr's pushes saved, right below its return
 * address (at ra_at), back into regs. */
static void restore_pushed(const struct unw_step_ops *ops, uint64_t *regs, const struct prologue *pr,
                           uint64_t ra_at)
{
        uint64_t v;

        for (uint8_t k = 0; k < pr->n_pushed; k++)
                if (ops->read_word(ops->ctx, ra_at - 8 * (k + 1u), &v))
                        regs[pr->pushed[k]] = v;
}

/* A frame pointer the caller could be using: 8-aligned, above sp and
 * not far (frames of a few KiB; the copy is 8 KiB, a deep one 128). */
#define UNW_FP_REACH (256u << 10)

static bool fp_plausible(uint64_t bp, uint64_t sp)
{
        return !(bp & 7) && bp > sp && bp - sp < UNW_FP_REACH;
}

/* Code of a called function searched for a tail jump on. */
#define TAIL_JUMP_BYTES 64

/* Where the call that returns to ra went: a direct call, or one through a
 * GOT slot d9d can read. False: another kind (through a register), or
 * code not read. */
static bool call_target(const struct unw_step_ops *ops, uint64_t ra, uint64_t *fn)
{
        uint8_t code[16];

        if (!ops->read_code(ops->ctx, ra, code))
                return false;
        if (code[11] == 0xe8) {
                *fn = ra + (uint64_t)rel32_at(code + 12);
                return true;
        }
        return code[10] == 0xff && code[11] == 0x15 && ops->read_ptr &&
               ops->read_ptr(ops->ctx, ra + (uint64_t)rel32_at(code + 12), fn);
}

/* The functions a call to fn may have run in: fn, then each target of a
 * jmp rel32 in its first bytes (any e9 byte is a candidate: the caller's
 * check decides). Returns how many went into fns (at most max). */
static size_t call_lands_in(const struct unw_step_ops *ops, uint64_t fn, uint64_t *fns, size_t max)
{
        uint8_t code[TAIL_JUMP_BYTES];
        size_t n = 0;

        fns[n++] = fn;
        for (size_t k = 0; k < TAIL_JUMP_BYTES; k += 16)
                if (!ops->read_code(ops->ctx, fn + k + 16, code + k))
                        return n;
        for (size_t i = 0; i + 5 <= TAIL_JUMP_BYTES && n < max; i++) {
                uint64_t to = fn + i + 5 + (uint64_t)rel32_at(code + i + 1);

                if (code[i] == 0xe9 && to != fn)
                        fns[n++] = to;
        }
        return n;
}

/* Functions call_lands_in gives at most: fn and the jumps in its first
 * TAIL_JUMP_BYTES (each e9 byte a candidate). */
#define LANDS_MAX 16

/* Whether ra, off bytes above sp in a frame at pc, is that frame's own
 * return address: the call before it goes to the function pc is in, or to
 * one that jumps on to it (musl's fstat and lstat end `jmp fstatat`), whose
 * prologue took exactly off bytes by pc. The call is a direct one, or one
 * through a GOT slot (`call *fstat@GOT(%rip)`, as Rust's static-pie builds
 * call libc). A stale return address in the frame's uninitialised locals
 * (of an earlier call from the caller, to memcpy say) fails that. */
static bool called_into(const struct unw_step_ops *ops, uint64_t ra, uint64_t off, uint64_t pc,
                        struct prologue *pr)
{
        uint64_t fn, fns[LANDS_MAX];
        size_t n;

        if (!call_target(ops, ra, &fn))
                return false;
        n = call_lands_in(ops, fn, fns, LANDS_MAX);
        for (size_t i = 0; i < n; i++)
                if (frame_of(ops, fns[i], off, pc, pr))
                        return true;
        return false;
}

/* Whether the code at fn jumps on through a GOT slot (a PLT entry:
 * `jmp *slot(%rip)`, after endbr64 and a bnd prefix if any). */
static bool jump_stub(const struct unw_step_ops *ops, uint64_t fn)
{
        uint8_t c[16];
        size_t i = 0;

        if (!ops->read_code(ops->ctx, fn + 16, c))
                return false;
        if (c[0] == 0xf3 && c[1] == 0x0f && c[2] == 0x1e && c[3] == 0xfa)
                i = 4;
        if (c[i] == 0xf2)
                i++;
        return c[i] == 0xff && c[i + 1] == 0x25;
}

/* Whether ra's call can have led to the frame a scan leaves: that frame
 * has no FDE, nor has any the scan steps over (their return addresses are
 * into code without one), so a direct call to a function with an FDE did
 * not, unless it is a stub jumping on. A stale return address from an
 * earlier call of the vDSO's clock_gettime into its own helper lay in
 * musl's epoll wrapper's frame (npm codex: 24 of 1,064 stacks of workers
 * in epoll went on from "clock_gettime" and ended there). */
static bool call_fits_no_cfi(const struct unw_step_ops *ops, uint64_t ra)
{
        uint64_t fn;

        return !call_target(ops, ra, &fn) || ops->cfi_at(ops->ctx, fn) != UNW_CFI_FDE || jump_stub(ops, fn);
}

/* After an unverified scan to ra (at ra_at): the registers the function
 * ra's call went to pushed, right below ra, when its prologue (or that of
 * a function it jumps on to) pushed rbp and that word looks like a frame
 * pointer: the caller's CFA may be rbp, which a callee reused (npm codex:
 * musl's futex wait, __timedwait by its shape, keeps a pointer in rbp;
 * its Rust caller, which called a lock whose fast path jumps on to a slow
 * path that pushed rbp fourth, lost its rbp-based frame, and 4 % of the
 * stacks ended there, unmarked).
 * False: nothing such found. */
static bool saved_by_callee(const struct unw_step_ops *ops, uint64_t *regs, uint64_t ra, uint64_t ra_at)
{
        uint64_t fn, fns[LANDS_MAX], v;
        size_t n;

        if (!call_target(ops, ra, &fn))
                return false;
        n = call_lands_in(ops, fn, fns, LANDS_MAX);
        for (size_t i = 0; i < n; i++) {
                struct prologue pr;
                int rbp_at = -1;

                if (ops->cfi_at(ops->ctx, fns[i]) == UNW_CFI_FDE)
                        continue;
                pr = prologue_of(ops, fns[i], fns[i] + PROLOGUE_BYTES);
                for (uint8_t k = 0; k < pr.n_pushed; k++)
                        if (pr.pushed[k] == D9_DW_RBP)
                                rbp_at = k;
                if (rbp_at < 0 || !ops->read_word(ops->ctx, ra_at - 8 * (rbp_at + 1u), &v) ||
                    !fp_plausible(v, ra_at + 8))
                        continue;
                restore_pushed(ops, regs, &pr, ra_at);
                return true;
        }
        return false;
}

/* After an unverified scan from a function without CFI: if that function
 * reused rbp (musl's syscall: `push %rbp; mov %rdi,%rbp`, the syscall
 * number in it), a caller whose CFA is rbp-based cannot be stepped (npm
 * onshape-mcp, Rust std with frame pointers: 41,382 of 44,895 off-CPU
 * stacks ended at Condvar::wait, which calls syscall through a register,
 * so called_into cannot confirm the call). A function that pushes rbp
 * pushes it first, right below its return address: take that word when it
 * looks like a frame pointer and rbp does not. */
static void fp_from_below_return(const struct unw_step_ops *ops, uint64_t *regs, uint64_t ra_at)
{
        uint64_t caller_sp = ra_at + 8, v;

        if (fp_plausible(regs[D9_DW_RBP], caller_sp) || !ops->read_word(ops->ctx, ra_at - 8, &v) ||
            !fp_plausible(v, caller_sp))
                return;
        regs[D9_DW_RBP] = v;
}

/* verified: only a return address called_into confirms, into any code d9d
 * reads (a musl function calling another has no FDE either). Else the
 * first return address into code with an FDE: from there libdw takes over
 * again, and a stale address is less likely to pass both checks. */
static bool step_scan(const struct unw_step_ops *ops, uint64_t *regs, bool verified, uint64_t from, uint64_t to)
{
        uint64_t sp = regs[D9_DW_RSP], pc = regs[D9_DW_RIP], w;
        struct prologue pr = { 0 };

        for (uint64_t off = from; off < to; off += 8) {
                if (!ops->read_word(ops->ctx, sp + off, &w))
                        return false;
                if (!unwind_is_return_address(ops, w))
                        continue;
                if (verified ? called_into(ops, w, off, pc, &pr)
                             : ops->cfi_at(ops->ctx, w - 1) == UNW_CFI_FDE && call_fits_no_cfi(ops, w)) {
                        /* The caller's registers the prologue saved: its
                         * CFA may be rbp, which the function reused (a
                         * frame-pointer build's caller of musl's fstatat). */
                        if (verified)
                                restore_pushed(ops, regs, &pr, sp + off);
                        if (!verified && off >= 8 && !saved_by_callee(ops, regs, w, sp + off))
                                fp_from_below_return(ops, regs, sp + off);
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
        /* A return address whose call and prologue fit the frame comes
         * first: musl's fstatat keeps 0xc8 bytes, and its uninitialised
         * locals held stale return addresses into code with FDEs, which
         * the plain scan took (npm sandbox-agent: 125 of 142 stacks through
         * it went on from a wrong frame, or ended). */
        if (step_scan(ops, regs, true, 0, UNW_SCAN_BYTES))
                return UNW_STEP_SCAN;
        if (leaf && step_frameless(ops, regs))
                return UNW_STEP_FRAMELESS;
        if (step_scan(ops, regs, false, 0, UNW_SCAN_BYTES))
                return UNW_STEP_SCAN;
        /* Last, a bigger frame, verified only: musl's posix_spawn keeps
         * 0x1628 bytes and six pushes, so its caller's return address is
         * 5.7 KiB up (npm codex: every stack through it, 23 of 23, ended
         * there unmarked). Only a return address whose call and prologue
         * fit that exactly is taken; a thread's outermost frame gets here
         * too, with little of the copy left above it. */
        if (step_scan(ops, regs, true, UNW_SCAN_BYTES, UNW_FIT_SCAN_BYTES))
                return UNW_STEP_SCAN;
        return UNW_STEP_NONE;
}
