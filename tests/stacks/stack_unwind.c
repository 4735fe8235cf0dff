/* stack_unwind: issue 5's must-show on a real release Tokio target (no
 * frame pointers), through the BPF loader and daemon/record/unwind.c directly.
 *
 * Runs TARGET `mixed` (50 ms busy_block_50ms polls and 20 ms
 * sleep_block_20ms polls, once per second each), attaches sched + CPU
 * sampling with stack capture, unwinds every STACK record while the target
 * runs and names the frames. Checks:
 *  - CPU samples inside busy_block_50ms: >= 5 user frames, every user frame
 *    named, through raw::poll up to the worker loop;
 *  - off-CPU stacks of the sleeping task (thread_sleeper): the sleep
 *    syscall (libc or kernel nanosleep), the app frame and raw::poll;
 *  - every SAMPLE/OFFCPU stack_id had its STACK record; nothing dropped.
 * With --debug-file F (stripped target), names come from F.
 * With --tiny-budget (1 us of unwinding per 100 ms), only checks that
 * stacks over the budget are refused and counted, none lost silently.
 * With --sealer-names, the user frames of busy stacks must also resolve
 * with daemon/symbolize/symbolize.c, the sealer's SymbolTableEntry symbolizer.
 * With --offcpu-through F1,F2,... (a musl static-pie target, whose libc
 * has no FDE, tests/targets/musl_block.c): the off-CPU stacks must name
 * every Fi and their median user depth must be >= 5, instead of the busy
 * and sleep checks.
 * With --offcpu-whole too (musl_block's `under-map` mode: the sleeping
 * thread's stack mapping has a readable mapping right above it), none of
 * the stacks that name every Fi may be said cut (unwinder_last_cut): they
 * reached the thread's start(), where the walk ends; the bytes past the
 * thread's TLS are another mapping's, not its callers'.
 * With --cpu-through F1,F2,... the same for the CPU samples inside
 * busy_block_50ms (the frame-pointer build without CFI, mode `deep`: a
 * 12 KiB poll frame between the busy loop and the poll's return address).
 * The executable's lack of CFI makes this test ask BPF for the
 * frame-pointer tail (D9_STACK_FP_TAIL), as d9d does; --no-fp-tail not.
 * With --cpu-cut (the release build, with CFI, mode `deep`): the busy
 * samples under the 12 KiB frame cannot reach the poll within the 8 KiB
 * copy, and the unwinder must say so (unwinder_last_cut, stats.cut) for
 * nearly all of them, while no stack that does reach `main` is called cut.
 * With --deep RATE, BPF copies a stack deeper than the 8 KiB whole (up to
 * 256 KiB, D9_STACK_DEEP) at up to RATE bytes/s beyond the 8 KiB, as d9d
 * does: with --cpu-through deep_poller,main on the release build (CFI),
 * modes `deep` (12 KiB frame) and `deeper` (84 KiB), the busy samples
 * must reach the poll frame and main. With --cpu-capped too (a RATE far
 * below what the samples want): every busy sample either reaches main or
 * is said cut with D9_SREC_CAPPED (the byte cap refused the deep copy),
 * and both kinds occur (and a thread's first cut stack, which asks BPF for
 * deep copies of that thread, d9_bpf_target_stack_deep, as d9d does).
 * With --ring BYTES --cpu-room too (a ring of 128 KiB, mode `deeper`,
 * whose deep copies want ~90 KiB): a deep copy would fill the ring past
 * half, so every busy sample is said cut with D9_SREC_ROOM (or was taken
 * before its thread got deep copies), no deep copy fills half the ring (the
 * other threads' few KiB past the 8 KiB still go), and nothing is lost.
 * With --swap-unwinder, a second unwinder of the same process shares the
 * first one's ELF files (daemon/record/unwind.c keeps one handle per file); the
 * first is freed after SWAP_AFTER stacks and the second unwinds and names
 * the rest: the shared handles outlive the unwinder that opened them.
 *
 * usage: stack_unwind [--debug-file F] [--sealer-names] [--tiny-budget]
 *                     [--user-bytes N] [--swap-unwinder] [--offcpu-through F,... [--offcpu-whole]] [--cpu-cut]
 *                     [--deep RATE [--cpu-capped] [--ring BYTES --cpu-room]]
 *                     TARGET ARGS... */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "harness.h"
