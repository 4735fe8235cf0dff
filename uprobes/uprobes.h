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
#include <stdio.h>
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

/* Where BPF finds the value a point is about (added by uprobes/, issue 4). */
enum probe_arg {
        PROBE_ARG_NONE = 0,     /* nothing to read (pair with the entry by thread) */
        PROBE_ARG_RET,          /* return value (rax) of a uretprobe */
        PROBE_ARG0,             /* first argument (rdi) */
        PROBE_ARG1,             /* second argument (rsi) */
        PROBE_ARG0_DEREF,       /* *(u64 *)arg0 */
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
        /* Added by uprobes/ (issue 4): */
        bool uretprobe;         /* attach a uretprobe at file_offset (a function entry),
                                 * e.g. PROBE_SPAWN on bind and PROBE_UNPARK_RETURN */
        /* What to read and where: poll/complete/wake -> the task Header*; spawn ->
         * the new Header* (RET of bind, or ARG1 of bind_inner's entry); park/unpark
         * -> a per-worker key that follows the worker's core (the Parker's Arc for
         * Parker::park and Unparker::unpark, which share it; the Box<Core> for
         * Context::park*); see the label for the function. */
        enum probe_arg value_from;
        char *insn_desc;        /* decoded first instruction, e.g. "push %reg", "sub $imm" */
        unsigned insn_len;      /* its length in bytes (0 if undecodable) */
        char *note;             /* warning on an attached point (e.g. essential but
                                 * single-stepped), or NULL */
        /* PROBE_POLL_RETURN: entry vaddr of the raw::poll this return site closes. */
        uint64_t func_vaddr;
        /* PROBE_POLL with T = Pin<Box<dyn Future>>: the label names the box type;
         * the concrete future is only known at run time (see dyn_future_* in
         * struct probe_plan). */
        bool boxed_dyn;
        /* For such a poll, where the boxed future's dyn vtable pointer lives, found
         * in the poll's code (0 if not found): at poll entry
         *   vt = *(u64 *)(hdr + dyn_vtable_hdr_off);
         *   concrete_poll = *(u64 *)(vt + 8 * plan->dyn_future_poll_slot);
         * concrete_poll - load bias symbolizes to `<X as Future>::poll`. Also set
         * (with boxed_dyn) on stripped binaries when the code shows the pattern. */
        uint32_t dyn_vtable_hdr_off;
        /* PROBE_POLL of a blocking-pool task (spawn_blocking, a worker's own
         * launch): its scheduler (BlockingSchedule) is not the one Arc every
         * runtime scheduler is, so the vtable's id offset is not its
         * scheduler offset + 8; or, without a vtable, the symbol names
         * BlockingTask. Such polls never make their thread a
         * worker (daemon/record/translate.c). */
        bool blocking_task;
        /* PROBE_POLL: the poll function's body (symbol size, else the next
         * function start in .eh_frame_hdr, else a code sweep from where
         * vaddr's leading jumps lead), func_end 0 if unknown: a stack frame
         * in [func_start, func_end) is inside this poll (daemon/long_poll.c).
         * func_start 0: vaddr. */
        uint64_t func_start, func_end;
};

/* A PT_LOAD segment of the executable: how its file offsets and link-time
 * addresses correspond (a runtime address of the target becomes a
 * link-time one through its memory map and these: daemon/symbolize/mapping.h). */
struct probe_segment {
        uint64_t vaddr, offset, filesz;
        bool exec;              /* PF_X */
};
#define PROBE_SEGMENTS_MAX 64u  /* real executables have 2-6 */

/* A function a boxed future's poll can be, and its name (plan_dyn_names.c). */
struct probe_fn_name {
        uint64_t vaddr;         /* link-time entry address */
        uint32_t name;          /* offset of its NUL-terminated name in dyn_fn_text */
};
/* Far above what the builds measured hold (docs/probe-plan.md, "Task id and
 * labels"); a build past either bound gets no table (a `missing` entry). */
#define PROBE_DYN_FNS_MAX (1u << 18)
#define PROBE_DYN_FN_TEXT_MAX (32u << 20)
/* Harness call sites a plan keeps at most (one to three per poll body). */
#define PROBE_HARNESS_SITES_MAX (1u << 16)

/* Something the plan wanted and did not find, with why. */
struct probe_missing {
        enum probe_kind kind;
        char *reason;
};

