/* plan_dyn_names: the names a task whose future is `Pin<Box<dyn Future>>`
 * can be labelled with, found while planning, so the daemon names such a
 * task from the plan and never reads the target's files on its drain loop
 * (daemon/record/translate.c).
 *
 * At poll entry BPF reads the concrete future's poll fn from the box's dyn
 * vtable (plan_dyn.c): slot 3 of one of the executable's Rust dyn vtables,
 * which are drop_in_place (a code pointer, or null for a type without drop
 * glue), size, align (a power of two, size a multiple of it), then the
 * trait's methods. In a PIE the code pointers are relative relocations and
 * size and align are not (relocs.c); a non-PIE binary has the same four
 * words in .data.rel.ro or .rodata. Nothing in a vtable says which trait it
 * is for, so this takes method 0 of every trait object (Future::poll of a
 * dyn Future, but also Debug::fmt, Write::write_str, FnOnce::call_once
 * shims, ...): a superset, which costs bytes, never a wrong name. Each
 * function is named as the sealer names a frame at its address
 * (d9_sym_table_find_nearest, d9_sym_name), which is what the drain loop's
 * own lookup used to print. Without symbols (none of them named) every one
 * is kept with the empty name: the daemon names such a function
 * "[unnamed] FILE 0xVADDR", and a default-set long poll of a boxed future
 * is labelled only by a frame the table holds (a poll instance also calls
 * free, the scheduler, ...; npm ace-tool-rs, musl static, stripped). */
#include <errno.h>
#include <string.h>

#include "plan_int.h"

#define DYN_SLOT 3
#define ALIGN_MAX (1ull << 29)  /* rustc's own limit for #[repr(align)] */

struct fn_list {
        uint64_t *v;
        size_t n, cap;
};

static int fn_push(struct fn_list *l, uint64_t fn)
{
        if (l->n == l->cap) {
                size_t ncap = l->cap ? l->cap * 2 : 1024;
                uint64_t *more = realloc(l->v, ncap * sizeof(*more));

                if (!more)
                        return -ENOMEM;
                l->v = more;
                l->cap = ncap;
        }
        l->v[l->n++] = fn;
        return 0;
}

static bool size_align_plausible(uint64_t size, uint64_t align)
{
        return align && align <= ALIGN_MAX && !(align & (align - 1)) && size % align == 0 && size < (1ull << 47);
}

/* The file's words at vaddr (n of them), or false. */
static bool words_at(const struct elf_image *img, uint64_t vaddr, uint64_t *w, size_t n)
{
        const uint8_t *p = d9_elf_vaddr_bytes(img, vaddr, 8 * n);

        if (p)
                memcpy(w, p, 8 * n);
        return p != NULL;
}

/* PIE: every relocated code pointer whose three words before are a dyn
 * vtable's head: a relocated code pointer or an unrelocated null, then two
 * unrelocated words, a size and its alignment. */
static int scan_relocs(const struct elf_image *img, const struct reloc_list *l, struct fn_list *out)
{
        for (size_t i = 0; i < l->n; i++) {
                uint64_t at = l->r[i].where, head = at - 8 * DYN_SLOT, w[DYN_SLOT];
                uint64_t prev = i ? l->r[i - 1].where : 0;

                /* prev between head and at: size or align relocated. */
                if (at <= 8 * DYN_SLOT || prev > head || !d9_elf_vaddr_is_exec(img, l->r[i].value) ||
                    !words_at(img, head, w, DYN_SLOT))
                        continue;
                if (i && prev == head ? !d9_elf_vaddr_is_exec(img, l->r[i - 1].value) : w[0] != 0)
                        continue;
                if (size_align_plausible(w[1], w[2]) && fn_push(out, l->r[i].value) < 0)
                        return -ENOMEM;
        }
        return 0;
}

