/* debuginfo: where debug files come from besides the standard places, for
 * the sealer and `d9ctl symbolize`: extra directories searched by build-id
 * and a debuginfod server (elfutils' libdebuginfod, DEBUGINFOD_URLS).
 * Installs itself as the uprobes debug lookup, so the probe planner, the
 * sealer's symbolizer and d9ctl use one search order. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

struct debuginfo_opts {
        const char *const *dirs;        /* searched in order; may be NULL */
        size_t n_dirs;
        bool debuginfod;                /* ask the servers in DEBUGINFOD_URLS */
        uint64_t timeout_ms;            /* per download; 0 = 10 s */
};

/* Copies nothing: opts->dirs must outlive the lookup. Call before other
 * threads look debug files up. */
void debuginfo_setup(const struct debuginfo_opts *opts);
/* Only threads that called this may wait for a server (the sealer, d9ctl);
 * on others (d9d's drain loop) the debuginfod step is skipped. */
void debuginfo_allow_network(bool allow);
/* The executable with this build-id from a server (malloc'd path in the
 * client cache) or NULL; checked by the caller. */
char *debuginfo_fetch_executable(const char *build_id);
/* Why this thread's last server request failed ("debug file BUILD-ID: no
 * server has it", "... : Connection refused"); "" if none did. */
const char *debuginfo_last_failure(void);
/* What debuginfod said of the debug file of missing's build-id (missing
 * starts with it, as resymbolize's "none for" does), else the last failure. */
const char *debuginfo_failure_of(const char *missing);
/* What kind of answer that was. */
enum debuginfo_answer {
        DEBUGINFO_NOT_ASKED,            /* no server was asked for it */
        DEBUGINFO_NONE_HAD_IT,          /* "no server has it" */
        DEBUGINFO_OTHER,                /* a failure that says more (a file that is no debug file, an error) */
};
enum debuginfo_answer debuginfo_answer_kind(const char *missing);
