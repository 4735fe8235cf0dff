/* plan_wire.c: a probe plan as bytes and back, for a plan built in another
 * process (daemon/record/plan_child.c).
 *
 * The reader treats the bytes as hostile: the process that wrote them parsed
 * a file the target's owner controls. Every count and length is bounded and
 * every enum checked before it becomes a plan. The format is native-endian
 * and versioned only by the build: both ends are the same executable. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "uprobes_int.h"

#define WIRE_MAGIC 0x64396e616c70ull            /* "plan9d" */
#define WIRE_MAX_POINTS (1u << 20)
#define WIRE_MAX_MISSING 4096u
#define WIRE_MAX_STRING (64u << 10)

/* A field added to either struct needs its line in put_* and get_* below. */
_Static_assert(sizeof(struct probe_point) == 144, "probe_point changed: update plan_wire.c");
/* A poll body no longer than this (Deno's longest: 11 KiB). */
#define WIRE_MAX_BODY (16u << 20)
_Static_assert(sizeof(struct probe_plan) == 312, "probe_plan changed: update plan_wire.c");
_Static_assert(sizeof(struct probe_segment) == 32 && sizeof(struct probe_fn_name) == 16,
               "probe_segment or probe_fn_name changed: update plan_wire.c");
/* Not on the wire: planned_ctime, which the parent takes from its own fd
 * of the file (plan_child.c), not from the child's word. */

/* Two passes: with buf NULL, put() only counts; then the bytes go into one
 * allocation of that size. */
struct wire_out {
        char *buf;
        size_t len;
};

static void put(struct wire_out *w, const void *p, size_t n)
{
        if (w->buf)
                memcpy(w->buf + w->len, p, n);
        w->len += n;
}

static void put_u64(struct wire_out *w, uint64_t v)
{
        put(w, &v, sizeof(v));
}

static void put_str(struct wire_out *w, const char *s)
{
        size_t n = s ? strlen(s) : 0;

        if (n > WIRE_MAX_STRING)
                n = WIRE_MAX_STRING;    /* labels are far shorter; never refuse the plan for one */
        put_u64(w, s ? n + 1 : 0);      /* 0: NULL */
        put(w, s, n);
}

static void put_point(struct wire_out *w, const struct probe_point *p)
{
        put_u64(w, p->file_offset);
        put_u64(w, p->vaddr);
        put_u64(w, (uint64_t)p->kind);
        put_u64(w, p->cookie);
        put_str(w, p->label);
        put_u64(w, (uint64_t)p->insn);
        put_u64(w, p->sources);
        put_u64(w, p->vtable_vaddr);
        put_u64(w, p->skipped);
        put_str(w, p->skip_reason);
        put_u64(w, p->uretprobe);
        put_u64(w, (uint64_t)p->value_from);
        put_str(w, p->insn_desc);
        put_u64(w, p->insn_len);
        put_str(w, p->note);
        put_u64(w, p->func_vaddr);
        put_u64(w, p->boxed_dyn);
        put_u64(w, p->dyn_vtable_hdr_off);
        put_u64(w, p->blocking_task);
        put_u64(w, p->func_start);
        put_u64(w, p->func_end);
}

static void put_plan(struct wire_out *w, const struct probe_plan *p)
{
        uint64_t ms;

        put_u64(w, WIRE_MAGIC);
        put_str(w, p->exe_path);
        put_str(w, p->build_id);
        put_str(w, p->tokio_version);
        put_str(w, p->shape);
        put_u64(w, p->has_symbols);
        put_u64(w, p->stripped);
        put_u64(w, p->hdr_vtable_off);
        put_u64(w, (uint64_t)(int64_t)p->vtable_id_off);
        put_u64(w, (uint64_t)(int64_t)p->vtable_scheduler_off);
        put_u64(w, (uint64_t)(int64_t)p->vtable_trailer_off);
        put_u64(w, p->dyn_future_poll_slot);
        put_str(w, p->scan_method);
        put_u64(w, p->n_vtables);
        put_u64(w, p->polls_by_symbols);
        put_u64(w, p->polls_by_scan);
        put_u64(w, p->polls_in_both);
        put_u64(w, p->routes_agree);
        put_u64(w, p->completes_by_scan);
        put_u64(w, p->completes_unfound);
        put_u64(w, p->completes_scan_wrong);
        put_u64(w, p->waker_vtable);
        put_u64(w, p->waker_scan_agrees);
        put_str(w, p->debug_file);
        put_u64(w, p->v0_mangling);
        memcpy(&ms, &p->elapsed_ms, sizeof(ms));
        put_u64(w, ms);
        put_u64(w, p->n_points);
        for (size_t i = 0; i < p->n_points; i++)
                put_point(w, &p->points[i]);
        put_u64(w, p->n_missing);
        for (size_t i = 0; i < p->n_missing; i++) {
                put_u64(w, (uint64_t)p->missing[i].kind);
                put_str(w, p->missing[i].reason);
        }
        put_u64(w, p->n_segments);
        for (size_t i = 0; i < p->n_segments; i++) {
                put_u64(w, p->segments[i].vaddr);
                put_u64(w, p->segments[i].offset);
                put_u64(w, p->segments[i].filesz);
                put_u64(w, p->segments[i].exec);
        }
        put_u64(w, p->tls_size);
        put_u64(w, p->n_dyn_fns);
        put_u64(w, p->dyn_fn_text_len);
        put(w, p->dyn_fn_text, p->dyn_fn_text_len);
        for (size_t i = 0; i < p->n_dyn_fns; i++) {
                put_u64(w, p->dyn_fns[i].vaddr);
                put_u64(w, p->dyn_fns[i].name);
        }
        put_u64(w, p->n_harness_sites);
        for (size_t i = 0; i < p->n_harness_sites; i++)
                put_u64(w, p->harness_sites[i]);
}

