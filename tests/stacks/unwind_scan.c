/* The unwinder's step out of a frame without CFI (daemon/record/unwind_step.c)
 * over a synthetic stack and code laid out as npm sandbox-agent's (a Rust
 * musl static-pie, frame pointers): musl's fstatat has no FDE and keeps
 * 0xc8 bytes (push r12; mov; mov; push rbp; push rbx; mov; sub rsp, 0xb0),
 * its locals hold stale return addresses of the caller's earlier calls, and
 * its caller reached it through fstat's tail jump, called through a GOT
 * slot. The step must take the real return address (not the first return
 * address into code with an FDE, as it did), and give the caller back its
 * rbp, which fstatat reused (the caller's CFA is rbp). */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "daemon/record/unwind_step.h"
#include "../tap.h"

enum {
        CODE = 0x1000, CODE_LEN = 0x2000,
        PARSE = 0x1040,         /* has an FDE; frame 0x88, as form_urlencoded's */
        FSTAT = 0x1100,         /* test edi; jns; ...; jmp fstatat */
        FSTATAT = 0x1200,       /* no FDE */
        PC = FSTATAT + 0x37,    /* after its first syscall */
        CALLER = 0x1800,        /* has an FDE */
        STALE_CALL = 0x1900,    /* call rel32 to GROW, an earlier call */
        GOT_CALL = 0x1a00,      /* call *FSTAT@GOT(%rip) */
        PARSE_CALL = 0x1b00,    /* call rel32 to PARSE, an earlier call */
        GROW = 0x1c00,          /* has an FDE */
        SYSCALL = 0x1300,       /* no FDE: musl's syscall() */
        REG_CALL = 0x1d00,      /* call *%r13 (to SYSCALL) */
        GOT = 0x4000,
        SP = 0x7000,
};

struct fake {
        uint8_t code[CODE_LEN];
        uint64_t stack[1024];
        bool got_readable;
};

static bool read_word(void *ctx, uint64_t addr, uint64_t *val)
{
        struct fake *f = ctx;

        if (addr < SP || addr + 8 > SP + sizeof(f->stack))
                return false;
        memcpy(val, (uint8_t *)f->stack + (addr - SP), 8);
        return true;
}

static bool read_code(void *ctx, uint64_t addr, uint8_t code[16])
{
        struct fake *f = ctx;

        if (addr < CODE + 16 || addr > CODE + CODE_LEN)
                return false;
        memcpy(code, f->code + (addr - 16 - CODE), 16);
        return true;
}

static bool read_ptr(void *ctx, uint64_t addr, uint64_t *val)
{
        struct fake *f = ctx;

        *val = FSTAT;
        return f->got_readable && addr == GOT;
}

static enum unw_cfi cfi_at(void *ctx, uint64_t pc)
{
        (void)ctx;
        if (pc < CODE || pc >= CODE + CODE_LEN)
                return UNW_CFI_NO_MODULE;
        return pc >= CALLER || (pc >= PARSE && pc < PARSE + 0x40) ? UNW_CFI_FDE : UNW_CFI_NO_FDE;
}

static void put(struct fake *f, uint64_t at, const uint8_t *bytes, size_t n)
{
        memcpy(f->code + (at - CODE), bytes, n);
}

static void put_rel32(struct fake *f, uint64_t at, uint64_t to)
{
        int32_t rel = (int32_t)(to - (at + 4));  /* from the end of the instruction */

        memcpy(f->code + (at - CODE), &rel, 4);
}

