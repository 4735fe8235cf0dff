/* plan_complete: Harness<T,S>::complete of every task vtable, without symbols.
 *
 * complete runs exactly once per task that finishes (output stored or the
 * task cancelled), with the task's Header* as its first argument: that is
 * the terminate event. It is generic over (T,S) and not in the vtable, but
 * both vtable entries that can end a task call it directly: poll (slot 0,
 * when the future returns Ready) and shutdown (slot 6, after cancelling it).
 * The calls the two have in common are complete itself, what complete
 * does on its own path as well (Core::set_stage, the cell's drop glue) and
 * helpers most task types call (panic cleanup): complete is the common
 * callee that calls another common callee and is not such a helper (called
 * for task types with three or more distinct shutdowns; identical code
 * folding merges the shutdown and complete of alike task types). Builds for size (opt-level s/z: Tokio 1.53 in
 * apimock, our `size` targets) keep cancel_task out of line, so shutdown
 * and complete share no callee; there complete is the common callee that
 * both drops the stage (a function poll calls too) and calls the vtable's
 * dealloc. The second rule is asked only when the first finds nothing. A
 * vtable where neither picks exactly one function gets no point (counted
 * in the plan, never guessed).
 *
 * Without symbols a body's end is a guess; a sweep stops at the next known
 * function entry (vtable slots, where their jumps lead, direct call targets
 * of poll and shutdown), else at a terminator no forward branch or PIC jump
 * table passes. A forward jmp to a known entry, past the next known entry,
 * to just after the padding between functions or to the very next byte is
 * a tail call. The vtable's dealloc entry is no substitute for complete:
 * complete frees the task (through dealloc, inlined or not) only when it
 * holds the last reference, so the vtable's dealloc runs for only some tasks.
 *
 * With symbols the same search runs as a cross-check: a point it finds that
 * is not the symbol's Harness::complete is a finding of its own (test). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan_int.h"

#define MAX_CALLEES 256
#define MAX_BODY (64u << 10)
/* Bytes one plan may decode here: a crafted file with a flood of fake
 * vtables must not pin d9d's CPU (codex 0.171, 2376 vtables, sweeps 48 MB
 * in ~0.7 s of a plan; this is ~5 times that). */
#define SWEEP_BUDGET (256ull << 20)

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
 * base) that lands inside [start, end): the table ends at the first entry
 * that does not (the data after it: another table, or none). */
static uint64_t jump_table_reach(const struct elf_image *img, uint64_t table, uint64_t start, uint64_t end)
{
        uint64_t far = 0;

        for (int i = 0; i < 512; i++) {
                const uint8_t *e = d9_elf_vaddr_bytes(img, table + 4 * (uint64_t)i, 4);
                int32_t rel;

                if (!e)
                        break;
                memcpy(&rel, e, 4);
                uint64_t to = table + (uint64_t)(int64_t)rel;
                if (to < start || to >= end)
                        break;
                far = to > far ? to : far;
        }
        return far;
}

/* True if [from, to) is one or more of the kernel's and compilers' nops. */
static bool all_nops(const struct elf_image *img, uint64_t from, uint64_t to)
{
        const uint8_t *b = d9_elf_vaddr_bytes(img, from, to - from);

        for (uint64_t off = 0; b && off < to - from;) {
                struct x86_insn in;

                uprobes_x86_decode(b + off, to - from - off, &in);
                if (!in.len || strcmp(in.what, "nop") != 0)
                        return false;
                off += (uint64_t)in.len;
        }
        return b != NULL;
}

/* Does an instruction that never falls through end exactly at end? (ret,
 * int3, ud2, jmp rel8/rel32, jmp *mem; read backwards, so a heuristic.) */
static bool terminator_ends_at(const struct elf_image *img, uint64_t end)
{
        const uint8_t *b = d9_elf_vaddr_bytes(img, end - 6, 6);

        return b && (b[5] == 0xc3 || b[5] == 0xcc || (b[4] == 0x0f && b[5] == 0x0b) || b[4] == 0xeb ||
                     b[1] == 0xe9 || (b[0] == 0xff && (b[1] == 0x25 || b[1] == 0x24)));
}

/* A forward jmp lands on another function when the target follows the
 * padding between functions: int3 (newer LLVM), or nops after an
 * instruction that never falls through, up to a 16-byte aligned entry. */
