/* Internal: the state shared by the plan-building steps (plan*.c). */
#pragma once

#include "uprobes_int.h"

struct tokio_rule;

struct point_meta {
        bool essential;
        const struct tokio_rule *rule;  /* NULL for scan-only points */
};

/* Function entries known without symbols (plan_complete.c), sorted. */
struct entry_set {
        uint64_t *v;
        size_t n;
};

struct body_span {
        uint64_t lo, hi;
};

struct plan_builder {
        struct elf_image *img;
        struct symtab st;
        struct vtable_scan vs;
        struct probe_point *pts;
        struct point_meta *meta; /* parallel to pts until they are sorted */
        size_t n, cap;
        /* Set by uprobes_plan_complete_route for the sweeps after it. */
        struct entry_set known;
        uint64_t sweep_left;    /* code bytes the sweeps may still decode */
        bool calls_via_got;     /* the task functions call through GOT slots */
};

int uprobes_plan_symbol_route(struct plan_builder *b);
int uprobes_plan_vtable_route(struct plan_builder *b);
int uprobes_plan_complete_route(struct plan_builder *b, struct probe_plan *plan);
int uprobes_plan_waker_route(struct plan_builder *b, struct probe_plan *plan);
int uprobes_plan_label_polls(struct plan_builder *b);
int uprobes_plan_classify(struct plan_builder *b);
int uprobes_plan_return_sites(struct plan_builder *b, struct probe_plan *plan);
uint64_t uprobes_plan_follow_jumps(const struct plan_builder *b, uint64_t vaddr);
/* The code a rip-relative slot (a GOT entry) holds, or 0. */
uint64_t uprobes_plan_slot_target(const struct plan_builder *b, uint64_t slot);
/* The callee of `call *slot(%rip)` or `jmp *slot(%rip)` at vaddr, or 0. */
uint64_t uprobes_plan_slot_callee(const struct plan_builder *b, const uint8_t *code, const struct x86_insn *in,
                                  uint64_t vaddr);
struct probe_point *uprobes_plan_point_add(struct plan_builder *b, enum probe_kind kind, uint64_t vaddr);
int uprobes_plan_add_missing(struct probe_plan *plan, enum probe_kind kind, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
void uprobes_plan_find_dyn_futures(struct plan_builder *b);
/* plan_dyn_names.c: plan->dyn_fns, what a boxed future's poll can be, named. */
int uprobes_plan_dyn_names(struct plan_builder *b, struct probe_plan *plan);
/* plan_complete.c: a stripped function's body [lo, hi) by a code sweep
 * (after uprobes_plan_complete_route); false when the sweep cannot tell its end. */
bool uprobes_plan_sweep_body(struct plan_builder *b, uint64_t vaddr, uint64_t *lo, uint64_t *hi);
/* func_bounds.c: func_start/func_end of every poll point (0: unknown). */
void uprobes_plan_poll_bounds(struct plan_builder *b);
/* u64_sort.c: qsort/bsearch order of uint64_t, and a sort that drops
 * repeats (returns the new count). */
int uprobes_cmp_u64(const void *a, const void *b);
size_t uprobes_sort_unique_u64(uint64_t *v, size_t n);
/* plan_harness.c: plan->harness_sites, after the poll bounds and segments. */
int uprobes_plan_harness_sites(struct plan_builder *b, struct probe_plan *plan);
