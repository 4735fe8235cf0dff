/* plan_complete: Harness<T,S>::complete of every task vtable, without symbols.
 *
 * complete runs exactly once per task that finishes (output stored or the
 * task cancelled), with the task's Header* as its first argument: that is
 * the terminate event. It is generic over (T,S) and not in the vtable, but
 * both vtable entries that can end a task call it directly: poll (slot 0,
 * when the future returns Ready) and shutdown (slot 6, after cancelling it).
 * The calls the two have in common are complete itself and what complete
 * does on its own path as well (Core::set_stage, the cell's drop glue), so
 * complete is the common callee that calls another common callee. A vtable
 * where that does not pick exactly one function gets no point (counted in
 * the plan, never guessed). The vtable's dealloc entry is no substitute:
 * complete frees the task through an inlined Harness::dealloc when it holds
 * the last reference, so the vtable's dealloc runs for only some tasks.
 *
 * With symbols the same search runs as a cross-check: a point it finds that
 * is not the symbol's Harness::complete is a finding of its own (test). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan-int.h"

#define MAX_CALLEES 256
#define MAX_BODY (64u << 10)

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

        return x < y ? -1 : x > y;
}

static size_t add_unique(uint64_t *out, size_t n, size_t max, uint64_t v)
{
        for (size_t i = 0; i < n; i++)
                if (out[i] == v)
                        return n;
        if (n < max)
                out[n++] = v;
        return n;
}

/* `lea disp32(%rip), %reg` (REX.W): LLVM loads a jump table's base so. */
static bool lea_rip(const uint8_t *p, size_t n, uint64_t at, uint64_t *to)
{
        int32_t disp;

        if (n < 7 || (p[0] & 0xf8) != 0x48 || p[1] != 0x8d || (p[2] & 0xc7) != 0x05)
                return false;
        memcpy(&disp, p + 3, 4);
        *to = at + 7 + (uint64_t)(int64_t)disp;
        return true;
}

/* The farthest case of a PIC jump table (int32 entries relative to its
 * base) that lands inside [start, start + MAX_BODY). */
static uint64_t jump_table_reach(const struct elf_image *img, uint64_t table, uint64_t start)
{
        uint64_t far = 0;

        for (int i = 0; i < 512; i++) {
                const uint8_t *e = elf_vaddr_bytes(img, table + 4 * (uint64_t)i, 4);
                int32_t rel;

                if (!e)
                        break;
                memcpy(&rel, e, 4);
                uint64_t to = table + (uint64_t)(int64_t)rel;
                if (to < start || to >= start + MAX_BODY)
                        break;
                far = to > far ? to : far;
        }
        return far;
}

/* LLVM pads between functions with int3, which never precedes a block
 * inside one: a forward jmp to just after int3 is a tail call. */
static bool is_function_entry(const struct elf_image *img, uint64_t to)
{
        const uint8_t *b = elf_vaddr_bytes(img, to - 1, 1);

        return b && *b == 0xcc;
}

size_t code_callees(const struct elf_image *img, uint64_t vaddr, uint64_t *out, size_t max)
{
        uint64_t start = plan_follow_jumps(img, vaddr), reach = start, table = 0;
        size_t n = 0, avail = MAX_BODY;
        const uint8_t *code = NULL;

        /* The body may end closer to the end of the segment than MAX_BODY. */
        while (avail >= 16 && !(code = elf_vaddr_bytes(img, start, avail)))
                avail /= 2;
        for (uint64_t off = 0; code && off < avail;) {
                struct x86_insn in;
                uint64_t at = start + off;

                x86_decode(code + off, avail - off, &in);
                if (!in.len)
                        break;
                uint64_t to;
                if (lea_rip(code + off, avail - off, at, &to))
                        table = to;
                to = at + (uint64_t)in.len + (uint64_t)in.rel;
                if (in.is_jmp_reg && table) {
                        uint64_t far = jump_table_reach(img, table, start);

                        reach = far > reach ? far : reach;
                }
                if (in.is_call_rel && elf_vaddr_is_exec(img, to))
                        n = add_unique(out, n, max, to);
                bool tail = in.is_jmp_rel && to > reach && is_function_entry(img, to);

                /* A jump backwards past the entry or far away is a tail call. */
                tail |= in.is_jmp_rel && (to < start || to >= start + MAX_BODY);
                if ((in.is_jcc || in.is_jmp_rel) && !tail && to > reach && to < start + MAX_BODY)
                        reach = to;
                if (tail && elf_vaddr_is_exec(img, to))
                        n = add_unique(out, n, max, to);
                off += (uint64_t)in.len;
                /* The function ends at a terminator no earlier branch jumps past. */
                if ((in.is_ret || in.is_jmp_rel || in.is_stop) && start + off > reach)
                        break;
        }
        qsort(out, n, sizeof(*out), cmp_u64);
        return n;
}

