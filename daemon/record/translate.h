/* translate: BPF records (bpf/d9_events.h) -> dial9 events (proto/).
 * Owns the per-target identity maps: thread -> worker id, probe cookie ->
 * interned future-type label, thread -> name. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bpf/d9_events.h"
#include "proto/d9proto.h"
#include "daemon/record/live_tasks.h"
#include "daemon/record/spawn_label.h"
#include "daemon/record/workers.h"
#include "daemon/symbolize/mapping.h"

struct probe_plan;
struct unwind_maps;

struct tr_thread {
        uint32_t tid;                   /* 0 = empty slot */
        uint32_t worker;                /* the worker it drives (workers.h),
                                         * D9_WORKER_NONE while it drives none */
        uint32_t poll_worker;           /* lane of its open poll, D9_WORKER_NONE if none */
        uint64_t poll_ts;               /* when its last runtime-task poll began */
        uint64_t poll_end_ts;           /* ... and ended (0 while it is open) */
        uint64_t poll_task;             /* ... and which task it polls */
        uint64_t poll_end_by;           /* its open poll ended no later than this:
                                         * its task's start on another thread */
        uint64_t loop_found_ts;         /* default set: when BPF found the loop of
                                         * its worker (translate_stack_worker) */
        bool older_loop;                /* ... whose core another thread's newer
                                         * loop has now: it drives no worker */
        uint32_t stacks_unnamed;        /* its stacks in a row that named no worker */
        bool stacks_looked;             /* BPF looked for its worker (default set) */
        bool pool_thread;               /* has run blocking-pool tasks, or waits in the
                                         * pool's loop for one (samples: 254) */
        uint64_t pool_not_outer;        /* outermost frames of its last stack not in the
                                         * pool's loop (stack_sites.c), */
        uint32_t pool_not_fns;          /* ... while the loop had this many functions */
        uint32_t job_unanswered;        /* default set: cookie + 1 of a job it showed
                                         * while BPF did not yet say whether it runs
                                         * a worker loop */
        uint32_t pool_job;              /* ... of the job that made it the pool's */
        bool poll_cut;                  /* its poll was closed by a window's end: a
                                         * late end from BPF's stale state is not its */
        uint64_t blocking_ts;           /* its open blocking-pool poll: start, */
        uint64_t blocking_task;         /* task id, */
        uint64_t blocking_cookie;       /* and label (cookie, boxed poll fn) */
        uint64_t blocking_future;
        bool blocking_nested;           /* runtime task polls ran inside it: a
                                         * worker's launch, ended at its terminate */
        uint64_t park_run_delay;        /* run_delay at the last park */
        /* A sleep from before the attach (D9_OFFCPU_BEGAN_BEFORE) seen
         * before the thread showed its worker: its park and unpark are
         * written when it does (worker_take). before_on 0: none. */
        uint64_t before_off, before_on, before_cpu, before_wait;
        bool before_in_pool_poll;       /* its stack showed a blocking-pool poll */
        uint32_t name_atom;
        char name[17];                  /* its name at its last CPU sample */
        /* The last two STACK records unwound here, used by the SAMPLE or
         * OFFCPU record naming them: a CPU sample can land between an
         * off-CPU interval's STACK and OFFCPU records (the task_work
         * writes both), so its STACK must not replace the pending one. */
        struct tr_stack {
                uint64_t id;            /* 0: free (used) */
                uint64_t *frames;       /* kernel first, leaf first */
                uint32_t n;             /* 0: it did not unwind, because of */
                uint32_t fail;          /* ... this enum stack_mark */
        } stk[2];
        uint8_t stk_next;               /* slot of the next STACK record */
        /* long_poll.c (default set): what stack lp_stack showed: cookie + 1
         * of its innermost task poll frame and of its launch poll frame. */
        uint64_t lp_stack;
        uint32_t lp_poll, lp_launch;
        uint32_t lp_depth;              /* user frames above that task poll frame */
        uint64_t lp_callee;             /* the frame that poll frame called (0: none) */
        /* The open run of fast ticks in one task poll (run_poll = cookie + 1),
         * and its stack: of the tick deepest in the poll (run_depth).
         * run_preempted: a preemption inside the poll is part of the run (a
         * run a preemption opened has no tick and no stretch, run_since 0). */
        uint32_t run_poll, run_n, run_stack_atom, run_gen, run_depth;
        uint64_t run_since, run_first, run_last;
        bool run_preempted;
        bool run_yielded;               /* ... by the thread's own sched_yield */
        uint64_t run_off_ns;            /* ... switched out still runnable, in all */
        bool run_stalled;               /* counted as a stall while still running */
        uint64_t run_callee;            /* lp_callee of the run's first stack */
        /* attach_poll.c (full set): the innermost task poll frame of its
         * stack ap_stack; the poll it has been in since before the uprobes
         * attached (ap_poll = cookie + 1), its CPU samples in it, the last
         * one's time and the latest stack (atom of encoder generation
         * ap_gen). ap_done: a poll, park or poll end of its own came. */
        uint64_t ap_stack, ap_last;
        uint32_t ap_stack_poll, ap_poll, ap_n, ap_atom, ap_gen;
        bool ap_done;
        bool ap_job;                    /* ... its stack shows a spawn_blocking job */
};