/* Non-PIE: the same four words, absolute, in a read-only data section. */
static int scan_section_words(const struct elf_image *img, const char *name, struct fn_list *out)
{
        size_t size;
        uint64_t addr;
        const uint8_t *d = d9_elf_section_data(img, name, &size, &addr);

        for (size_t off = d ? (8 - addr % 8) % 8 : 0; d && off + 8 * (DYN_SLOT + 1) <= size; off += 8) {
                uint64_t w[DYN_SLOT + 1];

                memcpy(w, d + off, sizeof(w));
                if ((w[0] == 0 || d9_elf_vaddr_is_exec(img, w[0])) && size_align_plausible(w[1], w[2]) &&
                    d9_elf_vaddr_is_exec(img, w[3]) && fn_push(out, w[3]) < 0)
                        return -ENOMEM;
        }
        return 0;
}

struct named {
        const char *name;
        size_t fn;              /* index into plan->dyn_fns */
};

/* A function a boxed future's poll can run in, and where its name is. */
struct dyn_entry {
        uint64_t vaddr, name_at;
};

static int by_entry(const void *a, const void *b)
{
        const struct dyn_entry *x = a, *y = b;

        if (x->vaddr != y->vaddr)
                return x->vaddr < y->vaddr ? -1 : 1;
        /* The function's own name before a thunk's jumping to it. */
        return (x->name_at != x->vaddr) - (y->name_at != y->vaddr);
}

/* Where fn goes if its first instruction is a `jmp` rel8/rel32, else fn. */
static uint64_t jmp_rel_target(const struct plan_builder *b, uint64_t fn)
{
        const uint8_t *code = d9_elf_vaddr_bytes(b->img, fn, 5);
        struct x86_insn in;

        if (!code)
                return fn;
        uprobes_x86_decode(code, 5, &in);
        return in.is_jmp_rel ? fn + (uint64_t)in.len + (uint64_t)in.rel : fn;
}

/* The sorted fns, each named by itself, and where the thunks among them
 * (methods that only jump on) go, named by the thunk: a stack never shows
 * a thunk, only where it jumped (npm grafbase's hyper client connections
 * are boxed `futures_util::future::Map`s whose poll jumps to the inner
 * `map::Map`'s, and their default-set long polls read no future at all).
 * One entry per address; a function two thunks jump to (code the compiler
 * merged for two types) is left out: either name could be wrong. */
static int dyn_entries(const struct plan_builder *b, const struct fn_list *fns, struct dyn_entry **out, size_t *n)
{
        struct dyn_entry *e = calloc(2 * fns->n + 1, sizeof(*e));
        size_t k = 0, u = 0;

        if (!e)
                return -ENOMEM;
        for (size_t i = 0; i < fns->n; i++) {
                uint64_t to = jmp_rel_target(b, fns->v[i]);

                e[k++] = (struct dyn_entry){ fns->v[i], fns->v[i] };
                if (to != fns->v[i] && d9_elf_vaddr_is_exec(b->img, to))
                        e[k++] = (struct dyn_entry){ to, fns->v[i] };
        }
        qsort(e, k, sizeof(*e), by_entry);
        for (size_t i = 0, j; i < k; i = j) {
                for (j = i + 1; j < k && e[j].vaddr == e[i].vaddr;)
                        j++;
                if (e[i].name_at == e[i].vaddr || j == i + 1)
                        e[u++] = e[i];
        }
        *out = e;
        *n = u;
        return 0;
}

static int by_name(const void *a, const void *b)
{
        return strcmp(((const struct named *)a)->name, ((const struct named *)b)->name);
}

/* plan->dyn_fn_text: the names of v[0..n), each once; dyn_fns[i].name
 * their offsets. */
static int names_pack(struct probe_plan *plan, struct named *v, size_t n)
{
        size_t len = 0;

        qsort(v, n, sizeof(*v), by_name);
        for (size_t i = 0; i < n; i++)
                if (!i || strcmp(v[i - 1].name, v[i].name))
                        len += strlen(v[i].name) + 1;
        if (len > PROBE_DYN_FN_TEXT_MAX)
                return -E2BIG;
        if (!(plan->dyn_fn_text = malloc(len ? len : 1)))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++) {
                if (!i || strcmp(v[i - 1].name, v[i].name)) {
                        size_t k = strlen(v[i].name) + 1;

                        memcpy(plan->dyn_fn_text + plan->dyn_fn_text_len, v[i].name, k);
                        plan->dyn_fn_text_len += k;
                }
                plan->dyn_fns[v[i].fn].name = (uint32_t)(plan->dyn_fn_text_len - strlen(v[i].name) - 1);
        }
        return 0;
}