static bool contains(const uint64_t *v, size_t n, uint64_t x)
{
        return bsearch(&x, v, n, sizeof(*v), cmp_u64) != NULL;
}

/* complete of one vtable, or 0 when the code does not single it out. */
static uint64_t vtable_complete(const struct elf_image *img, const struct task_vtable *v)
{
        uint64_t poll[MAX_CALLEES], shut[MAX_CALLEES], common[MAX_CALLEES], sub[MAX_CALLEES];
        size_t np = code_callees(img, v->fn[0], poll, MAX_CALLEES);
        size_t ns = code_callees(img, v->fn[6], shut, MAX_CALLEES);
        size_t nc = 0, found = 0;
        uint64_t pick = 0;

        for (size_t i = 0; i < ns; i++)
                if (contains(poll, np, shut[i]))
                        common[nc++] = shut[i];
        for (size_t i = 0; i < nc; i++) {
                size_t nsub = code_callees(img, common[i], sub, MAX_CALLEES);
                bool calls_common = false;

                for (size_t k = 0; k < nsub && !calls_common; k++)
                        calls_common = sub[k] != common[i] && contains(common, nc, sub[k]);
                if (calls_common) {
                        pick = common[i];
                        found++;
                }
        }
        return found == 1 ? pick : 0;
}

static struct probe_point *find_point(struct plan_builder *b, enum probe_kind kind, uint64_t vaddr)
{
        for (size_t i = 0; i < b->n; i++)
                if (b->pts[i].kind == kind && b->pts[i].vaddr == vaddr)
                        return &b->pts[i];
        return NULL;
}

/* With symbols: is the function at vaddr a Harness::complete? (The symbol
 * rules can miss an instance whose v0 name they do not parse.) */
static bool symbol_is_complete(struct plan_builder *b, uint64_t vaddr)
{
        struct func_sym *s = symtab_lookup(&b->st, vaddr);
        const char *name = s && s->vaddr == vaddr ? func_sym_name(s) : NULL;
        size_t n = name ? strlen(name) : 0;

        return name && strstr(name, "Harness") && n > 10 && strcmp(name + n - 10, "::complete") == 0;
}

int plan_complete_route(struct plan_builder *b, struct probe_plan *plan)
{
        bool by_symbols = false;

        for (size_t i = 0; i < b->n; i++)
                by_symbols |= b->pts[i].kind == PROBE_COMPLETE;
        for (size_t i = 0; i < b->vs.n; i++) {
                const struct task_vtable *v = &b->vs.v[i];
                uint64_t at = vtable_complete(b->img, v);
                struct probe_point *p;

                if (!at) {
                        plan->completes_unfound++;
                        continue;
                }
                p = find_point(b, PROBE_COMPLETE, at);
                if (!p && by_symbols && !symbol_is_complete(b, at)) {
                        /* Symbols name this function, and not as complete: a wrong pick. */
                        plan->completes_scan_wrong++;
                        continue;
                }
                if (!p) {
                        p = plan_point_add(b, PROBE_COMPLETE, at);
                        if (!p)
                                return -ENOMEM;
                        p->value_from = PROBE_ARG0;
                        /* A complete the symbol rules missed keeps its own name. */
                        struct func_sym *fs = by_symbols ? symtab_lookup(&b->st, at) : NULL;

                        if (fs ? !(p->label = strdup(func_sym_name(fs))) :
                            asprintf(&p->label, "Harness::complete of task vtable 0x%" PRIx64, v->vaddr) < 0)
                                return -ENOMEM;
                }
                if (!(p->sources & PROBE_FROM_VTABLE_SCAN))
                        plan->completes_by_scan++;
                p->sources |= PROBE_FROM_VTABLE_SCAN;
        }
        return 0;
}