static bool is_function_entry(const struct elf_image *img, uint64_t to)
{
        const uint8_t *b = d9_elf_vaddr_bytes(img, to - 1, 1);

        if (!b)
                return false;
        if (*b == 0xcc)
                return true;
        if (to % 16)
                return false;
        for (uint64_t pad = 1; pad < 16; pad++)
                if (all_nops(img, to - pad, to) && terminator_ends_at(img, to - pad))
                        return true;
        return false;
}

/* The first known function entry after start (UINT64_MAX if none). */
static uint64_t next_entry(const struct entry_set *known, uint64_t start)
{
        size_t lo = 0, hi = known ? known->n : 0;

        while (lo < hi) {
                size_t mid = (lo + hi) / 2;

                if (known->v[mid] <= start)
                        lo = mid + 1;
                else
                        hi = mid;
        }
        return known && lo < known->n ? known->v[lo] : UINT64_MAX;
}

static bool is_known(const struct entry_set *known, uint64_t at)
{
        return known && known->n && bsearch(&at, known->v, known->n, sizeof(*known->v), uprobes_cmp_u64);
}

/* push %rbp; mov %rsp,%rbp (either encoding of the mov). */
static bool frame_prologue(const uint8_t *p, size_t n)
{
        return n >= 4 && p[0] == 0x55 && p[1] == 0x48 && ((p[2] == 0x89 && p[3] == 0xe5) || (p[2] == 0x8b && p[3] == 0xec));
}

/* int3 or a nop: what compilers and linkers put between functions. */
static bool padding_at(const uint8_t *p, size_t n)
{
        struct x86_insn in;

        if (p[0] == 0xcc)
                return true;
        uprobes_x86_decode(p, n, &in);
        return in.len && strcmp(in.what, "nop") == 0;
}

/* Direct call (and tail-jump) targets of the function at vaddr, sorted and
 * unique (at most max), by a linear sweep that ends at the next known entry
 * (known NULL: within 16 KiB) or at the first terminator no forward branch
 * passes. Charges the bytes swept to *left; nothing once it is spent.
 * body (may be NULL): the function's bytes, [lo, hi), for which the sweep
 * goes on past a terminator unless padding (int3, nops) or a frame-pointer
 * prologue follows: landing pads and cold blocks no branch reaches sit
 * after the last one, and their calls are frames of this function too; hi
 * 0 when the sweep cannot tell (undecodable bytes, the budget). */