struct lp_range;
struct stack_site;

/* A boxed `dyn Future` seen in a poll: its concrete poll fn, named. */
struct tr_dyn {
        uint64_t addr;
        char *name;
        uint32_t atom;
};

/* launch_polls: a blocking poll seen below a task poll (a worker loop's
 * launch), and seen so on a thread BPF named a multi-thread worker of. */
enum { LAUNCH_SEEN = 1, LAUNCH_NAMED = 2 };

/* What the segment's last D9WakeWindowEvent said. */
enum wake_said { WAKE_SAID_NONE, WAKE_SAID_OFF, WAKE_SAID_ON };

struct translate {
        pid_t pid;
        bool hide_kernel;               /* no kernel addresses for this session's reader */
        const struct probe_plan *plan;
        struct d9_enc *enc;             /* current segment's encoder */
        int lost_schema;                /* D9LostEventsEvent handle in enc */
        int offcpu_short_schema;        /* D9ShortOffCpuEvent handle in enc */
        int wake_window_schema;         /* D9WakeWindowEvent handle in enc */
        uint8_t wake_window_said;       /* enum wake_said: its last in this segment */
        int blocking_schema;            /* D9BlockingPollEvent handle in enc */
        int label_addr_schema;          /* D9TaskLabelAddrEvent handle in enc */
        int probes_schema;              /* D9ProbesEvent handle in enc */
        uint32_t empty_atom, empty_stack;
        uint32_t *label_atoms;          /* per plan cookie; UINT32_MAX = not yet */
        size_t n_labels;
        bool wake_probes;               /* TaskSpawnEvent.instrumented */
        bool spawn_from_first_poll;     /* spawns are recorded: a task id no
                                         * spawn probe saw gets one at its first poll */
        bool park_from_sched;           /* no park probe attached: parks are a worker's
                                         * voluntary off-CPU intervals outside a poll
                                         * (full-detail windows: park_probes_saw) */
        bool end_at_next_poll;          /* entry-only poll end: a POLL_START also ends
                                         * the thread's open poll (BPF writes no
                                         * POLL_END for it) */
        struct tr_dyn *dyn;             /* boxed futures' concrete poll fns */
        size_t n_dyn;
        struct exe_map exe;             /* where the executable is mapped (n 0: not known) */
        struct spawn_labels spawn_labels;       /* the plan's poll points by task vtable */
        bool offcpu_open;               /* translating a sleep still open at the
                                         * end (open_sleep.h): no unpark */
        uint64_t recording_start_ts;    /* its first segment's start (session.c:
                                         * when the ring began to record): a
                                         * sleep from before the attach is
                                         * written from there, not earlier */
        struct unwinder *unw;           /* user stacks, created on the first STACK record */
        const struct probe_plan *trap_sites_plan;       /* the plan whose probe sites
                                                         * unw knows (unwinder_set_trap_sites) */
        struct unwind_maps *unw_maps;   /* the last map handed in before that */
        /* The unwinder wants a newer map (unwind_opts.want_maps); NULL: none. */
        void (*want_maps)(void *ctx);
        void *want_maps_ctx;
        uint64_t stacks, stacks_failed; /* STACK records unwound / not */
        uint64_t offcpu_no_stack;       /* off-CPU samples written with a "no stack" mark */
        uint64_t cpu_no_stack;          /* CPU samples written so (their user address, then the mark) */
        uint64_t probe_stacks;          /* stacks taken in d9d's own probes ([d9d uprobe]) */
        uint64_t frames_outside;        /* callers outside every mapping, dropped by the unwinder */
        uint64_t stacks_in_trap;        /* samples in a uprobe trap, unwound from its site */
        uint32_t files_not_local;       /* module files of the last map on a non-local
                                         * file system: not opened, no CFI from them */
        uint64_t stacks_cut;            /* stacks ending in the cut mark: callers past the copy */
        uint64_t stacks_capped;         /* ... ending in the frame-limit mark */
        uint64_t stacks_cut_capped;     /* ... of them, deeper copies refused by the byte cap */
        uint64_t stacks_cut_room;       /* ... of them, deeper copies left out for the ring's room */
        uint64_t stacks_cut_unread;     /* stacks ending where a step needed a page not in memory */
        uint64_t stacks_deep;           /* stacks copied whole past the 8 KiB (D9_SREC_DEEP) */
        uint64_t stacks_deep_bytes;     /* their copied bytes */
        uint64_t stack_bytes;           /* STACK record bytes read from the ring */
        uint32_t stack_copy_bytes;      /* user stack bytes BPF copies per stack (session's) */
        /* A thread's stack was cut at the end of that copy: ask BPF for deep
         * copies of its stacks (d9_bpf_target_stack_deep); NULL: none. */
        int (*deep_thread)(void *ctx, uint32_t tid);
        void *deep_ctx;
        struct translate_held_stack *held_scratch; /* on_stack's unwound frames */
        struct ksyms *ksyms;            /* kernel names, to tell d9d's probe path */
        uint64_t stacks_lost;           /* over the unwind budget, not yet in a
                                         * D9LostEventsEvent */
        uint64_t offcpu_after_poll;     /* sleeps inside a poll whose record came after its end */
        struct live_tasks live;         /* task ids seen and not yet terminated */
        uint64_t tasks_forgotten;       /* ... dropped unterminated (live.forgotten, kept past release) */

