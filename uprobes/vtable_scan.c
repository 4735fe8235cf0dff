/* vtable_scan: find every Tokio task vtable by its shape, with no symbols.
 *
 * Each spawned future type T (per scheduler S) gets a `static Vtable` in
 * .data.rel.ro: seven function pointers (poll, schedule, dealloc,
 * try_read_output, drop_join_handle_slow, drop_abort_handle, shutdown) then
 * three usize offsets into the task cell (trailer, scheduler, id). In a PIE
 * the seven pointers are R_X86_64_RELATIVE relocations (or RELR bits) and the
 * offsets are not, so the pattern "7 relocated pointers into executable code,
 * then 3 unrelocated small integers" picks the vtables out of the relocation
 * list. Non-PIE binaries have no relocations: there we test every aligned
 * word of the read-only data sections for the same shape.
 *
 * Which of the three integers is the id offset is decided by value, not by
 * slot: scheduler < id < trailer for every layout Tokio has used (the
 * scheduler is the first field of Core, the id follows it, the trailer is
 * after the future). The slot that holds the middle value is voted across all
 * vtables and reported, because BPF reads it through the task's own vtable.
 * The relocations come from relocs.c and stay with the scan for the later
 * plan steps that read them too. */
#include <errno.h>
#include <string.h>

#include "uprobes_int.h"

#define VT_FNS 7
#define VT_OFFS 3

/* The three offsets: all small, distinct, scheduler (smallest) at least the
 * header size (>= 32 in every Tokio), trailer (largest) within a sane cell. */
static bool offsets_plausible(const uint64_t off[VT_OFFS])
{
        uint64_t lo = UINT64_MAX, hi = 0;

        for (int i = 0; i < VT_OFFS; i++) {
                if (off[i] % 8 || off[i] > (1u << 20))
                        return false;
                lo = off[i] < lo ? off[i] : lo;
                hi = off[i] > hi ? off[i] : hi;
        }
        uint64_t mid = off[0] + off[1] + off[2] - lo - hi;

        /* scheduler == id when S is zero-sized (e.g. BlockingSchedule); the id
         * follows S (a handle: a few words); the trailer follows the stage,
         * which holds at least a JoinError. */
        return lo >= 32 && lo <= 4096 && mid - lo <= 64 && hi >= mid + 16;
}

/* True if v's offsets fill the voted roles (ties allowed for sched == id). */
static bool roles_consistent(const struct vtable_scan *vs, const struct task_vtable *v)
{
        uint64_t sched = v->off[vs->scheduler_slot - VT_FNS];
        uint64_t id = v->off[vs->id_slot - VT_FNS];
        uint64_t trailer = v->off[vs->trailer_slot - VT_FNS];

        return sched <= id && id < trailer;
}

/* A stray table that happens to look like a vtable rarely has its offsets in
 * the slot order every real one in the binary shares: drop those. */
static void drop_inconsistent(struct vtable_scan *vs)
{
        size_t w = 0;

        if (vs->id_slot < 0 || vs->scheduler_slot == vs->id_slot || vs->id_slot == vs->trailer_slot)
                return;
        for (size_t i = 0; i < vs->n; i++)
                if (roles_consistent(vs, &vs->v[i]))
                        vs->v[w++] = vs->v[i];
        vs->n = w;
}

