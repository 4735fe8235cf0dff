/* plan: probe_plan_for_pid() / probe_plan_for_file(), the public entry
 * points. Opens the executable, runs both discovery routes (always both: with
 * symbols the vtable scan cross-checks them, without symbols it is all there
 * is), then orders the points and fills in what is missing and why. */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "plan_int.h"

const char *probe_kind_name(enum probe_kind kind)
{
        static const char *const names[PROBE_KIND_MAX] = {
                [PROBE_POLL] = "poll",
                [PROBE_POLL_RETURN] = "poll_return",
                [PROBE_SPAWN] = "spawn",
                [PROBE_COMPLETE] = "complete",
                [PROBE_WAKE] = "wake",
                [PROBE_PARK] = "park",
                [PROBE_UNPARK_RETURN] = "unpark_return",
                [PROBE_UNPARK] = "unpark",
                [PROBE_WORKER_RUN] = "worker_run",
                [PROBE_BLOCK_IN_PLACE] = "block_in_place",
        };

        return kind > 0 && kind < PROBE_KIND_MAX && names[kind] ? names[kind] : "unknown";
}

int uprobes_plan_add_missing(struct probe_plan *plan, enum probe_kind kind, const char *fmt, ...)
{
        struct probe_missing *m = realloc(plan->missing, (plan->n_missing + 1) * sizeof(*m));
        va_list ap;
        int r;

        if (!m)
                return -ENOMEM;
        plan->missing = m;
        m = &m[plan->n_missing];
        m->kind = kind;
        va_start(ap, fmt);
        r = vasprintf(&m->reason, fmt, ap);
        va_end(ap);
        if (r < 0)
                return -ENOMEM;
        plan->n_missing++;
        return 0;
}

size_t probe_plan_count(const struct probe_plan *plan, enum probe_kind kind, bool include_skipped)
{
        size_t n = 0;

        for (size_t i = 0; i < plan->n_points; i++)
                n += plan->points[i].kind == kind && (include_skipped || !plan->points[i].skipped);
        return n;
}

size_t probe_plan_task_polls(const struct probe_plan *plan)
{
        size_t n = 0;

        for (size_t i = 0; i < plan->n_points; i++)
                n += plan->points[i].kind == PROBE_POLL && !plan->points[i].blocking_task;
        return n;
}

static size_t poll_bodies(const struct probe_plan *plan, bool blocking_too)
{
        size_t n = 0;

        for (size_t i = 0; i < plan->n_points; i++)
                n += plan->points[i].kind == PROBE_POLL && plan->points[i].func_end &&
                     (blocking_too || !plan->points[i].blocking_task);
        return n;
}

size_t probe_plan_poll_bodies(const struct probe_plan *plan)
{
        return poll_bodies(plan, false);
}

size_t probe_plan_any_poll_bodies(const struct probe_plan *plan)
{
        return poll_bodies(plan, true);
}

static int by_kind_addr(const void *a, const void *b)
{
        const struct probe_point *x = a, *y = b;

        if (x->kind != y->kind)
                return x->kind < y->kind ? -1 : 1;
        return x->vaddr < y->vaddr ? -1 : x->vaddr > y->vaddr;
}