        struct tr_thread *threads;      /* open addressing, power-of-two size */
        size_t threads_cap, threads_used;
        struct tr_workers ws;           /* worker ids and runtimes */
        uint32_t holder[TR_MAX_WORKERS]; /* tid of the thread that drives (or
                                         * last drove) each worker, 0 if none */
        uint32_t lane_tid[TR_MAX_WORKERS]; /* the thread of each lane's last
                                         * runtime-task poll start, */
        uint64_t lane_task[TR_MAX_WORKERS]; /* ... and its task: a poll start
                                         * looks for its task here before
                                         * it looks up any thread */

        uint64_t first_ts, last_ts;
        uint64_t events;                /* dial9 events written */
        uint64_t records;               /* BPF records seen */
        uint64_t exited, exec_seen;     /* EXIT / EXEC records */
        uint64_t run_ticks;             /* RUN_SAMPLE records: run ticks that kept a stack */
        uint64_t exec_planned;          /* EXECs into the planned file before any
                                         * uprobe joined: the attach's own */
        uint64_t exe_dev, exe_ino;      /* the planned file (translate_set_exe_file) */
        uint64_t uprobes_from_ts;       /* when uprobes joined; UINT64_MAX: not yet */
        uint64_t sched_parks;           /* parks derived from off-CPU records */
        uint64_t sleeps_not_parks;      /* a worker's sleeps outside a task poll
                                         * in no park's system call, or from
                                         * before the attach outside its loop */
        uint64_t polls_ended_by_task;   /* polls ended by their task's next
                                         * poll start on another thread */
        uint64_t poll_ends_lost;        /* open polls ended at their start: the
                                         * thread's records right after were lost */
        uint64_t ends_by_pending;       /* threads with a poll_end_by, */
        uint64_t ends_by_oldest;        /* ... the earliest of them */
        uint64_t cores_handed;          /* a worker's core seen moving to another thread
                                         * (block_in_place) */
        uint64_t polls_by_thread;       /* runtime task polls whose worker BPF did not
                                         * find (workers.h: the thread stands in) */
        uint64_t ids_by_thread;         /* worker ids given to a thread standing in
                                         * for its worker, either probe set */
        /* long_poll.c: workers and long polls from stacks (default set). */
        bool stack_workers;
        bool workers_from_polls;        /* poll uprobes name workers; stacks carry none
                                         * (BPF looks only without them) */
        bool attach_polls;              /* attach_poll.c: polls running at the attach (full set) */
        bool attach_polls_lost;         /* ... records lost since: no sample proves one */
        uint64_t run_period_ns;
        int (*lp_vaddr_of)(void *ctx, uint64_t addr, uint64_t *vaddr);
        void *lp_ctx;
        struct lp_range *lp_ranges;     /* poll functions, sorted by start */
        size_t n_lp_ranges;
        uint8_t *launch_polls;          /* per cookie: LAUNCH_SEEN, LAUNCH_NAMED */
        bool launch_known;              /* one of them LAUNCH_SEEN */
        /* The function a frame's address lies in (the unwinder's FDEs). */
        int (*lp_fn_of)(const struct translate *tr, uint64_t addr, uint64_t *fn);
        /* stack_sites.c: Tokio's blocking-pool loop (the functions calling
         * blocking-pool polls, and the caller frames already looked up);
         * which task poll whole stacks through a site showed, for stacks cut
         * before their poll frame, and how many cut stacks that placed. */
        uint64_t pool_run_fns[4], pool_callers[8];
        uint32_t n_pool_run_fns, n_pool_callers;
        struct stack_site *stack_sites;
        uint64_t cut_in_poll_by_site;
        int long_poll_schema;
        uint32_t enc_gen;               /* bumped with each encoder (atoms) */
        uint64_t long_polls;            /* D9LongPollEvents written */
        /* Full detail after a stall (session_window.c): long polls of at
         * least stall_ns (0: not counted), and those while a window was open. */
        uint64_t stall_ns, stalls, stalls_in_window;
        bool window_open;
        uint64_t window_opened_ts;      /* the last window's opening */
        uint64_t window_closed_ts;      /* the last window's close, while none is open */
        uint64_t window_closing_ts;     /* a close whose ring is being drained first */
        bool window_parks;              /* the window has park points: parks from them */
        bool window_wakes;
        int error;                      /* first encoder error */
};

