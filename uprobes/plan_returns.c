/* plan_returns: the `ret` instructions of each raw::poll, for the optional
 * "return-site uprobes" poll-end mode.
 *
 * raw::poll<T,S> is usually a one-instruction `jmp Harness<T,S>::poll`, so
 * the returns live in the jump target; we follow leading jumps, then walk the
 * body (bounded by its symbol size) with the length decoder. A `jmp` that
 * leaves the body is a tail call: the poll also ends there and a ret-site
 * probe would miss it, so such polls are reported as incomplete. Indirect
 * jumps are taken to be jump tables inside the body (LLVM's switch lowering),
 * not tail calls.
 *
 * Every point added here is `skipped`: `ret` is single-stepped by the kernel
 * (~15x an emulated probe), so the default poll end is entry-only (the next
 * poll or park on the same thread closes the poll) or a uretprobe; the BPF
 * loader can opt in to these. Without symbols there are no function bounds
 * and no return sites. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan_int.h"

struct ret_walk {
        uint64_t rets[64];
        size_t n_rets;
        size_t tail_calls;
        bool truncated;         /* undecodable bytes or > 64 rets */
};

static void walk_body(const struct elf_image *img, uint64_t start, uint64_t size, struct ret_walk *w)
{
        const uint8_t *code = d9_elf_vaddr_bytes(img, start, size);

        memset(w, 0, sizeof(*w));
        for (uint64_t off = 0; code && off < size;) {
                struct x86_insn in;

                uprobes_x86_decode(code + off, size - off, &in);
                if (!in.len) {
                        w->truncated = true;
                        return;
                }
                if (in.is_ret) {
                        if (w->n_rets == sizeof(w->rets) / sizeof(w->rets[0])) {
                                w->truncated = true;
                                return;
                        }
                        w->rets[w->n_rets++] = start + off;
                }
                if (in.is_jmp_rel) {
                        uint64_t to = start + off + (uint64_t)in.len + (uint64_t)in.rel;

                        if (to < start || to >= start + size)
                                w->tail_calls++;
                }
                off += (uint64_t)in.len;
        }
        if (!code)
                w->truncated = true;
}

static int add_returns(struct plan_builder *b, size_t poll_idx, const struct ret_walk *w)
{
        for (size_t k = 0; k < w->n_rets; k++) {
                uint64_t poll_vaddr = b->pts[poll_idx].vaddr;
                const char *label = b->pts[poll_idx].label;
                struct probe_point *p;

                p = uprobes_plan_point_add(b, PROBE_POLL_RETURN, w->rets[k]);
                if (!p)
                        return -ENOMEM;
                b->meta[b->n - 1].essential = false;
                p->func_vaddr = poll_vaddr;
                p->value_from = PROBE_ARG_NONE;
                p->sources = PROBE_FROM_SYMBOLS;
                p->label = label ? strdup(label) : NULL;
                p->skipped = true;
                asprintf(&p->skip_reason, "optional poll-end mode (default: entry-only)%s",
                         w->tail_calls || w->truncated ? "; INCOMPLETE: the body also leaves by tail call" : "");
        }
        return 0;
}

int uprobes_plan_return_sites(struct plan_builder *b, struct probe_plan *plan)
{
        size_t n_polls = 0, complete = 0, sites = 0, n = b->n;

        for (size_t i = 0; i < n; i++) {
                struct ret_walk w;

                if (b->pts[i].kind != PROBE_POLL)
                        continue;
                n_polls++;
                uint64_t body = uprobes_plan_follow_jumps(b, b->pts[i].vaddr);
                struct d9_sym *fs = d9_sym_table_find(&b->st.table, body);

                if (!fs || fs->vaddr != body || !fs->size)
                        continue;
                walk_body(b->img, body, fs->size, &w);
                if (add_returns(b, i, &w) < 0)
                        return -ENOMEM;
                sites += w.n_rets;
                complete += w.n_rets && !w.tail_calls && !w.truncated;
        }
        if (complete == n_polls && n_polls)
                return 0;
        return uprobes_plan_add_missing(plan, PROBE_POLL_RETURN,
                                "return sites complete for %zu of %zu polls (%zu sites); the rest have no "
                                "symbol bounds or leave by tail call: use entry-only poll end or a uretprobe",
                                complete, n_polls, sites);
}
