/* uprobe-insn-cost: what one uprobe hit costs on this kernel, by the class of
 * the probed first instruction, next to the class uprobes/x86_insn.c assigns.
 *
 * Tiny functions with a chosen first instruction live in this binary; each is
 * called in a loop without and then with a uprobe (perf_event_open on the
 * uprobe PMU, no BPF program: the bare cost of the trap plus emulation or
 * single-step) and the difference per call is printed. Run as root:
 *   build-x/bench/uprobe-insn-cost [calls]                                  */
#include <errno.h>
#include <inttypes.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "uprobes_int.h"
#include "uprobe_pmu.h"

/* Each probe target: a global function whose first instruction is the one
 * under test, written in assembly so the compiler cannot change it. */
#define PROBE_FN(name, body) \
        __asm__(".text\n.globl " #name "\n.type " #name ",@function\n" #name ":\n" body "\n.size " #name ", .-" #name "\n")

PROBE_FN(ic_push_rbp, "push %rbp\npop %rbp\nret");
PROBE_FN(ic_push_r12, "push %r12\npop %r12\nret");
PROBE_FN(ic_jmp, "jmp 1f\n1: ret");
PROBE_FN(ic_nop1, "nop\nret");
PROBE_FN(ic_nop5, ".byte 0x0f,0x1f,0x44,0x00,0x00\nret");
PROBE_FN(ic_endbr64, "endbr64\nret");
PROBE_FN(ic_push_imm, "push $0\npop %rax\nret");
PROBE_FN(ic_sub_rsp, "sub $8, %rsp\nadd $8, %rsp\nret");
PROBE_FN(ic_mov, "mov %rdi, %rax\nret");
PROBE_FN(ic_ret, "ret");

extern char __executable_start[];
void ic_push_rbp(void), ic_push_r12(void), ic_jmp(void), ic_nop1(void), ic_nop5(void),
        ic_endbr64(void), ic_push_imm(void), ic_sub_rsp(void), ic_mov(void), ic_ret(void);

static const struct {
        const char *name;
        void (*fn)(void);
} targets[] = {
        { "push %rbp", ic_push_rbp }, { "push %r12", ic_push_r12 }, { "jmp rel8", ic_jmp },
        { "nop", ic_nop1 }, { "nopl 5-byte", ic_nop5 }, { "endbr64", ic_endbr64 },
        { "push $imm", ic_push_imm }, { "sub $8,%rsp", ic_sub_rsp }, { "mov %rdi,%rax", ic_mov },
        { "ret", ic_ret },
};

static double now_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double ns_per_call(void (*fn)(void), long calls)
{
        void (*volatile call)(void) = fn;
        double t0 = now_ns();

        for (long i = 0; i < calls; i++)
                call();
        return (now_ns() - t0) / (double)calls;
}

int main(int argc, char **argv)
{
        long calls = argc > 1 ? atol(argv[1]) : 200000;
        int type = uprobe_pmu_type();
        struct elf_image *img = NULL;
        char *err = NULL;
        char exe[4096];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

        if (type < 0 || n < 0) {
                fprintf(stderr, "uprobe-insn-cost: no uprobe PMU (/sys/bus/event_source/devices/uprobe)\n");
                return 1;
        }
        exe[n] = 0;
        if (d9_elf_image_open(exe, &img, &err) < 0) {
                fprintf(stderr, "uprobe-insn-cost: %s\n", err);
                return 1;
        }
        /* Load bias: where the ELF header (first PT_LOAD, file offset 0) is
         * mapped minus its link-time address. */
        uint64_t bias = (uint64_t)(uintptr_t)__executable_start - img->segs[0].vaddr;

        printf("%-14s %-12s %10s %10s %10s %8s\n", "first insn", "our class", "bare ns", "probed ns",
               "cost ns", "hits");
        for (size_t i = 0; i < sizeof(targets) / sizeof(targets[0]); i++) {
                uint64_t vaddr = (uint64_t)(uintptr_t)targets[i].fn - bias, off, hits = 0;
                const uint8_t *code = d9_elf_vaddr_bytes(img, vaddr, 8);
                struct x86_insn in;
                int fd;

                if (!code || d9_elf_vaddr_to_offset(img, vaddr, &off) < 0) {
                        fprintf(stderr, "uprobe-insn-cost: cannot map %s\n", targets[i].name);
                        return 1;
                }
                uprobes_x86_decode(code, 8, &in);
                double bare = ns_per_call(targets[i].fn, calls);
                fd = uprobe_pmu_open(exe, off, true);
                if (fd < 0) {
                        fprintf(stderr, "uprobe-insn-cost: perf_event_open(%s): %s\n", targets[i].name,
                                strerror(errno));
                        return 1;
                }
                ioctl(fd, PERF_EVENT_IOC_ENABLE, 0);
                double probed = ns_per_call(targets[i].fn, calls);
                ioctl(fd, PERF_EVENT_IOC_DISABLE, 0);
                if (read(fd, &hits, sizeof(hits)) != sizeof(hits))
                        hits = 0;
                close(fd);
                printf("%-14s %-12s %10.1f %10.1f %10.1f %8" PRIu64 "%s\n", targets[i].name,
                       in.cls == PROBE_INSN_EMULATED ? "emulated" : "single-step", bare, probed,
                       probed - bare, hits, hits == (uint64_t)calls ? "" : "  (hits != calls!)");
        }
        d9_elf_image_free(img);
        return 0;
}