/* wake_probes: wake points really attached (TaskSpawnEvent.instrumented);
 * park_probes: park points really attached (else parks come from the
 * scheduler's off-CPU records, see translate.c). */
int translate_init(struct translate *tr, pid_t pid, const struct probe_plan *plan, bool wake_probes,
                   bool park_probes);
/* The plan of a session that started recording before it was built
 * (session.c holds the records that need it until then): as translate_init
 * would have taken it, for every record from now on. */
int translate_set_plan(struct translate *tr, const struct probe_plan *plan, bool wake_probes, bool park_probes);
void translate_destroy(struct translate *tr);
/* The session is over: free the unwinder, symbols and per-thread state,
 * keep the counters status shows. No record may follow. */
void translate_release(struct translate *tr);
/* Where the target's executable is mapped now (the session's last map read,
 * placed by the plan's PT_LOADs): what boxed futures' poll fns are named by,
 * from the plan's dyn_fns. Until the first, such tasks carry their poll
 * instance's label. */
void translate_set_exe_map(struct translate *tr, const struct exe_map *map);
/* A newer map and its files, opened off the drain loop (taken over): what
 * user stacks are unwound with. translate itself reads no /proc file. */
void translate_take_unwind_maps(struct translate *tr, struct unwind_maps *m);
/* Switch to a new segment's encoder: interned atoms belong to the old one. */
int translate_set_encoder(struct translate *tr, struct d9_enc *enc);
/* One record from the ring. Returns 0 or a negative errno. */
int translate_record(struct translate *tr, const void *rec, size_t size);
/* Record `lost` dropped records as a D9LostEventsEvent. */
/* Is tid a thread that drives a worker (not the blocking pool, not one
 * that never polled)? */
