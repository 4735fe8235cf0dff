/* translate.c: BPF records -> dial9 events.
 *
 * A pure function of the record stream and what the session hands in:
 * the plan, where the executable is mapped (translate_set_exe_map) and the
 * target's maps with their files opened (translate_take_unwind_maps, for
 * the unwinder). Nothing here reads /proc or opens a file: the unwinder
 * builds its modules from those maps, reads memory from the stack copy and
 * the module files only, and asks for a newer map (want_maps) when a pc
 * lies outside them. Identity rules (docs/probe-plan.md, "Worker identity";
 * trace-format.md §8):
 * - a poll of a blocking-pool task (the plan's blocking_task: Tokio's
 *   BlockingSchedule, told from the vtable's shape) is a
 *   D9BlockingPollEvent, not a poll on a worker lane, wherever it runs,
 *   and never makes its thread a worker. A worker's own launch is such a
 *   task, and so is every spawn_blocking job. Samples of blocking-pool
 *   threads are on 254, as dial9 writes them.
 * - a thread becomes a worker when it polls a runtime task (any other
 *   poll) or parks a worker's core, and which worker is the runtime's own
 *   word: BPF finds the Arc<Worker> of the loop the thread runs on its
 *   stack and writes Tokio's index of it into every task poll and park
 *   (workers.c keys ids by runtime and index), so a thread is worker N
 *   because it runs worker N's loop. A core that block_in_place hands to
 *   a stand-in thread moves with that worker's id; the previous holder's
 *   open poll leaves the lane there (worker_take). With park probes a park
 *   key that once showed with an index follows the core to threads not
 *   polling yet. Where BPF finds no Worker (a current-thread runtime) the
 *   thread stands in for its worker. Thread names, first sight of a tid or
 *   the order threads show up never decide a worker.
 * - a current-thread runtime: the thread that polls its tasks is its worker.
 * - runtimes: a worker belongs to the runtime whose tasks it polls (the
 *   task's scheduler field, its runtime Handle's Arc, read by BPF); each
 *   runtime is one runtime.<name> entry (translate_runtimes).
 * - parks without park probes: a worker thread's voluntary off-CPU
 *   interval (sched_switch, prev_state != running) with no poll open is a
 *   park at switch-out and an unpark at switch-in.
 * - task ids are read by BPF at poll entry; spawn_loc is the future-type
 *   label of the poll<T,S> instance the probe cookie names. A task id
 *   no spawn probe saw (bind and bind_inner inlined where it was spawned,
 *   no spawn point at all, or spawned before the attach) gets its spawn at
 *   its first poll; one both bind_inner and bind saw is written once.
 * - a task whose future is a `Pin<Box<dyn Future>>` is labelled with the
 *   name of the concrete future's poll fn (BPF reads it from the box's
 *   vtable): the plan's table of such functions (dyn_fns, built in the
 *   plan child) names it through the executable's load bias, which the
 *   session takes from its map reads (off this thread or where they land:
 *   session_take_maps); a stripped build's is "[unnamed] FILE 0xVADDR".
 * - values we cannot observe from outside (local/global queue lengths) are
 *   written as 0, documented in docs/daemon.md. */
#include <errno.h>
#include <sys/sysmacros.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpf/d9_events.h"
#include "daemon/symbolize/kallsyms.h"
#include "daemon/core/log.h"
#include "daemon/symbolize/stack_marks.h"
#include "daemon/record/attach_poll.h"
#include "daemon/record/long_poll.h"
#include "daemon/record/unwind.h"
#include "daemon/record/translate.h"
#include "daemon/record/workers.h"
#include "uprobes/uprobes.h"

static const struct d9_field_def lost_fields[] = {
        { "lost", D9_T_VARINT },
        { "source", D9_T_POOLED_STRING },
};
static const struct d9_schema_def lost_schema = { "D9LostEventsEvent", 2, lost_fields };

/* Off-CPU intervals below the session's minimum since the last such event:
 * not recorded one by one, but not hidden either. */
static const struct d9_field_def offcpu_short_fields[] = {
        { "intervals", D9_T_VARINT },
        { "total_ns", D9_T_VARINT },
        { "min_ns", D9_T_VARINT },
};
static const struct d9_schema_def offcpu_short_schema = { "D9ShortOffCpuEvent", 3, offcpu_short_fields };

/* Sampled wakes (d9ctl --wakes sampled): from ts on, the wake points are
 * attached (every wake is recorded) or not (none is), until the next one. */
static const struct d9_field_def wake_window_fields[] = {
        { "attached", D9_T_VARINT },
        { "on_ms", D9_T_VARINT },
        { "period_ms", D9_T_VARINT },
};
static const struct d9_schema_def wake_window_schema = { "D9WakeWindowEvent", 3, wake_window_fields };

/* A blocking-pool task's poll (a spawn_blocking job), written at its end.
 * dial9 records polls of runtime tasks on workers only and its viewer draws
 * a lane per worker id seen in poll and park events, so these are not
 * PollStart/PollEnd on 254 (a "Worker 254" lane) but an event of their own;
 * dial9's readers skip it, d9's keep it. start = ts - duration_ns. */
static const struct d9_field_def blocking_fields[] = {
        { "task_id", D9_T_VARINT },
        { "spawn_loc", D9_T_POOLED_STRING },
        { "tid", D9_T_VARINT },
        { "duration_ns", D9_T_VARINT },
};
static const struct d9_schema_def blocking_schema = { "D9BlockingPollEvent", 4, blocking_fields };

/* A task label that is only an address (a stripped build: the poll
 * instance's link-time address in the executable, "0x44ad4d8"): where
 * `d9ctl symbolize` finds its future type once a debug file turns up.
 * Written once per label and segment, when the label is first used. */
static const struct d9_field_def label_addr_fields[] = {
        { "label", D9_T_POOLED_STRING },
        { "vaddr", D9_T_VARINT },
        { "file_offset", D9_T_VARINT },
        { "build_id", D9_T_POOLED_STRING },
};
static const struct d9_schema_def label_addr_schema = { "D9TaskLabelAddrEvent", 4, label_addr_fields };

/* Probes that joined or left a live session (the plan's uprobes once it is
 * built, a full-detail window after a stall): what the trace holds of that
 * class starts or stops here. */
static const struct d9_field_def probes_fields[] = {
        { "probes", D9_T_POOLED_STRING },
        { "attached", D9_T_VARINT },
        { "reason", D9_T_POOLED_STRING },
};
static const struct d9_schema_def probes_schema = { "D9ProbesEvent", 3, probes_fields };

int translate_init(struct translate *tr, pid_t pid, const struct probe_plan *plan, bool wake_probes,
                   bool park_probes)
{
        int r;

        memset(tr, 0, sizeof(*tr));
        tr->pid = pid;
        tr->plan = plan;
        tr->wake_probes = wake_probes;
        tr->park_from_sched = !park_probes;
        tr->n_labels = plan ? plan->n_points : 0;
        tr->label_atoms = calloc(tr->n_labels ? tr->n_labels : 1, sizeof(*tr->label_atoms));
        tr->threads_cap = 256;
        tr->threads = calloc(tr->threads_cap, sizeof(*tr->threads));
        workers_init(&tr->ws);
        tr->spawn_from_first_poll = true;
        tr->uprobes_from_ts = UINT64_MAX;
        r = live_tasks_init(&tr->live, 0);
        /* Kernel names for collapse_probe_path, only once read (d9d reads
         * them at start, off this thread): reading /proc/kallsyms takes
         * 0.1-0.3 s, and on the drain thread it stalled busy rings into drops. */
        tr->ksyms = ksyms_get_ready();
        return tr->label_atoms && tr->threads && r == 0 ? 0 : -ENOMEM;
}

int translate_set_plan(struct translate *tr, const struct probe_plan *plan, bool wake_probes, bool park_probes)
{
        uint32_t *atoms = calloc(plan->n_points ? plan->n_points : 1, sizeof(*atoms));

        if (!atoms)
                return -ENOMEM;
        /* None interned yet in this segment (translate_set_encoder's state). */
        memset(atoms, 0xff, (plan->n_points ? plan->n_points : 1) * sizeof(*atoms));
        free(tr->label_atoms);
        tr->label_atoms = atoms;
        tr->n_labels = plan->n_points;
        tr->plan = plan;
        tr->wake_probes = wake_probes;
        tr->park_from_sched = !park_probes;
        return 0;
}

static void dyn_forget(struct translate *tr);

void translate_destroy(struct translate *tr)
{
        free(tr->label_atoms);
        for (size_t i = 0; tr->threads && i < tr->threads_cap; i++)
                for (int k = 0; k < 2; k++)
                        free(tr->threads[i].stk[k].frames);
        free(tr->threads);
        live_tasks_free(&tr->live);
        unwinder_free(tr->unw);
        unwind_maps_free(tr->unw_maps);
        free(tr->held_scratch);
        if (tr->ksyms)
                ksyms_put(tr->ksyms);
        dyn_forget(tr);
        spawn_labels_free(&tr->spawn_labels);
        long_poll_free(tr);
        memset(tr, 0, sizeof(*tr));
}

