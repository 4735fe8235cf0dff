/* bpf_loader.c: load d9's BPF objects once, attach and detach targets.
 *
 * Two skeletons: d9_sched (scheduler/perf/exit programs, owner of every
 * map) and d9_tokio (uprobes, reusing d9_sched's maps by fd). Per target:
 * a slot for drop counters, a ring buffer inserted into d9_rings, a config
 * in d9_targets, and one link per probe kind (uprobe_multi) or per point
 * (classic uprobes, the fallback for kernels without uprobe_multi).
 *
 * Loading (the verifier: 10-650 ms) happens once, possibly long before the
 * first target; the system-wide scheduler and sampling programs are
 * attached ("armed") only while there is a target (from the first attach
 * to the release of the last slot), so an idle d9d costs nothing per
 * context switch or CPU, before its first target and after its last.
 * Attaching and stopping a target may run on a worker thread while the
 * drain loop reads other targets: the slots and the teardown list are
 * under bpf->lock. */
#include "bpf/bpf_loader.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/perf_event.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/btf.h>
#include <bpf/libbpf.h>

#include "bpf/bpf_pidns.h"
#include "bpf/bpf_resume.h"
#include "bpf/bpf_sleepers.h"
#include "bpf/d9_wk_search.h"
#include "d9_sched.skel.h"
#include "d9_tokio.skel.h"
#include "uprobes/uprobes.h"
#include "proto/d9proto.h"

#define D9_DEFAULT_RING_BYTES (8u << 20)
#define D9_DEFAULT_SAMPLE_HZ 99

struct d9_bpf {
        struct d9_sched *sched;
        struct d9_tokio *tokio;
        struct bpf_link **sched_links;
        size_t n_sched_links;
        int *perf_fds;
        size_t n_perf_fds;
        bool multi;
        size_t ring_bytes;
        int ring_tmpl_fd;
        unsigned sample_hz;
        bool no_cpu_sampling;
        pthread_mutex_t lock;           /* slot_used, teardowns, armed */
        bool armed;                     /* the system-wide links are attached */
        bool slot_used[D9_MAX_TARGETS];
        uint32_t slot_tgid[D9_MAX_TARGETS];     /* its bit in d9_tgid_bits, 0: none */
        struct teardown *teardowns;     /* released targets whose links are still going */
};

/* The slow half of a detach: destroying the uprobe links (each waits for
 * an RCU-tasks grace period, tens of ms). It runs on its own thread once
 * the target records nothing more, so a detach returns without waiting for
 * it. The slot stays taken until the thread is done, so a new target can
 * never share drop counters with links still alive. */
struct teardown {
        struct teardown *next;
        pthread_t th;
        bool started;                   /* th is joinable */
        bool done;                      /* set by th (atomic) */
        pid_t pid;
        uint32_t slot;                  /* UINT32_MAX until the target lets go */
        struct bpf_link **links;
        size_t n_links;
};

static void teardowns_reap(struct d9_bpf *bpf, bool wait_all, pid_t pid);
static void destroy_links(struct bpf_link **links, size_t n);
static int links_release(struct d9_bpf *bpf, pid_t pid, struct bpf_link **links, size_t n);

struct d9_bpf_target {
        struct d9_bpf *bpf;
        pid_t pid;                      /* in d9d's pid namespace: attach, /proc */
        uint32_t kernel_tgid;           /* task->tgid: the key of every BPF map */
        uint32_t slot;
        int ring_fd;
        struct ring_buffer *rb;
        struct bpf_link **links;
        size_t n_links, cap_links;
        size_t n_attached;
        enum d9_poll_end poll_end;
        uint64_t attach_ns;
        uint64_t ring_insert_ns;        /* the d9_rings update alone */
        struct teardown *td;            /* set once stopped */
        bool in_rings, in_targets;      /* this target's entries were inserted (not another's) */
        d9_bpf_record_fn on_record;
        void *ctx;
        bool unpark_at_resume;          /* no uretprobe on the park functions */
        /* wakes_switchable: the wake points, where, and their own links
         * (none while off) */
        struct point_set *wake_set;
        char *wake_path;
        struct bpf_link **wake_links;
        size_t n_wake_links;
        /* d9_bpf_target_set_window: the window's links (none while closed) */
        struct bpf_link **win_links;
        size_t n_win_links, n_win_attached;
        uint64_t uprobes_on_ns;         /* when the late uprobes began to record */
        uint64_t since_ns;              /* its d9_target_cfg's since_ts */
        uint64_t quiesced_ns;           /* when its programs stopped writing (0: not yet) */
};

static void set_err(char **err, const char *fmt, ...)
{
        va_list ap;

        if (!err)
                return;
        free(*err);
        *err = NULL;
        va_start(ap, fmt);
        if (vasprintf(err, fmt, ap) < 0)
                *err = NULL;
        va_end(ap);
}

/* The same test libbpf uses: a kernel with uprobe_multi *and* the fixed
 * process (not thread) pid filter rejects pid -1 on a bogus path with
 * EINVAL. Older kernels fail the load or answer differently. */
static bool probe_uprobe_multi(void)
{
        struct bpf_insn insns[] = {
                { .code = 0xb7, .dst_reg = 0, .imm = 0 },      /* r0 = 0 */
                { .code = 0x95 },                               /* exit */
        };
        LIBBPF_OPTS(bpf_prog_load_opts, popts,
                    .expected_attach_type = BPF_TRACE_UPROBE_MULTI);
        LIBBPF_OPTS(bpf_link_create_opts, lopts);
        unsigned long offset = 0;
        int prog_fd, link_fd, err;

        prog_fd = bpf_prog_load(BPF_PROG_TYPE_KPROBE, "d9_probe_umulti", "GPL",
                                insns, 2, &popts);
        if (prog_fd < 0)
                return false;
        lopts.uprobe_multi.path = "/";
        lopts.uprobe_multi.offsets = &offset;
        lopts.uprobe_multi.cnt = 1;
        lopts.uprobe_multi.pid = -1;
        link_fd = bpf_link_create(prog_fd, -1, BPF_TRACE_UPROBE_MULTI, &lopts);
        err = -errno;
        if (link_fd >= 0)
                close(link_fd);
        close(prog_fd);
        return link_fd < 0 && err == -EINVAL;
}

static int push_sched_link(struct d9_bpf *bpf, struct bpf_link *link)
{
        struct bpf_link **n;

        if (!link)
                return -errno;
        n = realloc(bpf->sched_links, (bpf->n_sched_links + 1) * sizeof(*n));
        if (!n) {
                bpf_link__destroy(link);
                return -ENOMEM;
        }
        bpf->sched_links = n;
        bpf->sched_links[bpf->n_sched_links++] = link;
        return 0;
}

/* System-wide CPU-clock events at `hz`, one per CPU, running prog. The
 * BPF program keeps only samples of target threads. */
static int open_cpu_sampling(struct d9_bpf *bpf, struct bpf_program *prog, unsigned hz)
{
        int ncpu = libbpf_num_possible_cpus();
        int r;

        if (ncpu < 0)
                return ncpu;
        bpf->perf_fds = calloc((size_t)ncpu, sizeof(int));
        if (!bpf->perf_fds)
                return -ENOMEM;
        for (int cpu = 0; cpu < ncpu; cpu++) {
                struct perf_event_attr attr = {
                        .type = PERF_TYPE_SOFTWARE,
                        .size = sizeof(attr),
                        .config = PERF_COUNT_SW_CPU_CLOCK,
                        .freq = 1,
                        .sample_freq = hz,
                };
                int fd = (int)syscall(SYS_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);

                if (fd < 0) {
                        if (errno == ENODEV)    /* possible but offline */
                                continue;
                        return -errno;
                }
                bpf->perf_fds[bpf->n_perf_fds++] = fd;
                r = push_sched_link(bpf, bpf_program__attach_perf_event(prog, fd));
                if (r < 0)
                        return r;
        }
        return 0;
}

/* The inner map of d9_rings fixes every target ring's size: give libbpf a
 * template of the configured size (the BPF-side definition is a stand-in).
 * libbpf borrows the fd; it is only needed until both objects are loaded. */
static int set_ring_template(struct d9_bpf *bpf, struct bpf_map *outer)
{
        if (bpf->ring_tmpl_fd < 0) {
                bpf->ring_tmpl_fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "d9_ring_tmpl", 0,
                                                   0, (uint32_t)bpf->ring_bytes, NULL);
                if (bpf->ring_tmpl_fd < 0)
                        return -errno;
        }
        return bpf_map__set_inner_map_fd(outer, bpf->ring_tmpl_fd);
}

