/* synth.c: the synthetic Tokio of synth.h. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "synth.h"

#define PROBE_FN(name, body)                                                                \
        __asm__(".text\n.globl " #name "\n.type " #name ",@function\n.p2align 4\n" #name   \
                ":\n" body "\n.size " #name ", .-" #name "\n")

/* Tokio's raw::poll, wake_by_val, complete and park all start with push
 * (an emulated instruction): so do these. */
PROBE_FN(synth_push, "push %rbp\npop %rbp\nret");
PROBE_FN(synth_nop5, ".byte 0x0f,0x1f,0x44,0x00,0x00\nret");
PROBE_FN(synth_mov, "mov %rdi,%rax\nret");
PROBE_FN(synth_poll, "push %rbp\npop %rbp\nret");
PROBE_FN(synth_wake, "push %rbp\npop %rbp\nret");
PROBE_FN(synth_complete, "push %rbp\npop %rbp\nret");
PROBE_FN(synth_park, "push %rbp\npop %rbp\nret");
PROBE_FN(synth_bind, "push %rbp\nmov %rdi,%rax\npop %rbp\nret");

/* Header* -> vtable at +16, id offset in the vtable at +72, id at +32
 * (the layout the plan finds in the 1.24 targets). */
#define SYNTH_VTABLE_OFF 16
#define SYNTH_ID_OFF_SLOT 72
static uint64_t fake_vtable[16] = { [SYNTH_ID_OFF_SLOT / 8] = 32 };
static uint64_t fake_header[8] = { [4] = SYNTH_TASK_ID };
static uint64_t park_key = SYNTH_PARK_KEY;

void *synth_header(void)
{
        fake_header[SYNTH_VTABLE_OFF / 8] = (uint64_t)(uintptr_t)fake_vtable;
        return fake_header;
}

void *synth_park_key(void)
{
        return &park_key;
}

uint64_t synth_file_offset(synth_fn fn)
{
        uint64_t addr = (uint64_t)(uintptr_t)fn, lo, hi, pgoff;
        FILE *f = fopen("/proc/self/maps", "re");
        char line[512];

        while (f && fgets(line, sizeof(line), f))
                if (sscanf(line, "%" SCNx64 "-%" SCNx64 " %*s %" SCNx64, &lo, &hi, &pgoff) == 3 &&
                    addr >= lo && addr < hi) {
                        fclose(f);
                        return addr - lo + pgoff;
                }
        if (f)
                fclose(f);
        fprintf(stderr, "synth: %p not in /proc/self/maps\n", (void *)fn);
        exit(1);
}

static void add_point(struct probe_plan *plan, synth_fn fn, enum probe_kind kind,
                      enum probe_arg from, bool ret)
{
        struct probe_point *p = &plan->points[plan->n_points];

        p->file_offset = synth_file_offset(fn);
        p->kind = kind;
        p->cookie = plan->n_points++;
        p->insn = PROBE_INSN_EMULATED;
        p->value_from = from;
        p->uretprobe = ret;
}

void synth_plan(struct probe_plan *plan, struct probe_point *pts, char *exe)
{
        memset(plan, 0, sizeof(*plan));
        memset(pts, 0, 8 * sizeof(*pts));
        plan->exe_path = exe;
        plan->points = pts;
        plan->hdr_vtable_off = SYNTH_VTABLE_OFF;
        plan->vtable_id_off = SYNTH_ID_OFF_SLOT;
        synth_header();
        add_point(plan, synth_poll, PROBE_POLL, PROBE_ARG0, false);
        add_point(plan, synth_wake, PROBE_WAKE, PROBE_ARG0, false);
        add_point(plan, synth_complete, PROBE_COMPLETE, PROBE_ARG0, false);
        add_point(plan, synth_bind, PROBE_SPAWN, PROBE_ARG_RET, true);
        add_point(plan, synth_park, PROBE_PARK, PROBE_ARG0_DEREF, false);
        add_point(plan, synth_park, PROBE_UNPARK_RETURN, PROBE_ARG_NONE, true);
}