void translate_release(struct translate *tr)
{
        struct translate counters = {
                .pid = tr->pid, .first_ts = tr->first_ts, .last_ts = tr->last_ts,
                .events = tr->events, .records = tr->records, .exited = tr->exited,
                .exec_seen = tr->exec_seen, .error = tr->error,
                .stacks = tr->stacks, .stacks_failed = tr->stacks_failed,
                .offcpu_no_stack = tr->offcpu_no_stack, .cpu_no_stack = tr->cpu_no_stack,
                .probe_stacks = tr->probe_stacks,
                .frames_outside = tr->frames_outside, .stacks_in_trap = tr->stacks_in_trap,
                .files_not_local = tr->files_not_local,
                .stacks_cut = tr->stacks_cut, .stacks_capped = tr->stacks_capped,
                .stacks_cut_capped = tr->stacks_cut_capped, .stacks_cut_room = tr->stacks_cut_room,
                .stacks_cut_unread = tr->stacks_cut_unread,
                .stacks_deep = tr->stacks_deep,
                .stacks_deep_bytes = tr->stacks_deep_bytes, .stack_bytes = tr->stack_bytes,
                .cut_in_poll_by_site = tr->cut_in_poll_by_site,
                .long_polls = tr->long_polls, .stall_ns = tr->stall_ns, .stalls = tr->stalls,
                .stalls_in_window = tr->stalls_in_window,
                .cores_handed = tr->cores_handed, .polls_by_thread = tr->polls_by_thread,
                .polls_ended_by_task = tr->polls_ended_by_task, .poll_ends_lost = tr->poll_ends_lost,
                .ids_by_thread = tr->ids_by_thread, .offcpu_after_poll = tr->offcpu_after_poll,
                .tasks_forgotten = tr->live.forgotten,
        };

        translate_destroy(tr);
        *tr = counters;
}

int translate_set_encoder(struct translate *tr, struct d9_enc *enc)
{
        int r;

        tr->enc = enc;
        tr->enc_gen++;
        memset(tr->label_atoms, 0xff, (tr->n_labels ? tr->n_labels : 1) * sizeof(*tr->label_atoms));
        for (size_t i = 0; i < tr->threads_cap; i++)
                tr->threads[i].name_atom = D9_NO_ATOM;
        for (size_t i = 0; i < tr->n_dyn; i++)
                tr->dyn[i].atom = D9_NO_ATOM;
        r = d9_enc_declare(enc, &lost_schema);
        if (r < 0)
                return r;
        tr->lost_schema = r;
        r = d9_enc_declare(enc, &offcpu_short_schema);
        if (r < 0)
                return r;
        tr->offcpu_short_schema = r;
        r = d9_enc_declare(enc, &wake_window_schema);
        if (r < 0)
                return r;
        tr->wake_window_schema = r;
        tr->wake_window_said = WAKE_SAID_NONE;
        r = d9_enc_declare(enc, &blocking_schema);
        if (r < 0)
                return r;
        tr->blocking_schema = r;
        r = d9_enc_declare(enc, &label_addr_schema);
        if (r < 0)
                return r;
        tr->label_addr_schema = r;
        r = d9_enc_declare(enc, &probes_schema);
        if (r < 0)
                return r;
        tr->probes_schema = r;
        if ((tr->stack_workers || tr->attach_polls) && (r = long_poll_declare(tr)) < 0)
                return r;
        r = d9_enc_intern_string(enc, "", 0, &tr->empty_atom);
        if (!r)
                r = d9_enc_intern_stack(enc, NULL, 0, &tr->empty_stack);
        return r;
}

static struct tr_thread *thread_slot(struct translate *tr, uint32_t tid);

static int threads_grow(struct translate *tr)
{
        struct tr_thread *old = tr->threads;
        size_t old_cap = tr->threads_cap;

        tr->threads = calloc(old_cap * 2, sizeof(*tr->threads));
        if (!tr->threads) {
                tr->threads = old;
                return -ENOMEM;
        }
        tr->threads_cap = old_cap * 2;
        tr->threads_used = 0;
        for (size_t i = 0; i < old_cap; i++)
                if (old[i].tid)
                        *thread_slot(tr, old[i].tid) = old[i];
        free(old);
        return 0;
}

static struct tr_thread *thread_slot(struct translate *tr, uint32_t tid)
{
        size_t mask = tr->threads_cap - 1, i = (tid * 2654435761u) & mask;

        while (tr->threads[i].tid && tr->threads[i].tid != tid)
                i = (i + 1) & mask;
        if (!tr->threads[i].tid) {
                tr->threads[i] = (struct tr_thread){ .tid = tid, .worker = D9_WORKER_NONE,
                                                     .poll_worker = D9_WORKER_NONE,
                                                     .name_atom = D9_NO_ATOM };
                tr->threads_used++;
        }
        return &tr->threads[i];
}

static struct tr_thread *thread_find(struct translate *tr, uint32_t tid)
{
        size_t mask = tr->threads_cap - 1, i = (tid * 2654435761u) & mask;

        while (tid && tr->threads[i].tid && tr->threads[i].tid != tid)
                i = (i + 1) & mask;
        return tid && tr->threads[i].tid == tid ? &tr->threads[i] : NULL;
}

/* The table moves only when a new thread is added: a caller holding a
 * thread while a callee looks the same one up keeps a valid pointer
 * (translate_record's t, then translate_stack_worker's lookup of its tid:
 * npm nushell, whose short-lived threads grew the table past 2,048
 * while a stack record was translated, crashed d9d in every recording). */
static struct tr_thread *thread_get(struct translate *tr, uint32_t tid)
{
        struct tr_thread *t = thread_find(tr, tid);

        if (t)
                return t;
        if (tr->threads_used * 2 >= tr->threads_cap && threads_grow(tr) < 0)
                return NULL;
        return thread_slot(tr, tid);
}

static const char *cookie_label(const struct translate *tr, uint64_t cookie)
{
        if (!tr->plan || cookie >= tr->n_labels)
                return NULL;
        return tr->plan->points[cookie].label;
}

static void note_label_addr(struct translate *tr, const struct probe_point *pt, uint32_t atom)
{
        const char *id = tr->plan->build_id ? tr->plan->build_id : "";
        char hex[24];
        struct d9_enc_value v[4] = { { .atom = atom }, { .u = pt->vaddr }, { .u = pt->file_offset } };

        snprintf(hex, sizeof(hex), "0x%llx", (unsigned long long)pt->vaddr);
        if (strcmp(pt->label, hex) || d9_enc_intern_string(tr->enc, id, strlen(id), &v[3].atom) < 0)
                return;
        /* Only a loss of this hint: the label itself is written anyway. */
        (void)d9_enc_event(tr->enc, tr->label_addr_schema, tr->last_ts, v);
}

static uint32_t label_atom(struct translate *tr, uint64_t cookie)
{
        const char *label = cookie_label(tr, cookie);
        uint32_t atom;

        if (!label)
                return tr->empty_atom;
        if (tr->label_atoms[cookie] != D9_NO_ATOM)
                return tr->label_atoms[cookie];
        if (d9_enc_intern_string(tr->enc, label, strlen(label), &atom) < 0)
                return tr->empty_atom;
        tr->label_atoms[cookie] = atom;
        note_label_addr(tr, &tr->plan->points[cookie], atom);
        return atom;
}

/* The label a cookie alone gives: none for a boxed future's poll
 * instance, whose label says the box (Pin<Box<dyn Future>>); its concrete
 * future is only known from a read at the poll (poll_label_atom). */
uint32_t translate_label_atom(struct translate *tr, uint64_t cookie)
{
        if (tr->plan && cookie < tr->n_labels && tr->plan->points[cookie].boxed_dyn)
                return tr->empty_atom;
        return label_atom(tr, cookie);
}

/* Boxed futures' poll fns named per target: the first this many. */
#define MAX_DYN_LABELS 1024

/* The label of a boxed future whose concrete poll fn is at runtime address
 * addr (malloc'd), or NULL for its poll instance's own label: the name the
 * plan's table gives it; in the executable but not in the table (a
 * stripped build) "[unnamed] FILE 0xVADDR", as frames are written, which
 * d9ctl symbolize names later (two futures stay apart); outside the
 * executable (a library's code, a word that was no code pointer) none. */
static char *dyn_label(const struct translate *tr, uint64_t addr)
{
        const char *name = NULL;
        char unnamed[320];
        uint64_t vaddr;

        if (tr->plan && exe_map_vaddr(&tr->exe, addr, &vaddr))
                name = probe_plan_dyn_fn_name(tr->plan, vaddr);
        if (name && !*name)     /* in the table, no symbol names it */
                name = NULL;
        if (!name && exe_map_unnamed(&tr->exe, addr, unnamed, sizeof(unnamed)))
                name = unnamed;
        return name ? strdup(name) : NULL;
}

static void dyn_forget(struct translate *tr)
{
        for (size_t i = 0; i < tr->n_dyn; i++)
                free(tr->dyn[i].name);
        free(tr->dyn);
        tr->dyn = NULL;
        tr->n_dyn = 0;
}

void translate_set_exe_map(struct translate *tr, const struct exe_map *map)
{
        if (exe_map_same(&tr->exe, map))
                return;
        /* Another executable (an exec) or another layout: what the old map
         * named is named again. */
        dyn_forget(tr);
        tr->exe = *map;
}

void translate_take_unwind_maps(struct translate *tr, struct unwind_maps *m)
{
        if (m)
                tr->files_not_local = unwind_maps_not_local(m);
        if (tr->unw) {
                unwinder_take_maps(tr->unw, m);
        } else if (m) {
                unwind_maps_free(tr->unw_maps);
                tr->unw_maps = m;
        }
}

/* Where the executable lies, from a boxed future's poll start or a spawn
 * itself (BPF read where the kernel put the executable's code), while no
 * map read has been handed in: record -- CMD attaches before the exec, and
 * its first boxed polls and spawns came before the sampler's first map
 * (5 of 692 polls, 17 of 34,340 spawns once in CI), the polls labelled
 * with the erased type, the spawns not at all. The map read replaces it. */
static void exe_map_from_record(struct translate *tr, const struct d9_rec_task *r)
{
        struct exe_map m;

        if (tr->exe.n || !r->exe_code || !tr->plan)
                return;
        if (exe_map_from_code_start(r->exe_code, tr->plan->exe_path, tr->plan->segments, tr->plan->n_segments,
                                    &m) == 0)
                translate_set_exe_map(tr, &m);
}