static int load_sched(struct d9_bpf *bpf, uint64_t run_period_ns)
{
        int ncpu, r;

        bpf->sched = d9_sched__open();
        if (!bpf->sched)
                return -errno;
        r = set_ring_template(bpf, bpf->sched->maps.d9_rings);
        if (r < 0)
                return r;
        bpf->sched->rodata->d9_run_period_ns = run_period_ns;
        /* The run ticks' timers: one per possible CPU, keyed by its number. */
        ncpu = libbpf_num_possible_cpus();
        if (ncpu < 0)
                return ncpu;
        r = bpf_map__set_max_entries(bpf->sched->maps.d9_run_timers, (uint32_t)ncpu);
        if (r < 0)
                return r;
        bpf->sched->rodata->d9_resume_by = d9_bpf_resume_way();
        /* Only where it is the way: it runs at every return from __schedule,
         * and an older kernel has no such tracepoint to load it for. */
        bpf_program__set_autoload(bpf->sched->progs.d9_sched_resumed,
                                  bpf->sched->rodata->d9_resume_by == D9_RESUME_SCHED_EXIT);
        return d9_sched__load(bpf->sched);
}

/* Back to a loaded, idle state; caller holds bpf->lock. */
static void disarm_locked(struct d9_bpf *bpf)
{
        for (size_t i = 0; i < bpf->n_sched_links; i++)
                bpf_link__destroy(bpf->sched_links[i]);
        for (size_t i = 0; i < bpf->n_perf_fds; i++)
                close(bpf->perf_fds[i]);
        free(bpf->perf_fds);
        bpf->perf_fds = NULL;
        bpf->n_sched_links = bpf->n_perf_fds = 0;
        bpf->armed = false;
}

/* The system-wide programs, with the first target: they run on every
 * context switch of the machine. Caller holds bpf->lock. */
static int arm_locked(struct d9_bpf *bpf)
{
        struct bpf_program *progs[] = {
                bpf->sched->progs.d9_sched_switch,
                bpf->sched->progs.d9_proc_exit, bpf->sched->progs.d9_proc_exec,
        };
        int r = 0;

        if (bpf->armed)
                return 0;
        for (size_t i = 0; r == 0 && i < sizeof(progs) / sizeof(progs[0]); i++)
                r = push_sched_link(bpf, bpf_program__attach(progs[i]));
        if (r == 0 && bpf_program__autoload(bpf->sched->progs.d9_sched_resumed))
                r = push_sched_link(bpf, bpf_program__attach(bpf->sched->progs.d9_sched_resumed));
        if (r == 0 && !bpf->no_cpu_sampling)
                r = open_cpu_sampling(bpf, bpf->sched->progs.d9_cpu_sample, bpf->sample_hz);
        bpf->armed = r == 0;
        if (r < 0)
                disarm_locked(bpf);
        return r;
}

/* With no slot in use (no target, no teardown holding one), back to
 * idle: a failed first attach, a detach, or a reaped teardown. */
static void disarm_if_unused(struct d9_bpf *bpf)
{
        bool used = false;

        pthread_mutex_lock(&bpf->lock);
        for (uint32_t i = 0; i < D9_MAX_TARGETS && !used; i++)
                used = bpf->slot_used[i];
        if (!used)
                disarm_locked(bpf);
        pthread_mutex_unlock(&bpf->lock);
}

/* The tokio object writes into d9_sched's maps: same fds, not copies. */
static int load_tokio(struct d9_bpf *bpf)
{
        struct bpf_map *shared[][2] = {
                { bpf->sched->maps.d9_targets, NULL },
                { bpf->sched->maps.d9_rings, NULL },
                { bpf->sched->maps.d9_drops, NULL },
                { bpf->sched->maps.d9_threads, NULL },
        };
        struct bpf_program *prog;
        int r;

        bpf->tokio = d9_tokio__open();
        if (!bpf->tokio)
                return -errno;
        shared[0][1] = bpf->tokio->maps.d9_targets;
        shared[1][1] = bpf->tokio->maps.d9_rings;
        shared[2][1] = bpf->tokio->maps.d9_drops;
        shared[3][1] = bpf->tokio->maps.d9_threads;
        r = set_ring_template(bpf, bpf->tokio->maps.d9_rings);
        for (size_t i = 0; r == 0 && i < sizeof(shared) / sizeof(shared[0]); i++)
                r = bpf_map__reuse_fd(shared[i][1], bpf_map__fd(shared[i][0]));
        if (r < 0)
                return r;
        if (bpf->multi)
                bpf_object__for_each_program(prog, bpf->tokio->obj)
                        bpf_program__set_expected_attach_type(prog, BPF_TRACE_UPROBE_MULTI);
        return d9_tokio__load(bpf->tokio);
}

static int libbpf_quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
        return 0;
}

static int libbpf_warnings(enum libbpf_print_level level, const char *fmt, va_list ap)
{
        return level == LIBBPF_WARN ? vfprintf(stderr, fmt, ap) : 0;
}

int d9_bpf_open(const struct d9_bpf_opts *opts, struct d9_bpf **out)
{
        struct d9_bpf_opts none = { 0 };
        struct d9_bpf *bpf;
        int r;

        if (!opts)
                opts = &none;
        bpf = calloc(1, sizeof(*bpf));
        if (!bpf)
                return -ENOMEM;
        bpf->ring_bytes = opts->ring_bytes ? opts->ring_bytes : D9_DEFAULT_RING_BYTES;
        bpf->ring_tmpl_fd = -1;
        bpf->sample_hz = opts->sample_hz ? opts->sample_hz : D9_DEFAULT_SAMPLE_HZ;
        bpf->no_cpu_sampling = opts->no_cpu_sampling;
        pthread_mutex_init(&bpf->lock, NULL);
        libbpf_set_print(opts->libbpf_log ? libbpf_warnings : libbpf_quiet);
        bpf->multi = !opts->force_per_probe && probe_uprobe_multi();
        r = load_sched(bpf, (uint64_t)(opts->run_sample_us ? opts->run_sample_us : D9_RUN_SAMPLE_US_DEFAULT) * 1000);
        if (r == 0)
                r = load_tokio(bpf);
        if (bpf->ring_tmpl_fd >= 0)
                close(bpf->ring_tmpl_fd);
        bpf->ring_tmpl_fd = -1;
        if (r < 0) {
                d9_bpf_close(bpf);
                return r;
        }
        *out = bpf;
        return 0;
}

void d9_bpf_close(struct d9_bpf *bpf)
{
        if (!bpf)
                return;
        teardowns_reap(bpf, true, 0);
        for (size_t i = 0; i < bpf->n_sched_links; i++)
                bpf_link__destroy(bpf->sched_links[i]);
        for (size_t i = 0; i < bpf->n_perf_fds; i++)
                close(bpf->perf_fds[i]);
        free(bpf->sched_links);
        free(bpf->perf_fds);
        d9_tokio__destroy(bpf->tokio);
        d9_sched__destroy(bpf->sched);
        pthread_mutex_destroy(&bpf->lock);
        free(bpf);
}

bool d9_bpf_uses_uprobe_multi(const struct d9_bpf *bpf)
{
        return bpf->multi;
}

/* ---- per target ---------------------------------------------------- */

static int push_link(struct d9_bpf_target *t, struct bpf_link *link)
{
        if (!link)
                return -errno;
        if (t->n_links == t->cap_links) {
                size_t cap = t->cap_links ? 2 * t->cap_links : 16;
                struct bpf_link **n = realloc(t->links, cap * sizeof(*n));

                if (!n) {
                        bpf_link__destroy(link);
                        return -ENOMEM;
                }
                t->links = n;
                t->cap_links = cap;
        }
        t->links[t->n_links++] = link;
        return 0;
}

/* Where the BPF program finds its value: the plan's value_from, or the
 * documented default of the kind when the plan leaves it open. */
static uint64_t point_arg(const struct probe_point *p)
{
        switch (p->value_from) {
        case PROBE_ARG_RET: return D9_ARG_RET;
        case PROBE_ARG0: return D9_ARG_0;
        case PROBE_ARG1: return D9_ARG_1;
        case PROBE_ARG0_DEREF: return D9_ARG_0_DEREF;
        case PROBE_ARG_NONE: break;
        }
        switch (p->kind) {
        case PROBE_SPAWN: return D9_ARG_RET;
        case PROBE_PARK: return D9_ARG_0_DEREF;
        case PROBE_POLL: case PROBE_COMPLETE: case PROBE_WAKE: return D9_ARG_0;
        default: return D9_ARG_NONE;
        }
}