bool translate_thread_is_worker(struct translate *tr, uint32_t tid);
/* The OFFCPU record of a sleep not over yet as the recording ends
 * (open_sleep.h): translated as any, its park written, its unpark not. */
int translate_open_offcpu(struct translate *tr, const struct d9_rec_offcpu *o);
int translate_lost(struct translate *tr, uint64_t ts, uint64_t lost, const char *source);
/* `intervals` off-CPU intervals, together `total_ns` long, each shorter
 * than `min_ns` and so not recorded: a D9ShortOffCpuEvent. */
int translate_offcpu_short(struct translate *tr, uint64_t ts, uint64_t intervals, uint64_t total_ns,
                           uint64_t min_ns);
/* A STACK record of tid, as unwound (leaf first, n_kern kernel frames
 * first): what the next SAMPLE/OFFCPU/RUN_SAMPLE naming stack_id shows.
 * translate_record does this itself; tests feed synthetic stacks here. */
int translate_stack_frames(struct translate *tr, uint32_t tid, uint64_t stack_id, const uint64_t *frames,
                           uint32_t n, uint32_t n_kern, bool cut);
/* Kernel frames, unwind_opts' default 128 user frames, the cut mark. */
#define TRANSLATE_STACK_FRAMES_MAX (D9_STACK_KERN_MAX + 160)

/* A STACK record unwound ahead of its use: the fields translating it
 * reads later, then its frames. A session holds these instead of the raw
 * records while its plan is built (a copy of up to 8 KiB and more becomes
 * a few hundred bytes). Its type is translate's own: BPF never writes it. */
#define TRANSLATE_REC_HELD_STACK 0x8001
struct translate_held_stack {
        struct d9_rec_hdr hdr;          /* the STACK record's, type TRANSLATE_REC_HELD_STACK */
        uint64_t stack_id, worker_rt, worker_found_ts;
        uint32_t worker, flags, user_len;
        uint32_t n, n_kern;             /* n 0: it did not unwind, because of */
        uint32_t fail;                  /* ... this enum stack_mark */
        uint32_t cut;                   /* the walk needed stack past the copy */
        uint32_t unread;                /* ... or in its pages not in memory */
        uint32_t capped;                /* the walk stopped at the frame limit */
        uint64_t frames[];              /* n of them, kernel first, leaf first */
};
#define TRANSLATE_HELD_STACK_MAX \
        (sizeof(struct translate_held_stack) + TRANSLATE_STACK_FRAMES_MAX * sizeof(uint64_t))

static inline size_t translate_held_stack_size(const struct translate_held_stack *h)
{
        return sizeof(*h) + h->n * sizeof(h->frames[0]);
}

/* Unwinds a STACK record now, for translate_record to take later in its
 * place: unwinding needs no plan, and uses the map of the moment. *out is
 * translate's own, good until its next stack. Returns *out's size, or
 * -EINVAL for another record. */
ssize_t translate_stack_ahead(struct translate *tr, const void *rec, size_t size,
                              const struct translate_held_stack **out);
