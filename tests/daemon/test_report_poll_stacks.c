/* d9ctl report's longest polls, from a trace translate writes of synthetic
 * records: a poll with CPU samples inside shows the deepest of them; one
 * with none, whose thread was preempted inside it, shows the preemption's
 * stack and says so, rather than "(no stack)" (npm endform and kanoniv,
 * the full set under CPU hogs: their longest polls had no CPU sample and
 * one preempted switch-out each, with a whole stack). */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/d9_events.h"
#include "daemon/ctl/report.h"
#include "daemon/record/translate.h"
#include "proto/d9proto.h"
#include "uprobes/uprobes.h"
#include "../tap.h"
#include "report_of_trace.h"

#define TASK_FN 0x10000
#define TID 101

static struct probe_point point = { .kind = PROBE_POLL, .cookie = 0, .label = (char *)"app::serve",
                                    .vaddr = TASK_FN, .func_end = TASK_FN + 0x400 };
static struct probe_plan plan = { .points = &point, .n_points = 1 };

struct run {
        struct translate tr;
        struct d9_enc *enc;
        uint8_t *buf;
        uint64_t stack_id;
};

static void poll_edge(struct run *r, uint16_t type, uint64_t task, uint64_t ts, uint64_t start_ts)
{
        struct d9_rec_task t = { .task_id = task, .cookie = 0, .header = 0x5000 + task };

        t.hdr = (struct d9_rec_hdr){ .type = type, .tid = TID, .tgid = 1, .ts = ts };
        if (type == D9_REC_POLL_END)
                t.start_ts = start_ts;
        translate_record(&r->tr, &t, sizeof(t));
}

static uint64_t stack(struct run *r, const uint64_t *frames, uint32_t n)
{
        translate_stack_frames(&r->tr, TID, ++r->stack_id, frames, n, 0, false);
        return r->stack_id;
}

static void cpu_sample(struct run *r, uint64_t stack_id, uint64_t ts)
{
        struct d9_rec_sample s = { .ip = TASK_FN + 0x10, .stack_id = stack_id };

        s.hdr = (struct d9_rec_hdr){ .type = D9_REC_CPU_SAMPLE, .tid = TID, .tgid = 1, .ts = ts };
        translate_record(&r->tr, &s, sizeof(s));
}

/* The thread switched out still runnable (prev_state 0) from off to on. */
static void preempted(struct run *r, uint64_t stack_id, uint64_t off, uint64_t on)
{
        struct d9_rec_offcpu o = { .prev_state = 0, .stack_id = stack_id, .off_ts = off };

        o.hdr = (struct d9_rec_hdr){ .type = D9_REC_OFFCPU, .tid = TID, .tgid = 1, .ts = on };
        translate_record(&r->tr, &o, sizeof(o));
}

/* The longest_polls entry of the poll that began at start. */
static const json_t *poll_at(const json_t *doc, uint64_t start)
{
        const json_t *p;
        size_t i;

        json_array_foreach(json_object_get(doc, "longest_polls"), i, p)
                if ((uint64_t)json_integer_value(json_object_get(p, "start_ns")) == start)
                        return p;
        return NULL;
}

static const char *str(const json_t *o, const char *key)
{
        const char *s = json_string_value(json_object_get(o, key));

        return s ? s : "(none)";
}

int main(void)
{
        const uint64_t busy[] = { TASK_FN + 0x10, TASK_FN + 0x20 };
        const uint64_t held[] = { TASK_FN + 0x30, TASK_FN + 0x40, TASK_FN + 0x50 };
        const uint64_t t0 = 1000000000;
        static char text[1 << 16];
        struct run r = { 0 };
        const uint8_t *trace;
        const json_t *a, *b;
        json_t *doc;
        size_t n;

        r.buf = malloc(1 << 20);
        d9_enc_new(&r.enc);
        d9_enc_set_output(r.enc, r.buf, 1 << 20, NULL, NULL);
        translate_init(&r.tr, 1, &plan, false, false);
        translate_set_encoder(&r.tr, r.enc);

        /* A 30 ms poll with a CPU sample inside. */
        poll_edge(&r, D9_REC_POLL_START, 7, t0, 0);
        cpu_sample(&r, stack(&r, busy, 2), t0 + 10000000);
        poll_edge(&r, D9_REC_POLL_END, 7, t0 + 30000000, t0);
        /* A 20 ms poll with none, preempted for 12 ms inside. */
        poll_edge(&r, D9_REC_POLL_START, 8, t0 + 40000000, 0);
        preempted(&r, stack(&r, held, 3), t0 + 45000000, t0 + 57000000);
        poll_edge(&r, D9_REC_POLL_END, 8, t0 + 60000000, t0 + 40000000);
        trace = d9_enc_output(r.enc, &n);
        doc = report_of_trace(trace, n, text, sizeof(text));
        ok(doc != NULL, "report reads the trace (%zu bytes)", n);
        a = poll_at(doc, t0);
        b = poll_at(doc, t0 + 40000000);
        ok(a && json_integer_value(json_object_get(a, "cpu_samples")) == 1 &&
           !strcmp(str(a, "stack_from"), "cpu_sample") && json_array_size(json_object_get(a, "stack")) == 2,
           "the poll with a CPU sample shows that sample's stack (from %s, %zu frames)", str(a, "stack_from"),
           json_array_size(json_object_get(a, "stack")));
        ok(b && json_integer_value(json_object_get(b, "cpu_samples")) == 0 &&
           json_integer_value(json_object_get(b, "offcpu_samples")) == 1,
           "the other has no CPU sample and one off-CPU sample");
        ok(b && !strcmp(str(b, "stack_from"), "preempted") && json_array_size(json_object_get(b, "stack")) == 4,
           "its stack is the preemption's, the runnable mark and 3 frames (from %s, %zu frames)", str(b, "stack_from"),
           json_array_size(json_object_get(b, "stack")));
        ok(strstr(text, "0 CPU samples, preempted here: ") != NULL && !strstr(text, "(no stack)"),
           "the text says where it was preempted, not \"(no stack)\"");
        ok(json_array_size(json_object_get(doc, "blocking_in_polls")) == 0,
           "a preemption names no blocking call (%zu listed)", json_array_size(json_object_get(doc, "blocking_in_polls")));
        if (!strstr(text, "preempted here: ") || strstr(text, "(no stack)"))
                printf("# %.*s\n", 3000, text);
        json_decref(doc);
        translate_destroy(&r.tr);
        d9_enc_free(r.enc);
        free(r.buf);
        return tap_done();
}