/* A boxed dyn future's vtable offset, for poll entries that have one. */
static uint64_t point_dyn_off(const struct probe_point *p, enum d9_point what)
{
        if (what != D9_POINT_POLL || !p->boxed_dyn || p->dyn_vtable_hdr_off > 0xffff)
                return 0;
        return p->dyn_vtable_hdr_off;
}

/* The uprobe points of one target, entries and returns apart: each set
 * becomes one uprobe_multi link (or one link per point without it). */
struct point_set {
        unsigned long *offs;
        __u64 *cookies;
        size_t n;
};

static void point_sets_free(struct point_set sets[2])
{
        for (int i = 0; i < 2; i++) {
                free(sets[i].offs);
                free(sets[i].cookies);
        }
}

/* Which set a collected point goes to. */
enum collect_as {
        AS_POINT,               /* its own uretprobe flag picks */
        AS_RETURN,              /* the return set (poll end by uretprobe on raw::poll's entry) */
        AS_RETURN_BLOCKING,     /* that, for blocking-pool task points only */
};

/* Add every non-skipped point of `kind` as `what`. */
static void collect(struct point_set sets[2], const struct probe_plan *plan,
                    enum probe_kind kind, enum d9_point what, enum collect_as how)
{
        bool as_ret = how != AS_POINT;

        for (size_t i = 0; i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];
                struct point_set *set;

                if (p->kind != kind || p->skipped || (how == AS_RETURN_BLOCKING && !p->blocking_task))
                        continue;
                enum d9_point as = what == D9_POINT_POLL && p->blocking_task ? D9_POINT_POLL_BLOCKING : what;

                set = &sets[as_ret || p->uretprobe];
                set->offs[set->n] = p->file_offset;
                set->cookies[set->n++] = (p->cookie & D9_COOKIE_MASK) |
                                         (point_dyn_off(p, what) << D9_COOKIE_DYN_SHIFT) |
                                         ((__u64)as << D9_COOKIE_KIND_SHIFT) |
                                         (point_arg(p) << D9_COOKIE_ARG_SHIFT);
        }
}

static int attach_set(struct d9_bpf_target *t, const char *path, const struct point_set *set,
                      bool ret)
{
        struct bpf_program *prog = t->bpf->tokio->progs.d9_tokio_probe;
        int r = 0;

        if (set->n == 0)
                return 0;
        if (t->bpf->multi) {
                LIBBPF_OPTS(bpf_uprobe_multi_opts, mo, .offsets = set->offs,
                            .cookies = set->cookies, .cnt = set->n, .retprobe = ret);

                r = push_link(t, bpf_program__attach_uprobe_multi(prog, t->pid, path, NULL,
                                                                  &mo));
        }
        for (size_t i = 0; !t->bpf->multi && r == 0 && i < set->n; i++) {
                LIBBPF_OPTS(bpf_uprobe_opts, uo, .bpf_cookie = set->cookies[i],
                            .retprobe = ret);

                r = push_link(t, bpf_program__attach_uprobe_opts(prog, t->pid, path,
                                                                 set->offs[i], &uo));
        }
        if (r == 0)
                t->n_attached += set->n;
        return r;
}

enum d9_poll_end d9_bpf_poll_end_for(const struct probe_plan *plan, unsigned probes, enum d9_poll_end asked)
{
        if (asked != D9_POLL_END_AUTO)
                return asked;
        if ((probes & D9_PROBE_PARK) && plan && probe_plan_count(plan, PROBE_PARK, false) > 0)
                return D9_POLL_END_ENTRY_ONLY;
        return D9_POLL_END_URETPROBE;
}

size_t d9_bpf_poll_end_uretprobes(const struct probe_plan *plan, unsigned probes)
{
        enum d9_poll_end end = d9_bpf_poll_end_for(plan, probes, D9_POLL_END_AUTO);
        size_t n = 0;

        for (size_t i = 0; plan && (probes & D9_PROBE_POLL) && i < plan->n_points; i++) {
                const struct probe_point *p = &plan->points[i];

                n += p->kind == PROBE_POLL && !p->skipped &&
                     (end == D9_POLL_END_URETPROBE || (end == D9_POLL_END_ENTRY_ONLY && p->blocking_task));
        }
        return n;
}

static int attach_uprobes(struct d9_bpf_target *t, const struct probe_plan *plan,
                          unsigned probes, char **err)
{
        /* Each point lands in at most one set, and poll points at most twice. */
        size_t cap = 2 * plan->n_points + 1;
        struct point_set sets[2] = {
                { calloc(cap, sizeof(unsigned long)), calloc(cap, sizeof(__u64)), 0 },
                { calloc(cap, sizeof(unsigned long)), calloc(cap, sizeof(__u64)), 0 },
        };
        int r = -ENOMEM;

        if (!sets[0].offs || !sets[0].cookies || !sets[1].offs || !sets[1].cookies)
                goto out;
        if (probes & D9_PROBE_POLL) {
                collect(sets, plan, PROBE_POLL, D9_POINT_POLL, AS_POINT);
                if (t->poll_end == D9_POLL_END_URETPROBE)
                        collect(sets, plan, PROBE_POLL, D9_POINT_POLL_END, AS_RETURN);
                /* A blocking-pool thread waits for its next job on a condvar,
                 * no park point: an entry-only job would end only at the next
                 * job's start, its thread's idle time counted as its own. */
                if (t->poll_end == D9_POLL_END_ENTRY_ONLY)
                        collect(sets, plan, PROBE_POLL, D9_POINT_POLL_END, AS_RETURN_BLOCKING);
                if (t->poll_end == D9_POLL_END_RETSITES)
                        collect(sets, plan, PROBE_POLL_RETURN, D9_POINT_POLL_END, AS_POINT);
        }
        if (probes & D9_PROBE_SPAWN)
                collect(sets, plan, PROBE_SPAWN, D9_POINT_SPAWN, AS_POINT);
        if (probes & D9_PROBE_TERMINATE)
                collect(sets, plan, PROBE_COMPLETE, D9_POINT_TERMINATE, AS_POINT);
        if ((probes & D9_PROBE_WAKE) && !t->wake_set)
                collect(sets, plan, PROBE_WAKE, D9_POINT_WAKE, AS_POINT);
        if (t->wake_set) {
                struct point_set ws[2] = {
                        *t->wake_set,
                        { calloc(cap, sizeof(unsigned long)), calloc(cap, sizeof(__u64)), 0 },
                };

                if (!ws[1].offs || !ws[1].cookies) {
                        free(ws[1].offs);
                        free(ws[1].cookies);
                        goto out;
                }
                collect(ws, plan, PROBE_WAKE, D9_POINT_WAKE, AS_POINT);
                *t->wake_set = ws[0];
                t->n_attached += ws[0].n;
                free(ws[1].offs);
                free(ws[1].cookies);
        }
        if (probes & D9_PROBE_PARK) {
                collect(sets, plan, PROBE_PARK, D9_POINT_PARK, AS_POINT);
                if (!t->unpark_at_resume)
                        collect(sets, plan, PROBE_UNPARK_RETURN, D9_POINT_UNPARK, AS_POINT);
        }
        /* Returns first: a poll entered between the two attaches must not
         * miss its end (an end without a start is ignored in BPF). */
        /* The planned inode itself (see probe_plan.exe_fd), not a path. */
        const char *path = plan->attach_path ? plan->attach_path : plan->exe_path;

        r = attach_set(t, path, &sets[1], true);
        if (r == 0)
                r = attach_set(t, path, &sets[0], false);
        if (r == 0 && t->wake_set && !(t->wake_path = strdup(path)))
                r = -ENOMEM;
        if (r == 0 && t->wake_set)
                r = d9_bpf_target_set_wakes(t, true);
        if (r < 0)
                set_err(err, "cannot attach %zu Tokio probes to PID %d (%s): %s",
                        sets[0].n + sets[1].n, t->pid, plan->exe_path, strerror(-r));
out:
        point_sets_free(sets);
        return r;
}

/* d9_tgid_bits (d9_sched.bpf.c): set before the target's config goes in,
 * cleared when its slot is released and no other live slot's tgid shares
 * the bit. BPF reads the words without a lock; a bit set late or cleared
 * early only moves a target's first or last event by the attach or the
 * detach itself. Caller holds bpf->lock. */
