/* plan_points: build the list of probe points from the two discovery routes
 * (symbols, vtable scan), label them, classify their first instruction and
 * apply the single-step policy.
 *
 * Single-step policy: a point whose first instruction the kernel cannot
 * emulate costs ~13-16 us per hit instead of ~1 us. Points the trace cannot
 * do without (poll, spawn, complete, park/unpark, worker markers, wake_by_val)
 * are attached anyway with a note; optional ones (wake_by_ref,
 * Unparker::unpark, poll return sites) are marked skipped with the reason. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan_int.h"
#include "tokio.h"

struct probe_point *uprobes_plan_point_add(struct plan_builder *b, enum probe_kind kind, uint64_t vaddr)
{
        if (b->n == b->cap) {
                size_t ncap = b->cap ? b->cap * 2 : 256;
                struct probe_point *n = realloc(b->pts, ncap * sizeof(*n));
                struct point_meta *m;

                if (!n)
                        return NULL;
                b->pts = n;
                m = realloc(b->meta, ncap * sizeof(*m));
                if (!m)
                        return NULL;
                b->meta = m;
                b->cap = ncap;
        }
        struct probe_point *p = &b->pts[b->n++];

        memset(p, 0, sizeof(*p));
        b->meta[b->n - 1] = (struct point_meta){ .essential = true };
        p->kind = kind;
        p->vaddr = vaddr;
        return p;
}

static struct probe_point *point_find(struct plan_builder *b, enum probe_kind kind, uint64_t vaddr)
{
        for (size_t i = 0; i < b->n; i++)
                if (b->pts[i].kind == kind && b->pts[i].vaddr == vaddr)
                        return &b->pts[i];
        return NULL;
}

static int add_symbol_point(struct plan_builder *b, const struct tokio_rule *rule,
                            const struct d9_sym *s)
{
        struct probe_point *p = point_find(b, rule->kind, s->vaddr);

        if (p)
                return 0; /* aliases of one function */
        p = uprobes_plan_point_add(b, rule->kind, s->vaddr);
        if (!p)
                return -ENOMEM;
        p->sources = PROBE_FROM_SYMBOLS;
        p->uretprobe = rule->uretprobe;
        p->value_from = rule->value_from;
        b->meta[b->n - 1] = (struct point_meta){ .essential = rule->essential, .rule = rule };
        if (rule->kind == PROBE_POLL && s->v0)
                p->label = uprobes_name_first_generic_arg(s->name, "raw::poll");
        else if (rule->kind != PROBE_POLL)
                p->label = strdup(s->name);
        return 0;
}

/* Keeps, per rule group, only the points of the lowest rank that matched
 * (e.g. drops the worker's Context::park_timeout when Parker::park exists,
 * which would otherwise report every park twice). */
static void drop_shadowed_alternatives(struct plan_builder *b)
{
        size_t w = 0;

        for (size_t i = 0; i < b->n; i++) {
                const struct tokio_rule *r = b->meta[i].rule;
                bool shadowed = false;

                for (size_t j = 0; r && r->group && j < b->n && !shadowed; j++) {
                        const struct tokio_rule *o = b->meta[j].rule;

                        shadowed = o && o->group && strcmp(o->group, r->group) == 0 && o->rank < r->rank;
                }
                if (shadowed) {
                        free(b->pts[i].label);
                        continue;
                }
                b->pts[w] = b->pts[i];
                b->meta[w++] = b->meta[i];
        }
        b->n = w;
}

int uprobes_plan_symbol_route(struct plan_builder *b)
{
        for (size_t i = 0; i < b->st.table.n; i++) {
                const struct d9_sym *s = &b->st.table.syms[i];
                const struct tokio_rule *rule;

                if (!s->name)
                        continue; /* only tokio names are demangled up front */
                _cleanup_free_ char *stripped = uprobes_name_strip_generics(s->name);
                if (!stripped)
                        return -ENOMEM;
                rule = uprobes_tokio_rule_match(stripped);
                if (!rule)
                        continue;
                if (add_symbol_point(b, rule, s) < 0)
                        return -ENOMEM;
                if (rule->kind == PROBE_PARK) {
                        /* The same function's return is the unpark. */
                        static const struct tokio_rule ret = { PROBE_UNPARK_RETURN, "", true, PROBE_ARG_NONE, true };
                        struct probe_point *p;

                        if (add_symbol_point(b, &ret, s) < 0)
                                return -ENOMEM;
                        p = point_find(b, PROBE_UNPARK_RETURN, s->vaddr);
                        b->meta[p - b->pts].rule = rule; /* same group as its park */
                }
        }
        drop_shadowed_alternatives(b);
        return 0;
}

