/* plan_harness: where a task poll function calls Tokio's own code around
 * the future (plan->harness_sites), so a stack there is not read as the
 * future still polling.
 *
 * raw::poll<T,S> (Harness<T,S>::poll) polls the future and then, in the
 * same function, reschedules a task that woke itself (the scheduler's
 * yield_now), completes or frees it. A worker preempted in that tail has
 * the poll function on its stack with no future frame above it, and the
 * default set read it as a poll preempted for milliseconds (npm
 * endform-proxy-network under CPU hogs: 236 of 257 long polls at
 * `syscall <- ... Schedule::yield_now <- Harness::poll`). Names do not say
 * which calls those are on a stripped build; the code does: the
 * harness's helpers are generic over the scheduler only, so every poll
 * function of a runtime calls the same few, and little else calls them
 * (each task type's schedule function, the blocking pool's polls). A
 * future's own calls either differ per future type, or (memcpy, the
 * allocator, panics) are called from everywhere. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "plan_int.h"

/* A helper is the harness's when at least a third of the task poll
 * functions (one runtime flavour's of two: npm mise 2026.9.15's
 * multi-thread with_scheduler is called from 110 of 222) and at least this
 * many call it ... */
#define HARNESS_BODY_SHARE 3
#define HARNESS_MIN_BODIES 3
/* ... and calls from outside them are at most 3/2 of theirs (mise: its
 * with_scheduler 128 outside for 110 inside, transition_to_idle 125 for
 * 218; core::panicking::panic 6,020 for 218). */
#define HARNESS_OUTSIDE_NUM 3
#define HARNESS_OUTSIDE_DEN 2
/* A body is decoded up to this many bytes. */
#define HARNESS_BODY_MAX (256u << 10)

/* A call's target: the function a rel32 call names, or for a call through
 * a GOT slot (`call *slot(%rip)`, a PIE built without PLT calls: the test
 * targets) the slot's address, which names the function as well. */
struct harness_call {
        uint64_t target, site;  /* site: the return address, the call's end */
        uint32_t body;
};

struct harness_calls {
        struct harness_call *v;
        size_t n, cap;
};

static int calls_add(struct harness_calls *c, uint64_t target, uint64_t site, uint32_t body)
{
        if (c->n == c->cap) {
                size_t cap = c->cap ? c->cap * 2 : 256;
                struct harness_call *v = realloc(c->v, cap * sizeof(*v));

                if (!v)
                        return -ENOMEM;
                c->v = v;
                c->cap = cap;
        }
        c->v[c->n++] = (struct harness_call){ target, site, body };
        return 0;
}

/* The slot `call *disp32(%rip)` at vaddr reads (ff 15 disp32), or 0. */
static uint64_t got_call_slot(const uint8_t *p, size_t len, uint64_t vaddr)
{
        int32_t disp;

        if (len != 6 || p[0] != 0xff || p[1] != 0x15)
                return 0;
        memcpy(&disp, p + 2, 4);
        return vaddr + 6 + (uint64_t)(int64_t)disp;
}

/* The calls in [lo, hi), direct or through a GOT slot, the body numbered
 * body. */
static int body_calls(const struct elf_image *img, uint64_t lo, uint64_t hi, uint32_t body,
                      struct harness_calls *c)
{
        uint64_t size = hi - lo < HARNESS_BODY_MAX ? hi - lo : HARNESS_BODY_MAX;
        const uint8_t *code = d9_elf_vaddr_bytes(img, lo, size);