static void tgid_bit_set_locked(struct d9_bpf *bpf, uint32_t slot, uint32_t tgid)
{
        __u64 *words = bpf->sched->bss->d9_tgid_bits;

        bpf->slot_tgid[slot] = tgid;
        __atomic_fetch_or(&words[(tgid / 64) % D9_TGID_BITS_WORDS], 1ull << (tgid % 64), __ATOMIC_RELEASE);
}

static void slot_release_locked(struct d9_bpf *bpf, uint32_t slot)
{
        __u64 *words = bpf->sched->bss->d9_tgid_bits;
        uint32_t tgid = bpf->slot_tgid[slot], word = (tgid / 64) % D9_TGID_BITS_WORDS;
        __u64 bit = 1ull << (tgid % 64);
        bool shared = false;

        bpf->slot_used[slot] = false;
        bpf->slot_tgid[slot] = 0;
        if (!tgid)
                return;
        for (uint32_t i = 0; i < D9_MAX_TARGETS && !shared; i++) {
                uint32_t other = bpf->slot_tgid[i];

                shared = other && (other / 64) % D9_TGID_BITS_WORDS == word && (1ull << (other % 64)) == bit;
        }
        if (!shared)
                __atomic_fetch_and(&words[word], ~bit, __ATOMIC_RELEASE);
}

static int alloc_slot(struct d9_bpf *bpf, uint32_t *slot)
{
        for (uint32_t i = 0; i < D9_MAX_TARGETS; i++) {
                if (!bpf->slot_used[i]) {
                        bpf->slot_used[i] = true;
                        *slot = i;
                        return 0;
                }
        }
        return -ENOSPC;
}

/* A per-CPU counter map's row for one target slot: zeroed at attach (the
 * slot may have served an earlier target), summed over CPUs when read. */
static int percpu_row_zero(struct bpf_map *map, uint32_t slot)
{
        size_t size = bpf_map__value_size(map);
        int ncpu = libbpf_num_possible_cpus();
        void *zeros;
        int r;

        if (ncpu < 0)
                return ncpu;
        zeros = calloc((size_t)ncpu, size);
        if (!zeros)
                return -ENOMEM;
        r = bpf_map__update_elem(map, &slot, sizeof(slot), zeros, (size_t)ncpu * size, BPF_ANY);
        free(zeros);
        return r;
}

/* Sums n_cols u64 columns of the row over CPUs into sum[]. */
static int percpu_row_sum(struct bpf_map *map, uint32_t slot, uint64_t *sum, size_t n_cols)
{
        size_t size = bpf_map__value_size(map);
        int ncpu = libbpf_num_possible_cpus();
        uint64_t *v;
        int r;

        if (ncpu < 0)
                return ncpu;
        if (size != n_cols * sizeof(*v))
                return -EINVAL;
        v = calloc((size_t)ncpu, size);
        if (!v)
                return -ENOMEM;
        r = bpf_map__lookup_elem(map, &slot, sizeof(slot), v, (size_t)ncpu * size, 0);
        memset(sum, 0, size);
        for (int i = 0; r == 0 && i < ncpu; i++)
                for (size_t c = 0; c < n_cols; c++)
                        sum[c] += v[(size_t)i * n_cols + c];
        free(v);
        return r;
}

/* Task-id layout: the caller's, else the plan's. False if neither has one. */
static bool layout_of(const struct probe_plan *plan, const struct d9_bpf_target_opts *o,
                      struct d9_target_cfg *cfg)
{
        uint64_t vt = o->header_vtable_off, id = o->vtable_id_off_slot;

        if ((!vt || !id) && plan && plan->vtable_id_off > 0) {
                vt = plan->hdr_vtable_off;
                id = (uint64_t)plan->vtable_id_off;
        }
        if (cfg) {
                cfg->header_vtable_off = vt;
                cfg->vtable_id_off_slot = id;
                /* The scheduler's slot only with the plan's own layout. */
                cfg->vtable_sched_off_slot = plan && id == (uint64_t)plan->vtable_id_off &&
                                                     plan->vtable_scheduler_off > 0 ?
                                                     (uint64_t)plan->vtable_scheduler_off : 0;
        }
        return vt && id;
}

static int deliver_record(void *ctx, void *data, size_t size)
{
        struct d9_bpf_target *t = ctx;

        return t->on_record(t->ctx, data, size);
}

static int tls_size_set(struct d9_bpf_target *t, uint64_t tls_size)
{
        return bpf_map__update_elem(t->bpf->sched->maps.d9_wk_tls, &t->slot, sizeof(t->slot), &tls_size,
                                    sizeof(tls_size), 0);
}

int d9_bpf_target_set_tls(struct d9_bpf_target *t, uint64_t tls_size)
{
        int r = tls_size_set(t, tls_size);

        /* The search starts again below the new top: sweep it too. Not
         * fatal: the threads' own stacks go on scanning. */
        if (r == 0 && tls_size != D9_WK_TLS_UNKNOWN)
                (void)d9_bpf_sweep_workers(t->bpf->sched, t->pid);
        return r;
}

int d9_bpf_target_set_run_ticks(struct d9_bpf_target *t, bool on)
{
        struct bpf_map *targets = t->bpf->sched->maps.d9_targets;
        uint32_t tgid = t->kernel_tgid;
        struct d9_target_cfg cfg;
        int r = bpf_map__lookup_elem(targets, &tgid, sizeof(tgid), &cfg, sizeof(cfg), 0);

        if (r < 0 || cfg.run_ticks_off == !on)
                return r;
        cfg.run_ticks_off = !on;
        return bpf_map__update_elem(targets, &tgid, sizeof(tgid), &cfg, sizeof(cfg), BPF_EXIST);
}

/* Ring + config: the order matters, BPF checks the config first, so a
 * config is only visible once its ring exists. */
static int install_target(struct d9_bpf_target *t, const struct probe_plan *plan,
                          const struct d9_bpf_target_opts *o)
{
        struct d9_bpf *bpf = t->bpf;
        struct d9_target_cfg cfg = {
                .slot = t->slot,
                .probes = o->probes,
                .entry_only = t->poll_end == D9_POLL_END_ENTRY_ONLY,
                .unpark_at_resume = (o->probes & D9_PROBE_PARK) && o->unpark_at_resume,
                .dyn_poll_slot = plan ? plan->dyn_future_poll_slot : 0,
                .stack = o->stack,
                .offcpu_min_ns = o->offcpu_min_ns,
                /* With a plan, on once every link is in (d9_bpf_attach_target). */
                .uprobes_off = o->uprobes_later || plan,
                .run_ticks_off = o->run_ticks_off,
                .since_ts = d9_now_ns(),
        };
        uint32_t tgid = t->kernel_tgid;
        int r;

        t->since_ns = cfg.since_ts;
        layout_of(plan, o, &cfg);
        /* Always: the slot's last target may have set one. */
        r = tls_size_set(t, plan ? plan->tls_size : D9_WK_TLS_UNKNOWN);
        if (r < 0)
                return r;
        t->ring_fd = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "d9_ring", 0, 0,
                                    (uint32_t)bpf->ring_bytes, NULL);
        if (t->ring_fd < 0)
                return -errno;
        t->rb = ring_buffer__new(t->ring_fd, deliver_record, t, NULL);
        if (!t->rb)
                return -errno;
        r = percpu_row_zero(bpf->sched->maps.d9_drops, t->slot);
        if (r == 0)
                r = percpu_row_zero(bpf->sched->maps.d9_offcpu_short, t->slot);
        /* An update of a map of maps waits for an RCU grace period in the
         * kernel (maybe_wait_bpf_programs): timed for the attach timeline. */
        uint64_t t0 = d9_now_ns();
        if (r == 0)
                r = bpf_map__update_elem(bpf->sched->maps.d9_rings, &tgid, sizeof(tgid),
                                         &t->ring_fd, sizeof(t->ring_fd), BPF_NOEXIST);
        t->ring_insert_ns = d9_now_ns() - t0;
        t->in_rings = r == 0;
        if (r == 0) {
                pthread_mutex_lock(&bpf->lock);
                tgid_bit_set_locked(bpf, t->slot, tgid);
                pthread_mutex_unlock(&bpf->lock);
                r = bpf_map__update_elem(bpf->sched->maps.d9_targets, &tgid, sizeof(tgid),
                                         &cfg, sizeof(cfg), BPF_NOEXIST);
        }
        t->in_targets = r == 0;
        return r;
}

