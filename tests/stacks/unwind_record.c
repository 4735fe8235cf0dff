/* The unwinder (daemon/record/unwind.c) on STACK records written here, for
 * code of this very executable whose CFI is known (hand-written below), so
 * each edge of the record is met on purpose:
 *  - a leaf sampled at `ret` right after `pop %rbp`: the CFI still says rbp
 *    is saved at the CFA less 16, a word just popped and below the copy;
 *    its value is in rbp, and the rbp-framed caller's caller is found
 *    (npm sideseat: such stacks ended one caller later, unmarked);
 *  - the caller's frame in stack pages BPF found not in memory (unread_at,
 *    unread_len): the walk stops there and says so (unwinder_last_unread),
 *    not "cut at the copy's end" nor a whole stack;
 *  - a map read while ld.so was still mapping a file (the file read-only
 *    over its whole range, its text not yet mapped over it): a leaf there
 *    gets a newer map asked for and built, and the stack is walked with
 *    that file's CFI. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bpf/d9_events.h"
#include "daemon/core/cleanup.h"
#include "daemon/record/unwind.h"
#include "../tap.h"

/* leaf: push rbp; mov rsp, rbp; pop rbp; ret, with the CFI LLVM writes
 * (no restore of rbp after the pop). caller: rbp-framed, calls leaf.
 * outer: calls caller. */
__asm__(".text\n"
        ".globl d9t_leaf\n.type d9t_leaf,@function\n"
        "d9t_leaf:\n.cfi_startproc\n"
        "push %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset %rbp, -16\n"
        "mov %rsp, %rbp\n.cfi_def_cfa_register %rbp\n"
        "nop\n"
        "pop %rbp\n.cfi_def_cfa %rsp, 8\n"
        ".globl d9t_leaf_ret\nd9t_leaf_ret:\n"
        "ret\n.cfi_endproc\n.size d9t_leaf, .-d9t_leaf\n"
        ".globl d9t_caller\n.type d9t_caller,@function\n"
        "d9t_caller:\n.cfi_startproc\n"
        "push %rbp\n.cfi_def_cfa_offset 16\n.cfi_offset %rbp, -16\n"
        "mov %rsp, %rbp\n.cfi_def_cfa_register %rbp\n"
        "call d9t_leaf\n"
        ".globl d9t_caller_ra\nd9t_caller_ra:\n"
        "pop %rbp\n.cfi_def_cfa %rsp, 8\n"
        "ret\n.cfi_endproc\n.size d9t_caller, .-d9t_caller\n"
        ".globl d9t_outer\n.type d9t_outer,@function\n"
        "d9t_outer:\n.cfi_startproc\n"
        "sub $8, %rsp\n.cfi_def_cfa_offset 16\n"
        "call d9t_caller\n"
        ".globl d9t_outer_ra\nd9t_outer_ra:\n"
        "add $8, %rsp\n.cfi_def_cfa_offset 8\n"
        "ret\n.cfi_endproc\n.size d9t_outer, .-d9t_outer\n");

extern char d9t_leaf_ret[], d9t_caller_ra[], d9t_outer_ra[];

enum { COPY = 256, CALLER_RBP = 64 };   /* the caller's saved rbp at sp + 64 */

/* A record of a thread stopped at the leaf's ret: [sp] the caller's return
 * address, the caller's frame at sp + 64 (its caller's rbp, 0, then the
 * return address into outer), rbp = sp + 64 (the popped value). */
static struct d9_rec_stack *leaf_record(uint64_t sp)
{
        struct d9_rec_stack *r = calloc(1, sizeof(*r));
        uint64_t words[COPY / 8] = { 0 };

        if (!r)
                return NULL;
        r->hdr.type = D9_REC_STACK;
        r->hdr.tid = (uint32_t)getpid();
        r->stack_id = 1;
        r->regs[D9_DW_RIP] = (uint64_t)(uintptr_t)d9t_leaf_ret;
        r->regs[D9_DW_RSP] = sp;
        r->regs[D9_DW_RBP] = sp + CALLER_RBP;
        r->user_len = COPY;
        words[0] = (uint64_t)(uintptr_t)d9t_caller_ra;
        words[CALLER_RBP / 8] = 0;
        words[CALLER_RBP / 8 + 1] = (uint64_t)(uintptr_t)d9t_outer_ra;
        memcpy(r->data, words, COPY);
        return r;
}

/* Whether frames[] holds the three return points, in order, from i. */
static int found(const uint64_t *frames, int n, uint64_t addr)
{
        for (int i = 0; i < n; i++)
                if (frames[i] == addr || frames[i] == addr - 1)
                        return i;
        return -1;
}

/* This process's map, with the executable mapping holding addr shown as
 * ld.so leaves it before it maps the text: read-only. */
