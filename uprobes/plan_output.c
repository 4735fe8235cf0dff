/* plan_output: a probe plan as JSON (for d9d's segment metadata, d9ctl and
 * tests) and as text for humans. Both come from the same fields. */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>

#include "uprobes_int.h"

static const char *insn_class_name(enum probe_insn_class c)
{
        return c == PROBE_INSN_EMULATED ? "emulated" : c == PROBE_INSN_SSTEP ? "single-step" : "unknown";
}

static const char *probe_arg_name(enum probe_arg a)
{
        static const char *const names[] = {
                [PROBE_ARG_NONE] = "none", [PROBE_ARG_RET] = "ret", [PROBE_ARG0] = "arg0",
                [PROBE_ARG1] = "arg1", [PROBE_ARG0_DEREF] = "*arg0",
        };

        return a <= PROBE_ARG0_DEREF ? names[a] : "none";
}

static json_t *str_or_null(const char *s)
{
        return s ? json_string(s) : json_null();
}

static json_t *point_json(const struct probe_point *p)
{
        char hex[2][24];

        snprintf(hex[0], sizeof(hex[0]), "0x%" PRIx64, p->vaddr);
        snprintf(hex[1], sizeof(hex[1]), "0x%" PRIx64, p->vtable_vaddr);
        json_t *o = json_pack("{s:s, s:I, s:I, s:s, s:I, s:o, s:s, s:o, s:b, s:b, s:b, s:b}",
                              "kind", probe_kind_name(p->kind),
                              "cookie", (json_int_t)p->cookie,
                              "file_offset", (json_int_t)p->file_offset,
                              "vaddr", hex[0],
                              "vaddr_int", (json_int_t)p->vaddr,
                              "label", str_or_null(p->label),
                              "insn", insn_class_name(p->insn),
                              "insn_desc", str_or_null(p->insn_desc),
                              "uretprobe", p->uretprobe,
                              "skipped", p->skipped,
                              "from_symbols", !!(p->sources & PROBE_FROM_SYMBOLS),
                              "from_vtable_scan", !!(p->sources & PROBE_FROM_VTABLE_SCAN));
        if (!o)
                return NULL;
        json_object_set_new(o, "insn_len", json_integer(p->insn_len));
        json_object_set_new(o, "value_from", json_string(probe_arg_name(p->value_from)));
        if (p->vtable_vaddr)
                json_object_set_new(o, "vtable_vaddr", json_string(hex[1]));
        if (p->kind == PROBE_POLL_RETURN)
                json_object_set_new(o, "func_vaddr", json_integer((json_int_t)p->func_vaddr));
        if (p->kind == PROBE_POLL && p->func_end) {
                /* The body the default set looks for in stacks. */
                json_object_set_new(o, "body_start", json_integer((json_int_t)(p->func_start ? p->func_start : p->vaddr)));
                json_object_set_new(o, "body_end", json_integer((json_int_t)p->func_end));
        }
        if (p->blocking_task)
                json_object_set_new(o, "blocking_task", json_true());
        if (p->boxed_dyn) {
                json_object_set_new(o, "boxed_dyn", json_true());
                json_object_set_new(o, "dyn_vtable_hdr_off", json_integer(p->dyn_vtable_hdr_off));
        }
        if (p->skip_reason)
                json_object_set_new(o, "skip_reason", json_string(p->skip_reason));
        if (p->note)
                json_object_set_new(o, "note", json_string(p->note));
        return o;
}

static json_t *counts_json(const struct probe_plan *plan)
{
        json_t *o = json_object();

        for (int k = 1; k < PROBE_KIND_MAX; k++)
                json_object_set_new(o, probe_kind_name(k),
                                    json_pack("{s:I, s:I}",
                                              "attached", (json_int_t)probe_plan_count(plan, k, false),
                                              "found", (json_int_t)probe_plan_count(plan, k, true)));
        return o;
}