int uprobes_plan_vtable_route(struct plan_builder *b)
{
        for (size_t i = 0; i < b->vs.n; i++) {
                const struct task_vtable *v = &b->vs.v[i];
                struct probe_point *p = point_find(b, PROBE_POLL, v->fn[0]);

                if (!p) {
                        p = uprobes_plan_point_add(b, PROBE_POLL, v->fn[0]);
                        if (!p)
                                return -ENOMEM;
                        p->value_from = PROBE_ARG0;
                }
                p->sources |= PROBE_FROM_VTABLE_SCAN;
                if (!p->vtable_vaddr)
                        p->vtable_vaddr = v->vaddr;
                /* Shape, not names: every runtime scheduler (multi-thread,
                 * current-thread, LocalSet) is one Arc, 8 bytes before the
                 * id; BlockingSchedule is not: zero-sized (1.24), or hooks
                 * (16 bytes, 1.43), or a Handle with test-util. */
                if (b->vs.id_slot >= 0 && b->vs.scheduler_slot >= 0 &&
                    v->off[b->vs.id_slot - 7] - v->off[b->vs.scheduler_slot - 7] != 8)
                        p->blocking_task = true;
        }
        return 0;
}

static bool is_runtime_crate(const char *name)
{
        static const char *const prefixes[] = { "tokio::", "core::", "std::", "alloc::" };

        if (*name == '<')
                name++;
        for (size_t i = 0; i < sizeof(prefixes) / sizeof(prefixes[0]); i++)
                if (strncmp(name, prefixes[i], strlen(prefixes[i])) == 0)
                        return true;
        return false;
}

/* The function a rip-relative slot (a GOT entry) holds: its relocation's
 * target, else (RELR, non-PIE) the word in the file; 0 if that is no
 * address of code. */
uint64_t uprobes_plan_slot_target(const struct plan_builder *b, uint64_t slot)
{
        const struct reloc *r = uprobes_reloc_at(&b->vs.relocs, slot);
        const uint8_t *word = r ? NULL : d9_elf_vaddr_bytes(b->img, slot, 8);
        uint64_t to = r ? r->value : 0;

        if (word)
                memcpy(&to, word, 8);
        return d9_elf_vaddr_is_exec(b->img, to) ? to : 0;
}

uint64_t uprobes_plan_slot_callee(const struct plan_builder *b, const uint8_t *code, const struct x86_insn *in,
                                  uint64_t vaddr)
{
        int32_t disp;

        if (in->len != 6 || code[0] != 0xff || (code[1] != 0x15 && code[1] != 0x25))
                return 0;
        memcpy(&disp, code + 2, 4);
        return uprobes_plan_slot_target(b, vaddr + 6 + (uint64_t)(int64_t)disp);
}

/* Follows leading tail jumps (raw::poll is often just `jmp Harness::poll`;
 * a static-pie's can be `jmp *slot(%rip)` through the GOT: npm nushell
 * 0.115) to the function that does the work. */
uint64_t uprobes_plan_follow_jumps(const struct plan_builder *b, uint64_t vaddr)
{
        for (int hop = 0; hop < 4; hop++) {
                const uint8_t *code = d9_elf_vaddr_bytes(b->img, vaddr, 6);
                struct x86_insn in;
                uint64_t to;

                if (!code)
                        break;
                uprobes_x86_decode(code, 6, &in);
                if (in.is_jmp_rel) {
                        vaddr = vaddr + (uint64_t)in.len + (uint64_t)in.rel;
                        continue;
                }
                if (code[1] != 0x25 || !(to = uprobes_plan_slot_callee(b, code, &in, vaddr)))
                        break;
                vaddr = to;
        }
        return vaddr;
}

/* The runtime's own frames between raw::poll and the future's poll fn:
 * Tokio 1.0's raw::poll calls AssertUnwindSafe::call_once, which calls
 * the future's poll (BlockingTask's, or GenFuture's around an async fn's
 * closure). */
static bool is_poll_wrapper(const char *name)
{
        static const char *const parts[] = { "AssertUnwindSafe<F> as core::ops::function::FnOnce",
                                             "::harness::Harness<T,S>::poll", "::harness::poll_future",
                                             "::panicking::try",
                                             "from_generator::GenFuture<T> as core::future::future::Future>::poll",
                                             "::core::CoreStage<T>::poll", "::core::Core<T,S>::poll",
                                             "::unsafe_cell::UnsafeCell<T>::with_mut" };

        for (size_t i = 0; i < sizeof(parts) / sizeof(parts[0]); i++)
                if (strstr(name, parts[i]))
                        return true;
        return false;
}

