/* func_bounds.c: where each poll function ends, so d9d can tell a stack
 * frame that lies inside raw::poll<T,S> (the default probe set finds long
 * polls and workers from stacks, daemon/long_poll.c). The symbol's size
 * where there is one; else the next function start in .eh_frame_hdr's
 * search table, which stripped Rust binaries keep for unwinding; else (a
 * build with frame pointers and no CFI at all: Deno) where a code sweep
 * from the vtable's entry finds the body's last terminator. The sweep's end
 * is a guess, but one that errs short: it stops at the next function entry
 * the plan knows and at the first terminator no branch passes. Where
 * raw::poll is only a jump stub, the bounds are those of the function it
 * jumps to. */
#include <gelf.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

static bool eh_table_find(const struct elf_image *img, struct d9_eh_table *t)
{
        size_t n_ph;
        GElf_Phdr ph;

        if (elf_getphdrnum(img->elf, &n_ph) < 0)
                return false;
        for (size_t i = 0; i < n_ph; i++) {
                if (!gelf_getphdr(img->elf, (int)i, &ph) || ph.p_type != PT_GNU_EH_FRAME)
                        continue;
                return d9_eh_table_read(d9_elf_vaddr_bytes(img, ph.p_vaddr, ph.p_filesz), ph.p_filesz, ph.p_vaddr, t);
        }
        return false;
}

/* The first function start after vaddr; 0 if none. */
static uint64_t eh_next_start(const struct d9_eh_table *t, uint64_t vaddr)
{
        uint32_t i = d9_eh_table_above(t, vaddr);

        return i < t->n ? d9_eh_table_start(t, i) : 0;
}

static int by_func_start(const void *a, const void *b)
{
        const struct probe_point *x = *(struct probe_point *const *)a, *y = *(struct probe_point *const *)b;

        return x->func_start < y->func_start ? -1 : x->func_start > y->func_start;
}

/* Stubs of two future types that lead to one body (the linker folded
 * identical code): a frame there names neither for sure, so neither
 * keeps it. Sorted, as codex has 2,021 stubs. */
static void drop_shared_bodies(struct plan_builder *b)
{
        struct probe_point **stubs = calloc(b->n ? b->n : 1, sizeof(*stubs));
        size_t n = 0;

        if (!stubs)
                return;
        for (size_t i = 0; i < b->n; i++)
                if (b->pts[i].kind == PROBE_POLL && b->pts[i].func_start)
                        stubs[n++] = &b->pts[i];
        qsort(stubs, n, sizeof(*stubs), by_func_start);
        for (size_t i = 0, j; i < n; i = j) {
                for (j = i + 1; j < n && stubs[j]->func_start == stubs[i]->func_start; j++) {}
                for (size_t k = i; j - i > 1 && k < j; k++)
                        stubs[k]->func_start = stubs[k]->func_end = 0;
        }
        free(stubs);
}

void uprobes_plan_poll_bounds(struct plan_builder *b)
{
        struct d9_eh_table t = { 0 };
        bool have_table = eh_table_find(b->img, &t);

        for (size_t i = 0; i < b->n; i++) {
                struct probe_point *p = &b->pts[i];
                struct d9_sym *s;
                uint64_t body;

                if (p->kind != PROBE_POLL)
                        continue;
                /* raw::poll<T,S> can be a stub that only jumps on (dprint
                 * 0.57: `jmp` and padding, 16 bytes). A jump leaves no
                 * return address, so no stack frame ever lies in the stub:
                 * the body is where its leading jumps lead. */
                body = uprobes_plan_follow_jumps(b, p->vaddr);
                s = d9_sym_table_find(&b->st.table, body);
                if (s && s->vaddr == body && s->size)
                        p->func_end = body + s->size;
                else if (have_table)
                        p->func_end = eh_next_start(&t, body);
                else if (!uprobes_plan_sweep_body(b, p->vaddr, &p->func_start, &p->func_end))
                        p->func_start = p->func_end = 0;
                if (p->func_end && body != p->vaddr)
                        p->func_start = body;
        }
        drop_shared_bodies(b);
}
