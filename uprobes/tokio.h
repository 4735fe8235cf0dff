/* Internal: the table of Tokio probe points and name helpers (tokio.c). */
#pragma once

#include <stdbool.h>

#include "uprobes_int.h"

struct tokio_rule {
        enum probe_kind kind;
        const char *suffix;     /* of the generic-stripped demangled name */
        bool essential;         /* attach even if the kernel must single-step it */
        enum probe_arg value_from;
        bool uretprobe;
        /* Rules sharing a group are alternatives for the same event: only the
         * points of the lowest rank that matched are kept (probing a wrapper
         * and the function it calls would report every event twice). */
        const char *group;
        int rank;
};

/* Rule for a generic-stripped name, or NULL. */
const struct tokio_rule *uprobes_tokio_rule_match(const char *stripped);
/* `<a::B<X>>::f::<Y>` -> `a::B::f` (malloc'd). */
char *uprobes_name_strip_generics(const char *name);
/* First generic argument after the path `after` (e.g. "raw::poll"), malloc'd. */
char *uprobes_name_first_generic_arg(const char *name, const char *after);
/* The future type T a legacy drop glue's name carries (its Cell<T, S> or
 * Stage<T>), malloc'd; NULL for any other name. */
char *uprobes_future_from_drop_glue(const char *name);
/* The same from a CoreStage<T>'s glue. Less sure: the stage alone has the
 * same layout for more futures, so rustc merges more of these glues under
 * one name (npm vaulttools-mcp: its Stdout flush task's CoreStage glue is
 * named after its Stdin read task). */
char *uprobes_future_from_core_stage_glue(const char *name);
bool uprobes_label_is_boxed_dyn_future(const char *label);