static int check_uprobes(pid_t pid, const struct probe_plan *plan,
                         const struct d9_bpf_target_opts *o, char **err);

static int check_request(pid_t pid, const struct probe_plan *plan,
                         const struct d9_bpf_target_opts *o, char **err)
{
        unsigned uprobe_bits = D9_PROBE_PARK | D9_PROBE_POLL | D9_PROBE_SPAWN |
                               D9_PROBE_WAKE | D9_PROBE_TERMINATE;

        /* EPERM means the process exists but belongs to another user: d9d
         * running as its own user with CAP_SYS_PTRACE may still trace it. */
        if (pid <= 0 || (kill(pid, 0) < 0 && errno == ESRCH)) {
                set_err(err, "no such process: PID %d", (int)pid);
                return -ESRCH;
        }
        if (!o->on_record) {
                set_err(err, "internal: no record callback for PID %d", (int)pid);
                return -EINVAL;
        }
        if (!(o->probes & uprobe_bits) || o->uprobes_later)
                return 0;
        return check_uprobes(pid, plan, o, err);
}

/* The plan has what the Tokio uprobes need. */
static int check_uprobes(pid_t pid, const struct probe_plan *plan,
                         const struct d9_bpf_target_opts *o, char **err)
{
        if (!plan || probe_plan_count(plan, PROBE_POLL, false) == 0) {
                set_err(err, "PID %d is not a Tokio process: no raw::poll probe points found",
                        (int)pid);
                return -ENOENT;
        }
        if (!layout_of(plan, o, NULL)) {
                set_err(err, "PID %d: the probe plan gives no task-id layout", (int)pid);
                return -EINVAL;
        }
        return 0;
}

/* Sampled wakes: room for the plan's wake points (filled by attach_uprobes). */
static int wake_set_alloc(struct d9_bpf_target *t, const struct probe_plan *plan,
                          const struct d9_bpf_target_opts *o)
{
        size_t cap;

        if (!plan || !o->wakes_switchable || !(o->probes & D9_PROBE_WAKE) || t->wake_set)
                return 0;
        cap = plan->n_points + 1;
        t->wake_set = calloc(1, sizeof(*t->wake_set));
        if (t->wake_set) {
                t->wake_set->offs = calloc(cap, sizeof(unsigned long));
                t->wake_set->cookies = calloc(cap, sizeof(__u64));
        }
        if (!t->wake_set || !t->wake_set->offs || !t->wake_set->cookies)
                return -ENOMEM;
        return 0;
}

static int cfg_set_uprobes(struct d9_bpf_target *t, const struct probe_plan *plan,
                           const struct d9_bpf_target_opts *o, unsigned probes, bool on, uint64_t *ts);

int d9_bpf_attach_target(struct d9_bpf *bpf, pid_t pid, const struct probe_plan *plan,
                         const struct d9_bpf_target_opts *o,
                         struct d9_bpf_target **out, char **err)
{
        struct d9_bpf_target *t;
        uint64_t t0;
        int r;

        r = check_request(pid, plan, o, err);
        if (r < 0)
                return r;
        t = calloc(1, sizeof(*t));
        if (!t)
                return -ENOMEM;
        t->bpf = bpf;
        t->pid = pid;
        t->ring_fd = -1;
        t->slot = UINT32_MAX;
        t->poll_end = d9_bpf_poll_end_for(plan, o->probes, o->poll_end);
        t->on_record = o->on_record;
        t->ctx = o->ctx;
        t->unpark_at_resume = o->unpark_at_resume;
        pthread_mutex_lock(&bpf->lock);
        r = alloc_slot(bpf, &t->slot);
        bool waiting = bpf->teardowns != NULL;
        pthread_mutex_unlock(&bpf->lock);
        /* Links of an earlier session on this pid may still be going away:
         * they would feed the new config (with their own probe set). Reaped
         * once this attach holds a slot: were it the last slot in use, its
         * reap would take the system-wide programs off for arm_locked to
         * put them back at once. */
        teardowns_reap(bpf, false, pid);
        if (r == -ENOSPC && waiting) {
                teardowns_reap(bpf, true, 0);
                pthread_mutex_lock(&bpf->lock);
                r = alloc_slot(bpf, &t->slot);
                pthread_mutex_unlock(&bpf->lock);
        }
        if (r == 0) {
                pthread_mutex_lock(&bpf->lock);
                r = arm_locked(bpf);
                pthread_mutex_unlock(&bpf->lock);
                if (r < 0) {
                        set_err(err, "cannot attach d9's scheduler and sampling programs: %s", strerror(-r));
                        goto fail;
                }
        }
        if (r < 0) {
                set_err(err, "cannot trace PID %d: already %d targets", (int)pid,
                        D9_MAX_TARGETS);
                goto fail;
        }
        r = d9_bpf_kernel_tgid(bpf->sched, pid, &t->kernel_tgid);
        if (r < 0) {
                set_err(err, "cannot find the kernel's pid of PID %d (d9d in a pid namespace): %s",
                        (int)pid, strerror(-r));
                goto fail;
        }
        r = install_target(t, plan, o);
        if (r < 0) {
                set_err(err, "cannot set up the ring buffer for PID %d: %s%s", (int)pid,
                        strerror(-r), r == -EEXIST ? " (already traced)" : "");
                goto fail;
        }
        /* Not fatal: a thread asleep now that it misses has no interval
         * before its first switch-out (an idle worker reads as other time
         * until then, not parked). */
        if (o->probes & D9_PROBE_SCHED)
                (void)d9_bpf_seed_sleepers(bpf->sched, pid);
        /* Once the TLS size is known, as d9_bpf_target_set_tls does; the
         * program keeps to the default set's targets. Not fatal either:
         * without, idle workers are found when they wake. */
        if (plan)
                (void)d9_bpf_sweep_workers(bpf->sched, pid);
        if (!o->uprobes_later && (r = wake_set_alloc(t, plan, o)) < 0) {
                set_err(err, "cannot trace PID %d: out of memory", (int)pid);
                goto fail;
        }
        /* Attached while the config says off, then on at one instant, as
         * d9_bpf_target_add_uprobes does: the ring records from the install
         * on, and attaching a plan's points can take a second on a loaded
         * machine. A poll probe live before the others, with no instant
         * telling when, let a CPU sample from before it pass for a poll
         * running "since the attach" (npm aptove bridge: made-up 21-226 ms
         * polls on parked workers, the report's longest). */
        t0 = d9_now_ns();
        if (plan && !o->uprobes_later) {
                r = attach_uprobes(t, plan, o->probes, err);
                if (r == 0 && (r = cfg_set_uprobes(t, plan, o, o->probes, true, &t->uprobes_on_ns)) < 0)
                        set_err(err, "cannot switch PID %d's uprobes on: %s", (int)pid, strerror(-r));
        }
        t->attach_ns = d9_now_ns() - t0;
        if (r < 0)
                goto fail;
        *out = t;
        return 0;
fail:
        d9_bpf_detach_target(t);
        return r;
}

/* The config's uprobe part from the plan (task-id layout, poll end,
 * unpark at resume), uprobes recording (on) or not. A hash map update
 * swaps in a new element: programs running now see the old config whole,
 * later ones the new. *ts: the instant of the swap, as seen by records. */
static int cfg_set_uprobes(struct d9_bpf_target *t, const struct probe_plan *plan,
                           const struct d9_bpf_target_opts *o, unsigned probes, bool on, uint64_t *ts)
{
        struct bpf_map *targets = t->bpf->sched->maps.d9_targets;
        uint32_t tgid = t->kernel_tgid;
        struct d9_target_cfg cfg;
        int r;

        r = bpf_map__lookup_elem(targets, &tgid, sizeof(tgid), &cfg, sizeof(cfg), 0);
        if (r < 0)
                return r;
        if (plan) {
                cfg.entry_only = t->poll_end == D9_POLL_END_ENTRY_ONLY;
                cfg.dyn_poll_slot = plan->dyn_future_poll_slot;
                cfg.unpark_at_resume = (probes & D9_PROBE_PARK) && o->unpark_at_resume;
                layout_of(plan, o, &cfg);
        }
        cfg.uprobes_off = !on;
        /* On: every record is written by a program that saw the new config,
         * so after the clock is read here; off: the last ones by programs
         * that saw the old one, before the clock is read after the swap. */
        if (ts && on)
                *ts = d9_now_ns();
        r = bpf_map__update_elem(targets, &tgid, sizeof(tgid), &cfg, sizeof(cfg), BPF_EXIST);
        if (ts && !on)
                *ts = d9_now_ns();
        return r;
}