/* Label of a boxed future by its concrete poll fn at runtime address fn
 * (dyn_label), or D9_NO_ATOM: none, or the executable's place not known
 * yet (exe_map_from_record, else the session's map read). */
static uint32_t dyn_atom(struct translate *tr, uint64_t fn)
{
        struct tr_dyn *e = NULL;

        if (!fn || !tr->exe.n)
                return D9_NO_ATOM;
        for (size_t i = 0; i < tr->n_dyn && !e; i++)
                if (tr->dyn[i].addr == fn)
                        e = &tr->dyn[i];
        if (!e && tr->n_dyn < MAX_DYN_LABELS) {
                struct tr_dyn *more = realloc(tr->dyn, (tr->n_dyn + 1) * sizeof(*more));

                if (!more)
                        return D9_NO_ATOM;
                tr->dyn = more;
                e = &tr->dyn[tr->n_dyn++];
                *e = (struct tr_dyn){ fn, dyn_label(tr, fn), D9_NO_ATOM };
        }
        if (!e || !e->name)
                return D9_NO_ATOM;
        if (e->atom == D9_NO_ATOM && d9_enc_intern_string(tr->enc, e->name, strlen(e->name), &e->atom) < 0)
                return D9_NO_ATOM;
        return e->atom;
}

/* A poll's label: by the future its box holds, else the poll instance's. */
static uint32_t poll_label_atom(struct translate *tr, uint64_t cookie, uint64_t future_poll)
{
        uint32_t atom = dyn_atom(tr, future_poll);

        return atom != D9_NO_ATOM ? atom : label_atom(tr, cookie);
}

static bool boxed_cookie(const struct translate *tr, uint64_t cookie)
{
        return tr->plan && cookie < tr->n_labels && tr->plan->points[cookie].boxed_dyn;
}

/* The function frame addr lies in, if the plan knows it as a trait
 * object's first method (named or not): a frame in none is other code the
 * poll instance runs (the harness's free, the scheduler), whose name would
 * be wrong. */
static bool dyn_fn_frame(struct translate *tr, uint64_t addr, uint64_t *fn)
{
        uint64_t vaddr;

        return addr && tr->lp_fn_of && tr->lp_fn_of(tr, addr, fn) == 0 && exe_map_vaddr(&tr->exe, *fn, &vaddr) &&
               probe_plan_dyn_fn_name(tr->plan, vaddr);
}

uint64_t translate_stack_callee(struct translate *tr, uint64_t cookie, const uint64_t *frames, uint32_t i,
                                uint32_t n_kern)
{
        uint64_t fn;

        if (i <= n_kern)
                return 0;
        if (!boxed_cookie(tr, cookie))
                return frames[i - 1];
        for (uint32_t j = i; j > n_kern && i - j < TR_BOXED_CALLEE_DEPTH; j--)
                if (dyn_fn_frame(tr, frames[j - 1], &fn))
                        return frames[j - 1];
        return frames[i - 1];
}

uint32_t translate_stack_label_atom(struct translate *tr, uint64_t cookie, uint64_t callee)
{
        uint64_t fn;
        uint32_t atom;

        if (!boxed_cookie(tr, cookie))
                return label_atom(tr, cookie);
        if (!dyn_fn_frame(tr, callee, &fn))
                return tr->empty_atom;
        atom = dyn_atom(tr, fn);
        return atom != D9_NO_ATOM ? atom : tr->empty_atom;
}

/* A task the spawn probe saw is labelled as its polls will be, through
 * its vtable (spawn_label.h), once the executable's place is known. A
 * boxed dyn future's polls are named by the concrete future, read at each
 * poll: its spawn stays unlabelled rather than say the box. */
static uint32_t spawn_label_atom(struct translate *tr, uint64_t vtable)
{
        uint64_t bias, cookie;

        if (!vtable || !tr->plan || !exe_map_bias(&tr->exe, &bias) ||
            !spawn_label_cookie(&tr->spawn_labels, tr->plan, vtable - bias, &cookie))
                return tr->empty_atom;
        return translate_label_atom(tr, cookie);
}

/* The thread's name as BPF read it at the sample (task->comm), interned
 * once per segment and again when the thread renames itself. */
static uint32_t thread_name_atom(struct translate *tr, struct tr_thread *t, const char comm[16])
{
        size_t n = strnlen(comm, 16);

        if (!n)
                return D9_NO_ATOM;
        if (n != strnlen(t->name, sizeof(t->name)) || memcmp(t->name, comm, n)) {
                memcpy(t->name, comm, n);
                t->name[n < sizeof(t->name) ? n : sizeof(t->name) - 1] = 0;
                t->name_atom = D9_NO_ATOM;
        }
        if (t->name_atom == D9_NO_ATOM &&
            d9_enc_intern_string(tr->enc, t->name, strlen(t->name), &t->name_atom) < 0)
                t->name_atom = D9_NO_ATOM;
        return t->name_atom;
}

static bool cookie_is_blocking(const struct translate *tr, uint64_t cookie)
{
        return tr->plan && cookie < tr->n_labels && tr->plan->points[cookie].blocking_task;
}

/* When t's open poll ends, given the record that ends it at ts: no later
 * than its task's next start on another thread (end_by, kept by
 * note_task_polled_elsewhere). */
static uint64_t own_poll_end(struct translate *tr, struct tr_thread *t, uint64_t ts)
{
        uint64_t by = t->poll_end_by;

        if (!by)
                return ts;
        t->poll_end_by = 0;
        tr->ends_by_pending--;
        if (by >= ts)
                return ts;
        tr->polls_ended_by_task++;
        return by;
}

/* The sleep from before the attach that t's first off-CPU record showed,
 * now that t is a worker: its park from the recording's start, and the
 * unpark. Written out of time order with other threads' events, in order
 * with t's own (its next poll or stack comes after it woke). */
static int before_park_write(struct translate *tr, struct tr_thread *t)
{
        int e;

        if (!t->before_on || t->worker >= D9_WORKER_BLOCKING)
                return 0;
        /* A multi-thread worker (named by Tokio's index) parks inside its
         * loop, under the blocking-pool poll that launched it: a sleep
         * whose stack showed none was the thread idle in the pool before
         * it took this loop (npm sideseat, full set: a pool thread's 1.24 s
         * wait for a job read as worker 1 parked, and worker 1 busy and
         * parked 115 % of the time). */
        if (tr->ws.w[t->worker].index && !t->before_in_pool_poll) {
                t->before_on = 0;
                tr->sleeps_not_parks++;
                return 0;
        }
        e = d9_enc_worker_park(tr->enc, t->before_off, t->worker, 0, t->before_cpu, t->tid);
        if (e == 0)
                e = d9_enc_worker_unpark(tr->enc, t->before_on, t->worker, 0, t->before_cpu, t->before_wait,
                                         t->tid);
        tr->events += e == 0 ? 2 : 0;
        tr->sched_parks += e == 0;
        t->before_on = 0;
        return e;
}

/* Thread t drives worker w from ts on. A worker runs on one thread at a
 * time: a thread that held w before handed its core over (block_in_place:
 * the stand-in thread's loop took it) and is that worker no more; a poll
 * of its still open leaves w's lane here (the rest of it is the blocking
 * section, on no worker). */
static int worker_take(struct translate *tr, struct tr_thread *t, uint32_t w, uint64_t ts)
{
        struct tr_thread *u = w < TR_MAX_WORKERS ? thread_find(tr, tr->holder[w]) : NULL;
        int e = 0;

        if (w >= TR_MAX_WORKERS)
                return 0;
        if (u && u != t && u->worker == w) {
                if (u->poll_worker == w) {
                        uint64_t end = own_poll_end(tr, u, ts);

                        e = d9_enc_poll_end(tr->enc, end, w);
                        tr->events += e == 0;
                        u->poll_worker = D9_WORKER_NONE;
                        u->poll_end_ts = end;
                }
                u->worker = D9_WORKER_NONE;
                u->pool_thread = true;
                tr->cores_handed++;
        }
        t->worker = w;
        tr->holder[w] = t->tid;
        return e < 0 ? e : before_park_write(tr, t);
}

/* The lane a runtime task's poll starts on: the worker BPF found the
 * thread's loop running (Tokio's index, read from the loop's Arc<Worker>),
 * else the worker the thread is known to drive (by its park key), else an
 * id of the thread's own (docs/probe-plan.md, "Worker identity"). */
static int poll_worker(struct translate *tr, struct tr_thread *t, const struct d9_rec_task *r, uint32_t *lane)
{
        uint32_t w = t->worker;

        *lane = D9_WORKER_BLOCKING;
        if (cookie_is_blocking(tr, r->cookie))
                return 0;
        if (r->worker)
                w = workers_by_index(&tr->ws, r->worker_rt, r->worker, t->worker);
        else if (w == D9_WORKER_NONE) {
                w = workers_for_thread(&tr->ws, t->tid);
                tr->ids_by_thread += w < TR_MAX_WORKERS;
                tr->polls_by_thread++;
        } else if (!tr->ws.w[w].index) {
                tr->polls_by_thread++;
        }
        *lane = w;
        return w < TR_MAX_WORKERS ? worker_take(tr, t, w, r->hdr.ts) : 0;
}

/* Stacks naming no Worker before a thread stands in for its worker. */
#define STACKS_BEFORE_THREAD_ID 4