static char *map_without_text_at(uint64_t addr)
{
        _cleanup_fclose_ FILE *f = fopen("/proc/self/maps", "r");
        char *out = NULL, line[4096];
        size_t len = 0;
        FILE *o;

        if (!f || !(o = open_memstream(&out, &len)))
                return NULL;
        while (fgets(line, sizeof(line), f)) {
                unsigned long long lo, hi;
                char *perms = strchr(line, ' ');

                if (sscanf(line, "%llx-%llx", &lo, &hi) == 2 && addr >= lo && addr < hi && perms)
                        perms[3] = '-';         /* "r-xp" -> "r--p" */
                fputs(line, o);
        }
        fclose(o);
        return out;
}

/* want_maps of the stale-map case: this process's map as it is now. */
static void hand_current_map(void *ctx)
{
        struct unwinder *u = *(struct unwinder **)ctx;
        struct unwind_maps *m;

        if (unwind_maps_read(getpid(), &m) == 0)
                unwinder_take_maps(u, m);
}

static void stale_map_is_replaced(struct d9_rec_stack *r)
{
        struct unwinder *u = NULL;
        struct unwind_opts uo = { .budget_us = 1000000, .copy_bytes = COPY, .want_maps = hand_current_map,
                                  .want_ctx = &u };
        _cleanup_free_ char *text = map_without_text_at((uint64_t)(uintptr_t)d9t_leaf_ret);
        _cleanup_close_ int proc_fd = open("/proc/self", O_PATH | O_DIRECTORY | O_CLOEXEC);
        struct unwind_stats st;
        uint64_t frames[64];
        uint32_t n_kern = 0;
        int n, caller, outer;

        if (!text || proc_fd < 0 || unwinder_new(getpid(), &uo, &u) < 0)
                bail("no stale map");
        unwinder_take_maps(u, unwind_maps_open(proc_fd, text));
        n = unwinder_stack(u, r, D9_REC_STACK_FIXED + COPY, frames, 64, &n_kern);
        unwinder_get_stats(u, &st);
        caller = found(frames, n, (uint64_t)(uintptr_t)d9t_caller_ra);
        outer = found(frames, n, (uint64_t)(uintptr_t)d9t_outer_ra);
        ok(st.maps_stale == 1 && st.maps_asked == 1 && st.reports == 2 && caller == 1 && outer == 2 &&
           st.steps[1] + st.steps[2] + st.steps[3] == 0,
           "a leaf where the map showed its file not executable yet: a newer map is asked for and built, and the "
           "stack walked by CFI (stale %llu, asked %llu, built %llu, steps without CFI %llu; caller at %d, outer "
           "at %d)", (unsigned long long)st.maps_stale, (unsigned long long)st.maps_asked,
           (unsigned long long)st.reports, (unsigned long long)(st.steps[1] + st.steps[2] + st.steps[3]), caller,
           outer);
        unwinder_free(u);
}

int main(void)
{
        struct unwind_opts uo = { .budget_us = 1000000, .copy_bytes = COPY };
        struct unwinder *u = NULL;
        uint64_t frames[64], sp = 0x7ff000001000ull;
        uint32_t n_kern = 0;
        struct d9_rec_stack *r = leaf_record(sp);
        int n, leaf, caller, outer;

        if (!r || unwinder_new_reading(getpid(), &uo, &u) < 0)
                bail("no unwinder of this process");
        n = unwinder_stack(u, r, D9_REC_STACK_FIXED + COPY, frames, 64, &n_kern);
        leaf = found(frames, n, (uint64_t)(uintptr_t)d9t_leaf_ret);
        caller = found(frames, n, (uint64_t)(uintptr_t)d9t_caller_ra);
        outer = found(frames, n, (uint64_t)(uintptr_t)d9t_outer_ra);
        ok(leaf == 0 && caller == 1 && outer == 2 && !unwinder_last_unread(u),
           "a leaf at ret after pop %%rbp: its rbp-framed caller's caller is found (%d frames: leaf at %d, caller "
           "at %d, outer at %d)", n, leaf, caller, outer);

        r->unread_at = CALLER_RBP;
        r->unread_len = 16;
        n = unwinder_stack(u, r, D9_REC_STACK_FIXED + COPY, frames, 64, &n_kern);
        caller = found(frames, n, (uint64_t)(uintptr_t)d9t_caller_ra);
        outer = found(frames, n, (uint64_t)(uintptr_t)d9t_outer_ra);
        ok(caller == 1 && outer < 0 && unwinder_last_unread(u) && !unwinder_last_cut(u),
           "the caller's frame in pages not in memory: the walk stops at the caller and says why (%d frames, "
           "outer at %d, unread %d, cut %d)", n, outer, unwinder_last_unread(u), unwinder_last_cut(u));

        r->unread_at = 0;
        r->unread_len = COPY + 8;
        ok(unwinder_stack(u, r, D9_REC_STACK_FIXED + COPY, frames, 64, &n_kern) < 0,
           "a record whose unread pages run past its copy is refused");

        r->unread_len = 0;
        stale_map_is_replaced(r);
        unwinder_free(u);
        free(r);
        return tap_done();
}