/* What a boxed future's label can be, and the segments that place it. */
static json_t *dyn_fns_json(const struct probe_plan *plan)
{
        json_t *fns = json_array(), *segs = json_array();

        for (size_t i = 0; i < plan->n_dyn_fns; i++)
                json_array_append_new(fns, json_pack("{s:I, s:s}", "vaddr", (json_int_t)plan->dyn_fns[i].vaddr,
                                                     "name", plan->dyn_fn_text + plan->dyn_fns[i].name));
        for (size_t i = 0; i < plan->n_segments; i++)
                json_array_append_new(segs, json_pack("{s:I, s:I, s:I, s:b}",
                                                      "vaddr", (json_int_t)plan->segments[i].vaddr,
                                                      "offset", (json_int_t)plan->segments[i].offset,
                                                      "filesz", (json_int_t)plan->segments[i].filesz,
                                                      "exec", plan->segments[i].exec));
        return json_pack("{s:I, s:I, s:o, s:o}", "count", (json_int_t)plan->n_dyn_fns,
                         "text_bytes", (json_int_t)plan->dyn_fn_text_len, "fns", fns, "segments", segs);
}

char *probe_plan_to_json(const struct probe_plan *plan)
{
        json_t *pts = json_array(), *miss = json_array();

        for (size_t i = 0; i < plan->n_points; i++)
                json_array_append_new(pts, point_json(&plan->points[i]));
        for (size_t i = 0; i < plan->n_missing; i++)
                json_array_append_new(miss, json_pack("{s:s, s:s}",
                                                      "kind", probe_kind_name(plan->missing[i].kind),
                                                      "reason", plan->missing[i].reason));
        json_t *root = json_pack(
                "{s:s, s:o, s:o, s:o, s:b, s:b, s:b, s:o,"
                " s:{s:i, s:i, s:i, s:i, s:i},"
                " s:{s:o, s:I, s:I, s:I, s:I, s:b, s:I, s:I, s:I, s:I, s:b},"
                " s:f, s:o, s:o, s:o}",
                "exe_path", plan->exe_path,
                "build_id", str_or_null(plan->build_id),
                "tokio_version", str_or_null(plan->tokio_version),
                "shape", str_or_null(plan->shape),
                "has_symbols", plan->has_symbols,
                "stripped", plan->stripped,
                "v0_mangling", plan->v0_mangling,
                "debug_file", str_or_null(plan->debug_file),
                "task_layout",
                "hdr_vtable_off", (int)plan->hdr_vtable_off,
                "vtable_id_off", (int)plan->vtable_id_off,
                "vtable_scheduler_off", (int)plan->vtable_scheduler_off,
                "vtable_trailer_off", (int)plan->vtable_trailer_off,
                "dyn_future_poll_slot", (int)plan->dyn_future_poll_slot,
                "discovery",
                "scan_method", str_or_null(plan->scan_method),
                "vtables", (json_int_t)plan->n_vtables,
                "polls_by_symbols", (json_int_t)plan->polls_by_symbols,
                "polls_by_scan", (json_int_t)plan->polls_by_scan,
                "polls_in_both", (json_int_t)plan->polls_in_both,
                "routes_agree", plan->routes_agree,
                "completes_by_scan", (json_int_t)plan->completes_by_scan,
                "completes_unfound", (json_int_t)plan->completes_unfound,
                "completes_scan_wrong", (json_int_t)plan->completes_scan_wrong,
                "waker_vtable", (json_int_t)plan->waker_vtable,
                "waker_scan_agrees", plan->waker_scan_agrees,
                "elapsed_ms", plan->elapsed_ms,
                "counts", counts_json(plan),
                "points", pts,
                "missing", miss);
        if (!root)
                return NULL;
        json_object_set_new(root, "dyn_fns", dyn_fns_json(plan));
        json_t *sites = json_array();
        for (size_t i = 0; sites && i < plan->n_harness_sites; i++)
                json_array_append_new(sites, json_integer((json_int_t)plan->harness_sites[i]));
        json_object_set_new(root, "harness_call_sites", sites ? sites : json_null());
        char *s = json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
        json_decref(root);
        return s;
}