int probe_plan_serialize(const struct probe_plan *plan, void **bytes, size_t *len)
{
        struct wire_out w = { 0 };

        put_plan(&w, plan);
        if (!(w.buf = malloc(w.len ? w.len : 1)))
                return -ENOMEM;
        *len = w.len;
        w.len = 0;
        put_plan(&w, plan);
        *bytes = w.buf;
        return 0;
}

struct wire_in {
        const char *p, *end;
        int error;
};

static uint64_t get_u64(struct wire_in *in)
{
        uint64_t v = 0;

        if (in->error || in->end - in->p < (ptrdiff_t)sizeof(v)) {
                in->error = -EPROTO;
                return 0;
        }
        memcpy(&v, in->p, sizeof(v));
        in->p += sizeof(v);
        return v;
}

/* v only if it is at most max; else the message is refused. */
static uint64_t get_max(struct wire_in *in, uint64_t max)
{
        uint64_t v = get_u64(in);

        if (v > max)
                in->error = -EPROTO;
        return in->error ? 0 : v;
}

static bool get_bool(struct wire_in *in)
{
        return get_max(in, 1) != 0;
}

static char *get_str(struct wire_in *in)
{
        uint64_t n = get_max(in, WIRE_MAX_STRING + 1);
        char *s;

        if (in->error || n == 0)
                return NULL;
        if ((uint64_t)(in->end - in->p) < n - 1) {
                in->error = -EPROTO;
                return NULL;
        }
        if (!(s = strndup(in->p, n - 1))) {
                in->error = -ENOMEM;
                return NULL;
        }
        in->p += n - 1;
        return s;
}

static void get_point(struct wire_in *in, struct probe_point *p)
{
        p->file_offset = get_u64(in);
        p->vaddr = get_u64(in);
        p->kind = (enum probe_kind)get_max(in, PROBE_KIND_MAX - 1);
        p->cookie = get_u64(in);
        p->label = get_str(in);
        p->insn = (enum probe_insn_class)get_max(in, PROBE_INSN_SSTEP);
        p->sources = (unsigned)get_max(in, PROBE_FROM_SYMBOLS | PROBE_FROM_VTABLE_SCAN);
        p->vtable_vaddr = get_u64(in);
        p->skipped = get_bool(in);
        p->skip_reason = get_str(in);
        p->uretprobe = get_bool(in);
        p->value_from = (enum probe_arg)get_max(in, PROBE_ARG0_DEREF);
        p->insn_desc = get_str(in);
        p->insn_len = (unsigned)get_max(in, 15);
        p->note = get_str(in);
        p->func_vaddr = get_u64(in);
        p->boxed_dyn = get_bool(in);
        p->dyn_vtable_hdr_off = (uint32_t)get_max(in, UINT32_MAX);
        p->blocking_task = get_bool(in);
        p->func_start = get_u64(in);
        p->func_end = get_u64(in);
        uint64_t lo = p->func_start ? p->func_start : p->vaddr;
        if (!in->error && p->func_end && (p->func_end <= lo || p->func_end - lo > WIRE_MAX_BODY))
                in->error = -EPROTO;
        if (!in->error && p->kind == 0)
                in->error = -EPROTO;
}

/* The scan's method names are static strings in the plan; map the bytes back to one. */
static const char *known_scan_method(char *s)
{
        static const char *const known[] = { "rela.dyn", "relr.dyn", "data.rel.ro" };
        const char *m = NULL;

        for (size_t i = 0; s && i < sizeof(known) / sizeof(*known); i++)
                if (strcmp(s, known[i]) == 0)
                        m = known[i];
        free(s);
        return m;
}

static void get_segments(struct wire_in *in, struct probe_plan *p)
{
        uint64_t n = get_max(in, PROBE_SEGMENTS_MAX);

        if (!in->error && n && !(p->segments = calloc(n, sizeof(*p->segments))))
                in->error = -ENOMEM;
        for (uint64_t i = 0; !in->error && i < n; i++, p->n_segments++) {
                p->segments[i].vaddr = get_u64(in);
                p->segments[i].offset = get_u64(in);
                p->segments[i].filesz = get_u64(in);
                p->segments[i].exec = get_bool(in);
        }
}

/* The dyn_fns table: names packed as the writer packs them (text only with
 * entries, each name starts the text or follows a NUL, the text ends in
 * one), addresses strictly increasing (probe_plan_dyn_fn_name searches
 * them). */