static size_t code_callees(const struct plan_builder *b, uint64_t vaddr, const struct entry_set *known,
                           uint64_t *left, uint64_t *out, size_t max, struct body_span *body)
{
        const struct elf_image *img = b->img;
        uint64_t start = uprobes_plan_follow_jumps(b, vaddr), reach = start, table = 0;
        /* Unbounded sweeps only collect entries: a few KiB past a body is enough. */
        uint64_t bound = known ? next_entry(known, start) : start + (16u << 10);
        size_t n = 0, avail = MAX_BODY;
        const uint8_t *code = NULL;

        /* The body may end closer to the end of the segment than MAX_BODY. */
        if (bound - start < avail)
                avail = bound - start; /* never into the next function we know of */
        while (avail >= 16 && !(code = d9_elf_vaddr_bytes(img, start, avail)))
                avail /= 2;
        if (body)
                *body = (struct body_span){ start, 0 };
        if (*left < avail)
                return 0;
        uint64_t off = 0, first_end = 0, slot[MAX_CALLEES];
        size_t n_slot = 0;
        bool ended = false;
        for (; code && off < avail;) {
                struct x86_insn in;
                uint64_t at = start + off;

                /* A function with a frame starts so: nothing inside one does. */
                if (body && off && at > reach && frame_prologue(code + off, avail - off)) {
                        ended = true;
                        break;
                }
                uprobes_x86_decode(code + off, avail - off, &in);
                if (!in.len)
                        break;
                uint64_t to;
                if (lea_rip(code + off, avail - off, at, &to))
                        table = to;
                to = at + (uint64_t)in.len + (uint64_t)in.rel;
                if (in.is_jmp_reg && table) {
                        /* A body's: never past the next function we know of. */
                        uint64_t far = jump_table_reach(img, table, start, start + (body ? avail : MAX_BODY));

                        reach = far > reach ? far : reach;
                }
                if (in.is_call_rel && d9_elf_vaddr_is_exec(img, to))
                        n = add_unique(out, n, max, to);
                uint64_t slot_to = uprobes_plan_slot_callee(b, code + off, &in, at);
                if (slot_to)
                        n_slot = add_unique(slot, n_slot, MAX_CALLEES, slot_to);
                bool tail = in.is_jmp_rel && to > reach && (is_known(known, to) || is_function_entry(img, to));

                /* A jump backwards past the entry or far away is a tail call, and
                 * so is one at or past the next function we know of, or one to
                 * the very next byte: builds for size place a callee right
                 * after its caller and pad no function to an alignment. */
                tail |= in.is_jmp_rel && (to < start || to >= start + MAX_BODY || (known && to >= bound) ||
                                          to == at + (uint64_t)in.len);
                if ((in.is_jcc || in.is_jmp_rel) && !tail && to > reach && to < start + MAX_BODY)
                        reach = to;
                if (tail && d9_elf_vaddr_is_exec(img, to))
                        n = add_unique(out, n, max, to);
                off += (uint64_t)in.len;
                /* The function ends at a terminator no earlier branch jumps past. */
                if ((in.is_ret || in.is_jmp_rel || in.is_stop) && start + off > reach) {
                        first_end = first_end ? first_end : start + off;
                        if (!body || off >= avail || padding_at(code + off, avail - off)) {
                                ended = true;
                                break;
                        }
                }
        }
        /* Through GOT slots only in a build that calls so throughout (npm
         * nushell, static-pie): beside direct calls they are imports and
         * shared helpers, which blur the one callee complete is (the test
         * targets: 16 of 51 found with them). */
        for (size_t i = 0; b->calls_via_got && i < n_slot; i++)
                n = add_unique(out, n, max, slot[i]);
        /* Stopped by the next function we know of: it ends there at the latest. */
        ended |= known && code && off >= avail && start + avail == bound;
        if (body)
                body->hi = ended ? start + off : first_end;
        *left -= off;
        qsort(out, n, sizeof(*out), uprobes_cmp_u64);
        return n;
}

static bool contains(const uint64_t *v, size_t n, uint64_t x)
{
        return bsearch(&x, v, n, sizeof(*v), uprobes_cmp_u64) != NULL;
}

/* Does complete's own path show in sub (the callees of common callee c)?
 * It drops the stage through a function poll calls too (set_stage or
 * Core::drop_future_or_output; identical code folding may share that among
 * types) and frees the task through the vtable's dealloc. cancel_task drops
 * the stage but never frees; drop_reference frees but drops no stage. */
static bool drops_stage_and_frees(const uint64_t *sub, size_t nsub, const uint64_t *poll, size_t np,
                                  uint64_t c, uint64_t dealloc)
{
        bool frees = false, stage = false;

        for (size_t k = 0; k < nsub; k++) {
                frees |= sub[k] == dealloc;
                stage |= sub[k] != c && sub[k] != dealloc && contains(poll, np, sub[k]);
        }
        return frees && stage;
}