uint32_t translate_thread_worker(struct translate *tr, struct tr_thread *t)
{
        /* Its stacks show a task poll, but its worker's core went on to a
         * newer loop: the blocking section of block_in_place, on no worker. */
        if (t->older_loop)
                return D9_WORKER_NONE;
        /* BPF looks for the Worker at each of the thread's stacks and may
         * miss at first (mapping locked, still learning where it lies): a
         * thread stands in for its worker only once several stacks found
         * none (a current-thread runtime has no Worker), so a multi-thread
         * worker seen early gets no id of its own to give back later. */
        if (t->worker == D9_WORKER_NONE && t->stacks_looked && t->stacks_unnamed < STACKS_BEFORE_THREAD_ID)
                return D9_WORKER_NONE;
        /* Its loop was launched as loops BPF named multi-thread workers of:
         * it is one of those whose Worker its stacks did not show, not a
         * runtime of its own, and an id by thread would be a worker that
         * never was (npm deltachat, a CI run: a stand-in's pool thread
         * read as worker 2 for 20 ms). */
        if (t->worker == D9_WORKER_NONE && t->lp_launch && tr->launch_polls &&
            (tr->launch_polls[t->lp_launch - 1] & LAUNCH_NAMED))
                return D9_WORKER_NONE;
        if (t->worker == D9_WORKER_NONE && (t->worker = workers_for_thread(&tr->ws, t->tid)) < TR_MAX_WORKERS) {
                tr->holder[t->worker] = t->tid;
                tr->ids_by_thread++;
        }
        return t->worker;
}

/* Thread t begins or ends a blocking-pool poll: a worker loop ends (run
 * returns once its thread has no core: handed over by block_in_place and
 * not taken back, or the runtime shut down) or a job begins; either way t
 * drives no worker until its polls show one again. An id that named only
 * t stays: without a Worker index nothing tells where its core went. */
static void worker_loop_end(struct translate *tr, struct tr_thread *t)
{
        t->worker = D9_WORKER_NONE;
        t->pool_thread = true;
}

/* Default set: a STACK record says which worker's loop its thread runs
 * (d9_stack_worker in bpf/d9_stack.bpf.h), and since when (found_ts, the
 * thread's first stack in that loop); worker 0: none, or no longer. Two
 * threads can run loops of one worker at once: the one that handed the
 * core to a stand-in (block_in_place) stays in its loop until its poll
 * returns. The one in the newer loop has the core: an older one's stacks
 * take the worker from nobody, and only name it while its loop runs. */
int translate_stack_worker(struct translate *tr, uint32_t tid, uint64_t rt, uint32_t worker, uint64_t found_ts,
                           bool searching)
{
        struct tr_thread *t = thread_get(tr, tid), *u;
        uint32_t w;

        /* With poll uprobes BPF does not look (all,longpoll): a stack's
         * "none" is no answer, and read as "its loop ended" it took each
         * worker's thread off its worker, which then got an id by thread
         * (mixed's two workers read 0,1,2,3, their samples the pool's). */
        if (tr->workers_from_polls)
                return 0;
        if (!t)
                return -ENOMEM;
        t->older_loop = false;
        t->stacks_looked = true;
        /* BPF still learning this build: no answer yet, not a "none". */
        if (searching)
                return 0;
        t->stacks_unnamed = worker ? 0 : t->stacks_unnamed + 1;
        /* A job it showed before BPF could say: a loop now is BPF's to
         * name, none makes it the pool's, unless a stack has shown that
         * blocking poll launching a loop since (long_poll_on_stack). */
        if (!worker && t->job_unanswered)
                long_poll_pool_job(tr, t, t->job_unanswered);
        t->job_unanswered = 0;
        if (!worker) {
                /* Its loop ended: back to the pool (or never a worker). */
                if (t->worker < TR_MAX_WORKERS && tr->ws.w[t->worker].index)
                        worker_loop_end(tr, t);
                return 0;
        }
        w = workers_by_index(&tr->ws, rt, worker, t->worker);
        if (w >= TR_MAX_WORKERS)
                return 0;
        u = thread_find(tr, tr->holder[w]);
        if (u && u != t && u->worker == w && u->loop_found_ts > found_ts) {
                t->worker = D9_WORKER_NONE;
                t->pool_thread = true;
                t->older_loop = true;
                return 0;
        }
        t->loop_found_ts = found_ts;
        return t->worker == w ? 0 : worker_take(tr, t, w, tr->last_ts);
}

static int blocking_poll_end(struct translate *tr, struct tr_thread *t, uint64_t ts)
{
        struct d9_enc_value v[4] = {
                { .present = true, .u = t->blocking_task },
                { .present = true, .atom = poll_label_atom(tr, t->blocking_cookie, t->blocking_future) },
                { .present = true, .u = t->tid },
                { .present = true, .u = ts >= t->blocking_ts ? ts - t->blocking_ts : 0 },
        };

        return d9_enc_event(tr->enc, tr->blocking_schema, ts, v);
}

/* Tokio polls a task on one thread at a time: a poll of `task` still open
 * on another thread ended before this start at ts. Its end is otherwise
 * stamped too late: entry-only, at that thread's next event (4.4-22 ms
 * later under CPU hogs on npm postgrestools and tailcall); with return
 * probes, when the poll function returns, after the task was queued again
 * and maybe stolen. The end is not written here: that thread's own next
 * record may still come with an earlier time (records of two CPUs reach
 * the ring a little out of order), and its end is then that one. It is
 * written at that record, or once the trace is END_BY_SETTLE_NS past it. */
#define END_BY_SETTLE_NS 2000000ull
static void note_task_polled_elsewhere(struct translate *tr, const struct tr_thread *t, uint64_t task,
                                       uint64_t ts)
{
        for (uint32_t w = 0; task && w < tr->ws.n && w < TR_MAX_WORKERS; w++) {
                struct tr_thread *u = tr->lane_task[w] == task && tr->lane_tid[w] != t->tid ?
                                      thread_find(tr, tr->lane_tid[w]) : NULL;

                if (!u || u->poll_worker != w || u->poll_task != task || u->poll_end_ts || u->poll_end_by ||
                    ts <= u->poll_ts)
                        continue;
                u->poll_end_by = ts;
                if (!tr->ends_by_pending++ || ts < tr->ends_by_oldest)
                        tr->ends_by_oldest = ts;
                return;
        }
}

/* The trace (its newest record) is not yet END_BY_SETTLE_NS past ts. */
static bool end_by_unsettled(const struct translate *tr, uint64_t ts)
{
        return tr->last_ts < ts || tr->last_ts - ts < END_BY_SETTLE_NS;
}

int translate_settle_poll_ends(struct translate *tr, bool all)
{
        uint64_t oldest = UINT64_MAX;

        if (!tr->ends_by_pending || (!all && end_by_unsettled(tr, tr->ends_by_oldest)))
                return 0;
        for (size_t i = 0; tr->ends_by_pending && i < tr->threads_cap; i++) {
                struct tr_thread *u = &tr->threads[i];
                int e;

                if (!u->tid || !u->poll_end_by)
                        continue;
                if (!all && end_by_unsettled(tr, u->poll_end_by)) {
                        oldest = u->poll_end_by < oldest ? u->poll_end_by : oldest;
                        continue;
                }
                uint64_t end = own_poll_end(tr, u, UINT64_MAX);

                if (u->poll_worker >= D9_WORKER_BLOCKING)
                        continue;
                if ((e = d9_enc_poll_end(tr->enc, end, u->poll_worker)) < 0)
                        return e;
                tr->events++;
                u->poll_worker = D9_WORKER_NONE;
                u->poll_end_ts = end;
                u->poll_cut = true;
        }
        tr->ends_by_oldest = oldest;
        return 0;
}

/* Records of t's own were lost right before r (the ring was full; BPF
 * counts them per thread in hdr.lost): the end of t's open poll may be
 * among them, and the record that ends it now (this start, or a park)
 * came a hole later. Ended there, it was a long poll that never was
 * (npm nulljs: 2.4 s across a 63k-record loss). Its end is not known: it
 * ends at its start, and a D9LostEventsEvent (source "poll_end") says so.
 * A POLL_END ends its own poll unless that one began after the open one
 * (the start between them was lost). An entry-only blocking-pool job open
 * there is left out: it is written only at its end, as one event with its
 * duration, which is not known (the end of a pool thread's worker launch
 * with return probes comes at its task's end, after any number of polls,
 * so a hole says nothing of it). */
static int poll_end_lost(struct translate *tr, struct tr_thread *t, const struct d9_rec_hdr *h, size_t size)
{
        const struct d9_rec_task *r = (const void *)h;
        uint64_t end;
        int e;

        if (t->poll_worker == D9_WORKER_BLOCKING && tr->end_at_next_poll) {
                tr->poll_ends_lost++;
                t->poll_worker = D9_WORKER_NONE;
                t->blocking_nested = false;
                return translate_lost(tr, h->ts, 1, "poll_end");
        }
        if (t->poll_worker >= D9_WORKER_BLOCKING)
                return 0;
        if (h->type == D9_REC_POLL_END && (size < sizeof(*r) || r->start_ts <= t->poll_ts))
                return 0;
        end = own_poll_end(tr, t, t->poll_ts);
        if ((e = d9_enc_poll_end(tr->enc, end, t->poll_worker)) < 0)
                return e;
        tr->events++;
        tr->poll_ends_lost++;
        t->poll_worker = D9_WORKER_NONE;
        t->poll_end_ts = end;
        return translate_lost(tr, end, 1, "poll_end");
}

