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
#include <string.h>

#include "plan_int.h"

#define REG_RDI 7
#define MAX_BODY 8192

struct reg_state {
        uint32_t hdr;           /* bitmask: registers holding the Header* */
        int64_t load[16];       /* displacement last loaded from hdr into reg, or -1 */
};

static void track_insn(const uint8_t *p, const struct x86_insn *in, struct reg_state *rs, int64_t *found)
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
                /* A call clobbers the caller-saved registers. */
                const uint32_t clobbered = 0x0fc7; /* rax rcx rdx rsi rdi r8-r11 */

                for (int r = 0; r < 16; r++)
                        if (clobbered >> r & 1)
                                rs->load[r] = -1;
                rs->hdr &= ~clobbered;
        }
        if (op == 0x8d || op == 0x63 || (op < 0x40 && (op & 7) == 3)) {
                rs->load[reg] = -1;                 /* lea / movsxd / alu r64, r/m */
                rs->hdr &= ~(1u << reg);
                return;
        }
        if (!(rex & 8) || (op != 0x89 && op != 0x8b))
                return;
        if (mod == 3) {                             /* register copy */
                int src = op == 0x89 ? reg : rm, dst = op == 0x89 ? rm : reg;

                rs->hdr = (rs->hdr & ~(1u << dst)) | ((rs->hdr >> src & 1) << dst);
                rs->load[dst] = -1;
                return;
        }
        if (op == 0x8b && (mod == 1 || mod == 2) && (modrm & 7) != 4) {
                int64_t disp = mod == 1 ? (int8_t)p[i + 2]
                                        : (int32_t)((uint32_t)p[i + 2] | (uint32_t)p[i + 3] << 8 |
                                                    (uint32_t)p[i + 4] << 16 | (uint32_t)p[i + 5] << 24);

                rs->load[reg] = (rs->hdr >> rm & 1) ? disp : -1;
                rs->hdr &= ~(1u << reg);
        }
}

/* Displacement from the Header* of the dyn vtable pointer, or -1. */
static int64_t find_dyn_vtable_load(struct plan_builder *b, uint64_t poll_vaddr)
{
        uint64_t body = uprobes_plan_follow_jumps(b->img, poll_vaddr), size = MAX_BODY;
        struct d9_sym *fs = d9_sym_table_find(&b->st.table, body);
        struct reg_state rs = { .hdr = 1u << REG_RDI };
        int64_t found = -1;
        const uint8_t *code;

        if (fs && fs->vaddr == body && fs->size)
                size = fs->size < MAX_BODY ? fs->size : MAX_BODY;
        while (size > 16 && !(code = d9_elf_vaddr_bytes(b->img, body, size)))
                size /= 2;
        if (size <= 16)
                return -1;
        memset(rs.load, 0xff, sizeof(rs.load));
        for (uint64_t off = 0; off < size && found < 0;) {
                struct x86_insn in;

                uprobes_x86_decode(code + off, size - off, &in);
                if (!in.len || in.is_ret)
                        break;
                track_insn(code + off, &in, &rs, &found);
                off += (uint64_t)in.len;
        }
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
