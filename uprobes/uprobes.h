/* uprobes: find where to probe a Tokio runtime inside an ELF executable.
 *
 * Public face of the component: given a PID (or a file), produce a probe
 * plan: every (file offset, kind, cookie, label) to attach, plus what could
 * not be found and why. The plan is pure data; attaching is the daemon's job.
 *
 * This header is the contract between uprobes/ and the BPF loader. Extend it;
 * do not change the meaning of existing fields. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

enum probe_kind {
        PROBE_POLL = 1,         /* entry of raw::poll<T,S>; arg0 = task Header* */
        PROBE_POLL_RETURN,      /* a return site of raw::poll (or a uretprobe on it) */
        PROBE_SPAWN,            /* return of OwnedTasks<S>::bind; rax = new Header* */
        PROBE_COMPLETE,         /* entry of Harness<T,S>::complete */
        PROBE_WAKE,             /* waker::wake_by_val (and friends) */
        PROBE_PARK,             /* entry of a worker park function */
        PROBE_UNPARK_RETURN,    /* return of that park function */
        PROBE_UNPARK,           /* Unparker::unpark: the wake target of a parked worker */
        PROBE_WORKER_RUN,       /* worker::run: marks worker threads */
        PROBE_BLOCK_IN_PLACE,   /* block_in_place: a worker hands off its core */
        PROBE_KIND_MAX,
};

/* How the kernel will execute the probed first instruction. */
enum probe_insn_class {
        PROBE_INSN_UNKNOWN = 0,
        PROBE_INSN_EMULATED,    /* push/jmp/nop...: cheap (~1 us) */
        PROBE_INSN_SSTEP,       /* single-stepped out of line: ~15x the cost */
};

enum probe_source {
        PROBE_FROM_SYMBOLS = 1 << 0,
        PROBE_FROM_VTABLE_SCAN = 1 << 1,
};

struct probe_point {
        uint64_t file_offset;   /* offset in the ELF file, what uprobes attach to */
        uint64_t vaddr;         /* link-time virtual address (for symbolizing) */
        enum probe_kind kind;
        uint64_t cookie;        /* BPF cookie: index of this point in the plan */
        char *label;            /* future type T, concrete boxed future, or "0x..." */
        enum probe_insn_class insn;
        unsigned sources;       /* enum probe_source bits */
        /* For PROBE_POLL: the task vtable this poll came from (0 if unknown). */
        uint64_t vtable_vaddr;
        bool skipped;           /* not attached (e.g. single-step cost); see skip_reason */
        char *skip_reason;
};

/* Something the plan wanted and did not find, with why. */
struct probe_missing {
        enum probe_kind kind;
        char *reason;
};

struct probe_plan {
        char *exe_path;         /* path that was opened (e.g. /proc/PID/root/...) */
        char *build_id;         /* hex, or NULL */
        char *tokio_version;    /* from .rodata crate paths, or NULL */
        char *shape;            /* e.g. "multi-thread+current-thread, symbols, v0" */
        bool has_symbols;
        bool stripped;
        struct probe_point *points;
        size_t n_points;
        struct probe_missing *missing;
        size_t n_missing;
};

/* Build the plan for a running process. Returns 0 or a negative errno; on
 * error, *err_msg (if non-NULL) receives a malloc'd one-line explanation. */
int probe_plan_for_pid(pid_t pid, struct probe_plan **out, char **err_msg);

/* Same, for an executable file (tests, offline inspection). */
int probe_plan_for_file(const char *path, struct probe_plan **out, char **err_msg);

void probe_plan_free(struct probe_plan *plan);

const char *probe_kind_name(enum probe_kind kind);