/* Returns 1 when the record writes no event. */
static int on_task(struct translate *tr, const struct d9_rec_task *r, struct tr_thread *t)
{
        switch (r->hdr.type) {
        case D9_REC_POLL_START:
                exe_map_from_record(tr, r);
                if (tr->spawn_from_first_poll && r->task_id && live_tasks_add(&tr->live, r->task_id) == 1) {
                        int e = d9_enc_task_spawn(tr->enc, r->hdr.ts, r->task_id,
                                                  poll_label_atom(tr, r->cookie, r->future_poll), tr->wake_probes);
                        if (e < 0)
                                return e;
                        tr->events++;
                }
                /* Entry-only: this start is the end of the thread's open
                 * blocking-pool poll (a worker's launch, whose task polls
                 * come next, or a spawn_blocking job). */
                if (tr->end_at_next_poll && t->poll_worker == D9_WORKER_BLOCKING) {
                        int e = blocking_poll_end(tr, t, r->hdr.ts);

                        if (e < 0)
                                return e;
                        tr->events++;
                        t->poll_worker = D9_WORKER_NONE;
                }
                /* A poll still open here ends now: in entry-only mode its end
                 * is this start; otherwise it never got its end (it began
                 * before the attach, or a worker's launch poll that encloses
                 * all of its task polls), closed so no lane stays open. */
                if (t->poll_worker < D9_WORKER_BLOCKING) {
                        uint64_t end = own_poll_end(tr, t, r->hdr.ts);
                        int e = d9_enc_poll_end(tr->enc, end, t->poll_worker);
                        if (e < 0)
                                return e;
                        t->poll_end_ts = end;
                        tr->events++;
                }
                /* Runtime task polls inside an open blocking poll: it is the
                 * worker's launch, whose poll runs the worker loop; it stays
                 * open until the launch task ends (TERMINATE below). */
                if (t->poll_worker == D9_WORKER_BLOCKING)
                        t->blocking_nested = !cookie_is_blocking(tr, r->cookie);
                t->poll_cut = false;
                uint32_t lane;
                /* Not before this thread's last poll end: one written at
                 * its task's start elsewhere, before this record came. */
                uint64_t start = t->poll_end_ts > r->hdr.ts ? t->poll_end_ts : r->hdr.ts;
                int err = poll_worker(tr, t, r, &lane);
                if (err < 0)
                        return err;
                if (lane < D9_WORKER_BLOCKING)
                        note_task_polled_elsewhere(tr, t, r->task_id, start);
                t->poll_worker = lane;
                if (lane < D9_WORKER_BLOCKING) {
                        /* A bound on a poll that ended another way (a park
                         * after it) is no bound on this one. */
                        (void)own_poll_end(tr, t, 0);
                        t->poll_ts = start;
                        t->poll_end_ts = 0;
                        t->poll_task = r->task_id;
                        if (lane < TR_MAX_WORKERS) {
                                tr->lane_tid[lane] = t->tid;
                                tr->lane_task[lane] = r->task_id;
                        }
                }
                if (t->poll_worker == D9_WORKER_BLOCKING) {
                        /* A new loop or job: the thread's last loop (if
                         * any) ended, whether or not its end was seen. */
                        worker_loop_end(tr, t);
                        t->blocking_ts = r->hdr.ts;
                        t->blocking_task = r->task_id;
                        t->blocking_cookie = r->cookie;
                        t->blocking_future = r->future_poll;
                        return 1;
                }
                workers_runtime_seen(&tr->ws, t->poll_worker, r->sched);
                err = d9_enc_poll_start(tr->enc, start, t->poll_worker, 0,
                                        r->task_id, poll_label_atom(tr, r->cookie, r->future_poll));
                /* A start drained after its full-detail window closed (it
                 * was still in the ring): no end comes now, so it ends at
                 * the close, as the polls open then did (a poll begun 2 us
                 * before a close ran to the next window's first end,
                 * 1,258 ms, over the worker's parks). */
                if (err < 0 || !tr->window_closed_ts)
                        return err;
                tr->events++;
                err = d9_enc_poll_end(tr->enc, own_poll_end(tr, t, tr->window_closed_ts > start ? tr->window_closed_ts
                                                                                         : start),
                                    t->poll_worker);
                t->poll_worker = D9_WORKER_NONE;
                t->poll_cut = true;
                return err;
        case D9_REC_POLL_END: {
                uint32_t w = t->poll_worker;

                /* The end of a poll a window's close already ended. */
                if (w == D9_WORKER_NONE && t->poll_cut) {
                        t->poll_cut = false;
                        return 1;
                }
                t->poll_worker = D9_WORKER_NONE;
                uint64_t end = w < D9_WORKER_BLOCKING ? own_poll_end(tr, t, r->hdr.ts) : r->hdr.ts;
                if (w < D9_WORKER_BLOCKING)
                        t->poll_end_ts = end;
                if (w == D9_WORKER_BLOCKING) {
                        worker_loop_end(tr, t);
                        return blocking_poll_end(tr, t, r->hdr.ts);
                }
                if (t->blocking_nested && r->task_id && r->task_id == t->blocking_task) {
                        t->blocking_nested = false;
                        worker_loop_end(tr, t);
                        return blocking_poll_end(tr, t, r->hdr.ts);
                }
                /* A poll that started before the attach has no start here
                 * (a blocking one: a worker loop begun before it, ended). */
                if (w == D9_WORKER_NONE && cookie_is_blocking(tr, r->cookie))
                        worker_loop_end(tr, t);
                if (w == D9_WORKER_NONE && (cookie_is_blocking(tr, r->cookie) || t->worker == D9_WORKER_NONE))
                        return 1;
                return d9_enc_poll_end(tr->enc, end, w != D9_WORKER_NONE ? w : t->worker);
        }
        case D9_REC_SPAWN:
                exe_map_from_record(tr, r);
                /* Written once: bind_inner's entry and then bind's return
                 * both see a spawn through an out-of-line bind. */
                if (tr->spawn_from_first_poll && r->task_id) {
                        int n = live_tasks_add(&tr->live, r->task_id);

                        if (n <= 0)
                                return n < 0 ? n : 1;
                }
                return d9_enc_task_spawn(tr->enc, r->hdr.ts, r->task_id, spawn_label_atom(tr, r->vtable),
                                         tr->wake_probes);
        default:
                if (tr->spawn_from_first_poll)
                        live_tasks_remove(&tr->live, r->task_id);
                /* A launch's poll ends as its task completes (complete runs
                 * as the poll returns Ready, on the same thread). */
                if (t->blocking_nested && r->task_id && r->task_id == t->blocking_task) {
                        int e = blocking_poll_end(tr, t, r->hdr.ts);

                        t->blocking_nested = false;
                        worker_loop_end(tr, t);
                        if (e < 0)
                                return e;
                        tr->events++;
                }
                return d9_enc_task_terminate(tr->enc, r->hdr.ts, r->task_id);
        }
}

/* A park through current_thread::Context (the plan point names it): the
 * thread drives a current-thread runtime, whose only worker it is, so it
 * is not listed under main while none of its tasks has been polled (a
 * restate partition processor's runtime idles for seconds). */
static bool cookie_is_ct_park(const struct translate *tr, uint64_t cookie)
{
        const char *label = tr->plan && cookie < tr->plan->n_points ? tr->plan->points[cookie].label : NULL;

        return label && (strstr(label, "current_thread") || strstr(label, "basic_scheduler"));
}

/* Park probes: the worker whose loop the thread runs, when BPF knows it
 * (and its core's key is then that worker's), else the core the park key
 * names: block_in_place moves a core to another thread, and the key
 * follows the core. */
static int on_park(struct translate *tr, const struct d9_rec_park *r, struct tr_thread *t)
{
        uint32_t w = t->worker;
        int e;

        if (r->worker) {
                w = workers_by_index(&tr->ws, r->worker_rt, r->worker, t->worker);
                workers_set_park_key(&tr->ws, w, r->park_key);
        } else if (r->park_key) {
                w = workers_by_park_key(&tr->ws, r->park_key, t->worker);
        }
        /* An unreadable key names no core: the thread keeps what it was. */
        if (w >= TR_MAX_WORKERS)
                return 1;
        /* In entry-only mode BPF closed the thread's poll before this park. */
        if (t->poll_worker < D9_WORKER_BLOCKING)
                t->poll_worker = D9_WORKER_NONE;
        if ((e = worker_take(tr, t, w, r->hdr.ts)) < 0)
                return e;
        if (r->hdr.type == D9_REC_PARK) {
                if (r->park_key && tr->ws.w[w].rt == TR_RT_UNKNOWN && cookie_is_ct_park(tr, r->cookie))
                        workers_runtime_seen(&tr->ws, w, workers_rt_core_key(r->park_key));
                t->park_run_delay = r->run_delay_ns;
                return d9_enc_worker_park(tr->enc, r->hdr.ts, w, 0, r->cpu_ns, r->hdr.tid);
        }
        uint64_t wait = t->park_run_delay && r->run_delay_ns >= t->park_run_delay ?
                        r->run_delay_ns - t->park_run_delay : 0;
        return d9_enc_worker_unpark(tr->enc, r->hdr.ts, w, 0, r->cpu_ns, wait, r->hdr.tid);
}

/* A sample's worker_id: its worker, else 254 for a blocking-pool thread
 * (as dial9 marks them) or one in a job since before the attach (full set,
 * attach_poll.c), else 255. */
static uint32_t sample_lane(const struct tr_thread *t)
{
        if (t->worker != D9_WORKER_NONE)
                return t->worker;
        return t->pool_thread || (t->ap_job && !t->ap_done) ? D9_WORKER_BLOCKING : D9_WORKER_NONE;
}

/* Callchain atom for a sample that names stack_id; fallback: [ip] or empty. */
static uint32_t sample_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, uint64_t ip);
/* An off-CPU sample's: its stack, else the mark saying why it has none. */
static uint32_t offcpu_stack(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o);
static struct tr_stack *take_stack(struct tr_thread *t, uint64_t stack_id);

