/* tokio: which Tokio functions to probe, recognised by normalized name.
 *
 * Names are compared with generic arguments removed, so legacy
 * `OwnedTasks<S>::bind`, v0 `<OwnedTasks<Arc<Handle>>>::bind::<F>` and a
 * future `OwnedTasks<S>::bind` in another module all read
 * `...::OwnedTasks::bind`. Each rule matches a path suffix, so modules that
 * move between versions (`thread_pool` -> `scheduler::multi_thread`,
 * `basic_scheduler` -> `scheduler::current_thread`) still match; the
 * instance-count cross-check (poll ~ complete ~ vtables) catches a rule that
 * matches too much. */
#include <string.h>

#include "tokio.h"

static const struct tokio_rule rules[] = {
        /* Slot 0 of every task vtable; one instance per (future, scheduler). */
        { PROBE_POLL, "::task::raw::poll", true, PROBE_ARG0 },
        /* bind() returns the JoinHandle whose RawTask is the new Header*;
         * 1.4x's bind_inner (generic over the scheduler only) takes the new
         * Task (a Header*) as its second argument. Both are kept: a release
         * build inlines bind into most spawn sites and bind_inner into some
         * (npm grafbase, Tokio 1.47: 5 bind instances out of line, never
         * called, every spawn through 22 bind_inner copies). A spawn seen
         * by both, or by neither, is written once (translate.c). */
        { PROBE_SPAWN, "::task::list::OwnedTasks::bind", true, PROBE_ARG_RET, true },
        { PROBE_SPAWN, "::task::list::OwnedTasks::bind_inner", true, PROBE_ARG1, false },
        { PROBE_COMPLETE, "::task::harness::Harness::complete", true, PROBE_ARG0 },
        { PROBE_WAKE, "::task::waker::wake_by_val", true, PROBE_ARG0 },
        { PROBE_WAKE, "::task::waker::wake_by_ref", false, PROBE_ARG0 },
        /* Multi-thread worker sleep: Parker::park[_timeout]; arg0 = &Parker, its
         * first word (the Arc<Inner>) is a per-core key that Unparker shares.
         * Release builds may inline it into the worker's Context::park_internal
         * (1.49) or Context::park_timeout (1.2x-1.4x), whose second argument is
         * the worker's Box<Core>. */
        { PROBE_PARK, "::multi_thread::park::Parker::park", true, PROBE_ARG0_DEREF, false, "mt-park", 0 },
        { PROBE_PARK, "::multi_thread::park::Parker::park_timeout", true, PROBE_ARG0_DEREF, false, "mt-park", 0 },
        { PROBE_PARK, "::thread_pool::park::Parker::park", true, PROBE_ARG0_DEREF, false, "mt-park", 0 },
        { PROBE_PARK, "::thread_pool::park::Parker::park_timeout", true, PROBE_ARG0_DEREF, false, "mt-park", 0 },
        { PROBE_PARK, "::multi_thread::worker::Context::park_internal", true, PROBE_ARG1, false, "mt-park", 1 },
        { PROBE_PARK, "::multi_thread::worker::Context::park_timeout", true, PROBE_ARG1, false, "mt-park", 2 },
        /* Current-thread scheduler sleeps through its Context (arg1 = Box<Core>):
         * park and park_yield, which 1.49 routes through park_internal. */
        { PROBE_PARK, "::current_thread::Context::park_internal", true, PROBE_ARG1, false, "ct-park", 0 },
        { PROBE_PARK, "::current_thread::Context::park", true, PROBE_ARG1, false, "ct-park", 1 },
        { PROBE_PARK, "::current_thread::Context::park_yield", true, PROBE_ARG1, false, "ct-park", 1 },
        { PROBE_PARK, "::basic_scheduler::Context::park", true, PROBE_ARG1, false, "ct-park", 1 },
        { PROBE_PARK, "::basic_scheduler::Context::park_yield", true, PROBE_ARG1, false, "ct-park", 1 },
        { PROBE_UNPARK, "::multi_thread::park::Unparker::unpark", false, PROBE_ARG0_DEREF },
        { PROBE_UNPARK, "::thread_pool::park::Unparker::unpark", false, PROBE_ARG0_DEREF },
        { PROBE_WORKER_RUN, "::multi_thread::worker::run", true, PROBE_ARG_NONE },
        { PROBE_WORKER_RUN, "::thread_pool::worker::run", true, PROBE_ARG_NONE },
        { PROBE_BLOCK_IN_PLACE, "::multi_thread::worker::block_in_place", true, PROBE_ARG_NONE },
        { PROBE_BLOCK_IN_PLACE, "::thread_pool::worker::block_in_place", true, PROBE_ARG_NONE },
};

