/* report_long_polls.c: see report_long_polls.h. Kept by insertion into a
 * short array sorted by min_ns: the list is the report's top, a few rows. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "report_long_polls.h"
#include "daemon/symbolize/stack_marks.h"

int d9ctl_report_long_polls_init(struct report_long_polls *lp, unsigned cap)
{
        memset(lp, 0, sizeof(*lp));
        lp->cap = cap;
        lp->top = calloc(cap ? cap : 1, sizeof(*lp->top));
        return lp->top ? 0 : -ENOMEM;
}

void d9ctl_report_long_polls_free(struct report_long_polls *lp)
{
        free(lp->top);
        lp->top = NULL;
}

static void copy_string(char *dst, size_t len, const struct d9_value *v)
{
        size_t n = v && v->resolved ? v->str.len : 0;

        if (n >= len)
                n = len - 1;
        if (n)
                memcpy(dst, v->str.p, n);
        dst[n] = 0;
}

/* A poll running at the attach that outlives a segment is written again
 * in the next one, longer (daemon/record/attach_poll.h): one poll, its
 * longest event. False: ev is an earlier, shorter one's repeat. */
static bool keep_longest_at_attach(struct report_long_polls *lp, const struct d9_dec_event *ev, uint64_t min)
{
        char how[16];
        uint64_t tid;

        copy_string(how, sizeof(how), d9ctl_trace_field(ev, "how"));
        if (strcmp(how, "at attach"))
                return true;
        tid = d9ctl_trace_field_u(ev, "tid");
        for (unsigned i = 0; i < lp->n; i++) {
                if (lp->top[i].tid != tid || strcmp(lp->top[i].how, "at attach"))
                        continue;
                if (min <= lp->top[i].min_ns)
                        return false;
                memmove(&lp->top[i], &lp->top[i + 1], (lp->n - i - 1) * sizeof(*lp->top));
                lp->n--;
                lp->total--;
                break;
        }
        return true;
}

bool d9ctl_report_long_polls_event(struct report_long_polls *lp, const struct d9_dec_event *ev)
{
        const struct d9_value *stack;
        struct report_long_poll *p;
        uint64_t min;
        unsigned i;

        if (strcmp(ev->schema->name, "D9LongPollEvent"))
                return false;
        min = d9ctl_trace_field_u(ev, "min_ns");
        if (!keep_longest_at_attach(lp, ev, min))
                return true;
        lp->total++;
        if (!lp->cap || (lp->n == lp->cap && min <= lp->top[lp->n - 1].min_ns))
                return true;
        i = lp->n < lp->cap ? lp->n++ : lp->n - 1;
        for (; i > 0 && lp->top[i - 1].min_ns < min; i--)
                lp->top[i] = lp->top[i - 1];
        p = &lp->top[i];
        p->end = ev->ts;
        p->min_ns = min;
        p->ticks = d9ctl_trace_field_u(ev, "ticks");
        p->waited_ns = d9ctl_trace_field_u(ev, "waited_ns");       /* 0 in traces before it */
        p->tid = d9ctl_trace_field_u(ev, "tid");
        p->worker = (uint8_t)d9ctl_trace_field_u(ev, "worker_id");
        copy_string(p->future, sizeof(p->future), d9ctl_trace_field(ev, "spawn_loc"));
        copy_string(p->how, sizeof(p->how), d9ctl_trace_field(ev, "how"));
        stack = d9ctl_trace_field(ev, "stack");
        p->n = 0;
        for (uint32_t k = 0; stack && k < stack->stack.n && p->n < REPORT_FRAMES_MAX; k++)
                p->frames[p->n++] = d9_value_stack_addr(stack, k);
        return true;
}

json_t *d9ctl_report_frames_json(const struct trace_symbols *syms, const uint64_t *frames, unsigned n)
{
        json_t *a = json_array();
        char hex[32];

        for (unsigned i = 0; a && i < n; i++) {
                const char *name = d9ctl_trace_symbols_name(syms, frames[i]);

                if (!name) {
                        snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)frames[i]);
                        name = hex;
                }
                json_array_append_new(a, json_string(name));
        }
        return a;
}

unsigned d9ctl_report_kernel_frames(const uint64_t *frames, unsigned n)
{
        /* A runnable switch-out's mark stands for the scheduler's frames. */
        unsigned k = n && frames[0] == stack_mark_addr(STACK_MARK_RUNNABLE);

        while (k < n && frames[k] >= REPORT_KERNEL_MIN)
                k++;
        return k;
}

json_t *d9ctl_report_long_polls_json(const struct report_long_polls *lp, const struct trace_symbols *syms)
{
        json_t *a = json_array();

        for (unsigned i = 0; a && i < lp->n; i++) {
                const struct report_long_poll *p = &lp->top[i];

                json_array_append_new(a, json_pack("{s:I, s:I, s:I, s:i, s:I, s:s, s:I, s:s, s:o, s:i}",
                                                   "end_ns", (json_int_t)p->end, "min_ns", (json_int_t)p->min_ns,
                                                   "waited_ns", (json_int_t)p->waited_ns,
                                                   "worker", (int)p->worker, "tid", (json_int_t)p->tid,
                                                   "how", p->how, "ticks", (json_int_t)p->ticks,
                                                   "future", p->future,
                                                   "stack", d9ctl_report_frames_json(syms, p->frames, p->n),
                                                   "kernel_frames",
                                                   (int)d9ctl_report_kernel_frames(p->frames, p->n)));
        }
        return a;
}