struct probe_plan {
        char *exe_path;         /* path that was opened (e.g. /proc/PID/root/...) */
        /* The planned file itself, open (-1 for plans from a path): uprobes
         * attach to /proc/self/fd/<exe_fd>, the very inode that was read,
         * never to a path someone could swap in the meantime. */
        int exe_fd;
        char *attach_path;
        char *build_id;         /* hex, or NULL */
        char *tokio_version;    /* from .rodata crate paths, or NULL */
        char *shape;            /* e.g. "multi-thread+current-thread, symbols, v0" */
        bool has_symbols;
        bool stripped;
        struct probe_point *points;
        size_t n_points;
        struct probe_missing *missing;
        size_t n_missing;

        /* Added by uprobes/ (issue 4). Task-id read at poll entry, per design.md §3:
         *   vt = *(u64 *)(hdr + hdr_vtable_off);
         *   id = *(u64 *)(hdr + *(u64 *)(vt + vtable_id_off));
         * hdr_vtable_off comes from Tokio's #[repr(C)] Header {state, queue_next,
         * vtable, ...} (16 in every 1.x); vtable_id_off is discovered by shape
         * (the middle one of the three offsets after the 7 fn pointers; -1 if no
         * vtable was found). A poll point's vtable_vaddr + load bias normally
         * equals vt, but rustc may emit identical copies of one vtable in several
         * codegen units (seen in turbo), so a mismatch alone is no error. */
        uint32_t hdr_vtable_off;
        int32_t vtable_id_off;
        int32_t vtable_scheduler_off;
        int32_t vtable_trailer_off;
        /* Rust dyn vtables: drop_in_place, size, align, then methods; slot 3 is
         * Future::poll (see probe_point.dyn_vtable_hdr_off). */
        uint32_t dyn_future_poll_slot;
        /* Discovery routes and their cross-check (symbolized builds). */
        const char *scan_method;        /* "rela.dyn", "relr.dyn", "data.rel.ro" */
        size_t n_vtables;
        size_t polls_by_symbols, polls_by_scan, polls_in_both;
        bool routes_agree;              /* same set of poll addresses (symbols present) */
        /* Harness::complete found from the task vtables (plan_complete.c): new
         * points or symbol points it confirmed; vtables where the code did not
         * single one out; picks that are not a symbol's complete (symbols present). */
        size_t completes_by_scan, completes_unfound, completes_scan_wrong;
        /* Tokio's task RawWakerVTable found by the scan (0: not found), and,
         * with symbols, whether its wake slots are the symbols' wake_by_val
         * and wake_by_ref (plan_waker.c). */
        uint64_t waker_vtable;
        bool waker_scan_agrees;
        char *debug_file;               /* separate debug file used, or NULL */
        bool v0_mangling;
        double elapsed_ms;              /* time to build the plan */
        /* The file's ctime when planning began: a plan of a file written
         * since may mix both versions, and plan_cache.c does not keep it. */
        struct timespec planned_ctime;
        /* The executable's PT_LOAD segments, in file order. */
        struct probe_segment *segments;
        size_t n_segments;
        /* Its static TLS block (PT_TLS, aligned): glibc and musl place it
         * between each thread's stack and its thread pointer. */
        uint64_t tls_size;
        /* What a boxed future's poll (probe_point.boxed_dyn) can be: the
         * functions in slot 3 of the executable's Rust dyn vtables, named as
         * a stack frame there is (the sealer's names), sorted by vaddr,
         * unique. Empty without symbols: there the daemon labels such a
         * task "[unnamed] FILE 0xVADDR" for d9ctl symbolize to name later. */
        struct probe_fn_name *dyn_fns;
        size_t n_dyn_fns;
        char *dyn_fn_text;              /* their names, each once, NUL-terminated */
        size_t dyn_fn_text_len;
        /* Return addresses (link-time) of the calls task poll functions
         * make into Tokio's own code around the future: yield_now and the
         * like (plan_harness.c), sorted, unique. A stack whose task poll
         * frame returns to one is in the harness, not in the future. */
        uint64_t *harness_sites;
        size_t n_harness_sites;
};

/* Whether the link-time return address vaddr is one of harness_sites. */
bool probe_plan_harness_site(const struct probe_plan *plan, uint64_t vaddr);