/* complete of one vtable, or 0 when the code does not single it out. */
static uint64_t vtable_complete(const struct plan_builder *b, const struct entry_set *known,
                                const struct entry_set *shared, uint64_t *left, const struct task_vtable *v)
{
        uint64_t poll[MAX_CALLEES], shut[MAX_CALLEES], common[MAX_CALLEES], sub[MAX_CALLEES];
        size_t np = code_callees(b, v->fn[0], known, left, poll, MAX_CALLEES, NULL);
        size_t ns = code_callees(b, v->fn[6], known, left, shut, MAX_CALLEES, NULL);
        uint64_t dealloc = uprobes_plan_follow_jumps(b, v->fn[2]);
        size_t nc = 0, found = 0, found_freeing = 0;
        uint64_t pick = 0, pick_freeing = 0;

        for (size_t i = 0; i < ns; i++)
                if (contains(poll, np, shut[i]))
                        common[nc++] = shut[i];
        for (size_t i = 0; i < nc; i++) {
                size_t nsub = code_callees(b, common[i], known, left, sub, MAX_CALLEES, NULL);
                bool calls_common = false;

                /* Shared by several task types: a common helper, not complete. */
                if (is_known(shared, common[i]))
                        continue;
                for (size_t k = 0; k < nsub && !calls_common; k++)
                        calls_common = sub[k] != common[i] && contains(common, nc, sub[k]);
                if (calls_common) {
                        pick = common[i];
                        found++;
                }
                if (drops_stage_and_frees(sub, nsub, poll, np, common[i], dealloc)) {
                        pick_freeing = common[i];
                        found_freeing++;
                }
        }
        /* Inlined cancel_task (the usual shape): complete calls what shutdown
         * calls. Else the second shape, never a mix of the two. */
        if (found)
                return found == 1 ? pick : 0;
        return found_freeing == 1 ? pick_freeing : 0;
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
        struct d9_sym *s = d9_sym_table_find(&b->st.table, vaddr);
        const char *name = s && s->vaddr == vaddr ? d9_sym_name(s) : NULL;
        size_t n = name ? strlen(name) : 0;

        return name && strstr(name, "Harness") && n > 10 && strcmp(name + n - 10, "::complete") == 0;
}

static int entry_push(struct entry_set *e, size_t *cap, uint64_t v)
{
        if (e->n == *cap) {
                size_t ncap = *cap ? *cap * 2 : 1024;
                uint64_t *n = realloc(e->v, ncap * sizeof(*n));

                if (!n)
                        return -ENOMEM;
                e->v = n;
                *cap = ncap;
        }
        e->v[e->n++] = v;
        return 0;
}

struct call_pair {
        uint64_t callee, owner; /* owner: the vtable's shutdown function */
};

static int by_pair(const void *a, const void *b)
{
        const struct call_pair *x = a, *y = b;

        if (x->callee != y->callee)
                return x->callee < y->callee ? -1 : 1;
        return x->owner < y->owner ? -1 : x->owner > y->owner;
}

/* Callees that the polls or shutdowns of task types with three or more
 * distinct shutdown functions call (panic cleanup, allocator, Arc
 * drop_slow, ...): never a type's own complete. Counted by shutdown, not
 * by poll: identical code folding merges the shutdown and complete of task
 * types alike in layout (biome: three blocking task types share one), and
 * that complete is still theirs alone. */
static int shared_callees(struct plan_builder *b, const struct entry_set *known, uint64_t *left,
                          struct entry_set *shared)
{
        uint64_t calls[MAX_CALLEES];
        struct call_pair *pairs = NULL;
        size_t n = 0, cap = 0, scap = 0;
        int r = 0;

        for (size_t i = 0; i < b->vs.n && r == 0; i++)
                for (int k = 0; k <= 6 && r == 0; k += 6) {
                        size_t nc = code_callees(b, b->vs.v[i].fn[k], known, left, calls, MAX_CALLEES, NULL);

                        if (n + nc > cap) {
                                size_t ncap = (n + nc) * 2;
                                struct call_pair *np = realloc(pairs, ncap * sizeof(*np));

                                if (!np) {
                                        r = -ENOMEM;
                                        break;
                                }
                                pairs = np;
                                cap = ncap;
                        }
                        for (size_t j = 0; j < nc; j++)
                                pairs[n++] = (struct call_pair){ calls[j], b->vs.v[i].fn[6] };
                }
        if (r == 0 && n)
                qsort(pairs, n, sizeof(*pairs), by_pair);
        /* The helpers are called from most shutdowns; a folded complete
         * from one (or two) shutdowns however many polls share it. */
        for (size_t i = 0, owners = 0; i < n && r == 0; i++) {
                if (i && pairs[i].callee != pairs[i - 1].callee)
                        owners = 0;
                owners += !i || pairs[i].callee != pairs[i - 1].callee || pairs[i].owner != pairs[i - 1].owner;
                if (owners == 3)
                        r = entry_push(shared, &scap, pairs[i].callee);
        }
        free(pairs);
        return r;
}

/* Function entries we can be sure of without symbols: every vtable slot,
 * where its leading jumps lead, and every direct call target in the poll
 * and shutdown bodies (swept without bounds: a sweep that runs on into the
 * next function still finds real calls there). They bound the sweeps. */
