/* preflight: what this kernel and this process's privileges let d9d do.
 * Run once at start; d9d logs every finding that is not OK, each saying what
 * is missing and what d9d will do without it, then carries on unless a
 * finding is fatal (nothing could be traced at all). */
#pragma once

#include <stdbool.h>
#include <stdio.h>

enum preflight_check {
        PREFLIGHT_BTF,                /* kernel BTF: CO-RE programs and tp_btf */
        PREFLIGHT_RINGBUF,            /* BPF_MAP_TYPE_RINGBUF */
        PREFLIGHT_UPROBE_MULTI,       /* BPF_TRACE_UPROBE_MULTI links (Linux >= 6.6) */
        PREFLIGHT_UPROBE,             /* one uprobe perf event per probe point */
        PREFLIGHT_TASK_WORK,          /* bpf_task_work kfunc (Linux >= 6.18) */
        PREFLIGHT_CAP_BPF,
        PREFLIGHT_CAP_PERFMON,
        PREFLIGHT_CAP_SYS_ADMIN,
        PREFLIGHT_CAP_SYS_PTRACE,
        PREFLIGHT_CAP_DAC_READ_SEARCH,
        PREFLIGHT_CAP_SYS_RESOURCE,
        PREFLIGHT_CAP_SYSLOG,
        PREFLIGHT_PERF_EVENT_PARANOID,
        PREFLIGHT_NR,
};

enum preflight_level {
        PREFLIGHT_OK,        /* present, or not needed on this system */
        PREFLIGHT_DEGRADED,  /* d9d works with less: see consequence */
        PREFLIGHT_FATAL,     /* d9d cannot trace anything */
};

struct preflight_finding {
        enum preflight_level level;
        char detail[192];       /* what was found, e.g. "missing (kernel 6.1 < 6.6)" */
        char consequence[192];  /* what d9d does without it; "" when OK */
};

struct preflight_report {
        struct preflight_finding finding[PREFLIGHT_NR];
        int degraded;  /* number of DEGRADED findings */
        int fatal;     /* number of FATAL findings */
};

/* Runs every check. Never fails: a check that cannot run reports why in its
 * finding. Loads (and frees) a couple of trivial BPF programs. */
void d9d_preflight_run(struct preflight_report *report);

/* True when the check found the feature usable (level OK). Use it to choose
 * e.g. uprobe_multi vs one uprobe per probe point. */
bool d9d_preflight_ok(const struct preflight_report *report, enum preflight_check check);

/* Short stable name of a check ("btf", "uprobe_multi", "cap_perfmon", ...). */
const char *d9d_preflight_name(enum preflight_check check);

/* One line per finding ("d9d: preflight: <name>: <detail>[: <consequence>]")
 * to `out`; OK findings only when `verbose`. Returns the number of lines. */
int d9d_preflight_log(const struct preflight_report *report, FILE *out, bool verbose);