static void build(struct fake *f, bool got_readable)
{
        static const uint8_t fstatat[] = {
                0x41, 0x54, 0x41, 0x89, 0xf8, 0x49, 0x89, 0xf1, 0x55, 0x53, 0x48, 0x89, 0xd3,
                0x48, 0x81, 0xec, 0xb0, 0x00, 0x00, 0x00, 0x48, 0x8d, 0x6c, 0x24, 0x20,
        };
        static const uint8_t fstat[] = { 0x85, 0xff, 0x79, 0x0f, 0x50, 0x5a, 0xc3 };
        static const uint8_t got_call[] = { 0xff, 0x15 };
        /* push r15; push r14; push rbx; sub rsp, 0x70 */
        static const uint8_t parse[] = { 0x41, 0x57, 0x41, 0x56, 0x53, 0x48, 0x83, 0xec, 0x70 };

        memset(f, 0, sizeof(*f));
        memset(f->code, 0x90, sizeof(f->code));
        f->got_readable = got_readable;
        put(f, FSTATAT, fstatat, sizeof(fstatat));
        put(f, FSTAT, fstat, sizeof(fstat));
        put(f, PARSE, parse, sizeof(parse));
        f->code[FSTAT + 0x22 - CODE] = 0xe9;                    /* jmp fstatat */
        put_rel32(f, FSTAT + 0x23, FSTATAT);
        f->code[STALE_CALL - 5 - CODE] = 0xe8;                  /* call grow */
        put_rel32(f, STALE_CALL - 4, GROW);
        put(f, GOT_CALL - 6, got_call, sizeof(got_call));       /* call *GOT(%rip) */
        put_rel32(f, GOT_CALL - 4, GOT);
        f->code[PARSE_CALL - 5 - CODE] = 0xe8;                  /* call parse */
        put_rel32(f, PARSE_CALL - 4, PARSE);
        /* fstatat's frame: its locals (stale: the caller's call of grow,
         * twice), then rbx, rbp, r12 as pushed, then the return address. */
        f->stack[2] = STALE_CALL;
        f->stack[9] = STALE_CALL;
        f->stack[0xc8 / 8 - 3] = 0x3333;                        /* rbx */
        f->stack[0xc8 / 8 - 2] = SP + 0x200;                    /* the caller's rbp */
        f->stack[0xc8 / 8 - 1] = 0x1212;                        /* r12 */
        f->stack[0xc8 / 8] = GOT_CALL;
}

/* npm onshape-mcp (musl static-pie, Rust std with frame pointers): std's
 * Condvar::wait (CFA rbp+16) calls musl's syscall() through a register;
 * syscall pushes rbp, puts the syscall number in it and keeps 0x58 bytes. */
static void build_syscall(struct fake *f)
{
        /* push rbp; mov rdi, rbp; sub rsp, 0x50; ... syscall */
        static const uint8_t syscall_fn[] = { 0x55, 0x48, 0x89, 0xfd, 0x48, 0x83, 0xec, 0x50 };
        static const uint8_t reg_call[] = { 0x41, 0xff, 0xd5 };

        memset(f, 0, sizeof(*f));
        memset(f->code, 0x90, sizeof(f->code));
        put(f, SYSCALL, syscall_fn, sizeof(syscall_fn));
        f->code[SYSCALL + 0x59 - CODE] = 0x0f;
        f->code[SYSCALL + 0x5a - CODE] = 0x05;
        put(f, REG_CALL - 3, reg_call, sizeof(reg_call));
        f->stack[1] = 8;                                        /* locals: the futex args */
        f->stack[2] = SP + 0x60;
        f->stack[0x50 / 8] = SP + 0xb0;                         /* the caller's rbp */
        f->stack[0x58 / 8] = REG_CALL;
}

/* npm codex (musl static-pie, Tokio): a Rust caller (CFA rbp+16) calls
 * pthread_mutex_lock, whose fast path jumps on to the slow path (push r14;
 * mov; push r13; push r12; push rbp; push rbx; mov; sub rsp, 0x10), which
 * calls __timedwait (no FDE, a `mov $imm, %eax` among its pushes, rbp
 * reused for a pointer, 72 bytes deep at its call: more than its
 * prologue's 56). Nothing verifies; the plain scan steps over the slow
 * path's frame (its return address is into code without an FDE) to the
 * caller, past a stale return address from an earlier call of a function
 * with an FDE (the vDSO's helper, in the epoll wrapper's frame). */