static int vt_push(struct vtable_scan *vs, size_t *cap, const struct task_vtable *v)
{
        if (vs->n == *cap) {
                size_t ncap = *cap ? *cap * 2 : 64;
                struct task_vtable *n = realloc(vs->v, ncap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                vs->v = n;
                *cap = ncap;
        }
        vs->v[vs->n++] = *v;
        return 0;
}

/* Reads the offset words after the pointer run; false if any is missing. */
static bool read_offsets(const struct elf_image *img, uint64_t at, uint64_t off[VT_OFFS])
{
        const uint8_t *p = d9_elf_vaddr_bytes(img, at, 8 * VT_OFFS);

        if (!p)
                return false;
        memcpy(off, p, 8 * VT_OFFS);
        return true;
}

static int scan_relocs(const struct elf_image *img, struct reloc_list *l, struct vtable_scan *vs)
{
        size_t cap = 0, run = 0;

        for (size_t i = 0; i < l->n; i++) {
                const struct reloc *r = &l->r[i];
                bool code = d9_elf_vaddr_is_exec(img, r->value);

                if (!code) {
                        run = 0;
                        continue;
                }
                run = (run && r->where == l->r[i - 1].where + 8) ? run + 1 : 1;
                if (run < VT_FNS)
                        continue;
                /* The run's last 7 pointers end here; the next word must not be relocated. */
                uint64_t end = r->where + 8;
                if (i + 1 < l->n && l->r[i + 1].where < end + 8 * VT_OFFS)
                        continue;
                struct task_vtable v = { .vaddr = end - 8 * VT_FNS };
                if (!read_offsets(img, end, v.off) || !offsets_plausible(v.off))
                        continue;
                for (int k = 0; k < VT_FNS; k++)
                        v.fn[k] = l->r[i - (VT_FNS - 1) + k].value;
                if (vt_push(vs, &cap, &v) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* Non-PIE: no relocations, the pointers are absolute in the file. */
static int scan_section_words(const struct elf_image *img, const char *name, struct vtable_scan *vs,
                              size_t *cap)
{
        size_t size;
        uint64_t addr;
        const uint8_t *d = d9_elf_section_data(img, name, &size, &addr);

        if (!d)
                return 0;
        for (size_t off = (8 - addr % 8) % 8; off + 8 * (VT_FNS + VT_OFFS) <= size; off += 8) {
                struct task_vtable v = { .vaddr = addr + off };
                bool ok = true;

                memcpy(v.fn, d + off, sizeof(v.fn));
                memcpy(v.off, d + off + sizeof(v.fn), sizeof(v.off));
                for (int k = 0; ok && k < VT_FNS; k++)
                        ok = d9_elf_vaddr_is_exec(img, v.fn[k]);
                if (!ok || !offsets_plausible(v.off))
                        continue;
                if (vt_push(vs, cap, &v) < 0)
                        return -ENOMEM;
                off += 8 * (VT_FNS + VT_OFFS) - 8;
        }
        return 0;
}

/* The id offset is the middle of the three values; vote for its slot. */
static void vote_slots(struct vtable_scan *vs)
{
        int votes[3][VT_OFFS] = { 0 }; /* [role: sched,id,trailer][slot] */

        for (size_t i = 0; i < vs->n; i++) {
                const uint64_t *o = vs->v[i].off;
                int lo = 0, hi = 0;

                if (o[0] == o[1] || o[1] == o[2] || o[0] == o[2])
                        continue; /* a zero-sized scheduler makes the roles ambiguous */
                for (int k = 1; k < VT_OFFS; k++) {
                        if (o[k] < o[lo])
                                lo = k;
                        if (o[k] > o[hi])
                                hi = k;
                }
                votes[0][lo]++;
                votes[1][3 - lo - hi]++;
                votes[2][hi]++;
        }
        int *slots[3] = { &vs->scheduler_slot, &vs->id_slot, &vs->trailer_slot };
        for (int role = 0; role < 3; role++) {
                int best = 0;

                for (int k = 1; k < VT_OFFS; k++)
                        if (votes[role][k] > votes[role][best])
                                best = k;
                *slots[role] = vs->n ? VT_FNS + best : -1;
        }
}

/* True if some `lea disp32(%rip), %reg` (REX.W) in code[0, n) at vaddr
 * `at` loads vt: a byte test, far cheaper than decoding. */
static bool leas_vt(const uint8_t *code, size_t n, uint64_t at, uint64_t vt)
{
        for (size_t j = 0; j + 7 <= n; j++) {
                int32_t disp;

                if ((code[j] & 0xf8) != 0x48 || code[j + 1] != 0x8d || (code[j + 2] & 0xc7) != 0x05)
                        continue;
                memcpy(&disp, code + j + 3, 4);
                if (at + j + 7 + (uint64_t)(int64_t)disp == vt)
                        return true;
        }
        return false;
}

/* What a sweep of a clone candidate saw before its first ret. */
struct clone_sight {
        bool locked, ref_one, self;
        uint64_t callee;        /* its first direct call, 0 if none */
};

/* Sweeps code at fn for at most window bytes, up to its first ret: a
 * `lock` read-modify-write, the immediate 0x40, a rip-relative load of vt. */
static void clone_sweep(const struct elf_image *img, const struct reloc_list *l, uint64_t fn, uint64_t vt,
                        size_t window, struct clone_sight *cs)
{
        const uint8_t *code = NULL;

        while (window >= 16 && !(code = d9_elf_vaddr_bytes(img, fn, window)))
                window /= 2;
        for (size_t off = 0; code && off < window;) {
                const uint8_t *p = code + off;
                struct x86_insn in;

                uprobes_x86_decode(p, window - off, &in);
                if (!in.len)
                        break;
                size_t at = (p[0] & 0xf0) == 0x40 ? 1 : 0; /* REX */
                cs->locked |= p[0] == 0xf0;
                /* mov $0x40, %reg; push $0x40 (then pop %reg: how opt-level s/z
                 * builds load small constants); lock add $0x40, mem. */
                cs->ref_one |= (p[at] >= 0xb8 && p[at] <= 0xbf && in.len == (int)at + 5 && p[at + 1] == 0x40 &&
                                !p[at + 2] && !p[at + 3] && !p[at + 4]) ||
                               (p[0] == 0x6a && p[1] == 0x40 && in.len == 2) ||
                               (p[0] == 0xf0 && in.len >= 4 && p[in.len - 1] == 0x40 && p[in.len - 3] == 0x83);
                if (in.len == 7 && (p[0] & 0xf8) == 0x48 && (p[1] == 0x8d || p[1] == 0x8b) &&
                    (p[2] & 0xc7) == 0x05) {
                        int32_t disp;

                        memcpy(&disp, p + 3, 4);
                        uint64_t to = fn + off + 7 + (uint64_t)(int64_t)disp;
                        const struct reloc *r = p[1] == 0x8b ? uprobes_reloc_at(l, to) : NULL;

                        cs->self |= p[1] == 0x8d ? to == vt : r && r->value == vt;
                }
                if (in.is_call_rel && !cs->callee)
                        cs->callee = fn + off + (uint64_t)in.len + (uint64_t)in.rel;
                off += (size_t)in.len;
                if (in.is_ret)
                        break;
        }
}

/* True if clone (slot 0 of a RawWakerVTable at vt) is Tokio's task
 * clone_waker: within its first `window` bytes and before its first ret a
 * `lock` read-modify-write and the immediate 0x40, in it or loaded into a
 * register (Tokio's REF_ONE: the ref count sits above six state bits), and
 * a rip-relative load of vt itself (the RawWaker it returns points back at
 * this vtable: `lea vt(%rip)`, or a GOT slot relocated to vt). Builds for
 * size keep State::ref_inc out of line: then the increment is in the
 * first function clone calls. */
static bool is_task_clone_waker(const struct elf_image *img, const struct reloc_list *l, uint64_t clone,
                                uint64_t vt, size_t window)
{
        struct clone_sight cs = { 0 };

        clone_sweep(img, l, clone, vt, window, &cs);
        if (!cs.self)
                return false;
        if (!(cs.locked && cs.ref_one) && cs.callee && d9_elf_vaddr_is_exec(img, cs.callee)) {
                struct clone_sight inc = { 0 };

                clone_sweep(img, l, cs.callee, vt, 64, &inc);
                cs.locked = inc.locked;
                cs.ref_one = inc.ref_one;
        }
        return cs.locked && cs.ref_one;
}

/* Four relocated code pointers in a row whose first is the task
 * clone_waker. Usually the increment opens clone; builds with Tokio's
 * tracing instrumentation log first (~500 bytes, restate 1.7): a second,
 * wider pass looks there, for clones that `lea` their own vtable. */
static void find_task_waker(const struct elf_image *img, const struct reloc_list *l, struct vtable_scan *vs)
{
        static const size_t windows[2] = { 64, 1024 };

        for (int pass = 0; pass < 2 && !vs->waker_vtable; pass++)
                for (size_t i = 0; i + 3 < l->n; i++) {
                        uint64_t clone = l->r[i].value, vt = l->r[i].where;
                        const uint8_t *code;
                        bool run = true;

                        for (int k = 0; run && k < 4; k++)
                                run = l->r[i + k].where == vt + 8 * (uint64_t)k &&
                                      d9_elf_vaddr_is_exec(img, l->r[i + k].value);
                        if (!run)
                                continue;
                        if (pass && !((code = d9_elf_vaddr_bytes(img, clone, windows[pass])) &&
                                      leas_vt(code, windows[pass], clone, vt)))
                                continue;
                        if (!is_task_clone_waker(img, l, clone, vt, windows[pass]))
                                continue;
                        vs->waker_vtable = vt;
                        for (int k = 0; k < 4; k++)
                                vs->waker_fn[k] = l->r[i + k].value;
                        break;
                }
}

int uprobes_vtable_scan_run(const struct elf_image *img, struct vtable_scan *vs)
{
        struct reloc_list *l = &vs->relocs;
        int r;

        memset(vs, 0, sizeof(*vs));
        vs->id_slot = vs->scheduler_slot = vs->trailer_slot = -1;
        r = uprobes_relocs_collect(img, l);
        if (r == 0 && l->n) {
                vs->method = l->method;
                r = scan_relocs(img, l, vs);
                if (r == 0)
                        find_task_waker(img, l, vs);
        } else if (r == 0) {
                size_t cap = 0;

                struct reloc_list words;

                vs->method = "data.rel.ro";
                r = scan_section_words(img, ".data.rel.ro", vs, &cap);
                if (r == 0)
                        r = scan_section_words(img, ".rodata", vs, &cap);
                /* The waker's vtable among the code pointers there (npm
                 * mise 2026.9.15, non-PIE: no wake points without symbols). */
                if (r == 0 && (r = uprobes_relocs_from_words(img, ".data.rel.ro", &words)) == 0) {
                        find_task_waker(img, &words, vs);
                        uprobes_relocs_free(&words);
                }
        }
        if (r < 0)
                return r;
        vote_slots(vs);
        drop_inconsistent(vs);
        return 0;
}

void uprobes_vtable_scan_free(struct vtable_scan *vs)
{
        free(vs->v);
        uprobes_relocs_free(&vs->relocs);
        memset(vs, 0, sizeof(*vs));
}