/* Why a kind has no point: depends on whether symbols were there at all. */
static int note_missing_kinds(struct probe_plan *plan)
{
        /* Each says what d9d really does instead (daemon/record/translate.c). */
        static const char *const fallback[PROBE_KIND_MAX] = {
                [PROBE_SPAWN] = "spawn = first sight of a task id at poll entry",
                [PROBE_COMPLETE] = "none: no terminate events",
                [PROBE_WAKE] = "none: no wake events (TaskSpawnEvent.instrumented is false); the task waker vtable was "
                              "not found either",
                [PROBE_PARK] = "park = a worker thread's voluntary switch-out (sched_switch) with no poll "
                               "open; needs the sched probes, intervals under the off-CPU minimum are only counted",
                [PROBE_UNPARK_RETURN] = "unpark = that thread's switch-in (sched_switch), with its CPU time "
                                        "and its wait for a CPU since its wakeup (the kernel's run_delay)",
                [PROBE_UNPARK] = "none needed: d9d writes no event from it",
                [PROBE_WORKER_RUN] = "none needed: a worker thread is one that polls runtime tasks",
                [PROBE_BLOCK_IN_PLACE] = "none: block_in_place is not observable",
        };

        for (int k = PROBE_SPAWN; k < PROBE_KIND_MAX; k++) {
                int r;

                if (probe_plan_count(plan, k, true))
                        continue;
                if (!plan->has_symbols)
                        r = uprobes_plan_add_missing(plan, k, "no symbols (stripped, no debug file found); fallback: %s",
                                             fallback[k]);
                else
                        r = uprobes_plan_add_missing(plan, k, "no matching symbol in this build (inlined, renamed, "
                                             "or this runtime flavour/feature is not linked in); fallback: %s",
                                             fallback[k]);
                if (r < 0)
                        return r;
        }
        return 0;
}

/* Runtime flavours the symbols show (multi-thread, current-thread). */
static void flavours(const struct probe_plan *plan, bool *mt, bool *ct)
{
        *mt = probe_plan_count(plan, PROBE_WORKER_RUN, true) > 0;
        *ct = false;
        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                if ((p->kind != PROBE_PARK && p->kind != PROBE_POLL) || !p->label)
                        continue;
                /* A poll label names the runtime only via its scheduler (v0) or a
                 * runtime-internal task such as multi-thread's worker Launch. */
                *ct |= p->kind == PROBE_PARK &&
                       (strstr(p->label, "current_thread") || strstr(p->label, "basic_scheduler"));
                *mt |= strstr(p->label, "multi_thread") || strstr(p->label, "thread_pool");
        }
}

/* bind_inner is generic over the scheduler only: one instance per flavour,
 * and release builds inline some of them. Say when spawns of a flavour will
 * not be seen by a probe (the loader then adds the first-sight fallback). */
static int note_partial_spawn(struct probe_plan *plan)
{
        size_t inner = 0, mt_inner = 0, ct_inner = 0;
        bool mt, ct;

        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                if (p->kind != PROBE_SPAWN || !p->label || !strstr(p->label, "bind_inner"))
                        continue;
                inner++;
                mt_inner += strstr(p->label, "multi_thread") != NULL;
                ct_inner += strstr(p->label, "current_thread") != NULL;
        }
        flavours(plan, &mt, &ct);
        if (!inner || inner >= (size_t)mt + (size_t)ct)
                return 0;
        return uprobes_plan_add_missing(plan, PROBE_SPAWN,
                                "OwnedTasks::bind_inner found for %zu of %d runtime flavours%s (the others are "
                                "inlined); fallback for those: first sight of a task id at poll entry",
                                inner, mt + ct,
                                mt_inner && !ct_inner ? " (multi-thread only)" :
                                ct_inner && !mt_inner ? " (current-thread only)" : "");
}

/* Kinds found but not attached by d9d: the plan says so instead of
 * counting them as attached (worker_run still tells the flavour). */
static int skip_unattached_kinds(struct plan_builder *b)
{
        for (size_t i = 0; i < b->n; i++) {
                struct probe_point *p = &b->pts[i];
                const char *why = p->kind == PROBE_UNPARK ? "d9d writes no event from it" :
                                  p->kind == PROBE_WORKER_RUN ? "worker threads are told by the tasks they poll" :
                                  p->kind == PROBE_BLOCK_IN_PLACE ? "d9d writes no event from it" : NULL;

                if (!why || p->skipped)
                        continue;
                p->skipped = true;
                free(p->skip_reason);
                if (asprintf(&p->skip_reason, "found, not attached: %s", why) < 0)
                        return -ENOMEM;
        }
        return 0;
}

