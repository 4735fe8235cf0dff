/* plan_dyn: for tasks whose future is `Pin<Box<dyn Future>>` (hyper, tower,
 * axum, async_trait...), where BPF finds the concrete future's vtable, so the
 * poll can be labelled with the boxed future's own `poll` instead of "a boxed
 * future".
 *
 * The task's poll reaches the boxed future through its dyn vtable: it loads
 * the vtable pointer from the task cell and calls slot 3 (`Future::poll`,
 * after drop_in_place, size, align): `mov D(%hdr), %rA; ... call *0x18(%rA)`.
 * We find that pattern in the poll body, with %hdr tracked as the registers
 * holding a copy of the first argument (the Header*), and hand BPF the
 * displacement D: `vt = *(u64 *)(hdr + D); poll = *(u64 *)(vt + 24)`, a
 * runtime address the daemon symbolizes. Where Stage keeps the fat pointer
 * differs between Tokio versions (niche-packed in 1.24, after a tag word in
 * 1.43's #[repr(C)] Stage), which is why D is read from code, not assumed.
 * D must lie in the first words of the task's stage (just after the id, per
 * the vtable's id offset), which rejects unrelated indirect calls. This also
 * flags boxed tasks in stripped binaries. */
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "plan_int.h"

#define REG_RDI 7
#define MAX_BODY 8192
#define NO_BASE INT64_MIN

struct reg_state {
        int64_t base[16];       /* reg holds Header* + base[reg], or NO_BASE */
        int64_t load[16];       /* Header* offset last loaded from into reg, or -1 */
        uint64_t callee;        /* a direct call whose first argument is */
        int64_t callee_arg;     /* Header* + callee_arg (> 0), or 0 */
};

static void clear_reg(struct reg_state *rs, int r)
{
        rs->base[r] = NO_BASE;
        rs->load[r] = -1;
}

static void track_insn(const uint8_t *p, const struct x86_insn *in, uint64_t vaddr, struct reg_state *rs,
                       int64_t *found)
{
        int i = 0, rex = 0;

        if ((p[0] & 0xf0) == 0x40)
                rex = p[i++];
        uint8_t op = p[i], modrm = in->len > i + 1 ? p[i + 1] : 0;
        int mod = modrm >> 6, reg = ((modrm >> 3) & 7) | (rex & 4 ? 8 : 0), rm = (modrm & 7) | (rex & 1 ? 8 : 0);

        if (in->len <= i + 1)
                return;
        if (op == 0xff && mod == 1 && ((modrm >> 3) & 7) == 2 && (modrm & 7) != 4 && p[i + 2] == 0x18) {
                if (rs->load[rm] >= 0 && *found < 0)
                        *found = rs->load[rm];      /* call *0x18(%rA) */
        }
        if (in->is_call_rel || (op == 0xff && ((modrm >> 3) & 7) == 2)) {
                /* Tokio's Harness::poll may leave the poll to an out-of-line
                 * Core::poll, given &core (Header* + its offset). */
                if (in->is_call_rel && !rs->callee && rs->base[REG_RDI] > 0 && rs->base[REG_RDI] != NO_BASE) {
                        rs->callee = vaddr + (uint64_t)in->len + (uint64_t)in->rel;
                        rs->callee_arg = rs->base[REG_RDI];
                }
                /* A call clobbers the caller-saved registers. */
                const uint32_t clobbered = 0x0fc7; /* rax rcx rdx rsi rdi r8-r11 */

                for (int r = 0; r < 16; r++)
                        if (clobbered >> r & 1)
                                clear_reg(rs, r);
        }
        int64_t disp = 0;
        bool has_disp = (mod == 1 || mod == 2) && (modrm & 7) != 4 && in->len > i + (mod == 1 ? 2 : 5);

        if (has_disp)
                disp = mod == 1 ? (int8_t)p[i + 2]
                                : (int32_t)((uint32_t)p[i + 2] | (uint32_t)p[i + 3] << 8 |
                                            (uint32_t)p[i + 4] << 16 | (uint32_t)p[i + 5] << 24);
        if (op == 0x8d && (rex & 8) && has_disp && rs->base[rm] != NO_BASE) {
                int64_t b = rs->base[rm] + disp;        /* lea D(%hdr), %reg */

                clear_reg(rs, reg);
                rs->base[reg] = b;
                return;
        }
        if (op == 0x8d || op == 0x63 || (op < 0x40 && (op & 7) == 3)) {
                clear_reg(rs, reg);                 /* lea / movsxd / alu r64, r/m */
                return;
        }
        if (!(rex & 8) || (op != 0x89 && op != 0x8b))
                return;
        if (mod == 3) {                             /* register copy */
                int src = op == 0x89 ? reg : rm, dst = op == 0x89 ? rm : reg;
                int64_t b = rs->base[src];

                clear_reg(rs, dst);
                rs->base[dst] = b;
                return;
        }
        if (op == 0x8b && has_disp) {
                int64_t b = rs->base[rm];

                clear_reg(rs, reg);
                rs->load[reg] = b != NO_BASE && b + disp >= 0 ? b + disp : -1;
        }
}