/* Names the entries (sorted, one per address) the symbols know into
 * plan->dyn_fns; if they know none of them, all of them, unnamed. */
static int name_fns(struct plan_builder *b, const struct dyn_entry *e, size_t n, struct probe_plan *plan)
{
        struct named *v = calloc(n ? n : 1, sizeof(*v));
        int r;

        plan->dyn_fns = calloc(n ? n : 1, sizeof(*plan->dyn_fns));
        if (!v || !plan->dyn_fns) {
                free(v);
                return -ENOMEM;
        }
        for (size_t i = 0; i < n; i++) {
                struct d9_sym *s = d9_sym_table_find_nearest(&b->st.table, e[i].name_at);

                if (!s)
                        continue;
                v[plan->n_dyn_fns] = (struct named){ d9_sym_name(s), plan->n_dyn_fns };
                plan->dyn_fns[plan->n_dyn_fns++].vaddr = e[i].vaddr;
        }
        if (!plan->n_dyn_fns) {
                for (size_t i = 0; i < n; i++) {
                        v[i] = (struct named){ "", i };
                        plan->dyn_fns[i].vaddr = e[i].vaddr;
                }
                plan->n_dyn_fns = n;
        }
        r = plan->n_dyn_fns > PROBE_DYN_FNS_MAX ? -E2BIG : names_pack(plan, v, plan->n_dyn_fns);
        free(v);
        return r;
}

static void table_drop(struct probe_plan *plan)
{
        free(plan->dyn_fns);
        free(plan->dyn_fn_text);
        plan->dyn_fns = NULL;
        plan->dyn_fn_text = NULL;
        plan->n_dyn_fns = plan->dyn_fn_text_len = 0;
}

int uprobes_plan_dyn_names(struct plan_builder *b, struct probe_plan *plan)
{
        struct fn_list fns = { 0 };
        struct dyn_entry *e = NULL;
        size_t n_entries = 0;
        int r;

        if (b->vs.relocs.n)
                r = scan_relocs(b->img, &b->vs.relocs, &fns);
        else if ((r = scan_section_words(b->img, ".data.rel.ro", &fns)) == 0)
                r = scan_section_words(b->img, ".rodata", &fns);
        if (r == 0) {
                fns.n = uprobes_sort_unique_u64(fns.v, fns.n);
                r = dyn_entries(b, &fns, &e, &n_entries);
        }
        if (r == 0)
                r = name_fns(b, e, n_entries, plan);
        free(e);
        free(fns.v);
        if (r == -E2BIG) {
                size_t n = plan->n_dyn_fns;

                table_drop(plan);
                return uprobes_plan_add_missing(plan, PROBE_POLL, "%zu functions in slot 3 of dyn vtables, or "
                                                "their names, are more than d9d keeps: boxed futures are "
                                                "labelled \"[unnamed] FILE 0xVADDR\"", n);
        }
        if (r < 0 || !plan->n_dyn_fns)
                table_drop(plan);
        return r;
}

static int by_vaddr(const void *key, const void *elem)
{
        uint64_t k = *(const uint64_t *)key, v = ((const struct probe_fn_name *)elem)->vaddr;

        return k < v ? -1 : k > v;
}

const char *probe_plan_dyn_fn_name(const struct probe_plan *plan, uint64_t vaddr)
{
        const struct probe_fn_name *f =
                plan->n_dyn_fns ? bsearch(&vaddr, plan->dyn_fns, plan->n_dyn_fns, sizeof(*f), by_vaddr) : NULL;

        return f ? plan->dyn_fn_text + f->name : NULL;
}