int d9_bpf_target_add_uprobes(struct d9_bpf_target *t, const struct probe_plan *plan,
                              const struct d9_bpf_target_opts *o, char **err)
{
        size_t before = t->n_links;
        uint64_t t0;
        int r;

        if (t->td || t->slot == UINT32_MAX)
                return -ESRCH;
        r = check_uprobes(t->pid, plan, o, err);
        if (r < 0)
                return r;
        r = wake_set_alloc(t, plan, o);
        if (r < 0) {
                set_err(err, "cannot trace PID %d: out of memory", (int)t->pid);
                return r;
        }
        /* Attached while the config says off, then on at one instant: no
         * poll is half in (an end without its start is ignored in BPF). */
        t->poll_end = d9_bpf_poll_end_for(plan, o->probes, o->poll_end);
        t0 = d9_now_ns();
        r = attach_uprobes(t, plan, o->probes, err);
        t->attach_ns = d9_now_ns() - t0;
        if (r == 0 && (r = cfg_set_uprobes(t, plan, o, o->probes, true, &t->uprobes_on_ns)) < 0)
                set_err(err, "cannot switch PID %d's uprobes on: %s", (int)t->pid, strerror(-r));
        if (r < 0) {
                /* What did attach goes; the target records on without. */
                destroy_links(t->links + before, t->n_links - before);
                t->n_links = before;
                t->n_attached = 0;
                if (t->wake_set)
                        t->wake_set->n = 0;
        }
        return r;
}

uint64_t d9_bpf_target_uprobes_on_ns(const struct d9_bpf_target *t)
{
        return t->uprobes_on_ns;
}

uint64_t d9_bpf_target_since_ns(const struct d9_bpf_target *t)
{
        return t->since_ns;
}

bool d9_bpf_target_window_on(const struct d9_bpf_target *t)
{
        return t->n_win_links > 0;
}

size_t d9_bpf_target_window_points(const struct d9_bpf_target *t)
{
        return t->n_win_attached;
}

int d9_bpf_target_set_window(struct d9_bpf_target *t, const struct probe_plan *plan,
                             const struct d9_bpf_target_opts *o, unsigned probes, bool on,
                             uint64_t *ts, char **err)
{
        size_t before = t->n_links, n_attached = t->n_attached;
        int r;

        if (t->td || t->slot == UINT32_MAX)
                return -ESRCH;
        if (on == (t->n_win_links > 0))
                return 0;
        if (!on) {
                /* Off first, at one instant; the links go on their own thread. */
                r = cfg_set_uprobes(t, NULL, o, probes, false, ts);
                if (r < 0) {
                        set_err(err, "cannot switch PID %d's window off: %s", (int)t->pid, strerror(-r));
                        return r;
                }
                r = links_release(t->bpf, t->pid, t->win_links, t->n_win_links);
                t->win_links = NULL;
                t->n_win_links = 0;
                return r;
        }
        r = check_uprobes(t->pid, plan, o, err);
        if (r < 0)
                return r;
        teardowns_reap(t->bpf, false, 0);
        t->poll_end = d9_bpf_poll_end_for(plan, probes, D9_POLL_END_AUTO);
        r = attach_uprobes(t, plan, probes, err);
        t->n_win_attached = t->n_attached - n_attached;
        t->n_attached = n_attached;
        /* attach_uprobes appended them to the target's links: move them out. */
        if (t->n_links > before) {
                t->win_links = calloc(t->n_links - before, sizeof(*t->win_links));
                if (!t->win_links) {
                        destroy_links(t->links + before, t->n_links - before);
                        t->n_links = before;
                        set_err(err, "cannot trace PID %d: out of memory", (int)t->pid);
                        return -ENOMEM;
                }
                memcpy(t->win_links, t->links + before, (t->n_links - before) * sizeof(*t->links));
                t->n_win_links = t->n_links - before;
                t->n_links = before;
        }
        if (r == 0 && !t->n_win_links)
                r = -ENOENT;
        if (r == 0 && (r = cfg_set_uprobes(t, plan, o, probes, true, ts)) < 0)
                set_err(err, "cannot switch PID %d's window on: %s", (int)t->pid, strerror(-r));
        if (r < 0 && t->n_win_links) {
                links_release(t->bpf, t->pid, t->win_links, t->n_win_links);
                t->win_links = NULL;
                t->n_win_links = 0;
        }
        return r;
}

struct link_stripe {
        struct bpf_link **links;
        size_t n, first, step;
};

static void *destroy_stripe(void *arg)
{
        struct link_stripe *st = arg;

        for (size_t i = st->first; i < st->n; i += st->step)
                bpf_link__destroy(st->links[i]);
        return NULL;
}

/* Destroying a uprobe link waits for an RCU-tasks grace period (tens of
 * ms); destroying them from several threads lets the waits overlap, so a
 * teardown costs one grace period, not one per link. */
static void destroy_links(struct bpf_link **links, size_t n)
{
        enum { MAX_THREADS = 16 };
        struct link_stripe st[MAX_THREADS];
        pthread_t th[MAX_THREADS];
        size_t k = n < MAX_THREADS ? n : MAX_THREADS;
        bool started[MAX_THREADS] = { false };

        for (size_t i = 1; i < k; i++) {
                st[i] = (struct link_stripe){ links, n, i, k };
                started[i] = pthread_create(&th[i], NULL, destroy_stripe, &st[i]) == 0;
        }
        for (size_t i = 0; i < k; i++) {
                if (i == 0 || !started[i]) {
                        st[i] = (struct link_stripe){ links, n, i, k };
                        destroy_stripe(&st[i]);
                }
        }
        for (size_t i = 1; i < k; i++)
                if (started[i])
                        pthread_join(th[i], NULL);
}

static void *teardown_run(void *arg)
{
        struct teardown *td = arg;

        destroy_links(td->links, td->n_links);
        __atomic_store_n(&td->done, true, __ATOMIC_RELEASE);
        return NULL;
}

/* Join (outside bpf->lock: it may wait for grace periods), then give the
 * slot back. */
static void teardown_finish(struct d9_bpf *bpf, struct teardown *td)
{
        if (td->started)
                pthread_join(td->th, NULL);
        pthread_mutex_lock(&bpf->lock);
        if (td->slot != UINT32_MAX)
                slot_release_locked(bpf, td->slot);
        pthread_mutex_unlock(&bpf->lock);
        free(td->links);
        free(td);
        disarm_if_unused(bpf);
}

/* Finish the teardowns that are done; also wait for those of `pid` (> 0),
 * or for all of them with wait_all. */
static void teardowns_reap(struct d9_bpf *bpf, bool wait_all, pid_t pid)
{
        struct teardown *ready = NULL;

        pthread_mutex_lock(&bpf->lock);
        for (struct teardown **pp = &bpf->teardowns; *pp;) {
                struct teardown *td = *pp;

                if (wait_all || td->pid == pid || __atomic_load_n(&td->done, __ATOMIC_ACQUIRE)) {
                        *pp = td->next;
                        td->next = ready;
                        ready = td;
                        continue;
                }
                pp = &td->next;
        }
        pthread_mutex_unlock(&bpf->lock);
        while (ready) {
                struct teardown *next = ready->next;
                teardown_finish(bpf, ready);
                ready = next;
        }
}

size_t d9_bpf_teardowns_pending(struct d9_bpf *bpf)
{
        size_t n = 0;

        if (!bpf)
                return 0;
        teardowns_reap(bpf, false, 0);
        pthread_mutex_lock(&bpf->lock);
        for (struct teardown *td = bpf->teardowns; td; td = td->next)
                n++;
        pthread_mutex_unlock(&bpf->lock);
        return n;
}

void d9_bpf_reap(struct d9_bpf *bpf)
{
        if (bpf)
                teardowns_reap(bpf, false, 0);
}

bool d9_bpf_armed(struct d9_bpf *bpf)
{
        bool armed;

        if (!bpf)
                return false;
        pthread_mutex_lock(&bpf->lock);
        armed = bpf->armed;
        pthread_mutex_unlock(&bpf->lock);
        return armed;
}

bool d9_bpf_teardown_pending_for(struct d9_bpf *bpf, pid_t pid)
{
        bool pending = false;

        if (!bpf)
                return false;
        teardowns_reap(bpf, false, 0);
        pthread_mutex_lock(&bpf->lock);
        for (struct teardown *td = bpf->teardowns; td && !pending; td = td->next)
                pending = td->pid == pid;
        pthread_mutex_unlock(&bpf->lock);
        return pending;
}