        for (uint64_t off = 0; code && off < size;) {
                struct x86_insn in;
                uint64_t slot;

                uprobes_x86_decode(code + off, size - off, &in);
                if (!in.len)
                        return 0;
                slot = got_call_slot(code + off, (size_t)in.len, lo + off);
                off += (uint64_t)in.len;
                if (in.is_call_rel && calls_add(c, lo + off + (uint64_t)in.rel, lo + off, body) < 0)
                        return -ENOMEM;
                if (slot && calls_add(c, slot, lo + off, body) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static int by_target_body(const void *a, const void *b)
{
        const struct harness_call *x = a, *y = b;

        if (x->target != y->target)
                return x->target < y->target ? -1 : 1;
        return x->body < y->body ? -1 : x->body > y->body;
}

/* A target a third of the task poll functions call: its calls c->v[from, to). */
struct harness_candidate {
        uint64_t target;
        size_t from, to;
        uint64_t calls;         /* calls to it anywhere in the code */
};

static int by_candidate_target(const void *a, const void *b)
{
        const struct harness_candidate *x = a, *y = b;

        return x->target < y->target ? -1 : x->target > y->target;
}

/* A quick "no" for most scan hits: candidates by target bits 4-15. */
#define HARNESS_FILTER_BITS 4096u

struct harness_filter {
        uint64_t bits[HARNESS_FILTER_BITS / 64];
};

static unsigned filter_slot(uint64_t target)
{
        return (unsigned)(target >> 4) % HARNESS_FILTER_BITS;
}

static void count_hit(const struct harness_filter *f, struct harness_candidate *cand, size_t n, uint64_t target)
{
        struct harness_candidate key = { .target = target }, *hit;
        unsigned s = filter_slot(target);

        if (!(f->bits[s / 64] & (1ull << (s % 64))))
                return;
        hit = bsearch(&key, cand, n, sizeof(*cand), by_candidate_target);
        if (hit)
                hit->calls++;
}

/* Counts every call to a candidate in the executable's code, rel32 (e8)
 * or through its GOT slot (ff 15), in a byte scan: bytes that are no call
 * opcode rarely point exactly at a function or a slot. memchr skips the
 * rest (Deno's 60 MB of code: a byte-by-byte loop was a third of its
 * 1.5 s plan, memmem for ff 15 a sixth). */
static void count_calls(const struct elf_image *img, const struct probe_plan *plan,
                        struct harness_candidate *cand, size_t n)
{
        struct harness_filter f = { 0 };

        for (size_t i = 0; i < n; i++)
                f.bits[filter_slot(cand[i].target) / 64] |= 1ull << (filter_slot(cand[i].target) % 64);
        for (size_t s = 0; n && s < plan->n_segments; s++) {
                const struct probe_segment *seg = &plan->segments[s];
                const uint8_t *code = seg->exec && seg->filesz > 6 ? d9_elf_vaddr_bytes(img, seg->vaddr, seg->filesz)
                                                                   : NULL;
                const uint8_t *end = code ? code + seg->filesz - 5 : NULL, *p;
                int32_t rel;

                for (p = code; p && p < end && (p = memchr(p, 0xe8, (size_t)(end - p))); p++) {
                        memcpy(&rel, p + 1, 4);
                        count_hit(&f, cand, n, seg->vaddr + (uint64_t)(p - code) + 5 + (uint64_t)(int64_t)rel);
                }
                /* By its second byte, rarer in code than 0xff. */
                for (p = code + 1; p && p < end && (p = memchr(p, 0x15, (size_t)(end - p))); p++)
                        if (p[-1] == 0xff)
                                count_hit(&f, cand, n, got_call_slot(p - 1, 6, seg->vaddr + (uint64_t)(p - 1 - code)));
        }
}

static int keep_sites(struct probe_plan *plan, const struct harness_calls *c, const struct harness_candidate *h)
{
        uint64_t *more;

        if (plan->n_harness_sites + (h->to - h->from) > PROBE_HARNESS_SITES_MAX)
                return 0;
        more = realloc(plan->harness_sites, (plan->n_harness_sites + (h->to - h->from)) * sizeof(*more));
        if (!more)
                return -ENOMEM;
        plan->harness_sites = more;
        for (size_t i = h->from; i < h->to; i++)
                plan->harness_sites[plan->n_harness_sites++] = c->v[i].site;
        return 0;
}

/* The candidates: targets at least a third of the bodies (and
 * HARNESS_MIN_BODIES) call. c->v is sorted by target, then body. */
static size_t candidates(const struct harness_calls *c, uint32_t n_bodies, struct harness_candidate *out)
{
        size_t n = 0;

        for (size_t i = 0, j; i < c->n; i = j) {
                uint32_t bodies = 1;

                for (j = i + 1; j < c->n && c->v[j].target == c->v[i].target; j++)
                        bodies += c->v[j].body != c->v[j - 1].body;
                if (bodies >= HARNESS_MIN_BODIES && bodies * HARNESS_BODY_SHARE >= n_bodies)
                        out[n++] = (struct harness_candidate){ c->v[i].target, i, j, 0 };
        }
        return n;
}

int uprobes_plan_harness_sites(struct plan_builder *b, struct probe_plan *plan)
{
        struct harness_calls c = { 0 };
        struct harness_candidate *cand = NULL;
        uint32_t n_bodies = 0;
        size_t n_cand = 0;
        int r = 0;

        for (size_t i = 0; i < b->n && r == 0; i++) {
                const struct probe_point *p = &b->pts[i];
                uint64_t lo = p->func_start ? p->func_start : p->vaddr;

                if (p->kind == PROBE_POLL && !p->blocking_task && p->func_end > lo)
                        r = body_calls(b->img, lo, p->func_end, n_bodies++, &c);
        }
        if (r == 0 && c.n && !(cand = malloc(c.n * sizeof(*cand))))
                r = -ENOMEM;
        if (r == 0 && c.n) {
                qsort(c.v, c.n, sizeof(*c.v), by_target_body);
                n_cand = candidates(&c, n_bodies, cand);
                count_calls(b->img, plan, cand, n_cand);
        }
        /* Calls from outside the bodies: a few at most (the scan finds the
         * bodies' own calls too). */
        for (size_t i = 0; i < n_cand && r == 0; i++) {
                uint64_t inside = cand[i].to - cand[i].from;
                uint64_t outside = cand[i].calls > inside ? cand[i].calls - inside : 0;

                if (outside * HARNESS_OUTSIDE_DEN <= inside * HARNESS_OUTSIDE_NUM)
                        r = keep_sites(plan, &c, &cand[i]);
        }
        free(cand);
        free(c.v);
        if (r == 0)
                plan->n_harness_sites = uprobes_sort_unique_u64(plan->harness_sites, plan->n_harness_sites);
        return r;
}

bool probe_plan_harness_site(const struct probe_plan *plan, uint64_t vaddr)
{
        return plan->n_harness_sites &&
               bsearch(&vaddr, plan->harness_sites, plan->n_harness_sites, sizeof(vaddr), uprobes_cmp_u64);
}