/* Where the call or jump in (decoded from code, at vaddr) goes: direct, or
 * through a GOT slot a relative relocation fills (a PIE's `call
 * *f@GOTPCREL(%rip)`: Tokio 1.12's UnsafeCell::with_mut calls the future's
 * poll that way); 0 if neither. */
static uint64_t callee_of(const struct plan_builder *b, const uint8_t *code, const struct x86_insn *in, uint64_t vaddr)
{
        if (in->is_call_rel || in->is_jmp_rel)
                return vaddr + in->len + (uint64_t)in->rel;
        return uprobes_plan_slot_callee(b, code, in, vaddr);
}

/* Calls f(callee name) for each call in the function at vaddr (after its
 * leading jumps), and with depth > 1 in the runtime's poll wrappers it
 * calls; stops when f returns a label. */
static char *scan_callees(struct plan_builder *b, uint64_t vaddr, char *(*f)(const char *name), int depth)
{
        uint64_t body = uprobes_plan_follow_jumps(b, vaddr);
        struct d9_sym *fs = d9_sym_table_find(&b->st.table, body);

        if (!fs || fs->vaddr != body || !fs->size)
                return NULL;
        const uint8_t *code = d9_elf_vaddr_bytes(b->img, body, fs->size);
        for (uint64_t off = 0; code && off < fs->size;) {
                struct x86_insn in;
                char *label;

                uprobes_x86_decode(code + off, fs->size - off, &in);
                if (!in.len)
                        break;
                uint64_t to = callee_of(b, code + off, &in, body + off);

                if (to) {
                        struct d9_sym *callee = d9_sym_table_find(&b->st.table, to);
                        const char *name = callee && callee != fs ? d9_sym_name(callee) : NULL;

                        if (name && (label = f(name)))
                                return label;
                        if (name && depth > 1 && callee->vaddr != body && is_poll_wrapper(name) &&
                            (label = scan_callees(b, callee->vaddr, f, depth - 1)))
                                return label;
                }
                off += (uint64_t)in.len;
        }
        return NULL;
}

/* Not the runtime's, nor a compiler helper (`__rust_probestack`, the first
 * call of a poll with a big frame, labelled 10 poll points of npm
 * traffic-mesh, and with them 63 of its long polls). */
static char *first_non_runtime(const char *name)
{
        return is_runtime_crate(name) || !strncmp(name, "__", 2) ? NULL : strdup(name);
}

/* The future's own poll fn, as legacy symbols name it: an async fn or block
 * (`crate::f::{{closure}}`) or a hand-written `<X as Future>::poll`; or
 * a blocking-pool task's (its label then flags the point blocking). */
static char *future_poll_name(const char *name)
{
        size_t n = strlen(name);

        if (strstr(name, "::blocking::task::BlockingTask<T> as core::future::future::Future>::poll"))
                return strdup(name);
        if (is_runtime_crate(name))
                return NULL;
        if ((n > 13 && !strcmp(name + n - 13, "::{{closure}}")) || strstr(name, " as core::future::future::Future>::poll"))
                return strdup(name);
        return NULL;
}

/* T from the drop glue a vtable's siblings (dealloc, shutdown, ...) call:
 * a Cell's or Stage's of any sibling before a CoreStage's, which is merged
 * across more futures. Tokio 1.49's dealloc may drop only a CoreStage (npm
 * vaulttools-mcp: its request task's poll enters the future through a jump
 * table, so that glue is all that names it). */
static char *drop_glue_label(struct plan_builder *b, const struct task_vtable *v)
{
        char *(*const glues[])(const char *) = { uprobes_future_from_drop_glue,
                                                 uprobes_future_from_core_stage_glue };

        for (size_t g = 0; g < sizeof(glues) / sizeof(glues[0]); g++)
                for (int slot = 2; slot < 7; slot++) {
                        char *t = scan_callees(b, v->fn[slot], glues[g], 1);

                        if (t)
                                return t;
                }
        return NULL;
}

/* "A | B (one poll instance serves 2 future types)" when several vtables
 * share this poll and their drop glue names different types; else NULL. */