#include "daemon/symbolize/symbolize.h"
#include "daemon/record/unwind.h"

#define MAX_FRAMES 128
#define MAX_TIDS 128
#define SWAP_AFTER 10

struct pending {
        uint32_t tid;
        uint64_t id;
        int n;                  /* frames, or negative errno */
        uint32_t n_kern;
        bool cut;               /* unwinder_last_cut */
        bool capped;            /* D9_SREC_CAPPED: the byte cap refused a deep copy */
        bool room;              /* D9_SREC_ROOM: the ring had no room for one */
        bool learned;           /* cut by the plain copy before its thread got deep copies */
        uint32_t rec_flags, user_len;   /* the STACK record's */
        uint64_t frames[MAX_FRAMES];
};

struct run {
        pid_t pid;
        struct unwinder *uw;
        struct unwinder *uw_next;       /* --swap-unwinder: takes over from uw */
        unsigned long stacks_swapped;   /* stacks unwound by it */
        struct symbolizer *sealer_sym;  /* kernel names; user names too with --sealer-names */
        bool sealer_names;
        struct pending pend[MAX_TIDS];
        size_t n_pend;
        unsigned long stacks, samples, offcpu, missing, unwind_err;
        unsigned long busy, busy_good, sleep, sleep_good, sealer_bad;
        const char *through;            /* --offcpu-through, --cpu-through */
        bool through_cpu;
        unsigned long through_good, depth_hist[MAX_FRAMES + 1];
        bool whole_mode;                /* --offcpu-whole */
        unsigned long through_cut;      /* of through_good: said cut */
        bool shown_busy, shown_sleep, shown_bad;
        bool cut_mode;                  /* --cpu-cut */
        unsigned long cut_busy, cut_busy_said, cut_busy_main, whole, whole_said_cut;
        bool capped_mode;               /* --cpu-capped */
        unsigned long cap_busy, cap_whole, cap_cut_capped, cap_learn, cap_bad;
        bool room_mode;                 /* --cpu-room */
        unsigned long room_busy, room_said, room_learn, room_bad;
        unsigned long deep_records, deep_bytes, deep_max;
        struct d9_bpf_target *bpf_t;    /* --deep: to ask for deep copies */
        uint32_t learned[MAX_TIDS];     /* threads asked for ... */
        uint64_t learned_ts[MAX_TIDS];  /* ... at this CLOCK_MONOTONIC time */
        size_t n_learned;
};

/* Was tid asked for deep copies before a stack taken at ts? If it never
 * was, it is asked now. Stacks taken before that (still in the ring when
 * the first cut one was read) had no chance of a deep copy. */
static bool tid_learned(struct run *r, uint32_t tid, uint64_t ts, bool *ask)
{
        struct timespec now;

        *ask = false;
        for (size_t i = 0; i < r->n_learned; i++)
                if (r->learned[i] == tid)
                        return ts >= r->learned_ts[i];
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (r->n_learned < MAX_TIDS) {
                r->learned[r->n_learned] = tid;
                r->learned_ts[r->n_learned++] = (uint64_t)now.tv_sec * 1000000000ull + (uint64_t)now.tv_nsec;
        }
        *ask = true;
        return false;
}

/* Where a new STACK record of tid goes. Two slots per thread: a CPU
 * sample of the thread can land between an off-CPU interval's STACK and
 * OFFCPU records (both written by the task_work on its way back to user
 * space), and its own STACK then comes before the OFFCPU record. */
static struct pending *pending_for_stack(struct run *r, uint32_t tid)
{
        struct pending *used = NULL;
        int mine = 0;