/* Header* offset of the dyn vtable pointer the code at body loads and
 * calls slot 3 of, with %rdi = Header* + arg on entry; or -1. */
static int64_t scan_body(struct plan_builder *b, uint64_t body, int64_t arg, uint64_t *callee, int64_t *callee_arg)
{
        struct d9_sym *fs = d9_sym_table_find(&b->st.table, body);
        struct reg_state rs = { .callee = 0 };
        uint64_t size = MAX_BODY;
        int64_t found = -1;
        const uint8_t *code;

        if (fs && fs->vaddr == body && fs->size)
                size = fs->size < MAX_BODY ? fs->size : MAX_BODY;
        while (size > 16 && !(code = d9_elf_vaddr_bytes(b->img, body, size)))
                size /= 2;
        if (size <= 16)
                return -1;
        for (int r = 0; r < 16; r++)
                clear_reg(&rs, r);
        rs.base[REG_RDI] = arg;
        for (uint64_t off = 0; off < size && found < 0;) {
                struct x86_insn in;

                uprobes_x86_decode(code + off, size - off, &in);
                if (!in.len || in.is_ret)
                        break;
                track_insn(code + off, &in, body + off, &rs, &found);
                off += (uint64_t)in.len;
        }
        *callee = rs.callee;
        *callee_arg = rs.callee_arg;
        return found;
}

/* Displacement from the Header* of the dyn vtable pointer, or -1: in the
 * poll body, else in the first function it calls with a pointer into the
 * task cell (npm grafbase, Tokio 1.47: Harness::poll calls an out-of-line
 * Core::poll with &core, Header* + 0x20, which loads the vtable at +0x20
 * of that; every boxed task there read "a boxed future"). */
static int64_t find_dyn_vtable_load(struct plan_builder *b, uint64_t poll_vaddr)
{
        uint64_t body = uprobes_plan_follow_jumps(b, poll_vaddr), callee, unused;
        int64_t arg, found = scan_body(b, body, 0, &callee, &arg);

        if (found < 0 && callee)
                found = scan_body(b, uprobes_plan_follow_jumps(b, callee), arg, &unused, &arg);
        return found;
}

static const struct task_vtable *vtable_of(const struct plan_builder *b, uint64_t vaddr)
{
        for (size_t i = 0; i < b->vs.n; i++)
                if (b->vs.v[i].vaddr == vaddr)
                        return &b->vs.v[i];
        return NULL;
}

void uprobes_plan_find_dyn_futures(struct plan_builder *b)
{
        if (b->vs.id_slot < 0)
                return;
        for (size_t i = 0; i < b->n; i++) {
                struct probe_point *p = &b->pts[i];
                const struct task_vtable *v = vtable_of(b, p->vtable_vaddr);

                if (p->kind != PROBE_POLL || !v)
                        continue;
                int64_t d = find_dyn_vtable_load(b, p->vaddr);
                int64_t stage = (int64_t)v->off[b->vs.id_slot - 7] + 8;

                /* The fat pointer sits in the stage's first words (after at
                 * most one tag word): data, then vtable. */
                if (d >= stage + 8 && d <= stage + 16) {
                        p->dyn_vtable_hdr_off = (uint32_t)d;
                        p->boxed_dyn = true;
                }
        }
}