/* The name dyn_fns gives the function at link-time address vaddr, or NULL. */
const char *probe_plan_dyn_fn_name(const struct probe_plan *plan, uint64_t vaddr);

/* Point counts per kind, attached (not skipped) only. */
size_t probe_plan_count(const struct probe_plan *plan, enum probe_kind kind, bool include_skipped);
/* Runtime-task poll points (not blocking-pool ones), skipped included. */
size_t probe_plan_task_polls(const struct probe_plan *plan);
/* Runtime-task poll points whose function body is known (func_end): the
 * frames the default probe set's long polls are found in. 0: it sees no
 * long poll, and its run ticks are off (workers: below). */
size_t probe_plan_poll_bodies(const struct probe_plan *plan);
/* Poll points of either kind whose body is known: with any, the default
 * set tells workers (by the Worker in their loop's stack, under the
 * launch's blocking-pool poll) and blocking-pool threads from stacks, even
 * in a build that polls no runtime task (ast-grep 0.51's LSP: all its work
 * in block_on, its two workers idle). */
size_t probe_plan_any_poll_bodies(const struct probe_plan *plan);

/* Plan as a JSON document (malloc'd), and as human-readable text. */
char *probe_plan_to_json(const struct probe_plan *plan);
void probe_plan_print(const struct probe_plan *plan, FILE *out, bool all_points);

/* `PROG (--pid PID | --exe PATH) [--json] [--all]`: prints the plan; returns
 * the exit status (0, 1 on failure with one line on stderr, 2 on usage). */
int probe_plan_cli(int argc, char **argv, const char *prog);

/* Build the plan for a running process. Returns 0 or a negative errno; on
 * error, *err_msg (if non-NULL) receives a malloc'd one-line explanation. */
int probe_plan_for_pid(pid_t pid, struct probe_plan **out, char **err_msg);

/* Same, for an executable file (tests, offline inspection). */
int probe_plan_for_file(const char *path, struct probe_plan **out, char **err_msg);

void probe_plan_free(struct probe_plan *plan);

/* The same for the executable of the process behind pidfd (pid is its PID
 * in our namespace): /proc/PID/exe is opened, then the pidfd is checked to
 * still name a live process, so the file cannot belong to a recycled PID. */
int probe_plan_for_pidfd(int pidfd, pid_t pid, struct probe_plan **out, char **err_msg);

/* Same for an already open file (taken over: closed by the plan), e.g. the
 * executable a d9ctl record child opened with its own permissions. */
int probe_plan_for_fd(int fd, const char *display, struct probe_plan **out, char **err_msg);
/* Same, with separate debug files looked for under root ("" for none). */
int probe_plan_for_fd_in_root(int fd, const char *display, const char *root, struct probe_plan **out,
                              char **err_msg);
/* The executable of the process behind pidfd, opened as probe_plan_for_pidfd
 * does; *display names it (malloc'd). An fd or a negative errno. */
int probe_target_exe_open(int pidfd, pid_t pid, char **display, char **err_msg);
/* The executable at path (d9_target_file_open), with probe_plan_for_file's
 * message when it cannot be opened; *display (if display is not NULL) is a
 * copy of path. An fd or a negative errno. */
int probe_target_file_open(const char *path, char **display, char **err_msg);

/* A plan as bytes (one malloc'd block) and back. The bytes carry no file
 * descriptor: the plan read back has exe_fd -1 and no attach_path. The
 * reader bounds every count and string (the writer parsed hostile input):
 * -EPROTO for bytes that are not a plan. */
int probe_plan_serialize(const struct probe_plan *plan, void **bytes, size_t *len);
int probe_plan_parse(const void *bytes, size_t len, struct probe_plan **out);

/* ---- plan_cache.c: plans of files planned before ------------------------ */

struct probe_plan_cache;
struct probe_plan_cache *probe_plan_cache_new(unsigned capacity);
void probe_plan_cache_free(struct probe_plan_cache *cache);
/* Keep a copy of plan (one built from its exe_fd) for processes that run
 * the same, unchanged file later; the least recently used entry goes. A
 * plan that used a separate debug file, or of a file changed while it was
 * planned, is not kept. */
void probe_plan_cache_put(struct probe_plan_cache *cache, const struct probe_plan *plan);
/* The plan for pid's executable, when that file was planned unchanged:
 * 0, -ENOENT if not, another negative errno if its executable cannot be
 * opened (pidfd checked, as probe_plan_for_pidfd). */