        for (size_t i = 0; i < r->n_pend; i++) {
                if (r->pend[i].tid != tid)
                        continue;
                if (!r->pend[i].id)
                        return &r->pend[i];
                used = used ? used : &r->pend[i];
                mine++;
        }
        if (mine >= 2 || r->n_pend == MAX_TIDS)
                return used;
        r->pend[r->n_pend].tid = tid;
        return &r->pend[r->n_pend++];
}

static struct pending *pending_with(struct run *r, uint32_t tid, uint64_t id)
{
        for (size_t i = 0; i < r->n_pend; i++)
                if (r->pend[i].tid == tid && r->pend[i].id == id)
                        return &r->pend[i];
        return NULL;
}

static const char *kernel_name(struct run *r, uint64_t addr)
{
        uint64_t size;
        const char *n = r->sealer_sym ? symbolizer_lookup(r->sealer_sym, addr, &size) : NULL;
        return n ? n : "?";
}

/* Names of p's frames into names[] (user frames via the unwinder). Returns
 * the number of user frames without a name. The vDSO exports only its entry
 * points; the helpers they call (the clock read a sample after rdtsc lands
 * in, 2 of 18 busy samples once in CI) have no symbol anywhere, so a nameless
 * callee of a __vdso_ function is not counted. */
static int name_frames(struct run *r, const struct pending *p, char names[][160])
{
        int unnamed = 0;

        for (int i = p->n - 1; i >= 0; i--) {
                const char *n = (uint32_t)i < p->n_kern ? kernel_name(r, p->frames[i])
                                                        : unwinder_addr_name(r->uw, p->frames[i]);
                bool vdso_inner = !n && i + 1 < p->n && !strncmp(names[i + 1], "__vdso_", 7);
                if (!n && (uint32_t)i >= p->n_kern && !vdso_inner)
                        unnamed++;
                snprintf(names[i], 160, "%s", n ? n : vdso_inner ? "? (vDSO helper)" : "?");
        }
        return unnamed;
}

static bool any_has(char names[][160], int from, int to, const char *needle)
{
        for (int i = from; i < to; i++)
                if (strstr(names[i], needle))
                        return true;
        return false;
}

static void show(const char *what, const struct pending *p, char names[][160])
{
        tap_diag("%s stack (%d frames, %u kernel):", what, p->n, p->n_kern);
        for (int i = 0; i < p->n; i++)
                tap_diag("  #%-2d %#018llx %s", i, (unsigned long long)p->frames[i], names[i]);
}

/* The worker's own loop, in both flavours and both Tokio series. */
static bool has_worker_loop(char names[][160], int from, int to)
{
        return any_has(names, from, to, "worker::run") || any_has(names, from, to, "Context::run") ||
               any_has(names, from, to, "current_thread::") || any_has(names, from, to, "block_on");
}

static void check_busy(struct run *r, const struct pending *p, char names[][160], int unnamed)
{
        int user = p->n - (int)p->n_kern;
        bool ok = user >= 5 && unnamed == 0 && any_has(names, (int)p->n_kern, p->n, "raw::poll") &&
                  has_worker_loop(names, (int)p->n_kern, p->n);

        r->busy++;
        r->busy_good += ok;
        if ((!ok && !r->shown_bad) || (ok && !r->shown_busy)) {
                show(ok ? "busy (good)" : "busy (BAD)", p, names);
                r->shown_busy |= ok;
                r->shown_bad |= !ok;
        }
        /* Rust frames of the target itself (the sealer reads no libc
         * debug info, so libc internals may stay unnamed there). */
        for (int i = (int)p->n_kern; r->sealer_names && i < p->n; i++) {
                if (!strstr(names[i], "::"))
                        continue;
                uint64_t size;
                const char *s = symbolizer_lookup(r->sealer_sym, p->frames[i], &size);
                if (!s || strcmp(s, names[i])) {
                        if (r->sealer_bad++ == 0)
                                tap_diag("sealer symbolizer: %#llx -> %s (unwinder: %s)",
                                         (unsigned long long)p->frames[i], s ? s : "NULL", names[i]);
                }
        }
}