const struct tokio_rule *uprobes_tokio_rule_match(const char *stripped)
{
        size_t len = strlen(stripped);

        if (strncmp(stripped, "tokio::", 7) != 0)
                return NULL;
        for (size_t i = 0; i < sizeof(rules) / sizeof(rules[0]); i++) {
                size_t sl = strlen(rules[i].suffix);

                if (len >= sl && strcmp(stripped + len - sl, rules[i].suffix) == 0)
                        return &rules[i];
        }
        return NULL;
}

/* Index just past the '>' closing the '<' at s[i], or 0 if unbalanced.
 * A '>' preceded by '-' is part of "->" in a fn type, not a bracket. */
static size_t skip_angle(const char *s, size_t i)
{
        int depth = 0;

        for (; s[i]; i++) {
                if (s[i] == '<')
                        depth++;
                else if (s[i] == '>' && (i == 0 || s[i - 1] != '-') && --depth == 0)
                        return i + 1;
        }
        return 0;
}

char *uprobes_name_strip_generics(const char *name)
{
        size_t n = strlen(name), w = 0, i = 0;
        char *out = malloc(n + 1);

        if (!out)
                return NULL;
        /* A leading qualified path `<Type>::method` (v0, inherent impls): keep
         * the type path, drop the brackets. `<A as B>` is left alone. */
        if (name[0] == '<') {
                size_t close = skip_angle(name, 0);

                if (close && memmem(name, close, " as ", 4)) {
                        memcpy(out, name, close); /* trait impls keep their <A as B> */
                        w = close;
                        i = close;
                } else if (close) {
                        char *inner = strndup(name + 1, close - 2);
                        char *si = inner ? uprobes_name_strip_generics(inner) : NULL;

                        free(inner);
                        if (!si) {
                                free(out);
                                return NULL;
                        }
                        w = strlen(si);
                        memcpy(out, si, w);
                        free(si);
                        i = close;
                }
        }
        while (i < n) {
                if (name[i] == '<') {
                        size_t close = skip_angle(name, i);

                        if (!close)
                                break;
                        if (w >= 2 && out[w - 1] == ':' && out[w - 2] == ':')
                                w -= 2; /* turbofish ::<...> */
                        i = close;
                        continue;
                }
                out[w++] = name[i++];
        }
        out[w] = 0;
        return out;
}

char *uprobes_name_first_generic_arg(const char *name, const char *after)
{
        const char *p = strstr(name, after);
        size_t start, i;
        int depth = 0;

        if (!p)
                return NULL;
        p += strlen(after);
        if (strncmp(p, "::<", 3) == 0)
                p += 3;
        else if (*p == '<')
                p++;
        else
                return NULL;
        start = 0;
        for (i = 0; p[i]; i++) {
                if (p[i] == '<')
                        depth++;
                else if (p[i] == '>' && (i == 0 || p[i - 1] != '-')) {
                        if (depth-- == 0)
                                break;
                } else if (p[i] == ',' && depth == 0)
                        break;
        }
        if (!p[i] || i == start)
                return NULL;
        return strndup(p, i);
}

/* Legacy drop glue is named after the dropped type, generics included:
 * `core::ptr::drop_in_place<...task::core::Cell<T, S>>` or `<...Stage<T>>`. */
char *uprobes_future_from_drop_glue(const char *name)
{
        char *t = NULL;

        if (strncmp(name, "core::ptr::drop_in_place", 24) != 0)
                return NULL;
        if (strstr(name, "task::core::Cell<"))
                t = uprobes_name_first_generic_arg(name, "task::core::Cell");
        if (!t && strstr(name, "task::core::Stage<"))
                t = uprobes_name_first_generic_arg(name, "task::core::Stage");
        return t;
}

char *uprobes_future_from_core_stage_glue(const char *name)
{
        if (strncmp(name, "core::ptr::drop_in_place", 24) != 0 || !strstr(name, "task::core::CoreStage<"))
                return NULL;
        return uprobes_name_first_generic_arg(name, "task::core::CoreStage");
}

bool uprobes_label_is_boxed_dyn_future(const char *label)
{
        return label && strstr(label, "Pin<alloc::boxed::Box<dyn ") &&
               strstr(label, "Future");
}