/* Whether park probes were attached when a thread went off CPU at off_ts,
 * so a park then is theirs. A full-detail window's are only from its
 * opening to its close: a sleep begun before the opening is the
 * scheduler's to tell, and one begun inside it is not, though it ends
 * after the close (BPF ends the probe's park at the resume; a second park
 * and unpark were written, and a poll cut at the close read as a park). */
static bool park_probes_saw(const struct translate *tr, uint64_t off_ts)
{
        if (!tr->window_parks)
                return !tr->park_from_sched;
        if (tr->window_open)
                return off_ts >= tr->window_opened_ts && (!tr->window_closing_ts || off_ts < tr->window_closing_ts);
        return tr->window_closed_ts && off_ts >= tr->window_opened_ts && off_ts < tr->window_closed_ts;
}

/* Whether a worker's voluntary sleep outside a task poll, in system call
 * syscall (d9_rec_offcpu's), can be its park: Tokio parks a worker in
 * epoll_wait (musl: epoll_pwait) when it holds the driver, else on a
 * futex (std's Condvar). A worker also sleeps in its loop outside any
 * poll for other reasons: npm tombi's "park" was a brk in free(), and
 * a runtime's thread hooks, a task's drop, a page fault run there too.
 * Not known (0: BPF did not read it, as in the unit tests' records): a
 * park, as before. x86-64 numbers. */
static bool offcpu_in_park_call(uint32_t syscall)
{
        switch (syscall) {
        case 0:
        case 202 + 1:   /* futex */
        case 232 + 1:   /* epoll_wait */
        case 281 + 1:   /* epoll_pwait */
        case 441 + 1:   /* epoll_pwait2 */
        case 449 + 1:   /* futex_waitv */
        case 455 + 1:   /* futex_wait */
                return true;
        default:
                return false;
        }
}

/* A sleep from before the attach, of a thread whose worker is not known
 * yet: kept for before_park_write, unless its stack shows a task poll
 * (a poll blocked since before the attach is no park) or no poll function
 * is known to tell. */
static void before_park_hold(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o)
{
        const struct tr_stack *st = NULL;

        for (int k = 0; k < 2; k++)
                if (t->stk[k].id == o->stack_id && o->stack_id)
                        st = &t->stk[k];
        if (t->pool_thread || !tr->n_lp_ranges || !st || !st->n ||
            long_poll_task_frame(tr, st->frames, st->n, 0) || !offcpu_in_park_call(o->syscall))
                return;
        t->before_off = o->off_ts;
        t->before_on = o->hdr.ts;
        t->before_cpu = o->cpu_ns;
        t->before_wait = o->sched_wait_ns;
        t->before_in_pool_poll = long_poll_blocking_frame(tr, st->frames, st->n, 0);
}

/* An off-CPU sample; without park probes, a worker's voluntary sleep
 * outside a poll is also its park (at switch-out) and unpark (at
 * switch-in). Preemption (prev_state 0) is not a park: the worker still
 * wanted the CPU. Both carry the thread's CPU time (it does not grow while
 * off CPU); the unpark's scheduler wait is from its wakeup to switch-in,
 * as a parked thread's run_delay grows between park and unpark. Returns
 * 1 when it writes nothing. */
static int on_offcpu(struct translate *tr, const struct d9_rec_offcpu *o, struct tr_thread *t)
{
        bool before = (o->prev_state & D9_OFFCPU_BEGAN_BEFORE) != 0;
        struct d9_rec_offcpu from_start;
        uint32_t stack;
        int r;

        /* The trace starts when BPF's config went in (its first segment
         * is stamped from then): a sleep begun before is written from
         * there. Before, the trace started at the segment's open, tens of
         * ms later (record -- CMD's child waited in between, and its
         * interval began 61 ms before the listing's start). */
        if (before && o->off_ts < tr->recording_start_ts) {
                if (o->hdr.ts <= tr->recording_start_ts) {
                        take_stack(t, o->stack_id);     /* nor its stack */
                        return 1;       /* over before the trace began */
                }
                from_start = *o;
                from_start.off_ts = tr->recording_start_ts;
                /* Woken before that too, it waited for a CPU from then:
                 * the wait the trace can show is the span it has (a first
                 * attach under 2 CPU hogs, its plan slow: an unpark's wait
                 * of 1.1 ms after a park of 0.39 ms). */
                if (from_start.sched_wait_ns > o->hdr.ts - from_start.off_ts)
                        from_start.sched_wait_ns = o->hdr.ts - from_start.off_ts;
                o = &from_start;
        }

        /* Its stack, before offcpu_stack takes it. */
        if (before && t->worker == D9_WORKER_NONE && t->poll_worker == D9_WORKER_NONE)
                before_park_hold(tr, t, o);
        stack = offcpu_stack(tr, t, o);
        r = d9_enc_cpu_sample(tr->enc, o->off_ts, sample_lane(t), o->hdr.tid, 1,
                              thread_name_atom(tr, t, o->comm), stack, o->hdr.cpu);
        if (r == 0 && tr->stack_workers && o->prev_state == 0)
                r = long_poll_on_preempt(tr, t, o, stack);
        /* The park probes did not see a park begun before they attached. */
        if (r < 0 || (!before && park_probes_saw(tr, o->off_ts)) || t->worker >= D9_WORKER_BLOCKING ||
            t->poll_worker != D9_WORKER_NONE || o->prev_state == 0)
                return r;
        /* A sleep inside the thread's last poll, whose record came after
         * that poll's end: BPF writes a stacked interval's record as the
         * thread returns to user space, by task work that the kernel queues
         * through an irq_work, and that can run only after the poll-end
         * uprobe. It is the poll blocking, not a park. */
        if (t->poll_end_ts && o->off_ts >= t->poll_ts && o->off_ts < t->poll_end_ts) {
                tr->offcpu_after_poll++;
                return r;
        }
        tr->events++;
        /* Default set: an interval inside a task poll is that poll blocking. */
        if (tr->stack_workers && (r = long_poll_on_offcpu(tr, t, o, stack)) != 0)
                return r < 0 ? r : 0;
        /* Asleep in its loop but not parked: the off-CPU sample shows it. */
        if (!offcpu_in_park_call(o->syscall)) {
                tr->sleeps_not_parks++;
                return 0;
        }
        r = d9_enc_worker_park(tr->enc, o->off_ts, t->worker, 0, o->cpu_ns, o->hdr.tid);
        if (r < 0)
                return r;
        tr->events++;
        tr->sched_parks++;
        if (tr->offcpu_open)
                return 0;
        return d9_enc_worker_unpark(tr->enc, o->hdr.ts, t->worker, 0, o->cpu_ns, o->sched_wait_ns, o->hdr.tid);
}

bool translate_thread_is_worker(struct translate *tr, uint32_t tid)
{
        const struct tr_thread *t = thread_find(tr, tid);

        return t && t->worker < D9_WORKER_BLOCKING;
}

int translate_open_offcpu(struct translate *tr, const struct d9_rec_offcpu *o)
{
        int r;

        tr->offcpu_open = true;
        r = translate_record(tr, o, sizeof(*o));
        tr->offcpu_open = false;
        return r;
}

#define MAX_FRAMES TRANSLATE_STACK_FRAMES_MAX

/* A stack taken in d9d's own probe path (the uprobe trap and handler, our
 * BPF programs): its kernel frames become one "[d9d uprobe]" frame, so a
 * flamegraph shows d9d's cost as one thing of its own and the target's
 * own hot spots stay on top (docs/stacks.md). */
static uint32_t collapse_probe_path(struct translate *tr, uint64_t *frames, uint32_t n, uint32_t n_kern)
{
        const char *names[D9_STACK_KERN_MAX];
        unsigned mark;

        if (!tr->ksyms && n_kern)
                tr->ksyms = ksyms_get_ready();
        if (!n_kern || n_kern > D9_STACK_KERN_MAX || !tr->ksyms)
                return n;
        for (uint32_t i = 0; i < n_kern; i++)
                names[i] = ksyms_lookup(tr->ksyms, frames[i]);
        mark = stack_mark_probe_path(names, n_kern);
        if (!mark)
                return n;
        tr->probe_stacks++;
        frames[0] = stack_mark_addr(mark);
        memmove(frames + 1, frames + n_kern, (n - n_kern) * sizeof(*frames));
        return n - n_kern + 1;
}

/* The slot for a thread's next STACK record: the other slot may hold a
 * stack whose owner record is still to come; take it only if it is free
 * (or used). */
static struct tr_stack *stack_slot(struct tr_thread *t)
{
        struct tr_stack *st = &t->stk[t->stk_next];

        if (st->id && !t->stk[t->stk_next ^ 1].id)
                return &t->stk[t->stk_next ^ 1];
        t->stk_next ^= 1;
        return st;
}

/* The unwinder learns where the plan's uprobes sit: a sample taken in one's
 * trap is unwound from the site (unwinder_set_trap_sites). Once per plan;
 * a late plan comes after stacks were unwound without one. */
static void trap_sites_set(struct translate *tr)
{
        const struct probe_plan *p = tr->plan;
        uint64_t *sites;
        size_t n = 0;

        if (!tr->unw || !p || tr->trap_sites_plan == p)
                return;
        sites = calloc(p->n_points ? p->n_points : 1, sizeof(*sites));
        if (!sites)
                return;
        for (size_t i = 0; i < p->n_points; i++)
                if (!p->points[i].skipped)
                        sites[n++] = p->points[i].vaddr;
        if (unwinder_set_trap_sites(tr->unw, p->build_id, sites, n) == 0)
                tr->trap_sites_plan = p;
        free(sites);
}

/* Unwinds a STACK record into h (the record's fields later steps read,
 * then the frames): what on_stack uses now, or what a session holds while
 * its plan is built (translate_stack_ahead). */
