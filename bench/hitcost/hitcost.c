/* hitcost: what one uprobe hit costs the probed thread on this kernel, and
 * how that cost splits between the kernel's trap and d9's BPF program.
 *
 * The probed functions are tiny assembly functions in this binary, called
 * in a loop; the cost of a hit is the thread's CPU time per call with the
 * probe minus without (CPU time, not wall time, so other processes on the
 * machine do not count). The BPF program's own share is the kernel's
 * per-program run time (bpf_stats, enabled only for the run that reads
 * it). Three parts, one table each:
 *   1. the floor: a uprobe with no program, with an empty program (classic
 *      and uprobe_multi), a uretprobe, a 5-byte nop, a single-stepped insn;
 *   2. d9's real program (bpf/d9_tokio.bpf.c, attached by the real loader
 *      through a hand-made probe plan) per kind of hit, with a consumer
 *      that keeps up and one that lags, and with a second thread on the
 *      other CPU writing the same ring;
 *   3. the pieces that program is made of (bench/hitcost/helpers.bpf.c).
 * usage (root): hitcost [calls]       (default 100000 per measurement) */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <linux/perf_event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "bpf/bpf_loader.h"
#include "helpers.skel.h"
#include "hitcost.h"
#include "synth.h"
#include "uprobe_pmu.h"

static char exe[4096];
static long n_calls = 100000;
/* Calls between two drains of the ring (the consumer's pace). */
static long batch_calls = 2000;