static void get_dyn_fns(struct wire_in *in, struct probe_plan *p)
{
        uint64_t n = get_max(in, PROBE_DYN_FNS_MAX), len = get_max(in, PROBE_DYN_FN_TEXT_MAX);

        if (!in->error && ((uint64_t)(in->end - in->p) < len || !n != !len || (len && in->p[len - 1])))
                in->error = -EPROTO;
        if (!in->error && len && !(p->dyn_fn_text = malloc(len)))
                in->error = -ENOMEM;
        if (!in->error && len) {
                memcpy(p->dyn_fn_text, in->p, len);
                p->dyn_fn_text_len = len;
                in->p += len;
        }
        if (!in->error && (uint64_t)(in->end - in->p) / 16 < n)
                in->error = -EPROTO;
        if (!in->error && n && !(p->dyn_fns = calloc(n, sizeof(*p->dyn_fns))))
                in->error = -ENOMEM;
        for (uint64_t i = 0; !in->error && i < n; i++, p->n_dyn_fns++) {
                struct probe_fn_name *f = &p->dyn_fns[i];

                f->vaddr = get_u64(in);
                f->name = (uint32_t)get_max(in, len - 1);
                if (!in->error && ((i && f->vaddr <= f[-1].vaddr) || (f->name && p->dyn_fn_text[f->name - 1])))
                        in->error = -EPROTO;
        }
}

/* Sorted, unique (probe_plan_harness_site searches them). */
static void get_harness_sites(struct wire_in *in, struct probe_plan *p)
{
        uint64_t n = get_max(in, PROBE_HARNESS_SITES_MAX);

        if (!in->error && (uint64_t)(in->end - in->p) / 8 < n)
                in->error = -EPROTO;
        if (!in->error && n && !(p->harness_sites = calloc(n, sizeof(*p->harness_sites))))
                in->error = -ENOMEM;
        for (uint64_t i = 0; !in->error && i < n; i++, p->n_harness_sites++) {
                p->harness_sites[i] = get_u64(in);
                if (i && p->harness_sites[i] <= p->harness_sites[i - 1])
                        in->error = -EPROTO;
        }
}

static void get_plan(struct wire_in *in, struct probe_plan *p)
{
        uint64_t ms, n;

        if (get_u64(in) != WIRE_MAGIC) {
                in->error = -EPROTO;
                return;
        }
        p->exe_path = get_str(in);
        p->build_id = get_str(in);
        p->tokio_version = get_str(in);
        p->shape = get_str(in);
        p->has_symbols = get_bool(in);
        p->stripped = get_bool(in);
        p->hdr_vtable_off = (uint32_t)get_max(in, UINT32_MAX);
        p->vtable_id_off = (int32_t)get_u64(in);
        p->vtable_scheduler_off = (int32_t)get_u64(in);
        p->vtable_trailer_off = (int32_t)get_u64(in);
        p->dyn_future_poll_slot = (uint32_t)get_max(in, UINT32_MAX);
        p->scan_method = known_scan_method(get_str(in));
        p->n_vtables = get_u64(in);
        p->polls_by_symbols = get_u64(in);
        p->polls_by_scan = get_u64(in);
        p->polls_in_both = get_u64(in);
        p->routes_agree = get_bool(in);
        p->completes_by_scan = get_u64(in);
        p->completes_unfound = get_u64(in);
        p->completes_scan_wrong = get_u64(in);
        p->waker_vtable = get_u64(in);
        p->waker_scan_agrees = get_bool(in);
        p->debug_file = get_str(in);
        p->v0_mangling = get_bool(in);
        ms = get_u64(in);
        memcpy(&p->elapsed_ms, &ms, sizeof(ms));
        n = get_max(in, WIRE_MAX_POINTS);
        if (!in->error && n && !(p->points = calloc(n, sizeof(*p->points))))
                in->error = -ENOMEM;
        for (uint64_t i = 0; !in->error && i < n; i++, p->n_points++)
                get_point(in, &p->points[i]);
        n = get_max(in, WIRE_MAX_MISSING);
        if (!in->error && n && !(p->missing = calloc(n, sizeof(*p->missing))))
                in->error = -ENOMEM;
        for (uint64_t i = 0; !in->error && i < n; i++, p->n_missing++) {
                p->missing[i].kind = (enum probe_kind)get_max(in, PROBE_KIND_MAX - 1);
                p->missing[i].reason = get_str(in);
        }
        get_segments(in, p);
        p->tls_size = get_max(in, 1u << 20);
        get_dyn_fns(in, p);
        get_harness_sites(in, p);
        if (!in->error && in->p != in->end)
                in->error = -EPROTO;
}

int probe_plan_parse(const void *bytes, size_t len, struct probe_plan **out)
{
        struct wire_in in = { bytes, (const char *)bytes + len, 0 };
        struct probe_plan *plan = calloc(1, sizeof(*plan));

        *out = NULL;
        if (!plan)
                return -ENOMEM;
        plan->exe_fd = -1;
        get_plan(&in, plan);
        if (in.error) {
                probe_plan_free(plan);
                return in.error;
        }
        *out = plan;
        return 0;
}