/* sleep_block_20ms ends in a tail call (jmp) to std::thread::sleep, so
 * it has no frame of its own: the app frame is its caller, the
 * thread_sleeper task in d9_target::mixed. */
static void check_sleep(struct run *r, const struct pending *p, char names[][160])
{
        bool syscall = any_has(names, 0, p->n, "nanosleep");
        bool ok = syscall && any_has(names, (int)p->n_kern, p->n, "std::thread::") &&
                  any_has(names, (int)p->n_kern, p->n, "raw::poll") &&
                  has_worker_loop(names, (int)p->n_kern, p->n);

        r->sleep++;
        r->sleep_good += ok;
        if (!r->shown_sleep || (!ok && !r->shown_bad)) {
                show(ok ? "off-CPU sleep (good)" : "off-CPU sleep (BAD)", p, names);
                r->shown_sleep = true;
                r->shown_bad |= !ok;
        }
}

/* --offcpu-through: every listed function among the user frames. */
static void check_through(struct run *r, const struct pending *p, char names[][160])
{
        char list[256], *save = NULL;
        bool ok = true;

        snprintf(list, sizeof(list), "%s", r->through);
        for (char *f = strtok_r(list, ",", &save); f; f = strtok_r(NULL, ",", &save))
                ok &= any_has(names, (int)p->n_kern, p->n, f);
        r->depth_hist[p->n - (int)p->n_kern]++;
        r->through_good += ok;
        r->through_cut += ok && p->cut;
        if (r->whole_mode && ok && p->cut && !r->shown_bad) {
                tap_diag("said cut: flags %#x, %u bytes copied", p->rec_flags, p->user_len);
                show("off-CPU, whole but said cut (BAD)", p, names);
                r->shown_bad = true;
                return;
        }
        if (!r->shown_sleep || (!ok && !r->shown_bad)) {
                show(ok ? "off-CPU (good)" : "off-CPU (BAD)", p, names);
                r->shown_sleep = true;
                r->shown_bad |= !ok;
        }
}

static unsigned long median_depth(const struct run *r, unsigned long n)
{
        unsigned long seen = 0;

        for (unsigned long d = 0; d <= MAX_FRAMES; d++) {
                seen += r->depth_hist[d];
                if (seen * 2 > n)
                        return d;
        }
        return 0;
}

/* A SAMPLE or OFFCPU record: its stack is the tid's pending STACK. */
static void on_owner(struct run *r, uint32_t tid, uint64_t stack_id, bool cpu)
{
        static char names[MAX_FRAMES][160];
        struct pending *p;
        int unnamed;

        if (!stack_id)
                return;
        p = pending_with(r, tid, stack_id);
        if (!p) {
                r->missing++;
                return;
        }
        p->id = 0;
        if (p->n < 0)
                return;
        unnamed = name_frames(r, p, names);
        if (getenv("STACK_UNWIND_SHOW_ALL"))
                show(cpu ? "cpu" : "off-cpu", p, names);
        if (r->room_mode) {
                if (!cpu || !any_has(names, (int)p->n_kern, p->n, "busy_block_50ms"))
                        return;
                bool said = p->cut && p->room;
                r->room_busy++;
                r->room_said += said;
                r->room_learn += p->learned;
                r->room_bad += !said && !p->learned;
                if (!said && !p->learned && !r->shown_bad) {
                        tap_diag("cut %d, room %d, flags %#x, %u bytes copied", p->cut, p->room,
                                 p->rec_flags, p->user_len);
                        show("busy, not said cut for the ring's room (BAD)", p, names);
                        r->shown_bad = true;
                }
                return;
        }
        if (r->capped_mode) {
                if (!cpu || !any_has(names, (int)p->n_kern, p->n, "busy_block_50ms"))
                        return;
                bool whole = any_has(names, (int)p->n_kern, p->n, "_poller") &&
                             any_has(names, (int)p->n_kern, p->n, "main") && !p->cut;
                bool said = p->cut && p->capped;
                r->cap_busy++;
                r->cap_whole += whole;
                r->cap_cut_capped += said;
                r->cap_learn += p->learned;
                r->cap_bad += !whole && !said && !p->learned;
                if (!whole && !said && !p->learned && !r->shown_bad) {
                        tap_diag("cut %d, capped %d, flags %#x, %u bytes copied", p->cut, p->capped,
                                 p->rec_flags, p->user_len);
                        show("busy, neither whole nor said cut by the cap (BAD)", p, names);
                        r->shown_bad = true;
                }
                return;
        }
        if (r->cut_mode) {
                bool main_reached = any_has(names, (int)p->n_kern, p->n, "main");
                if (cpu && any_has(names, (int)p->n_kern, p->n, "busy_block_50ms")) {
                        r->cut_busy++;
                        r->cut_busy_said += p->cut;
                        r->cut_busy_main += main_reached;
                        if (!r->shown_busy)
                                show(p->cut ? "busy, cut (good)" : "busy, not said cut", p, names);
                        r->shown_busy = true;
                } else if (main_reached) {
                        r->whole++;
                        r->whole_said_cut += p->cut;
                }
                return;
        }
        if (!r->through && cpu && any_has(names, (int)p->n_kern, p->n, "busy_block_50ms"))
                check_busy(r, p, names, unnamed);
        if (!r->through && !cpu && any_has(names, (int)p->n_kern, p->n, "thread_sleeper"))
                check_sleep(r, p, names);
        if (r->through && cpu == r->through_cpu &&
            (!cpu || any_has(names, (int)p->n_kern, p->n, "busy_block_50ms")))
                check_through(r, p, names);
}