static void stack_unwind(struct translate *tr, const struct d9_rec_stack *rec, size_t size,
                         struct translate_held_stack *h)
{
        uint32_t n_kern = 0;
        int n = 0;

        memset(h, 0, offsetof(struct translate_held_stack, frames));
        h->hdr = rec->hdr;
        h->hdr.type = TRANSLATE_REC_HELD_STACK;
        h->stack_id = rec->stack_id;
        h->worker_rt = rec->worker_rt;
        h->worker_found_ts = rec->worker_found_ts;
        h->worker = rec->worker;
        h->flags = rec->flags;
        h->user_len = rec->user_len;
        tr->stack_bytes += size;
        if (!tr->unw) {
                struct unwind_opts uo = { .hide_kernel = tr->hide_kernel, .copy_bytes = tr->stack_copy_bytes,
                                          .want_maps = tr->want_maps, .want_ctx = tr->want_maps_ctx };

                if (unwinder_new(tr->pid, &uo, &tr->unw) < 0)
                        tr->unw = NULL;
                else
                        unwinder_take_maps(tr->unw, tr->unw_maps);
                tr->unw_maps = tr->unw ? NULL : tr->unw_maps;
        }
        trap_sites_set(tr);
        if (!tr->unw || (n = unwinder_stack(tr->unw, rec, size, h->frames, MAX_FRAMES, &n_kern)) <= 0) {
                tr->stacks_failed++;
                /* Over the unwind budget (daemon/record/unwind.h): dropped, and
                 * said so in the trace with the next stack that unwinds. */
                tr->stacks_lost += n == -EBUSY;
                h->fail = !tr->unw || n == -ENOENT ? STACK_MARK_NO_MODULES :
                          n == -EBUSY ? STACK_MARK_UNWIND_BUDGET : STACK_MARK_UNWIND_NONE;
                return;
        }
        h->n = (uint32_t)n;
        h->n_kern = n_kern;
        h->cut = unwinder_last_cut(tr->unw);
        h->unread = unwinder_last_unread(tr->unw);
        h->capped = unwinder_last_capped(tr->unw);
        /* Cut by the plain copy: this thread's next stacks are copied whole,
         * within the byte cap (docs/stacks.md, "Deep stacks"). Said here, as
         * the stack is unwound, so a stack held while the plan is built
         * switches the thread at once, not seconds later at its replay. */
        if (h->cut && !(h->flags & (D9_SREC_DEEP | D9_SREC_CAPPED | D9_SREC_ROOM)) && tr->deep_thread)
                tr->deep_thread(tr->deep_ctx, h->hdr.tid);
}

/* A STACK record comes right before the SAMPLE/OFFCPU record of the same
 * thread that names it: its frames are kept on the thread for that one. */
static void on_stack_frames(struct translate *tr, const struct translate_held_stack *h, struct tr_thread *t)
{
        struct unwind_stats us;
        struct tr_stack *st;
        uint32_t n = h->n;

        if (tr->stack_workers)
                translate_stack_worker(tr, h->hdr.tid, h->worker_rt, h->worker, h->worker_found_ts,
                                       h->flags & D9_SREC_WK_SEARCH);
        st = stack_slot(t);
        if (!st->frames)
                st->frames = malloc(MAX_FRAMES * sizeof(*st->frames));
        st->id = h->stack_id;
        st->n = 0;
        if (!h->n || !st->frames) {
                st->fail = h->n ? STACK_MARK_UNWIND_NONE : h->fail;
                tr->stacks_failed += h->n != 0;
                return;
        }
        memcpy(st->frames, h->frames, n * sizeof(*st->frames));
        if (tr->stacks_lost && translate_lost(tr, h->hdr.ts, tr->stacks_lost, "stack_unwind") == 0)
                tr->stacks_lost = 0;
        tr->stacks++;
        if (h->flags & D9_SREC_DEEP) {
                tr->stacks_deep++;
                tr->stacks_deep_bytes += h->user_len;
        }
        if (tr->unw) {
                unwinder_get_stats(tr->unw, &us);
                tr->frames_outside = us.outside;
                tr->stacks_in_trap = us.trap_sites;
        }
        if (tr->stack_workers)
                long_poll_on_stack(tr, t, h->stack_id, st->frames, n, h->n_kern, h->cut || h->unread || h->capped);
        attach_poll_on_stack(tr, t, h->stack_id, st->frames, n, h->n_kern);
        /* Say where a stack stops short, so a flame graph does not show
         * the innermost frames as if they were all there was. */
        if (h->cut && n < MAX_FRAMES) {
                bool rate = (h->flags & D9_SREC_CAPPED) != 0, room = (h->flags & D9_SREC_ROOM) != 0;

                st->frames[n++] = stack_mark_addr(rate ? STACK_MARK_CUT_RATE : room ? STACK_MARK_CUT_ROOM : STACK_MARK_CUT);
                tr->stacks_cut++;
                tr->stacks_cut_capped += rate;
                tr->stacks_cut_room += room;
        } else if (h->unread && n < MAX_FRAMES) {
                st->frames[n++] = stack_mark_addr(STACK_MARK_CUT_UNREAD);
                tr->stacks_cut_unread++;
        } else if (h->capped && n < MAX_FRAMES) {
                /* Deep recursion (npm postgrestools: 128 frames of one
                 * function): the poll frame and main lie beyond the walk. */
                st->frames[n++] = stack_mark_addr(STACK_MARK_FRAME_CAP);
                tr->stacks_capped++;
        }
        st->n = collapse_probe_path(tr, st->frames, n, h->n_kern);
}

static void on_stack(struct translate *tr, const struct d9_rec_stack *rec, size_t size, struct tr_thread *t)
{
        const struct translate_held_stack *h;

        if (translate_stack_ahead(tr, rec, size, &h) < 0) {
                tr->stacks_failed++;
                return;
        }
        on_stack_frames(tr, h, t);
}

ssize_t translate_stack_ahead(struct translate *tr, const void *rec, size_t size,
                              const struct translate_held_stack **out)
{
        if (size < D9_REC_STACK_FIXED || ((const struct d9_rec_hdr *)rec)->type != D9_REC_STACK)
                return -EINVAL;
        if (!tr->held_scratch && !(tr->held_scratch = malloc(TRANSLATE_HELD_STACK_MAX)))
                return -ENOMEM;
        stack_unwind(tr, rec, size, tr->held_scratch);
        *out = tr->held_scratch;
        return (ssize_t)translate_held_stack_size(tr->held_scratch);
}

int translate_stack_frames(struct translate *tr, uint32_t tid, uint64_t stack_id, const uint64_t *frames,
                           uint32_t n, uint32_t n_kern, bool cut)
{
        struct tr_thread *t = thread_get(tr, tid);
        struct tr_stack *st = t ? stack_slot(t) : NULL;

        if (!st || (!st->frames && !(st->frames = malloc(MAX_FRAMES * sizeof(*st->frames)))))
                return -ENOMEM;
        if (n > MAX_FRAMES)
                n = MAX_FRAMES;
        memcpy(st->frames, frames, n * sizeof(*frames));
        st->id = stack_id;
        st->n = n;
        if (tr->stack_workers)
                long_poll_on_stack(tr, t, stack_id, st->frames, n, n_kern < n ? n_kern : n, cut);
        attach_poll_on_stack(tr, t, stack_id, st->frames, n, n_kern < n ? n_kern : n);
        return 0;
}

/* The thread's stack named stack_id, taken (its slot freed), or NULL. */
static struct tr_stack *take_stack(struct tr_thread *t, uint64_t stack_id)
{
        for (int k = 0; stack_id && k < 2; k++) {
                if (t->stk[k].id == stack_id) {
                        t->stk[k].id = 0;
                        return &t->stk[k];
                }
        }
        return NULL;
}

/* A CPU sample's stack; without one, the sampled user address (if any)
 * and the mark saying why the rest is missing: a sample in the kernel
 * whose STACK record was dropped (ring full) had an empty callchain, and
 * one in user code a single frame that read as a whole stack (npm codex
 * under load, 2-5 per 6 s; docs/stacks.md, "Samples without a stack"). */
static uint32_t sample_stack(struct translate *tr, struct tr_thread *t, uint64_t stack_id, uint64_t ip)
{
        struct tr_stack *st = take_stack(t, stack_id);
        uint64_t chain[2];
        uint32_t atom, n = 0;

        if (st && st->n && d9_enc_intern_stack(tr->enc, st->frames, st->n, &atom) == 0)
                return atom;
        if (ip && !(tr->hide_kernel && ip >= UNWIND_KERNEL_MIN))
                chain[n++] = ip;
        chain[n++] = stack_mark_addr(st && st->fail ? st->fail : STACK_MARK_MISSING);
        tr->cpu_no_stack++;
        if (d9_enc_intern_stack(tr->enc, chain, n, &atom) == 0)
                return atom;
        return tr->empty_stack;
}

static uint32_t offcpu_stack(struct translate *tr, struct tr_thread *t, const struct d9_rec_offcpu *o)
{
        struct tr_stack *st = take_stack(t, o->stack_id);
        uint64_t mark, marked[MAX_FRAMES + 1];
        uint32_t atom;

        /* Still runnable at the switch-out: said at the leaf, where the
         * kernel's scheduler frames would be (stack_marks.h). */
        if (st && st->n && o->prev_state == 0 && st->n <= MAX_FRAMES) {
                marked[0] = stack_mark_addr(STACK_MARK_RUNNABLE);
                memcpy(marked + 1, st->frames, st->n * sizeof(*marked));
                if (d9_enc_intern_stack(tr->enc, marked, st->n + 1, &atom) == 0)
                        return atom;
        }
        if (st && st->n && d9_enc_intern_stack(tr->enc, st->frames, st->n, &atom) == 0)
                return atom;
        if (o->stack_id)
                mark = st ? st->fail : STACK_MARK_MISSING;
        else
                mark = o->no_stack > D9_NOSTACK_NONE && o->no_stack < D9_NOSTACK_MAX ? o->no_stack
                                                                                   : D9_NOSTACK_OFF;
        mark = stack_mark_addr((unsigned)mark);
        tr->offcpu_no_stack++;
        if (d9_enc_intern_stack(tr->enc, &mark, 1, &atom) == 0)
                return atom;
        return tr->empty_stack;
}