/* Hand links to a teardown thread (the target keeps its slot). */
static int links_release(struct d9_bpf *bpf, pid_t pid, struct bpf_link **links, size_t n)
{
        struct teardown *td = calloc(1, sizeof(*td));

        if (!td) {
                destroy_links(links, n);
                free(links);
                return 0;
        }
        td->pid = pid;
        td->slot = UINT32_MAX;
        td->links = links;
        td->n_links = n;
        td->started = pthread_create(&td->th, NULL, teardown_run, td) == 0;
        if (!td->started) {
                destroy_links(td->links, td->n_links);
                td->done = true;
        }
        /* The list is shared with the BPF thread's attaches (teardowns_reap). */
        pthread_mutex_lock(&bpf->lock);
        td->next = bpf->teardowns;
        bpf->teardowns = td;
        pthread_mutex_unlock(&bpf->lock);
        return 0;
}

bool d9_bpf_target_wakes_on(const struct d9_bpf_target *t)
{
        return t->n_wake_links > 0;
}

int d9_bpf_target_set_wakes(struct d9_bpf_target *t, bool on)
{
        size_t before = t->n_links, n_attached = t->n_attached;
        int r;

        if (!t->wake_set || !t->wake_set->n || t->td || on == (t->n_wake_links > 0))
                return 0;
        if (!on) {
                r = links_release(t->bpf, t->pid, t->wake_links, t->n_wake_links);
                t->wake_links = NULL;
                t->n_wake_links = 0;
                return r;
        }
        teardowns_reap(t->bpf, false, 0);
        r = attach_set(t, t->wake_path, t->wake_set, false);
        t->n_attached = n_attached;     /* counted once, at the attach */
        /* attach_set appended them to the target's links: move them out. */
        t->wake_links = calloc(t->n_links - before + 1, sizeof(*t->wake_links));
        if (!t->wake_links) {
                destroy_links(t->links + before, t->n_links - before);
                t->n_links = before;
                return -ENOMEM;
        }
        memcpy(t->wake_links, t->links + before, (t->n_links - before) * sizeof(*t->links));
        t->n_wake_links = t->n_links - before;
        t->n_links = before;
        if (r < 0) {
                links_release(t->bpf, t->pid, t->wake_links, t->n_wake_links);
                t->wake_links = NULL;
                t->n_wake_links = 0;
        }
        return r;
}

int d9_bpf_target_quiesce(struct d9_bpf_target *t)
{
        uint32_t tgid = t->kernel_tgid;
        struct teardown *td;

        if (t->td)
                return 0;
        teardowns_reap(t->bpf, false, 0);       /* earlier ones, if done */
        for (size_t i = 0; i < t->n_wake_links; i++)
                if (push_link(t, t->wake_links[i]) < 0)
                        bpf_link__destroy(t->wake_links[i]);
        t->n_wake_links = 0;
        for (size_t i = 0; i < t->n_win_links; i++)
                if (push_link(t, t->win_links[i]) < 0)
                        bpf_link__destroy(t->win_links[i]);
        t->n_win_links = 0;
        td = calloc(1, sizeof(*td));
        if (!td)
                return -ENOMEM;
        td->pid = t->pid;
        td->slot = UINT32_MAX;
        td->links = t->links;
        td->n_links = t->n_links;
        t->links = NULL;
        t->n_links = t->cap_links = 0;
        t->td = td;
        /* Every program looks the config up first: without it they write
         * nothing more for this pid (links or not). */
        if (t->slot != UINT32_MAX)
                bpf_map__delete_elem(t->bpf->sched->maps.d9_targets, &tgid, sizeof(tgid), 0);
        t->quiesced_ns = d9_now_ns();
        /* The links are dead weight from here on; their grace periods run
         * while this thread waits for its own below. */
        td->started = pthread_create(&td->th, NULL, teardown_run, td) == 0;
        if (!td->started) {
                destroy_links(td->links, td->n_links);
                td->done = true;
        }
        /* The kernel answers a delete from a map-in-map only after
         * synchronize_rcu(): no program that still saw the config is
         * running, so every record it reserved is now submitted. */
        if (t->slot != UINT32_MAX)
                bpf_map__delete_elem(t->bpf->sched->maps.d9_rings, &tgid, sizeof(tgid), 0);
        return 0;
}

int d9_bpf_target_stop(struct d9_bpf_target *t)
{
        int r = d9_bpf_target_quiesce(t);

        if (t->rb)
                ring_buffer__consume(t->rb);
        return r;
}

/* An interval of this recording that a d9_offcpu_pending entry still
 * holds at the detach (its record was left to the thread's return to user
 * space, which did not write it): written now, stackless, after the ring's
 * last records, so the trace still has it. */
static void offcpu_pending_write(struct d9_bpf_target *t, uint32_t tid, const struct d9_offcpu_pending_entry *e)
{
        struct d9_rec_offcpu r = {
                .hdr = { .type = D9_REC_OFFCPU, .tid = tid, .tgid = t->kernel_tgid, .ts = e->span.on_ts },
                .off_ts = e->span.off_ts,
                .prev_state = e->span.state,
                .no_stack = D9_NOSTACK_GONE,
                .cpu_ns = e->span.cpu_ns,
                .sched_wait_ns = e->span.wait_ns,
                .run_since = e->span.run_since,
                .syscall = e->span.syscall,
        };

        if (!e->running && e->span.on_ts && e->span.on_ts >= t->since_ns)
                t->on_record(t->ctx, &r, sizeof(r));
}

/* A detached target's entries in d9_offcpu_pending: their callbacks, if
 * any is still due, write nothing now, and one the kernel never ran (a
 * thread past exit_task_work) would stay until its tid came back, which
 * with a large pid_max is never: the map would fill up. Keys first, then
 * deletes, since deleting under get_next_key restarts the walk. */
static void offcpu_pending_forget(struct d9_bpf_target *t)
{
        struct bpf_map *map = t->bpf->sched->maps.d9_offcpu_pending;
        uint32_t cap = bpf_map__max_entries(map), n = 0, key, *prev = NULL;
        uint32_t *mine = calloc(cap, sizeof(*mine));
        struct d9_offcpu_pending_entry e;

        if (!mine)
                return;
        while (n < cap && !bpf_map__get_next_key(map, prev, &key, sizeof(key))) {
                if (!bpf_map__lookup_elem(map, &key, sizeof(key), &e, sizeof(e), 0) &&
                    e.tgid == t->kernel_tgid) {
                        offcpu_pending_write(t, key, &e);
                        mine[n++] = key;
                }
                prev = &key;
        }
        for (uint32_t i = 0; i < n; i++)
                bpf_map__delete_elem(map, &mine[i], sizeof(mine[i]), 0);
        free(mine);
}

void d9_bpf_detach_target(struct d9_bpf_target *t)
{
        uint32_t tgid;

        if (!t)
                return;
        tgid = t->kernel_tgid;
        if (!t->td) {
                destroy_links(t->wake_links, t->n_wake_links);
                destroy_links(t->win_links, t->n_win_links);
        }
        free(t->wake_links);
        free(t->win_links);
        free(t->wake_path);
        if (t->wake_set) {
                free(t->wake_set->offs);
                free(t->wake_set->cookies);
                free(t->wake_set);
        }
        if (t->td) {
                /* Stopped: the links die on their own thread; the slot is
                 * released with them (teardowns_reap). */
                pthread_mutex_lock(&t->bpf->lock);
                t->td->slot = t->slot;
                t->td->next = t->bpf->teardowns;
                t->bpf->teardowns = t->td;
                pthread_mutex_unlock(&t->bpf->lock);
        } else {
                destroy_links(t->links, t->n_links);
                if (t->slot != UINT32_MAX) {
                        /* An insert refused with EEXIST left another
                         * target's entries under this tgid: not ours to delete. */
                        if (t->in_targets)
                                bpf_map__delete_elem(t->bpf->sched->maps.d9_targets, &tgid, sizeof(tgid), 0);
                        if (t->in_rings)
                                bpf_map__delete_elem(t->bpf->sched->maps.d9_rings, &tgid, sizeof(tgid), 0);
                        pthread_mutex_lock(&t->bpf->lock);
                        slot_release_locked(t->bpf, t->slot);
                        pthread_mutex_unlock(&t->bpf->lock);
                }
                disarm_if_unused(t->bpf);
        }
        if (t->rb)
                ring_buffer__consume(t->rb);
        if (t->slot != UINT32_MAX && t->in_targets)
                offcpu_pending_forget(t);
        ring_buffer__free(t->rb);
        if (t->ring_fd >= 0)
                close(t->ring_fd);
        free(t->links);
        free(t);
}