static void count_routes(struct probe_plan *plan)
{
        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                if (p->kind != PROBE_POLL)
                        continue;
                plan->polls_by_symbols += !!(p->sources & PROBE_FROM_SYMBOLS);
                plan->polls_by_scan += !!(p->sources & PROBE_FROM_VTABLE_SCAN);
                plan->polls_in_both += (p->sources & 3) == 3;
        }
        plan->routes_agree = plan->has_symbols && plan->polls_by_symbols &&
                             plan->polls_by_symbols == plan->polls_by_scan &&
                             plan->polls_in_both == plan->polls_by_symbols;
}

static bool has_interp(const struct elf_image *img)
{
        size_t n;

        if (elf_getphdrnum(img->elf, &n) < 0)
                return false;
        for (size_t i = 0; i < n; i++) {
                GElf_Phdr ph;

                if (gelf_getphdr(img->elf, (int)i, &ph) && ph.p_type == PT_INTERP)
                        return true;
        }
        return false;
}

static char *describe_shape(const struct elf_image *img, const struct probe_plan *plan)
{
        char *s = NULL;
        bool mt, ct;

        flavours(plan, &mt, &ct);
        asprintf(&s, "%s, %s, %s, %s",
                 !plan->has_symbols ? "flavours unknown" : mt && ct ? "multi-thread+current-thread" :
                 mt ? "multi-thread" : ct ? "current-thread" : "no scheduler symbols",
                 plan->has_symbols ? (plan->debug_file ? "symbols from debug file" : "symbols") : "stripped",
                 !plan->has_symbols ? "mangling unknown" : plan->v0_mangling ? "v0" : "legacy",
                 img->e_type == ET_EXEC ? "non-PIE" : has_interp(img) ? "PIE" : "static-pie");
        return s;
}

static int plan_segments(const struct elf_image *img, struct probe_plan *plan)
{
        size_t n = img->n_segs < PROBE_SEGMENTS_MAX ? img->n_segs : PROBE_SEGMENTS_MAX;

        if (!(plan->segments = calloc(n ? n : 1, sizeof(*plan->segments))))
                return -ENOMEM;
        for (size_t i = 0; i < n; i++)
                plan->segments[i] = (struct probe_segment){ img->segs[i].vaddr, img->segs[i].offset,
                                                            img->segs[i].filesz, img->segs[i].flags & PF_X };
        plan->n_segments = n;
        plan->tls_size = img->tls_size;
        return 0;
}