/* The worker a STACK record says tid's loop runs (0: none; searching: BPF
 * cannot tell yet), as on_stack takes it; tests feed it before
 * translate_stack_frames. */
int translate_stack_worker(struct translate *tr, uint32_t tid, uint64_t rt, uint32_t worker, uint64_t found_ts,
                           bool searching);
/* t's worker id, a new one if it has none yet (long_poll.c). */
uint32_t translate_thread_worker(struct translate *tr, struct tr_thread *t);
/* The future-type label of a plan cookie, interned in the current segment;
 * none (the empty string) for a boxed future's poll instance, which says
 * only the box. */
uint32_t translate_label_atom(struct translate *tr, uint64_t cookie);
/* The label of a poll seen on a stack (the default set's long polls): the
 * cookie's; for a boxed future's poll instance, whose poll reads no
 * vtable there, the function its frame called (callee: that frame's
 * address, 0 if none), named as a boxed poll read at its start would be
 * (npm ace-tool-rs, stripped: every long poll was "unknown future" while
 * the full set named each by address); none if that cannot be told. */
uint32_t translate_stack_label_atom(struct translate *tr, uint64_t cookie, uint64_t callee);
/* How many frames under a boxed future's poll frame its future's poll may
 * be: Tokio's Core::poll, which calls it through the box's vtable, is not
 * always inlined into the poll function (npm grafbase, Tokio 1.47). */
#define TR_BOXED_CALLEE_DEPTH 3
/* The callee for translate_stack_label_atom of poll frame frames[i] (leaf
 * first, n_kern kernel ones first; cookie: its poll's): the frame it
 * called; for a boxed future's, the first of the TR_BOXED_CALLEE_DEPTH
 * frames under it in a function the plan names, else that one. */
uint64_t translate_stack_callee(struct translate *tr, uint64_t cookie, const uint64_t *frames, uint32_t i,
                                uint32_t n_kern);

/* Sampled wakes: the wake points are attached from ts on (or not), for
 * on_ms of every period_ms: a D9WakeWindowEvent. */
int translate_wake_window(struct translate *tr, uint64_t ts, bool attached, uint64_t on_ms, uint64_t period_ms);
/* Write the poll ends that a task's start on another thread decided, once
 * the trace is past them (all: every one, at a segment's end). 0 or a
 * negative errno from the encoder. */
int translate_settle_poll_ends(struct translate *tr, bool all);

/* A probe class joined the recording (attached) or left it at ts: a
 * D9ProbesEvent naming it ("uprobes: poll,spawn,...") and why. Nothing of
 * that class is recorded before its attached=1 or after its attached=0. */
int translate_probes_event(struct translate *tr, uint64_t ts, const char *probes, bool attached, const char *why);

/* A full-detail window opened (on) or closed at ts: while open, parks and
 * wakes come from its uprobes; at its close the polls still open end
 * there (their real end is not recorded). */
int translate_window(struct translate *tr, uint64_t ts, bool on);
/* A window's uprobes went off at ts; what the ring still holds is drained
 * before translate_window(off): those records are the window's (polls end
 * at the next start, as inside it), except switch-outs after ts, parks. */
void translate_window_closing(struct translate *tr, uint64_t ts);

/* The planned executable (st_dev, st_ino of its open file): an EXEC into
 * it before uprobes joined is the exec the attach landed in, not a new
 * program (it counts in exec_planned, not exec_seen). */
void translate_set_exe_file(struct translate *tr, uint64_t dev, uint64_t ino);
/* The uprobes record from ts on (0: from the start). */
void translate_uprobes_from(struct translate *tr, uint64_t ts);

/* "0,1,2": all worker ids in use (an id a thread held only until its first
 * park showed it drives a known core is not). */
void translate_worker_list(const struct translate *tr, char *buf, size_t len);

/* SegmentMetadataEvent entries "runtime.<name>" (workers_runtimes). */
void translate_runtimes(const struct translate *tr, struct tr_runtimes *out);