static int on_record(void *ctx, const void *rec, size_t size)
{
        struct run *r = ctx;
        const struct d9_rec_hdr *h = rec;

        if (h->tgid != (uint32_t)r->pid)
                return 0;
        if (h->type == D9_REC_STACK) {
                const struct d9_rec_stack *s = rec;
                struct pending *p = pending_for_stack(r, h->tid);
                if (!p)
                        return 0;
                r->stacks++;
                if (r->uw_next && r->stacks == SWAP_AFTER + 1) {
                        unwinder_free(r->uw);
                        r->uw = r->uw_next;
                        r->uw_next = NULL;
                        r->stacks_swapped = 1;
                } else if (r->stacks_swapped) {
                        r->stacks_swapped++;
                }
                p->id = s->stack_id;
                if (getenv("STACK_UNWIND_SHOW_ALL"))
                        tap_diag("stack record: %u bytes copied, %u frame-pointer frames past them, sp %#llx bp %#llx",
                                 s->user_len, s->n_fp, (unsigned long long)s->regs[D9_DW_RSP],
                                 (unsigned long long)s->regs[D9_DW_RBP]);
                p->n = unwinder_stack(r->uw, s, size, p->frames, MAX_FRAMES, &p->n_kern);
                p->cut = p->n >= 0 && unwinder_last_cut(r->uw);
                p->capped = (s->flags & D9_SREC_CAPPED) != 0;
                p->room = (s->flags & D9_SREC_ROOM) != 0;
                p->rec_flags = s->flags;
                p->user_len = s->user_len;
                /* As d9d does: a thread cut by the plain copy gets deep
                 * copies (once per thread: later cuts say why). */
                bool ask = false;
                p->learned = p->cut && r->bpf_t && !(s->flags & (D9_SREC_DEEP | D9_SREC_CAPPED | D9_SREC_ROOM)) &&
                             !tid_learned(r, h->tid, h->ts, &ask);
                if (ask)
                        d9_bpf_target_stack_deep(r->bpf_t, h->tid);
                if (s->flags & D9_SREC_DEEP) {
                        r->deep_records++;
                        r->deep_bytes += s->user_len;
                        if (s->user_len > r->deep_max)
                                r->deep_max = s->user_len;
                }
                if (p->n < 0)
                        r->unwind_err++;
        } else if (h->type == D9_REC_CPU_SAMPLE) {
                r->samples++;
                on_owner(r, h->tid, ((const struct d9_rec_sample *)rec)->stack_id, true);
        } else if (h->type == D9_REC_OFFCPU) {
                r->offcpu++;
                on_owner(r, h->tid, ((const struct d9_rec_offcpu *)rec)->stack_id, false);
        }
        return 0;
}