static int plan_fill(struct plan_builder *b, struct probe_plan *plan, char **err_msg)
{
        int r;

        plan->build_id = d9_elf_build_id(b->img);
        plan->tokio_version = uprobes_tokio_version_detect(b->img);
        plan->has_symbols = b->st.from_symtab;
        plan->stripped = !b->st.from_symtab;
        plan->v0_mangling = b->st.any_v0;
        plan->debug_file = b->st.debug_path ? strdup(b->st.debug_path) : NULL;
        plan->scan_method = b->vs.method;
        plan->n_vtables = b->vs.n;
        plan->hdr_vtable_off = 16;
        plan->vtable_id_off = b->vs.id_slot >= 0 ? b->vs.id_slot * 8 : -1;
        plan->vtable_scheduler_off = b->vs.scheduler_slot >= 0 ? b->vs.scheduler_slot * 8 : -1;
        plan->vtable_trailer_off = b->vs.trailer_slot >= 0 ? b->vs.trailer_slot * 8 : -1;
        plan->dyn_future_poll_slot = 3;         /* dyn vtable: drop, size, align, poll */

        if ((r = uprobes_plan_symbol_route(b)) < 0 || (r = uprobes_plan_vtable_route(b)) < 0 ||
            (r = uprobes_plan_complete_route(b, plan)) < 0 ||
            (r = uprobes_plan_waker_route(b, plan)) < 0)
                return r;
        if (probe_plan_count(&(struct probe_plan){ .points = b->pts, .n_points = b->n }, PROBE_POLL, true) == 0) {
                unsigned major = 0, minor = 0;

                /* Its source paths may still name a Tokio (npm rome: 1.18.5,
                 * stripped, whose task vtables predate the layouts the scan
                 * reads): "not a Tokio binary" would be wrong there. */
                if (err_msg && plan->tokio_version &&
                    sscanf(plan->tokio_version, "%u.%u", &major, &minor) == 2 && major == 1 && minor < 24)
                        asprintf(err_msg, "%s is built with Tokio %s, older than d9d reads: no "
                                 "tokio::runtime::task::raw::poll symbol, and no task vtable of a layout the scan "
                                 "knows (Tokio 1.24 to 1.53 are tested)", b->img->path, plan->tokio_version);
                else if (err_msg && plan->tokio_version)
                        asprintf(err_msg, "%s is built with Tokio %s, but d9d found no "
                                 "tokio::runtime::task::raw::poll symbol and no task vtable in it",
                                 b->img->path, plan->tokio_version);
                else if (err_msg)
                        asprintf(err_msg, "%s is not a Tokio binary: no tokio::runtime::task::raw::poll "
                                 "symbol and no task vtable found", b->img->path);
                return -ENOTSUP;
        }
        uprobes_plan_find_dyn_futures(b);
        if ((r = uprobes_plan_dyn_names(b, plan)) < 0 || (r = plan_segments(b->img, plan)) < 0)
                return r;
        uprobes_plan_poll_bounds(b);
        if ((r = uprobes_plan_harness_sites(b, plan)) < 0 || (r = uprobes_plan_label_polls(b)) < 0 ||
            (r = uprobes_plan_return_sites(b, plan)) < 0 || (r = uprobes_plan_classify(b)) < 0 ||
            (r = skip_unattached_kinds(b)) < 0)
                return r;
        qsort(b->pts, b->n, sizeof(*b->pts), by_kind_addr);
        for (size_t i = 0; i < b->n; i++)
                b->pts[i].cookie = i;
        plan->points = b->pts;
        plan->n_points = b->n;
        b->pts = NULL;
        count_routes(plan);
        if (b->vs.n == 0 && (r = uprobes_plan_add_missing(plan, PROBE_POLL, "vtable scan found no task vtables: "
                                                  "task ids cannot be read (vtable_id_off unknown)")) < 0)
                return r;
        if ((r = note_missing_kinds(plan)) < 0 || (r = note_partial_spawn(plan)) < 0)
                return r;
        /* Without symbols the scan is the only route: say which tasks it leaves out. */
        if (!plan->has_symbols && plan->completes_unfound &&
            (r = uprobes_plan_add_missing(plan, PROBE_COMPLETE, "Harness::complete not singled out in the code of "
                                  "%zu of %zu task vtables: tasks of those types get no terminate event",
                                  plan->completes_unfound, plan->n_vtables)) < 0)
                return r;
        plan->shape = describe_shape(b->img, plan);
        return 0;
}

/* Takes fd over: the plan keeps it (exe_fd) for the attach. */
static int plan_build(int fd, const char *path, const char *root, struct probe_plan **out, char **err_msg)
{
        struct plan_builder b = { 0 };
        struct probe_plan *plan;
        struct timespec t0, t1;
        struct stat st;
        int r;

        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (err_msg)
                *err_msg = NULL;
        plan = calloc(1, sizeof(*plan));
        if (!plan) {
                close(fd);
                return -ENOMEM;
        }
        plan->exe_fd = fd;
        plan->exe_path = strdup(path);
        if (fstat(fd, &st) == 0)
                plan->planned_ctime = st.st_ctim;
        r = asprintf(&plan->attach_path, "/proc/self/fd/%d", fd) < 0 ? -ENOMEM : 0;
        if (r == 0) {
                int copy = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                r = copy < 0 ? -errno : d9_elf_image_open_fd(copy, path, &b.img, err_msg);
        }
        if (r == 0)
                r = uprobes_symtab_load(b.img, root, &b.st);
        if (r == 0)
                r = uprobes_vtable_scan_run(b.img, &b.vs);
        if (r == 0)
                r = plan_fill(&b, plan, err_msg);
        for (size_t i = 0; b.pts && i < b.n; i++) {
                free(b.pts[i].label);
                free(b.pts[i].skip_reason);
                free(b.pts[i].insn_desc);
                free(b.pts[i].note);
        }
        free(b.pts);
        free(b.meta);
        free(b.known.v);
        uprobes_symtab_free(&b.st);
        uprobes_vtable_scan_free(&b.vs);
        d9_elf_image_free(b.img);
        if (r == -E2BIG && err_msg && !*err_msg)
                asprintf(err_msg, "%s has more function symbols or symbol name bytes than d9d reads "
                         "(4M symbols, 4x the string table)", path);
        if (r < 0) {
                if (err_msg && !*err_msg)
                        asprintf(err_msg, "cannot build a probe plan for %s: %s", path, strerror(-r));
                probe_plan_free(plan);
                return r;
        }
        clock_gettime(CLOCK_MONOTONIC, &t1);
        plan->elapsed_ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
        *out = plan;
        return 0;
}