static int known_entries(struct plan_builder *b, uint64_t *left, struct entry_set *e)
{
        uint64_t calls[MAX_CALLEES];
        size_t cap = 0;

        for (size_t i = 0; i < b->vs.n; i++)
                for (int k = 0; k < 7; k++) {
                        uint64_t fn = b->vs.v[i].fn[k];

                        if (entry_push(e, &cap, fn) < 0 || entry_push(e, &cap, uprobes_plan_follow_jumps(b, fn)) < 0)
                                return -ENOMEM;
                        if (k != 0 && k != 6)
                                continue;
                        size_t n = code_callees(b, fn, NULL, left, calls, MAX_CALLEES, NULL);
                        for (size_t j = 0; j < n; j++)
                                if (entry_push(e, &cap, calls[j]) < 0)
                                        return -ENOMEM;
                }
        e->n = uprobes_sort_unique_u64(e->v, e->n);
        return 0;
}

/* Whether the task vtables' poll functions call through GOT slots far
 * more than directly: their first 512 bytes each, after leading jumps. */
static bool task_calls_via_got(const struct plan_builder *b)
{
        uint64_t direct = 0, via_got = 0;

        for (size_t i = 0; i < b->vs.n; i++) {
                uint64_t at = uprobes_plan_follow_jumps(b, b->vs.v[i].fn[0]);
                const uint8_t *code = d9_elf_vaddr_bytes(b->img, at, 512);

                for (size_t off = 0; code && off < 512;) {
                        struct x86_insn in;

                        uprobes_x86_decode(code + off, 512 - off, &in);
                        if (!in.len)
                                break;
                        direct += in.is_call_rel;
                        via_got += in.len == 6 && code[off] == 0xff && code[off + 1] == 0x15;
                        off += (size_t)in.len;
                }
        }
        return via_got > 4 * direct;
}

int uprobes_plan_complete_route(struct plan_builder *b, struct probe_plan *plan)
{
        struct entry_set *known = &b->known, shared = { 0 };
        bool by_symbols = false;
        uint64_t *left = &b->sweep_left;
        int r;

        *left = SWEEP_BUDGET;
        b->calls_via_got = task_calls_via_got(b);
        r = known_entries(b, left, known);
        if (r == 0)
                r = shared_callees(b, known, left, &shared);
        if (r < 0) {
                free(shared.v);
                return r;
        }

        for (size_t i = 0; i < b->n; i++)
                by_symbols |= b->pts[i].kind == PROBE_COMPLETE;
        for (size_t i = 0; i < b->vs.n; i++) {
                const struct task_vtable *v = &b->vs.v[i];
                uint64_t at = vtable_complete(b, known, &shared, left, v);
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
                        p = uprobes_plan_point_add(b, PROBE_COMPLETE, at);
                        if (!p) {
                                r = -ENOMEM;
                                break;
                        }
                        p->value_from = PROBE_ARG0;
                        /* A complete the symbol rules missed keeps its own name. */
                        struct d9_sym *fs = by_symbols ? d9_sym_table_find(&b->st.table, at) : NULL;

                        if (fs ? !(p->label = strdup(d9_sym_name(fs))) :
                            asprintf(&p->label, "Harness::complete of task vtable 0x%" PRIx64, v->vaddr) < 0) {
                                r = -ENOMEM;
                                break;
                        }
                }
                if (!(p->sources & PROBE_FROM_VTABLE_SCAN))
                        plan->completes_by_scan++;
                p->sources |= PROBE_FROM_VTABLE_SCAN;
        }
        free(shared.v);
        if (r == 0 && *left < MAX_BODY)
                r = uprobes_plan_add_missing(plan, PROBE_COMPLETE, "code sweep budget (%llu MiB) spent: not every task "
                                     "vtable's code was examined for Harness::complete", SWEEP_BUDGET >> 20);
        return r;
}

bool uprobes_plan_sweep_body(struct plan_builder *b, uint64_t vaddr, uint64_t *lo, uint64_t *hi)
{
        uint64_t calls[MAX_CALLEES];
        struct body_span body;

        code_callees(b, vaddr, &b->known, &b->sweep_left, calls, MAX_CALLEES, &body);
        *lo = body.lo;
        *hi = body.hi;
        return body.hi > body.lo;
}