int main(int argc, char **argv)
{
        struct d9_bpf_opts bo = { .sample_hz = 99 };
        struct d9_bpf_target_opts to = {
                .probes = D9_PROBE_SCHED | D9_PROBE_CPU,
                .stack = { .flags = D9_STACK_CPU | D9_STACK_OFFCPU, .user_bytes = 8192,
                           /* Rate high enough that the sleeps are not
                            * crowded out by worker parks: the limit itself
                            * is measured by bench/stacks. */
                           .offcpu_min_us = 5000, .offcpu_per_sec = 200, .offcpu_burst = 50 },
                .on_record = on_record,
        };
        struct unwind_opts uo = { .budget_us = 1000000 };     /* the test wants every stack */
        struct run run = { 0 };
        struct d9_bpf_target *t = NULL;
        struct d9_bpf *bpf = NULL;
        struct unwind_stats st;
        struct child target;
        bool sealer_names = false, tiny_budget = false, swap = false, no_fp_tail = false;
        _cleanup_close_ int fd = -1;
        uint64_t drops = 0;
        char *err = NULL;
        int a = 1, r;

        for (; a < argc && !strncmp(argv[a], "--", 2); a++) {
                if (!strcmp(argv[a], "--debug-file") && a + 1 < argc)
                        uo.debug_file = argv[++a];
                else if (!strcmp(argv[a], "--sealer-names"))
                        sealer_names = true;
                else if (!strcmp(argv[a], "--tiny-budget"))
                        uo.budget_us = 1, tiny_budget = true;
                else if (!strcmp(argv[a], "--offcpu-through") && a + 1 < argc)
                        run.through = argv[++a];
                else if (!strcmp(argv[a], "--offcpu-whole"))
                        run.whole_mode = true;
                else if (!strcmp(argv[a], "--cpu-through") && a + 1 < argc)
                        run.through = argv[++a], run.through_cpu = true;
                else if (!strcmp(argv[a], "--cpu-cut"))
                        run.cut_mode = true;
                else if (!strcmp(argv[a], "--deep") && a + 1 < argc) {
                        to.stack.flags |= D9_STACK_DEEP;
                        to.stack.deep_bytes = D9_STACK_DEEP_MAX;
                        to.stack.deep_per_sec = (uint32_t)atoi(argv[++a]);
                        to.stack.deep_burst = 256 * 1024;
                } else if (!strcmp(argv[a], "--cpu-capped"))
                        run.capped_mode = true;
                else if (!strcmp(argv[a], "--ring") && a + 1 < argc)
                        bo.ring_bytes = (size_t)atol(argv[++a]);
                else if (!strcmp(argv[a], "--cpu-room"))
                        run.room_mode = true;
                else if (!strcmp(argv[a], "--no-fp-tail"))
                        no_fp_tail = true;
                else if (!strcmp(argv[a], "--swap-unwinder"))
                        swap = true;
                else if (!strcmp(argv[a], "--user-bytes") && a + 1 < argc)
                        to.stack.user_bytes = (uint32_t)atoi(argv[++a]);
                else
                        break;
        }
        if (a >= argc) {
                fprintf(stderr, "usage: stack_unwind [--debug-file F] [--sealer-names] TARGET ARGS...\n");
                return 2;
        }
        uo.copy_bytes = to.stack.user_bytes;
        r = d9_bpf_open(&bo, &bpf);
        if (r < 0) {
                printf("Bail out! d9_bpf_open: %s\n", strerror(-r));
                return 1;
        }
        if (child_start(&target, argv + a, true) < 0) {
                printf("Bail out! cannot start %s\n", argv[a]);
                return 1;
        }
        run.pid = target.pid;
        run.sealer_names = sealer_names;
        /* The file, not /proc/PID/exe: the child may not have exec'd yet. */
        if (!no_fp_tail && (fd = open(argv[a], O_RDONLY | O_CLOEXEC)) >= 0 && unwind_file_has_cfi(fd) == 0) {
                to.stack.flags |= D9_STACK_FP_TAIL;
                tap_diag("executable without CFI: frame-pointer tail on");
        }
        to.ctx = &run;
        /* The target waits (--start-delay) before its workload: attach now. */
        r = d9_bpf_attach_target(bpf, target.pid, NULL, &to, &t, &err);
        if (r == 0 && (to.stack.flags & D9_STACK_DEEP))
                run.bpf_t = t;
        if (r == 0)
                r = unwinder_new_reading(target.pid, &uo, &run.uw);
        if (r == 0 && swap)
                r = unwinder_new_reading(target.pid, &uo, &run.uw_next);
        if (r < 0) {
                printf("Bail out! attach/unwinder for %d: %s %s\n", target.pid, strerror(-r),
                       err ? err : "");
                child_kill(&target);
                return 1;
        }
        {
                char path[64];
                /* child_start does not wait for the exec: maps read before
                 * it are this test's own (the sealer names then missed every
                 * target frame, seen once in 99 mismatches). */
                struct stat want, now;
                snprintf(path, sizeof(path), "/proc/%d/exe", target.pid);
                for (int i = 0; i < 200 && stat(argv[a], &want) == 0 &&
                                (stat(path, &now) < 0 || now.st_ino != want.st_ino || now.st_dev != want.st_dev);
                     i++)
                        usleep(10000);
                snprintf(path, sizeof(path), "/proc/%d/maps", target.pid);
                char *maps = symbolizer_read_proc_text(path);
                run.sealer_sym = symbolizer_new(target.pid, sealer_names ? maps : NULL);
                free(maps);
        }
        r = drain_until_exit(t, &target);
        d9_bpf_target_drops(t, &drops);
        d9_bpf_detach_target(t);
        d9_bpf_close(bpf);
        free(child_read_all(&target));
        unwinder_get_stats(run.uw, &st);
        tap_diag("records: %lu stacks, %lu samples, %lu off-CPU; unwind %.1f us/stack, "
                 "%.1f frames/stack, %llu reports, %llu truncated",
                 run.stacks, run.samples, run.offcpu,
                 st.stacks ? (double)st.ns / 1e3 / (double)st.stacks : 0.0,
                 st.stacks ? (double)st.frames / (double)st.stacks : 0.0,
                 (unsigned long long)st.reports, (unsigned long long)st.truncated);
        tap_ok(r >= 0 && target.reaped && WIFEXITED(target.status) && WEXITSTATUS(target.status) == 0,
               "target ran to completion while traced");
        if (tiny_budget) {
                /* 1 us per 100 ms window: about one stack per window gets
                 * unwound, every other one is refused and counted. */
                tap_ok(st.over_budget > 0 && run.unwind_err == st.over_budget &&
                       st.stacks + st.over_budget == run.stacks,
                       "over the unwind budget stacks are dropped and counted (%llu unwound, "
                       "%llu over budget, %lu records)", (unsigned long long)st.stacks,
                       (unsigned long long)st.over_budget, run.stacks);
                goto out;
        }
        tap_ok(run.stacks > 0 && run.missing == 0 && run.unwind_err == 0 && drops == 0,
               "every sample's stack arrived and unwound (stacks %lu, missing %lu, errors %lu, drops %llu)",
               run.stacks, run.missing, run.unwind_err, (unsigned long long)drops);
        if (to.stack.flags & D9_STACK_DEEP)
                tap_diag("deep copies: %lu records, %.1f KiB each on average", run.deep_records,
                         run.deep_records ? (double)run.deep_bytes / 1024.0 / (double)run.deep_records : 0.0);
        if (run.room_mode) {
                tap_ok(run.room_busy >= 10 && run.room_bad == 0 && run.room_said >= 10 &&
                               run.deep_max + D9_REC_STACK_FIXED <= bo.ring_bytes / 2,
                       "with a %zu-byte ring, no deep copy fills half of it (largest %lu bytes) and every busy "
                       "sample is said cut for the ring's room (%lu) or taken before its thread got deep copies "
                       "(%lu), none else (%lu of %lu)",
                       bo.ring_bytes, run.deep_max, run.room_said, run.room_learn, run.room_bad, run.room_busy);
                goto out;
        }
        if (run.capped_mode) {
                tap_ok(run.cap_busy >= 10 && run.cap_bad == 0 && run.cap_whole >= 1 && run.cap_cut_capped >= 1,
                       "with the deep copies capped at %u bytes/s, every busy sample is whole (%lu) or said "
                       "cut by the cap (%lu) or taken before its thread got deep copies (%lu), none else (%lu of %lu)",
                       to.stack.deep_per_sec, run.cap_whole, run.cap_cut_capped, run.cap_learn, run.cap_bad,
                       run.cap_busy);
                goto out;
        }
        if (run.cut_mode) {
                tap_ok(run.cut_busy >= 10 && run.cut_busy_said * 10 >= run.cut_busy * 9 && run.cut_busy_main == 0,
                       "busy samples under the 12 KiB frame stop at the %u-byte copy and are said cut "
                       "(%lu of %lu; %lu reach main); stats.cut %llu", to.stack.user_bytes, run.cut_busy_said,
                       run.cut_busy, run.cut_busy_main, (unsigned long long)st.cut);
                tap_ok(run.whole >= 5 && run.whole_said_cut == 0,
                       "no stack that reaches main is said cut (%lu of %lu)", run.whole_said_cut, run.whole);
                goto out;
        }
        if (run.through) {
                unsigned long n = 0;
                for (int d = 0; d <= MAX_FRAMES; d++)
                        n += run.depth_hist[d];
                tap_ok(n >= 20 && median_depth(&run, n) >= 5 && run.through_good * 10 >= n * 9 &&
                               (!(to.stack.flags & D9_STACK_DEEP) || run.deep_records > 0),
                       "%s stacks go past frames without CFI: median user depth %lu >= 5, "
                       "%lu of %lu name %s", run.through_cpu ? "busy CPU" : "off-CPU",
                       median_depth(&run, n), run.through_good, n, run.through);
                if (run.whole_mode)
                        tap_ok(run.through_good >= 20 && run.through_cut == 0,
                               "none of the %lu off-CPU stacks that reach the thread's start is said cut "
                               "(%lu are); stats.cut %llu", run.through_good, run.through_cut,
                               (unsigned long long)st.cut);
                tap_diag("steps without CFI: %llu frameless, %llu frame pointer, %llu scan",
                         (unsigned long long)st.steps[1], (unsigned long long)st.steps[2],
                         (unsigned long long)st.steps[3]);
                goto out;
        }
        tap_ok(run.busy >= 2 && run.busy_good * 10 >= run.busy * 9,
               "CPU samples in busy_block_50ms unwind through raw::poll to the worker loop, "
               ">= 5 frames, all named (%lu of %lu)", run.busy_good, run.busy);
        tap_ok(run.sleep >= 1 && run.sleep_good * 10 >= run.sleep * 9,
               "off-CPU stacks of the sleeping task show nanosleep, std::thread::sleep, raw::poll, "
               "the worker loop "
               "(%lu of %lu)", run.sleep_good, run.sleep);
        if (swap)
                tap_ok(!run.uw_next && run.stacks_swapped >= 10,
                       "the second unwinder, sharing the first one's ELF files, unwound %lu stacks "
                       "after the first was freed", run.stacks_swapped);
        if (sealer_names)
                tap_ok(run.sealer_bad == 0, "the sealer's symbolizer names the same user frames "
                       "(%lu mismatches)", run.sealer_bad);
out:
        symbolizer_free(run.sealer_sym);
        unwinder_free(run.uw_next);
        unwinder_free(run.uw);
        tap_done_plan();
        return tap_done();
}
