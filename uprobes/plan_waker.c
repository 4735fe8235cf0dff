/* plan_waker: the task waker's wake functions, without symbols.
 *
 * Every Tokio task's Waker shares one RawWakerVTable (clone, wake,
 * wake_by_ref, drop; non-generic since 1.2x), whose data pointer is the
 * task's Header*. vtable_scan.c finds it among the relocations by its clone
 * function (REF_ONE increment, returns a RawWaker pointing back at the
 * vtable). Slot 1 (wake = wake_by_val) and slot 2 (wake_by_ref) get the same
 * points and policy the symbol rules give them: wake_by_val is essential,
 * wake_by_ref optional (left out when single-stepped: wakes are hot, see
 * docs/bpf.md). With symbols the scan only cross-checks them. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "plan_int.h"

int uprobes_plan_waker_route(struct plan_builder *b, struct probe_plan *plan)
{
        static const char *const names[2] = { "waker::wake_by_val", "waker::wake_by_ref" };
        bool by_symbols = false;

        plan->waker_vtable = b->vs.waker_vtable;
        if (!b->vs.waker_vtable)
                return 0;
        for (size_t i = 0; i < b->n; i++)
                by_symbols |= b->pts[i].kind == PROBE_WAKE;
        for (int k = 0; k < 2; k++) {
                uint64_t at = b->vs.waker_fn[1 + k];
                struct probe_point *p = NULL;

                for (size_t i = 0; i < b->n && !p; i++)
                        if (b->pts[i].kind == PROBE_WAKE && b->pts[i].vaddr == at)
                                p = &b->pts[i];
                if (by_symbols) {
                        /* The symbols know both: the scan must name the same two. */
                        plan->waker_scan_agrees = (k == 0 || plan->waker_scan_agrees) && p &&
                                                  p->label && strstr(p->label, names[k]);
                        if (p)
                                p->sources |= PROBE_FROM_VTABLE_SCAN;
                        continue;
                }
                p = uprobes_plan_point_add(b, PROBE_WAKE, at);
                if (!p)
                        return -ENOMEM;
                b->meta[b->n - 1].essential = k == 0;
                p->sources = PROBE_FROM_VTABLE_SCAN;
                p->value_from = PROBE_ARG0;
                if (asprintf(&p->label, "%s (task waker vtable 0x%" PRIx64 " slot %d)", names[k],
                             b->vs.waker_vtable, 1 + k) < 0)
                        return -ENOMEM;
        }
        return 0;
}