/* The exec the attach landed in: Popen and a shell's `&` return while the
 * child is still inside execve (the kernel fires its exec event at the
 * end; 17 of 200 Python Popens looked at were still in it), so a
 * `record --pid $!` can see the exec that made the very image it planned.
 * Before any uprobe joined nothing of the image is lost: sched and CPU
 * records follow the tgid, and uprobes attach to the planned file. */
static bool exec_into_planned_file(const struct translate *tr, const void *rec)
{
        const struct d9_rec_proc *p = rec;
        uint64_t dev = makedev(p->exec_dev >> 20, p->exec_dev & 0xfffff);

        return tr->exe_ino && p->exec_ino == tr->exe_ino && dev == tr->exe_dev && p->hdr.ts < tr->uprobes_from_ts;
}

/* A poll start, poll end or park of t's own was translated (r: how): a
 * poll t was in since the attach ended before it, written now, after the
 * record named t's worker. */
static int after_own_record(struct translate *tr, struct tr_thread *t, int r)
{
        int e = r >= 0 ? attach_poll_own_record(tr, t) : 0;

        return e < 0 ? e : r;
}

int translate_record(struct translate *tr, const void *rec, size_t size)
{
        const struct d9_rec_hdr *h = rec;
        struct tr_thread *t;
        int r = 0;

        tr->records++;
        if (size < sizeof(*h))
                return -EBADMSG;
        if (!tr->first_ts || h->ts < tr->first_ts)
                tr->first_ts = h->ts;
        if (h->ts > tr->last_ts)
                tr->last_ts = h->ts;
        t = thread_get(tr, h->tid);
        if (!t)
                return -ENOMEM;
        if (tr->ends_by_pending && tr->enc && (r = translate_settle_poll_ends(tr, false)) < 0)
                return r;
        if (h->lost && tr->enc && (r = poll_end_lost(tr, t, h, size)) < 0)
                return r;
        switch (h->type) {
        case D9_REC_POLL_START:
        case D9_REC_POLL_END:
        case D9_REC_SPAWN:
        case D9_REC_TERMINATE:
                if (size < sizeof(struct d9_rec_task))
                        return -EBADMSG;
                r = on_task(tr, rec, t);
                /* A spawn or a terminate comes from inside a poll: only a
                 * poll's start or end shows that the thread left it. */
                if (h->type == D9_REC_POLL_START || h->type == D9_REC_POLL_END)
                        r = after_own_record(tr, t, r);
                if (r == 1)
                        return 0;
                break;
        case D9_REC_WAKE: {
                const struct d9_rec_wake *w = rec;
                if (size < sizeof(*w))
                        return -EBADMSG;
                r = d9_enc_wake(tr->enc, h->ts, w->waker_task_id, w->woken_task_id,
                                t->worker > 254 ? 255 : (uint8_t)t->worker);
                break;
        }
        case D9_REC_PARK:
        case D9_REC_UNPARK:
                if (size < sizeof(struct d9_rec_park))
                        return -EBADMSG;
                r = after_own_record(tr, t, on_park(tr, rec, t));
                if (r == 1)
                        return 0;
                break;
        case D9_REC_OFFCPU:
                if (size < sizeof(struct d9_rec_offcpu))
                        return -EBADMSG;
                r = on_offcpu(tr, rec, t);
                if (r == 1)
                        return 0;
                break;
        case D9_REC_CPU_SAMPLE: {
                const struct d9_rec_sample *s = rec;
                if (size < sizeof(*s))
                        return -EBADMSG;
                uint32_t stack = sample_stack(tr, t, s->stack_id, s->ip);

                r = d9_enc_cpu_sample(tr->enc, h->ts, sample_lane(t), h->tid, 0, thread_name_atom(tr, t, s->comm),
                                      stack, h->cpu);
                attach_poll_on_sample(tr, t, h->ts, s->stack_id, stack);
                break;
        }
        case D9_REC_STACK:
                on_stack(tr, rec, size, t);
                return 0;
        case TRANSLATE_REC_HELD_STACK: {
                const struct translate_held_stack *hs = rec;

                if (size < offsetof(struct translate_held_stack, frames) || hs->n > MAX_FRAMES ||
                    size < translate_held_stack_size(hs))
                        return -EBADMSG;
                on_stack_frames(tr, hs, t);
                return 0;
        }
        case D9_REC_RUN_SAMPLE: {
                const struct d9_rec_run *run = rec;
                struct tr_stack *st;

                if (size < sizeof(*run))
                        return -EBADMSG;
                tr->run_ticks++;
                st = take_stack(t, run->stack_id);
                r = tr->stack_workers && st && st->n ? long_poll_on_run(tr, t, run, st->frames, st->n) : 0;
                if (r < 0 && !tr->error)
                        tr->error = r;
                return r < 0 ? r : 0;
        }
        case D9_REC_EXIT:
                tr->exited++;
                return 0;
        case D9_REC_EXEC:
                if (size >= sizeof(struct d9_rec_proc) && exec_into_planned_file(tr, rec))
                        tr->exec_planned++;
                else
                        tr->exec_seen++;
                return 0;
        default:
                return 0; /* WAKEUP and future types carry no dial9 event */
        }
        if (r < 0) {
                if (!tr->error)
                        tr->error = r;
                return r;
        }
        tr->events++;
        return 0;
}

int translate_lost(struct translate *tr, uint64_t ts, uint64_t lost, const char *source)
{
        struct d9_enc_value v[2] = { { .present = true, .u = lost }, { .present = true } };
        int r = d9_enc_intern_string(tr->enc, source, strlen(source), &v[1].atom);

        return r < 0 ? r : d9_enc_event(tr->enc, tr->lost_schema, ts, v);
}

int translate_offcpu_short(struct translate *tr, uint64_t ts, uint64_t intervals, uint64_t total_ns,
                           uint64_t min_ns)
{
        struct d9_enc_value v[3] = {
                { .present = true, .u = intervals },
                { .present = true, .u = total_ns },
                { .present = true, .u = min_ns },
        };

        return d9_enc_event(tr->enc, tr->offcpu_short_schema, ts, v);
}

int translate_probes_event(struct translate *tr, uint64_t ts, const char *probes, bool attached, const char *why)
{
        struct d9_enc_value v[3] = { { .present = true }, { .present = true, .u = attached }, { .present = true } };
        int r;

        if (!tr->enc)
                return -ENOENT;
        r = d9_enc_intern_string(tr->enc, probes, strlen(probes), &v[0].atom);
        if (!r)
                r = d9_enc_intern_string(tr->enc, why, strlen(why), &v[2].atom);
        if (!r)
                r = d9_enc_event(tr->enc, tr->probes_schema, ts, v);
        tr->events += r == 0;
        return r;
}

void translate_window_closing(struct translate *tr, uint64_t ts)
{
        tr->window_closing_ts = ts;
}

int translate_window(struct translate *tr, uint64_t ts, bool on)
{
        tr->window_open = on;
        tr->window_closing_ts = 0;
        if (on)
                tr->window_opened_ts = ts;
        tr->window_closed_ts = on ? 0 : ts;
        tr->wake_probes = on && tr->window_wakes;
        for (size_t i = 0; !on && tr->enc && i < tr->threads_cap; i++) {
                struct tr_thread *t = &tr->threads[i];
                int r = 0;

                if (!t->tid || t->poll_worker == D9_WORKER_NONE)
                        continue;
                if (t->poll_worker < D9_WORKER_BLOCKING)
                        r = d9_enc_poll_end(tr->enc, own_poll_end(tr, t, ts), t->poll_worker);
                else
                        r = blocking_poll_end(tr, t, ts);
                if (r < 0)
                        return r;
                tr->events++;
                t->poll_worker = D9_WORKER_NONE;
                t->poll_cut = true;
        }
        return 0;
}

int translate_wake_window(struct translate *tr, uint64_t ts, bool attached, uint64_t on_ms, uint64_t period_ms)
{
        struct d9_enc_value v[3] = {
                { .present = true, .u = attached },
                { .present = true, .u = on_ms },
                { .present = true, .u = period_ms },
        };
        uint8_t said = attached ? WAKE_SAID_ON : WAKE_SAID_OFF;
        int r;

        /* Once per change in a segment: the segment's opening restates it,
         * and the session's start said the same again (every recording
         * began with two attached=1, npm apimock). */
        if (tr->wake_window_said == said)
                return 0;
        r = d9_enc_event(tr->enc, tr->wake_window_schema, ts, v);
        tr->events += r == 0;
        if (r == 0)
                tr->wake_window_said = said;
        return r;
}

void translate_set_exe_file(struct translate *tr, uint64_t dev, uint64_t ino)
{
        tr->exe_dev = dev;
        tr->exe_ino = ino;
}

void translate_uprobes_from(struct translate *tr, uint64_t ts)
{
        tr->uprobes_from_ts = ts;
}

void translate_worker_list(const struct translate *tr, char *buf, size_t len)
{
        workers_list(&tr->ws, buf, len);
}

void translate_runtimes(const struct translate *tr, struct tr_runtimes *out)
{
        workers_runtimes(&tr->ws, out);
}