int probe_plan_cache_get(struct probe_plan_cache *cache, int pidfd, pid_t pid, struct probe_plan **out);

/* ---- target_file.c: reading files a target or user controls ------------ */

#define D9_TARGET_FILE_MAX (1ull << 30) /* larger "executables" are refused */

/* Open path (a "/proc/PID/root/" or "/proc/self/fd/N/" prefix: the rest is
 * resolved inside that root, or inside the directory open as N) for
 * reading: no final symlink, no magic links, no blocking on FIFOs or
 * devices, regular files of at most D9_TARGET_FILE_MAX bytes. Returns an fd
 * or a negative errno (-EBADFD: not a regular file, -EFBIG: too large). */
int d9_target_file_open(const char *path);
int d9_target_file_openat(int dirfd, const char *path, bool in_root);
/* Read-only fd of the regular file behind an O_PATH fd (taken over). */
int d9_target_file_reopen(int opath_fd);
/* A sealed in-memory copy of the regular file open on fd (fd unchanged):
 * safe to mmap (the copy cannot shrink); -ENODATA if fd shrank meanwhile. */
int d9_target_file_copy(int fd);
/* Seals a memfd copy just written (d9_target_file_copy's, the unwinder's
 * vDSO image) against any change of size, and of content where the
 * kernel allows it (uprobes/target_file.c says when it does not). */
int d9_memfd_seal_copy(int mfd);
/* From now on d9_target_file_copy hands out the file itself (another fd of
 * it): for a process that may die of a fault, the plan child. */
void d9_target_files_read_in_place(void);
/* 0 if the process behind pidfd has not exited (so its PID is still its
 * own), else a negative errno. */
int d9_pidfd_alive(int pidfd);
/* d9_target_file_open then d9_target_file_copy. */
int d9_target_file_open_copy(const char *path);

const char *probe_kind_name(enum probe_kind kind);

/* .eh_frame_hdr's search table (eh_frame_hdr.c), read in place from its
 * bytes h (len of them, at link-time address vaddr): false if it has none
 * in the one encoding linkers write. */
struct d9_eh_table {
        const uint8_t *entries; /* pairs of int32: function start, FDE (datarel) */
        uint64_t base;          /* .eh_frame_hdr's vaddr */
        uint32_t n;
};
bool d9_eh_table_read(const uint8_t *h, size_t len, uint64_t vaddr, struct d9_eh_table *t);
/* Entry i's function start and FDE address (link-time). */
uint64_t d9_eh_table_start(const struct d9_eh_table *t, uint32_t i);
uint64_t d9_eh_table_fde(const struct d9_eh_table *t, uint32_t i);
/* The first entry starting above vaddr (n: none). */
uint32_t d9_eh_table_above(const struct d9_eh_table *t, uint64_t vaddr);

/* Separate debug file for the ELF file at path (malloc'd), or NULL: the
 * lookup the plan uses (build-id under <root>/usr/lib/debug/.build-id/,
 * then .gnu_debuglink next to the file, in .debug/, under
 * <root>/usr/lib/debug/<dir>/), rejecting a build-id mismatch. path must
 * already carry the root prefix; root is "" for our own mount namespace. */
char *uprobes_debug_file_for(const char *path, const char *root);

/* Further places for separate debug files, tried after the standard ones by
 * every lookup above (so the planner, the sealer and d9ctl symbolize agree):
 * each directory as DIR/.build-id/xx/rest.debug, DIR/xx/rest.debug and
 * DIR/<debuglink name>, then fetch(build-id hex, ctx), e.g. a debuginfod
 * client, which returns a malloc'd path or NULL. Whatever is found must
 * carry the wanted build-id. Process-wide: set it before other threads
 * look files up; the strings must outlive their use. NULL clears it. */
struct uprobes_debug_lookup {
        const char *const *dirs;
        size_t n_dirs;
        char *(*fetch)(const char *build_id, void *ctx);
        void *ctx;
};
void uprobes_set_debug_lookup(const struct uprobes_debug_lookup *lookup);
/* Debug file by build-id alone (lowercase hex; the executable may be long
 * gone): /usr/lib/debug/.build-id/ in root, the directories, then fetch. */
char *uprobes_debug_file_by_build_id(const char *build_id, const char *root);