int probe_target_file_open(const char *path, char **display, char **err_msg)
{
        int fd = d9_target_file_open(path);

        if (err_msg)
                *err_msg = NULL;
        if (fd < 0) {
                if (err_msg)
                        asprintf(err_msg, fd == -EBADFD ? "%s is not a regular file" : "cannot open %s: %s",
                                 path, strerror(-fd));
                return fd;
        }
        if (display && !(*display = strdup(path))) {
                close(fd);
                return -ENOMEM;
        }
        return fd;
}

int probe_plan_for_file(const char *path, struct probe_plan **out, char **err_msg)
{
        int fd = probe_target_file_open(path, NULL, err_msg);

        return fd < 0 ? fd : plan_build(fd, path, "", out, err_msg);
}

int probe_plan_for_fd(int fd, const char *display, struct probe_plan **out, char **err_msg)
{
        if (err_msg)
                *err_msg = NULL;
        return plan_build(fd, display, "", out, err_msg);
}

int probe_plan_for_fd_in_root(int fd, const char *display, const char *root, struct probe_plan **out,
                              char **err_msg)
{
        if (err_msg)
                *err_msg = NULL;
        return plan_build(fd, display, root, out, err_msg);
}

int probe_target_exe_open(int pidfd, pid_t pid, char **display, char **err_msg)
{
        if (err_msg)
                *err_msg = NULL;
        return uprobes_target_exe_open(pidfd, pid, display, err_msg);
}

int probe_plan_for_pid(pid_t pid, struct probe_plan **out, char **err_msg)
{
        return probe_plan_for_pidfd(-1, pid, out, err_msg);
}

int probe_plan_for_pidfd(int pidfd, pid_t pid, struct probe_plan **out, char **err_msg)
{
        _cleanup_free_ char *path = NULL;
        char root[64];
        int r, fd;

        if (err_msg)
                *err_msg = NULL;
        fd = uprobes_target_exe_open(pidfd, pid, &path, err_msg);
        if (fd < 0)
                return fd;
        snprintf(root, sizeof(root), "/proc/%d/root", pid);
        r = plan_build(fd, path, root, out, err_msg);
        if (r < 0 && err_msg && *err_msg) {
                char *with_pid = NULL;

                if (asprintf(&with_pid, "PID %d: %s", pid, *err_msg) >= 0) {
                        free(*err_msg);
                        *err_msg = with_pid;
                }
        }
        return r;
}

void probe_plan_free(struct probe_plan *plan)
{
        if (!plan)
                return;
        for (size_t i = 0; i < plan->n_points; i++) {
                free(plan->points[i].label);
                free(plan->points[i].skip_reason);
                free(plan->points[i].insn_desc);
                free(plan->points[i].note);
        }
        for (size_t i = 0; i < plan->n_missing; i++)
                free(plan->missing[i].reason);
        free(plan->points);
        free(plan->missing);
        if (plan->exe_fd > 0)
                close(plan->exe_fd);
        free(plan->attach_path);
        free(plan->exe_path);
        free(plan->build_id);
        free(plan->tokio_version);
        free(plan->shape);
        free(plan->debug_file);
        free(plan->segments);
        free(plan->dyn_fns);
        free(plan->dyn_fn_text);
        free(plan->harness_sites);
        free(plan);
}