int d9_bpf_target_epoll_fd(const struct d9_bpf_target *t)
{
        return ring_buffer__epoll_fd(t->rb);
}

int d9_bpf_target_consume(struct d9_bpf_target *t)
{
        return ring_buffer__consume(t->rb);
}

size_t d9_bpf_target_pending(const struct d9_bpf_target *t, size_t *size)
{
        struct ring *r = ring_buffer__ring(t->rb, 0);

        *size = r ? ring__size(r) : 0;
        return r ? ring__avail_data_size(r) : 0;
}

int d9_bpf_target_poll(struct d9_bpf_target *t, int timeout_ms)
{
        int woken = ring_buffer__poll(t->rb, timeout_ms), more;

        /* BPF wakes us only when D9_WAKEUP_BYTES are pending: drain the rest. */
        if (woken < 0 && woken != -EINTR)
                return woken;
        more = ring_buffer__consume(t->rb);
        return more < 0 ? more : (woken > 0 ? woken : 0) + more;
}

int d9_bpf_target_drops(const struct d9_bpf_target *t, uint64_t *dropped)
{
        return percpu_row_sum(t->bpf->sched->maps.d9_drops, t->slot, dropped, 1);
}

int d9_bpf_target_stack_deep(struct d9_bpf_target *t, uint32_t tid)
{
        uint32_t one = 1;

        return bpf_map__update_elem(t->bpf->sched->maps.d9_stack_deep_tids, &tid, sizeof(tid), &one,
                                    sizeof(one), BPF_ANY) ? -errno : 0;
}

/* Byte offset of member `name` of the struct BTF type id names, or -ENOENT. */
static int btf_member_byte(const struct btf *btf, __u32 id, const char *name)
{
        const struct btf_type *type = btf__type_by_id(btf, id);
        const struct btf_member *m;

        if (!type || !btf_is_struct(type))
                return -ENOENT;
        m = btf_members(type);
        for (int i = 0; i < btf_vlen(type); i++, m++)
                if (!strcmp(btf__name_by_offset(btf, m->name_off), name))
                        return (int)(btf_member_bit_offset(type, (__u32)i) / 8);
        return -ENOENT;
}

#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL     /* linux/pidfd.h, 6.9 */
#endif

int d9_bpf_target_thread_off(const struct d9_bpf_target *t, pid_t ns_tid, struct d9_thread_off *out)
{
        static const char *const names[10] = { "tid", "off_state", "off_ts", "off_cpu_ns", "off_bp", "off_syscall",
                                               "wk_index", "wk_rt", "wk_ts", "wk_swept_ts" };
        static const unsigned sizes[10] = { 4, 4, 8, 8, 8, 4, 4, 8, 8, 8 };
        const struct bpf_map *map = t->bpf->sched->maps.d9_threads;
        const struct btf *btf = bpf_object__btf(t->bpf->sched->obj);
        __u32 id = bpf_map__btf_value_type_id(map), size = bpf_map__value_size(map);
        uint64_t own_ts, swept_ts;
        int off[10], pidfd, r = 0;
        uint8_t *v;

        /* Offsets from the map's BTF: this never drifts from d9_maps.bpf.h. */
        for (int i = 0; i < 10; i++)
                if (!btf || (off[i] = btf_member_byte(btf, id, names[i])) < 0 || (unsigned)off[i] + sizes[i] > size)
                        return -ENOENT;
        v = malloc(size);
        if (!v)
                return -ENOMEM;
        pidfd = (int)syscall(SYS_pidfd_open, ns_tid, PIDFD_THREAD);
        if (pidfd < 0 || bpf_map_lookup_elem(bpf_map__fd(map), &pidfd, v))
                r = -errno;
        if (pidfd >= 0)
                close(pidfd);
        if (r == 0) {
                memcpy(&out->tid, v + off[0], 4);
                memcpy(&out->state, v + off[1], 4);
                memcpy(&out->off_ts, v + off[2], 8);
                memcpy(&out->cpu_ns, v + off[3], 8);
                memcpy(&out->bp, v + off[4], 8);
                memcpy(&out->syscall, v + off[5], 4);
                memcpy(&out->worker, v + off[6], 4);
                memcpy(&out->worker_rt, v + off[7], 8);
                memcpy(&own_ts, v + off[8], 8);
                memcpy(&swept_ts, v + off[9], 8);
                if (out->off_ts < t->since_ns)
                        out->off_ts = 0;
                /* Its own stacks' find, else the attach's sweep's; one left
                 * by an earlier recording says nothing (the loop may have
                 * changed). */
                out->worker_found_ts = own_ts >= t->since_ns ? own_ts : swept_ts;
                if (out->worker_found_ts < t->since_ns)
                        out->worker = 0;
        }
        free(v);
        return r;
}

int d9_bpf_target_offcpu_short(const struct d9_bpf_target *t, struct d9_offcpu_short *sum)
{
        uint64_t v[3] = { 0 };
        int r = percpu_row_sum(t->bpf->sched->maps.d9_offcpu_short, t->slot, v, 3);

        sum->count = v[0];
        sum->ns = v[1];
        sum->unseen = v[2];
        return r;
}

int d9_bpf_target_worker_search(const struct d9_bpf_target *t, struct d9_worker_search *out)
{
        struct d9_wk_depth d;

        *out = (struct d9_worker_search){ 0 };
        if (t->slot == UINT32_MAX)
                return -ESRCH;
        if (bpf_map__lookup_elem(t->bpf->sched->maps.d9_wk_depths, &t->slot, sizeof(t->slot), &d,
                                 sizeof(d), 0))
                return -errno;
        /* The slot's last target, or this one before its first scan. */
        if (d.since != t->since_ns || !d.first_ts)
                return 0;
        out->begun = true;
        out->depth = d.depth;
        out->from_thread_pointer = d.tls == D9_WK_TLS_UNKNOWN;
        out->begun_ns = d.first_ts;
        out->confirmed_ns = d.depth ? d.confirmed_ts : 0;
        out->misses = d.misses;
        for (size_t k = 0; k < D9_WK_CANDS; k++) {
                out->candidates += d.cand[k].depth != 0;
                out->ruled_out += d.cand[k].depth && d.cand[k].ruled_out;
        }
        return 0;
}

int d9_bpf_target_sweep_workers(struct d9_bpf_target *t)
{
        return d9_bpf_sweep_workers(t->bpf->sched, t->pid);
}

void d9_bpf_target_worker_candidates(const struct d9_bpf_target *t, char *buf, size_t size)
{
        struct d9_wk_depth d;
        size_t at = 0;

        if (!size)
                return;
        buf[0] = 0;
        if (t->slot == UINT32_MAX || bpf_map__lookup_elem(t->bpf->sched->maps.d9_wk_depths, &t->slot,
                                                         sizeof(t->slot), &d, sizeof(d), 0))
                return;
        for (size_t k = 0; k < D9_WK_CANDS; k++) {
                const struct d9_wk_cand *c = &d.cand[k];
                int n;

                if (!c->depth)
                        continue;
                n = snprintf(buf + at, size - at,
                             "%s%llu (workers %s, %u finds, %u objects%s; the first %#llx, index %u, runtime %#llx)",
                             at ? ", " : "", (unsigned long long)c->depth,
                             c->first_two == 3 ? "0+1" : c->first_two == 1 ? "0" : c->first_two == 2 ? "1" : "none",
                             c->hits, c->n, c->ruled_out ? ", ruled out" : "", (unsigned long long)c->key[0],
                             c->index[0] - 1, (unsigned long long)c->rt);
                if (n < 0 || (size_t)n >= size - at)
                        break;
                at += (size_t)n;
        }
}

enum d9_poll_end d9_bpf_target_poll_end(const struct d9_bpf_target *t)
{
        return t->poll_end;
}

size_t d9_bpf_target_n_attached(const struct d9_bpf_target *t)
{
        return t->n_attached;
}

uint64_t d9_bpf_target_quiesced_ns(const struct d9_bpf_target *t)
{
        return t->quiesced_ns;
}

uint64_t d9_bpf_target_attach_ns(const struct d9_bpf_target *t)
{
        return t->attach_ns;
}

uint64_t d9_bpf_target_ring_insert_ns(const struct d9_bpf_target *t)
{
        return t->ring_insert_ns;
}