void probe_plan_print(const struct probe_plan *plan, FILE *out, bool all_points)
{
        fprintf(out, "exe:            %s\n", plan->exe_path);
        fprintf(out, "build-id:       %s\n", plan->build_id ? plan->build_id : "-");
        fprintf(out, "tokio:          %s\n", plan->tokio_version ? plan->tokio_version : "unknown");
        fprintf(out, "shape:          %s\n", plan->shape ? plan->shape : "-");
        if (plan->debug_file)
                fprintf(out, "debug file:     %s\n", plan->debug_file);
        fprintf(out, "task layout:    vtable at hdr+%u, id_offset at vtable+%d\n",
                plan->hdr_vtable_off, plan->vtable_id_off);
        fprintf(out, "discovery:      %zu vtables (%s); polls: %zu by symbols, %zu by scan, %zu in both%s\n",
                plan->n_vtables, plan->scan_method ? plan->scan_method : "-", plan->polls_by_symbols,
                plan->polls_by_scan, plan->polls_in_both,
                plan->has_symbols ? (plan->routes_agree ? " (routes agree)" : " (ROUTES DISAGREE)") : "");
        /* With symbols the points also come from them: the table below
         * counts those too, so this says which route found how many. */
        fprintf(out, "terminate:      %zu complete points; the vtable scan found %zu, %zu vtables without one%s\n",
                probe_plan_count(plan, PROBE_COMPLETE, true), plan->completes_by_scan, plan->completes_unfound,
                plan->completes_scan_wrong ? " (SCAN PICKED A NON-complete)" : "");
        if (!plan->waker_vtable)
                fprintf(out, "wake:           task waker vtable not found: no wake points from it\n");
        else
                fprintf(out, "wake:           task waker vtable 0x%" PRIx64 "%s\n", plan->waker_vtable,
                !plan->has_symbols ? "" :
                plan->waker_scan_agrees ? " (its wake slots are the symbols' wake_by_val, wake_by_ref)" :
                " (SCAN DISAGREES WITH SYMBOLS)");
        size_t bodies = probe_plan_poll_bodies(plan), tasks = probe_plan_task_polls(plan);
        if (bodies)
                fprintf(out, "default set:    %zu of %zu runtime task poll function bodies known: workers, parks "
                        "and long polls from stacks\n", bodies, tasks);
        else if (!tasks && probe_plan_any_poll_bodies(plan))
                fprintf(out, "default set:    only blocking-pool task polls in this build (block_on and "
                        "spawn_blocking, no runtime task): workers and parks from stacks, no task poll to "
                        "be long (--probes all records the jobs)\n");
        else if (!tasks && probe_plan_count(plan, PROBE_POLL, true))
                fprintf(out, "default set:    only blocking-pool task polls in this build, no poll function "
                        "body known: without uprobes d9d sees no worker (use --probes all)\n");
        else
                fprintf(out, "default set:    no poll function body known: without uprobes d9d cannot tell "
                        "this runtime's workers or long polls (use --probes all)\n");
        if (bodies)
                fprintf(out, "harness calls:  %zu call sites in the poll functions into Tokio's own code around "
                        "the future (yield_now and the like): a stack there is no poll\n", plan->n_harness_sites);
        if (plan->n_dyn_fns && plan->dyn_fn_text_len <= 1)
                fprintf(out, "boxed futures:  %zu functions a boxed future's poll can be, none named (no symbols): "
                        "labelled \"[unnamed] FILE 0xVADDR\"\n", plan->n_dyn_fns);
        else
                fprintf(out, "boxed futures:  %zu functions a boxed future's poll can be named (%zu bytes of names)\n",
                        plan->n_dyn_fns, plan->dyn_fn_text_len);
        fprintf(out, "planned in:     %.1f ms\n\n", plan->elapsed_ms);
        /* A plan attaches nothing: the probe set picks from its points. */
        fprintf(out, "points (usable: found and not skipped; a recording attaches those its probe set needs:\n"
                     "none in the default set, no unpark_return where sched_switch gives the unparks;\n"
                     "d9ctl status lists what is attached):\n");
        for (int k = 1; k < PROBE_KIND_MAX; k++)
                fprintf(out, "  %-15s %4zu usable, %4zu found\n", probe_kind_name(k),
                        probe_plan_count(plan, k, false), probe_plan_count(plan, k, true));
        fputc('\n', out);
        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                if (!all_points && p->kind == PROBE_POLL_RETURN)
                        continue;
                fprintf(out, "%5" PRIu64 " %-14s off=0x%-8" PRIx64 " %-11s %-12s%s %s%s%s%s", p->cookie,
                        probe_kind_name(p->kind), p->file_offset, insn_class_name(p->insn),
                        p->insn_desc ? p->insn_desc : "-", p->uretprobe ? " (ret)" : "",
                        p->label ? p->label : "-", p->blocking_task ? "  [blocking pool]" : "",
                        p->skipped ? "  [skipped: " : "",
                        p->skipped ? p->skip_reason : "");
                fputs(p->skipped ? "]\n" : "\n", out);
        }
        for (size_t i = 0; i < plan->n_missing; i++)
                fprintf(out, "missing %-14s %s\n", probe_kind_name(plan->missing[i].kind), plan->missing[i].reason);
}