static double thread_cpu_ns(void)
{
        struct timespec ts;

        clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
        return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* What to do between batches of calls (drain a ring), not timed. */
struct drain {
        int (*fn)(void *ctx);
        void *ctx;
};

/* CPU ns per call of fn(arg): calls in batches, draining between. */
static double ns_per_call(synth_fn fn, void *arg, long calls, const struct drain *d)
{
        void (*volatile call)(void *) = fn;
        double total = 0;

        for (long done = 0; done < calls;) {
                long batch = calls - done < batch_calls ? calls - done : batch_calls;
                double t0 = thread_cpu_ns();

                for (long i = 0; i < batch; i++)
                        call(arg);
                total += thread_cpu_ns() - t0;
                done += batch;
                if (d && d->fn)
                        d->fn(d->ctx);
        }
        return total / (double)calls;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;

        return (x > y) - (x < y);
}

/* Median of 5 measurements: the machine is shared. */
static double median_ns_per_call(synth_fn fn, void *arg, const struct drain *d)
{
        double v[5];

        for (int i = 0; i < 5; i++)
                v[i] = ns_per_call(fn, arg, n_calls / 5, d);
        qsort(v, 5, sizeof(v[0]), cmp_double);
        return v[2];
}

static int prog_stats(int prog_fd, uint64_t *run_ns, uint64_t *runs)
{
        struct bpf_prog_info info;
        uint32_t len = sizeof(info);

        memset(&info, 0, sizeof(info));
        if (bpf_prog_get_info_by_fd(prog_fd, &info, &len) < 0)
                return -errno;
        *run_ns = info.run_time_ns;
        *runs = info.run_cnt;
        return 0;
}

/* Program ns per run and runs per call, with bpf_stats on for this run only. */
static int prog_ns_per_run(int prog_fd, synth_fn fn, void *arg, const struct drain *d,
                           double *ns, double *runs_per_call)
{
        uint64_t t0, r0, t1, r1;
        int stats_fd = bpf_enable_stats(BPF_STATS_RUN_TIME);

        if (stats_fd < 0)
                return -errno;
        prog_stats(prog_fd, &t0, &r0);
        ns_per_call(fn, arg, n_calls, d);
        prog_stats(prog_fd, &t1, &r1);
        close(stats_fd);
        *ns = r1 > r0 ? (double)(t1 - t0) / (double)(r1 - r0) : 0;
        *runs_per_call = (double)(r1 - r0) / (double)n_calls;
        return 0;
}

/* --- part 1: the floor ------------------------------------------------- */

/* A bare uprobe: a perf counter, no BPF at all (the trap alone). */
static double bare_uprobe_cost(synth_fn fn, double base)
{
        int fd = uprobe_pmu_open(exe, synth_file_offset(fn), false);
        double ns;

        if (fd < 0) {
                fprintf(stderr, "hitcost: perf_event_open(uprobe): %s\n", strerror(errno));
                exit(1);
        }
        ns = median_ns_per_call(fn, NULL, NULL) - base;
        close(fd);
        return ns;
}

static struct bpf_link *attach_multi(struct bpf_program *prog, synth_fn fn, bool ret)
{
        unsigned long off = synth_file_offset(fn);
        LIBBPF_OPTS(bpf_uprobe_multi_opts, mo, .offsets = &off, .cnt = 1, .retprobe = ret);
        struct bpf_link *l = bpf_program__attach_uprobe_multi(prog, getpid(), exe, NULL, &mo);

        if (!l) {
                fprintf(stderr, "hitcost: uprobe_multi attach of %s: %s\n",
                        bpf_program__name(prog), strerror(errno));
                exit(1);
        }
        return l;
}

/* Is the probed 5-byte nop now a call into the kernel's uprobe trampoline
 * (the x86 "optimized uprobe" of 6.18+, entered by the uprobe syscall)? */
static bool nop5_optimized(void)
{
        const uint8_t *code = (const uint8_t *)(uintptr_t)synth_nop5;
        FILE *f = fopen("/proc/self/maps", "re");
        bool tramp = false;
        char line[512];

        while (f && fgets(line, sizeof(line), f))
                tramp |= strstr(line, "[uprobes-trampoline]") != NULL;
        if (f)
                fclose(f);
        return code[0] == 0xe8 || tramp;
}

static void print_row(const char *what, double ns, double prog_ns, double hits)
{
        printf("%-46s %9.0f %9.0f %9.0f %6.2f\n", what, ns, prog_ns, ns - prog_ns * hits, hits);
}

static void part_floor(struct helpers_bpf *skel)
{
        struct bpf_program *empty = skel->progs.hc_empty;
        int efd = bpf_program__fd(empty);
        double base_push = median_ns_per_call(synth_push, NULL, NULL);
        double base_nop5 = median_ns_per_call(synth_nop5, NULL, NULL);
        double base_mov = median_ns_per_call(synth_mov, NULL, NULL);
        double ns, pns, hits;
        struct bpf_link *l;
        bool opt;

        printf("\n1. The floor: one hit with nothing or an empty BPF program\n");
        printf("%-46s %9s %9s %9s %6s\n", "probe", "ns/call", "prog ns", "rest ns", "hits");
        print_row("uprobe, no BPF (perf counter), push %rbp", bare_uprobe_cost(synth_push, base_push),
                  0, 1);

        {
                unsigned long off = synth_file_offset(synth_push);
                LIBBPF_OPTS(bpf_uprobe_opts, uo);

                l = bpf_program__attach_uprobe_opts(skel->progs.hc_empty_classic, getpid(), exe,
                                                    off, &uo);
                if (!l) {
                        fprintf(stderr, "hitcost: classic uprobe attach: %s\n", strerror(errno));
                        exit(1);
                }
                ns = median_ns_per_call(synth_push, NULL, NULL) - base_push;
                prog_ns_per_run(bpf_program__fd(skel->progs.hc_empty_classic), synth_push, NULL,
                                NULL, &pns, &hits);
                print_row("empty BPF, classic uprobe, push %rbp", ns, pns, hits);
                bpf_link__destroy(l);
        }

        l = attach_multi(empty, synth_push, false);
        ns = median_ns_per_call(synth_push, NULL, NULL) - base_push;
        prog_ns_per_run(efd, synth_push, NULL, NULL, &pns, &hits);
        print_row("empty BPF, uprobe_multi, push %rbp", ns, pns, hits);
        bpf_link__destroy(l);

        l = attach_multi(empty, synth_push, true);
        ns = median_ns_per_call(synth_push, NULL, NULL) - base_push;
        prog_ns_per_run(efd, synth_push, NULL, NULL, &pns, &hits);
        print_row("empty BPF, uprobe_multi uretprobe, push %rbp", ns, pns, hits);
        bpf_link__destroy(l);

        l = attach_multi(empty, synth_nop5, false);
        ns_per_call(synth_nop5, NULL, 1000, NULL); /* first hits: the kernel may optimize */
        usleep(100000);
        opt = nop5_optimized();
        ns = median_ns_per_call(synth_nop5, NULL, NULL) - base_nop5;
        prog_ns_per_run(efd, synth_nop5, NULL, NULL, &pns, &hits);
        print_row(opt ? "empty BPF, uprobe_multi, nop5 (optimized: call)"
                      : "empty BPF, uprobe_multi, nop5 (not optimized)",
                  ns, pns, hits);
        bpf_link__destroy(l);

        l = attach_multi(empty, synth_mov, false);
        ns = median_ns_per_call(synth_mov, NULL, NULL) - base_mov;
        prog_ns_per_run(efd, synth_mov, NULL, NULL, &pns, &hits);
        print_row("empty BPF, uprobe_multi, mov (single-stepped)", ns, pns, hits);
        bpf_link__destroy(l);
}

/* --- part 2: d9's own program ------------------------------------------ */

struct d9_counts {
        unsigned long by_type[D9_REC_TYPE_MAX];
        unsigned long bad_id;
};

static int count_record(void *ctx, const void *rec, size_t size)
{
        struct d9_counts *c = ctx;
        const struct d9_rec_hdr *h = rec;

        if (h->type < D9_REC_TYPE_MAX)
                c->by_type[h->type]++;
        if ((h->type == D9_REC_POLL_START || h->type == D9_REC_TERMINATE) &&
            ((const struct d9_rec_task *)rec)->task_id != SYNTH_TASK_ID)
                c->bad_id++;
        return 0;
}

static int drain_d9(void *ctx)
{
        return d9_bpf_target_consume(ctx);
}

/* The prog fd of d9_tokio_probe held by this process. */
static int find_prog_fd(const char *name)
{
        for (int fd = 3; fd < 1024; fd++) {
                struct bpf_prog_info info;
                uint32_t len = sizeof(info);

                memset(&info, 0, sizeof(info));
                if (bpf_prog_get_info_by_fd(fd, &info, &len) == 0 && !strcmp(info.name, name))
                        return fd;
        }
        return -1;
}

/* The same hit on the other CPU at the same time: both write one ring, as
 * two Tokio workers do. */
static volatile int rival_stop;

static void pin_to_cpu(int cpu)
{
        cpu_set_t set;

        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        sched_setaffinity(0, sizeof(set), &set);
}

static void *rival_thread(void *fn)
{
        void (*volatile call)(void *) = (synth_fn)fn;

        pin_to_cpu(1);
        while (!rival_stop)
                call(synth_header());
        return NULL;
}

static void part_d9(long drain_every)
{
        struct probe_point pts[8];
        struct probe_plan plan;
        struct d9_counts counts;
        struct d9_bpf_opts bo = { .no_cpu_sampling = true };
        struct d9_bpf_target_opts to = {
                .probes = D9_PROBE_POLL | D9_PROBE_PARK | D9_PROBE_WAKE | D9_PROBE_TERMINATE |
                          D9_PROBE_SPAWN,
                .poll_end = D9_POLL_END_ENTRY_ONLY,
                .on_record = count_record,
                .ctx = &counts,
        };
        const struct {
                const char *what;
                synth_fn fn;
                void *arg;
        } kinds[] = {
                { "poll start (entry-only: closes the last one)", synth_poll, synth_header() },
                { "wake", synth_wake, synth_header() },
                { "terminate", synth_complete, synth_header() },
                { "spawn (uretprobe on bind)", synth_bind, synth_header() },
                { "park + unpark (entry + uretprobe)", synth_park, synth_park_key() },
        };
        struct d9_bpf *bpf = NULL;
        struct d9_bpf_target *t = NULL;
        char *err = NULL;
        int prog_fd;

        synth_plan(&plan, pts, exe);
        if (d9_bpf_open(&bo, &bpf) < 0 ||
            d9_bpf_attach_target(bpf, getpid(), &plan, &to, &t, &err) < 0) {
                fprintf(stderr, "hitcost: d9 attach: %s\n", err ? err : "d9_bpf_open failed");
                exit(1);
        }
        prog_fd = find_prog_fd("d9_tokio_probe");
        printf("\n2. d9's program (bpf/d9_tokio.bpf.c, uprobe_multi) per kind of hit, ring drained "
               "every %ld calls (%s)\n", drain_every,
               drain_every >= 1000 ? "a consumer that lags: over 64 KiB pending"
                                   : "a consumer that keeps up");
        batch_calls = drain_every;
        printf("%-46s %9s %9s %9s %6s %s\n", "hit", "ns/call", "prog ns", "rest ns", "hits",
               "records/call");
        for (size_t i = 0; i < sizeof(kinds) / sizeof(kinds[0]); i++) {
                struct drain d = { drain_d9, t };
                double base, ns, pns = 0, hits = 0;
                unsigned long recs = 0;

                /* The bare call, measured with the probe attached elsewhere. */
                base = median_ns_per_call(synth_push, NULL, NULL);
                memset(&counts, 0, sizeof(counts));
                ns = median_ns_per_call(kinds[i].fn, kinds[i].arg, &d) - base;
                d9_bpf_target_consume(t);
                for (int ty = 0; ty < D9_REC_TYPE_MAX; ty++)
                        recs += counts.by_type[ty];
                if (prog_fd >= 0)
                        prog_ns_per_run(prog_fd, kinds[i].fn, kinds[i].arg, &d, &pns, &hits);
                printf("%-46s %9.0f %9.0f %9.0f %6.2f %.2f%s\n", kinds[i].what, ns, pns,
                       ns - pns * hits, hits, (double)recs / (double)(n_calls / 5 * 5),
                       counts.bad_id ? " (wrong task ids!)" : "");
        }
        if (drain_every < 1000 && sysconf(_SC_NPROCESSORS_ONLN) > 1) {
                struct drain d = { drain_d9, t };
                double base, ns;
                pthread_t rival;
                cpu_set_t all;

                sched_getaffinity(0, sizeof(all), &all);
                pin_to_cpu(0);
                rival_stop = 0;
                if (pthread_create(&rival, NULL, rival_thread, (void *)synth_poll) == 0) {
                        base = median_ns_per_call(synth_push, NULL, NULL);
                        ns = median_ns_per_call(synth_poll, synth_header(), &d) - base;
                        rival_stop = 1;
                        pthread_join(rival, NULL);
                        /* No program time here: bpf_stats would mix in the
                         * rival's runs, preempted by whatever else runs on
                         * its CPU. */
                        printf("%-46s %9.0f %9s %9s %6s %s\n",
                               "poll start, same on the other CPU at once", ns, "-", "-", "1.00",
                               "2.00 (one ring, two writers)");
                }
                sched_setaffinity(0, sizeof(all), &all);
        }
        batch_calls = 2000;
        d9_bpf_detach_target(t);
        d9_bpf_close(bpf);
}

/* --- part 3: the pieces ------------------------------------------------ */

static int drain_ring(void *ctx)
{
        return ring_buffer__consume(ctx);
}

static int ignore_record(void *ctx, void *data, size_t size)
{
        return 0;
}

static void part_pieces(struct helpers_bpf *skel)
{
        const struct {
                const char *what;
                struct bpf_program *prog;
        } pieces[] = {
                { "bpf_get_attach_cookie", skel->progs.hc_cookie },
                { "bpf_get_current_pid_tgid", skel->progs.hc_pid_tgid },
                { "bpf_get_smp_processor_id", skel->progs.hc_cpu },
                { "bpf_ktime_get_ns", skel->progs.hc_ktime },
                { "hash lookup (d9_targets)", skel->progs.hc_hash_lookup },
                { "hash-of-maps lookup (d9_rings)", skel->progs.hc_hom_lookup },
                { "task storage get (d9_threads)", skel->progs.hc_task_storage },
                { "bpf_probe_read_user 8 bytes", skel->progs.hc_read_user },
                { "ringbuf reserve + submit (72 bytes)", skel->progs.hc_ringbuf },
                { "bpf_ringbuf_query", skel->progs.hc_ringbuf_query },
                { "BPF_CORE_READ task->se.sum_exec_runtime", skel->progs.hc_core_read },
                { "direct load task->se.sum_exec_runtime", skel->progs.hc_btf_load },
        };
        struct ring_buffer *rb = ring_buffer__new(bpf_map__fd(skel->maps.hc_ring), ignore_record,
                                                  NULL, NULL);
        struct drain d = { drain_ring, rb };
        double empty_ns, hits;
        struct bpf_link *l;

        if (!rb) {
                fprintf(stderr, "hitcost: ring_buffer__new: %s\n", strerror(errno));
                exit(1);
        }
        l = attach_multi(skel->progs.hc_empty, synth_push, false);
        prog_ns_per_run(bpf_program__fd(skel->progs.hc_empty), synth_push, NULL, NULL, &empty_ns,
                        &hits);
        bpf_link__destroy(l);
        printf("\n3. The pieces of a program: ns each (bpf_stats run time of %d repeats, minus the "
               "empty program's %.0f ns, / %d)\n", D9HC_REPS, empty_ns, D9HC_REPS);
        for (size_t i = 0; i < sizeof(pieces) / sizeof(pieces[0]); i++) {
                double ns;

                l = attach_multi(pieces[i].prog, synth_push, false);
                prog_ns_per_run(bpf_program__fd(pieces[i].prog), synth_push, NULL, &d, &ns, &hits);
                bpf_link__destroy(l);
                printf("%-46s %9.1f\n", pieces[i].what, (ns - empty_ns) / D9HC_REPS);
        }
        ring_buffer__free(rb);
}

/* Give the lookup programs something to find: this process's tgid. */
static int helpers_setup(struct helpers_bpf *skel)
{
        uint32_t tgid = (uint32_t)getpid();
        uint64_t val[8] = { 0 };
        int ring = bpf_map_create(BPF_MAP_TYPE_RINGBUF, "hc_ring_in", 0, 0, 1 << 22, NULL);
        int r;

        if (ring < 0)
                return -errno;
        r = bpf_map__update_elem(skel->maps.hc_hash, &tgid, sizeof(tgid), val, sizeof(val), 0);
        if (r == 0)
                r = bpf_map__update_elem(skel->maps.hc_rings, &tgid, sizeof(tgid), &ring,
                                         sizeof(ring), 0);
        close(ring);
        return r;
}

int main(int argc, char **argv)
{
        struct helpers_bpf *skel;
        ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

        if (argc > 1)
                n_calls = atol(argv[1]);
        if (n < 0 || n_calls < 1000 || uprobe_pmu_type() < 0) {
                fprintf(stderr, "usage: hitcost [calls >= 1000] (root, a kernel with uprobes)\n");
                return 1;
        }
        exe[n] = 0;
        skel = helpers_bpf__open();
        if (!skel) {
                fprintf(stderr, "hitcost: open BPF: %s\n", strerror(errno));
                return 1;
        }
        skel->rodata->hc_addr = (uint64_t)(uintptr_t)synth_header();
        if (helpers_bpf__load(skel) < 0 || helpers_setup(skel) < 0) {
                fprintf(stderr, "hitcost: load BPF: %s\n", strerror(errno));
                helpers_bpf__destroy(skel);
                return 1;
        }
        printf("hitcost: %ld calls per measurement, CPU ns of the calling thread per call above "
               "the bare call; prog ns = the BPF program's own run time (bpf_stats); rest = "
               "trap, uprobe handling, emulation or single-step\n", n_calls);
        part_floor(skel);
        part_d9(100);
        part_d9(4000);
        part_pieces(skel);
        helpers_bpf__destroy(skel);
        return 0;
}