static char *shared_instance_label(struct plan_builder *b, const struct probe_point *p)
{
        char *joined = NULL;
        size_t types = 0;

        for (size_t i = 0; i < b->vs.n; i++) {
                char *t, *more;

                if (b->vs.v[i].fn[0] != p->vaddr || !(t = drop_glue_label(b, &b->vs.v[i])))
                        continue;
                if (joined && strstr(joined, t)) {
                        free(t);
                        continue;
                }
                more = NULL;
                if (asprintf(&more, "%s%s%s", joined ? joined : "", joined ? " | " : "", t) < 0)
                        more = NULL;
                free(t);
                free(joined);
                joined = more;
                types++;
                if (!joined)
                        return NULL;
        }
        if (types < 2) {
                free(joined);
                return NULL;
        }
        char *label = NULL;
        if (asprintf(&label, "%s (one poll instance serves %zu future types)", joined, types) < 0)
                label = NULL;
        free(joined);
        return label;
}

/* Legacy mangling has no generic arguments, so `raw::poll<T,S>` does not
 * name T. Best: the future's own poll fn that this instance calls (the
 * harness calls it directly). Drop glue names T too (`drop_in_place<...
 * Cell<T, S>>`), but identical glue of two futures with the same layout is
 * merged by the compiler and keeps one name: mixed's thread_sleeper task
 * was labelled blocker that way. So the glue is the fallback, and when
 * several vtables really share one poll instance the label lists them all. */
static char *legacy_label(struct plan_builder *b, const struct probe_point *p)
{
        char *t = shared_instance_label(b, p), *own, *glue = NULL;

        if (t)
                return t;
        own = scan_callees(b, p->vaddr, future_poll_name, 4);
        for (size_t i = 0; i < b->vs.n && p->vtable_vaddr && !glue; i++)
                if (b->vs.v[i].vaddr == p->vtable_vaddr)
                        glue = drop_glue_label(b, &b->vs.v[i]);
        /* The glue's name says more when it wraps the fn this poll calls
         * (BlockingTask<F> calling F); when it names another future, it is
         * that future's merged glue: the poll's own callee is right. */
        if (own && glue && strstr(glue, own)) {
                free(own);
                return glue;
        }
        if (own || glue) {
                free(own ? glue : NULL);
                return own ? own : glue;
        }
        return scan_callees(b, p->vaddr, first_non_runtime, 1);
}

int uprobes_plan_label_polls(struct plan_builder *b)
{
        for (size_t i = 0; i < b->n; i++) {
                struct probe_point *p = &b->pts[i];

                if (p->kind != PROBE_POLL)
                        continue;
                if (!p->label && b->st.from_symtab)
                        p->label = legacy_label(b, p);
                if (!p->label && asprintf(&p->label, "0x%" PRIx64, p->vaddr) < 0)
                        return -ENOMEM;
                p->boxed_dyn |= uprobes_label_is_boxed_dyn_future(p->label);
                /* Symbol-only points (no vtable found for them). */
                p->blocking_task |= !p->vtable_vaddr && strstr(p->label, "BlockingTask") != NULL;
        }
        return 0;
}

int uprobes_plan_classify(struct plan_builder *b)
{
        for (size_t i = 0; i < b->n; i++) {
                struct probe_point *p = &b->pts[i];
                const uint8_t *code = NULL;
                size_t avail = 15;
                struct x86_insn in = { 0 };

                while (avail && !(code = d9_elf_vaddr_bytes(b->img, p->vaddr, avail)))
                        avail--;
                if (d9_elf_vaddr_to_offset(b->img, p->vaddr, &p->file_offset) < 0 || !code) {
                        p->skipped = true;
                        asprintf(&p->skip_reason, "address 0x%" PRIx64 " is not in the file", p->vaddr);
                        continue;
                }
                uprobes_x86_decode(code, avail, &in);
                p->insn = in.len ? in.cls : PROBE_INSN_UNKNOWN;
                p->insn_len = (unsigned)in.len;
                p->insn_desc = strdup(in.len ? in.what : "undecodable");
                if (p->insn == PROBE_INSN_EMULATED || p->skipped)
                        continue;
                if (b->meta[i].essential) {
                        asprintf(&p->note, "first instruction '%s' is single-stepped (~15x cost per hit); "
                                 "attached because this kind is essential", p->insn_desc);
                } else {
                        p->skipped = true;
                        asprintf(&p->skip_reason, "first instruction '%s' is single-stepped (~15x cost per hit) "
                                 "and this point is optional", p->insn_desc);
                }
        }
        return 0;
}