enum {
        LOCK = 0x1400,          /* no FDE: mov (%rdi),%eax; ...; jmp SLOW */
        SLOW = 0x1480,          /* no FDE */
        TIMEDWAIT = 0x1500,     /* no FDE */
        TW_PC = TIMEDWAIT + 0x90,
        SLOW_RA = SLOW + 0x40,  /* after its call of __timedwait */
        LOCK_CALL = 0x1e00,     /* has an FDE: the Rust caller's call of LOCK */
};

static void build_codex(struct fake *f)
{
        static const uint8_t lock[] = { 0x8b, 0x07, 0x85, 0xc0, 0x75, 0x02, 0xc3, 0x90 };
        static const uint8_t slow[] = { 0x41, 0x56, 0x49, 0x89, 0xfe, 0x41, 0x55, 0x41, 0x54, 0x55, 0x53,
                                        0x48, 0x89, 0xf3, 0x48, 0x83, 0xec, 0x10 };
        static const uint8_t timedwait[] = { 0x41, 0x56, 0xb8, 0x80, 0x00, 0x00, 0x00, 0x41, 0x55, 0x41, 0x54,
                                             0x55, 0x53, 0x48, 0x83, 0xec, 0x10 };

        memset(f, 0, sizeof(*f));
        memset(f->code, 0x90, sizeof(f->code));
        put(f, LOCK, lock, sizeof(lock));
        f->code[LOCK + 8 - CODE] = 0xe9;                        /* jmp SLOW */
        put_rel32(f, LOCK + 9, SLOW);
        put(f, SLOW, slow, sizeof(slow));
        f->code[SLOW_RA - 5 - CODE] = 0xe8;                     /* call __timedwait */
        put_rel32(f, SLOW_RA - 4, TIMEDWAIT);
        put(f, TIMEDWAIT, timedwait, sizeof(timedwait));
        f->code[LOCK_CALL - 5 - CODE] = 0xe8;                   /* call pthread_mutex_lock */
        put_rel32(f, LOCK_CALL - 4, LOCK);
        f->code[STALE_CALL - 5 - CODE] = 0xe8;                  /* call grow */
        put_rel32(f, STALE_CALL - 4, GROW);
        /* __timedwait's 72 bytes, a stale return address among them, then
         * the slow path's 56 and the caller's return address; the slow
         * path pushed the caller's rbp fourth. */
        f->stack[3] = STALE_CALL;
        f->stack[72 / 8] = SLOW_RA;
        f->stack[(72 + 8 + 56) / 8 - 4] = SP + 0x300;           /* the caller's rbp */
        f->stack[(72 + 8 + 56) / 8 - 5] = 0x3333;               /* rbx */
        f->stack[(72 + 8 + 56) / 8] = LOCK_CALL;
}

/* npm codex: musl's posix_spawn (no FDE) pushes six registers and takes
 * 0x1628 bytes more, so its caller's return address is 0x1658 bytes above
 * its sp; its locals hold nothing that looks like a return address. */
enum {
        SPAWN = 0x1580,         /* no FDE */
        SPAWN_PC = SPAWN + 0x60,
        SPAWN_FRAME = 6 * 8 + 0x1628,
        SPAWN_CALL = 0x1f00,    /* has an FDE: the Rust caller's call of SPAWN */
};

static void build_spawn(struct fake *f)
{
        /* push r15; push r14; push r13; push r12; push rbp; push rbx; sub rsp, 0x1628 */
        static const uint8_t spawn[] = { 0x41, 0x57, 0x41, 0x56, 0x41, 0x55, 0x41, 0x54, 0x55, 0x53,
                                         0x48, 0x81, 0xec, 0x28, 0x16, 0x00, 0x00 };

        memset(f, 0, sizeof(*f));
        memset(f->code, 0x90, sizeof(f->code));
        put(f, SPAWN, spawn, sizeof(spawn));
        f->code[SPAWN_CALL - 5 - CODE] = 0xe8;                  /* call posix_spawn */
        put_rel32(f, SPAWN_CALL - 4, SPAWN);
        f->stack[SPAWN_FRAME / 8 - 5] = SP + 0x2000;            /* the caller's rbp */
        f->stack[SPAWN_FRAME / 8] = SPAWN_CALL;
}

static uint64_t step(struct fake *f, uint64_t *regs, bool leaf)
{
        const struct unw_step_ops ops = {
                .read_word = read_word, .read_code = read_code, .read_ptr = read_ptr, .cfi_at = cfi_at, .ctx = f,
        };

        memset(regs, 0, D9_STACK_NREGS * sizeof(*regs));
        regs[D9_DW_RIP] = PC;
        regs[D9_DW_RSP] = SP;
        regs[D9_DW_RBP] = SP + 0x20;                            /* fstatat's own use of it */
        return unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, leaf);
}

int main(void)
{
        static struct fake f;
        uint64_t regs[D9_STACK_NREGS];
        enum unw_step_kind k;

        build(&f, true);
        k = step(&f, regs, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == GOT_CALL && regs[D9_DW_RSP] == SP + 0xc8 + 8,
           "the return address the call and prologue fit (through the GOT, fstat's tail jump, 0xc8 bytes), "
           "not a stale one below it (pc %#llx, sp +%#llx)", (unsigned long long)regs[D9_DW_RIP],
           (unsigned long long)(regs[D9_DW_RSP] - SP));
        ok(regs[D9_DW_RBP] == SP + 0x200 && regs[3] == 0x3333 && regs[12] == 0x1212,
           "the caller gets back the registers the prologue pushed: rbp %#llx, rbx %#llx, r12 %#llx",
           (unsigned long long)regs[D9_DW_RBP], (unsigned long long)regs[3], (unsigned long long)regs[12]);

        /* Without the slot's target nothing fits: the plain scan takes the
         * first return address into code with an FDE whose call can have
         * led here. The stale one's call went to grow, which has an FDE
         * and no frame the scan steps over can be its (before: taken). */
        build(&f, false);
        k = step(&f, regs, false);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == GOT_CALL && regs[D9_DW_RSP] == SP + 0xc8 + 8,
           "nothing verified: the plain scan's first return address into code with an FDE, not one whose call "
           "went to a function with an FDE (%#llx)", (unsigned long long)regs[D9_DW_RIP]);

        /* A stale return address whose call went elsewhere at exactly the
         * frame's size is not taken for one that fits: grow's prologue is
         * empty, so it fits only at offset 0. */
        build(&f, true);
        f.stack[0] = STALE_CALL;
        k = step(&f, regs, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == GOT_CALL,
           "a leaf's word at sp, a return address from a call elsewhere, does not pass as frameless (%#llx)",
           (unsigned long long)regs[D9_DW_RIP]);

        /* The caller's earlier call of a function below pc, whose frame
         * then began at this very sp: its return address sits exactly its
         * prologue's 0x88 bytes up, and passed (npm sandbox-agent, 5 of 30
         * stacks through fstatat went on in serde_urlencoded). That
         * function has an FDE, and pc has none: another function. */
        build(&f, true);
        f.stack[0x88 / 8] = PARSE_CALL;
        k = step(&f, regs, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == GOT_CALL,
           "a stale return address from a call of a function with an FDE below pc, its frame's size up, "
           "is not taken (%#llx)", (unsigned long long)regs[D9_DW_RIP]);

        /* Through a register the call cannot be confirmed: the plain scan
         * takes the return address, and the caller needs its rbp back from
         * right below it (syscall left 202, SYS_futex, in rbp; before, 41,382
         * of 44,895 off-CPU stacks ended at Condvar::wait). */
        const struct unw_step_ops ops = {
                .read_word = read_word, .read_code = read_code, .read_ptr = read_ptr, .cfi_at = cfi_at, .ctx = &f,
        };
        build_syscall(&f);
        memset(regs, 0, sizeof(regs));
        regs[D9_DW_RIP] = SYSCALL + 0x5b;
        regs[D9_DW_RSP] = SP;
        regs[D9_DW_RBP] = 202;
        k = unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == REG_CALL && regs[D9_DW_RSP] == SP + 0x60 &&
                   regs[D9_DW_RBP] == SP + 0xb0,
           "a call through a register into a function that reused rbp: the caller's rbp from below the return "
           "address (pc %#llx, sp +%#llx, rbp %#llx)", (unsigned long long)regs[D9_DW_RIP],
           (unsigned long long)(regs[D9_DW_RSP] - SP), (unsigned long long)regs[D9_DW_RBP]);

        /* A function that left rbp alone: a frame pointer still there is
         * kept, whatever lies below the return address. */
        memset(regs, 0, sizeof(regs));
        regs[D9_DW_RIP] = SYSCALL + 0x5b;
        regs[D9_DW_RSP] = SP;
        regs[D9_DW_RBP] = SP + 0x300;
        k = unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RBP] == SP + 0x300,
           "a plausible frame pointer in rbp is kept (rbp %#llx)", (unsigned long long)regs[D9_DW_RBP]);

        /* npm codex: the caller's rbp from the slow path's pushes, reached
         * through the lock's jump, though rbp looks like a frame pointer. */
        build_codex(&f);
        memset(regs, 0, sizeof(regs));
        regs[D9_DW_RIP] = TW_PC;
        regs[D9_DW_RSP] = SP;
        regs[D9_DW_RBP] = SP + 0x40;                            /* __timedwait's pointer */
        k = unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, false);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == LOCK_CALL && regs[D9_DW_RSP] == SP + 72 + 8 + 56 + 8,
           "over a frame without an FDE to the caller, past a stale return address whose call went to a "
           "function with an FDE (pc %#llx, sp +%#llx)", (unsigned long long)regs[D9_DW_RIP],
           (unsigned long long)(regs[D9_DW_RSP] - SP));
        ok(regs[D9_DW_RBP] == SP + 0x300 && regs[3] == 0x3333,
           "the caller's rbp and rbx from the pushes of the function its call jumped on to (rbp %#llx, rbx %#llx)",
           (unsigned long long)regs[D9_DW_RBP], (unsigned long long)regs[3]);

        /* A frame bigger than the plain scans look at: only a return address
         * whose call and prologue fit it exactly, further up. */
        build_spawn(&f);
        memset(regs, 0, sizeof(regs));
        regs[D9_DW_RIP] = SPAWN_PC;
        regs[D9_DW_RSP] = SP;
        k = unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, true);
        ok(k == UNW_STEP_SCAN && regs[D9_DW_RIP] == SPAWN_CALL && regs[D9_DW_RSP] == SP + SPAWN_FRAME + 8 &&
                   regs[D9_DW_RBP] == SP + 0x2000,
           "a 5.7 KiB frame without an FDE (musl's posix_spawn): its caller from the return address its call and "
           "prologue fit, 0x%x bytes up, with its rbp (pc %#llx, sp +%#llx)", SPAWN_FRAME,
           (unsigned long long)regs[D9_DW_RIP], (unsigned long long)(regs[D9_DW_RSP] - SP));
        build_spawn(&f);
        f.stack[SPAWN_FRAME / 8] = 0;
        f.stack[SPAWN_FRAME / 8 + 2] = SPAWN_CALL;
        memset(regs, 0, sizeof(regs));
        regs[D9_DW_RIP] = SPAWN_PC;
        regs[D9_DW_RSP] = SP;
        k = unwind_step_no_cfi(&ops, regs, UNW_CFI_NO_FDE, true);
        ok(k == UNW_STEP_NONE, "the same return address 16 bytes off the frame's size is not taken (step %d)", k);
        return tap_done();
}
