/* session: one traced target process, from attach to its last sealed
 * segment. Keyed by pid + process start time, so a recycled PID is a new
 * session in a new folder. */
#pragma once

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "daemon/core/d9d.h"
#include "daemon/record/record_hold.h"
#include "daemon/record/segment.h"
#include "daemon/record/translate.h"
#include "bpf/bpf_loader.h"
#include "bpf/d9_events.h"

struct probe_plan;
struct unwind_maps;
struct d9_bpf_target;
struct seal_job;

enum session_state {
        SESSION_RECORDING,
        SESSION_SEALING,        /* ended; segments still queued for sealing */
        SESSION_DONE,
};

/* Auto-attach on exec: when each step from the exec to the first event was
 * done (CLOCK_MONOTONIC ns, 0 = not yet; list and status give them in µs
 * after the exec), so a slow attach says where its time went. */
struct attach_timeline {
        uint64_t exec;                  /* the kernel's sched_process_exec */
        uint64_t noticed;               /* its exec record read on the loop */
        uint64_t checked;               /* matched a rule, target checked (pidfd, /proc) */
        uint64_t install_begun;         /* the BPF thread took the install */
        uint64_t installed;             /* pid filter, ring and uprobes in place */
        uint64_t uprobes_ns;            /* of which uprobe registration, */
        uint64_t ring_insert_ns;        /* and the ring's insertion in the map of rings */
        uint64_t install_cpu_ns;        /* CPU time the BPF thread spent from begun to maps_read, */
        uint64_t install_runq_ns;       /* and runnable, waiting for a CPU (the rest: blocked) */
        uint64_t maps_read;             /* /proc/PID/maps read, still on the BPF thread */
        uint64_t attached;              /* back on the loop: segment open, ring watched */
        uint64_t first_event;           /* the kernel's time of the first record drained */
        bool planned;                   /* by the planner (not the plan cache, not nothing to plan) */
};

struct session {
        struct d9_watch ring_w;         /* the target's ring buffer */
        struct d9_watch pidfd_w;        /* readable when the target exits */
        struct d9d *d;
        struct session *next;
        uint64_t id;
        pid_t pid;
        uint64_t starttime;             /* /proc/PID/stat field 22, clock ticks since boot */
        pid_t nspid;                    /* its pid in its own pid namespace: names of files it writes */
        uid_t uid;                      /* the target's (owner of /proc/PID) */
        uid_t starter_uid;              /* the peer that attached (may detach, sees it) */
        int status_fd;                  /* /proc/PID/status, for peers other than root */
        int root_fd;                    /* /proc/PID/root (O_PATH), taken with the pidfd valid */
        int proc_fd;                    /* /proc/PID (O_PATH), taken with the pidfd valid:
                                         * the sampler reads below it */
        char *creds;                    /* its Uid/Gid/Groups/Cap lines at attach */
        bool privileged;                /* gained privileges: records discarded from now */
        uint64_t discarded;             /* records discarded for that reason */
        char service[128];
        char exe[4096];
        char pid_chain[128];            /* NSpid: d9d's pid first, then each namespace's below */
        char cgroup[1024];              /* cgroup v2 path at attach */
        char rule[384];                 /* the auto-attach rule that started it, "" = d9ctl */
        int64_t exec_to_attach_ms;      /* auto-attach on exec: from the exec to attached; -1 */
        struct attach_timeline timeline; /* auto-attach on exec: exec .. first event */
        int probes;                     /* enum d9_probe_bits mask asked for */
        uint64_t offcpu_min_us;         /* shorter off-CPU intervals only counted */
        uint64_t resources_every_ms;    /* process resource samples (0: none) */
        bool accept_queues;             /* accept-queue samples asked for */
        struct session_samples {        /* what the sampler delivered, for status */
                uint64_t resources, accept_queues; /* samples written */
                uint64_t lost;          /* not written: the sampler's queue was full */
                uint64_t listeners_unlisted;
                char resources_error[96], accept_queues_error[96]; /* why a kind stopped */
                int resources_errno, accept_queues_errno;          /* -errno of a stop the trace states (not an exit) */
        } samples;
        bool wakes_sampled;             /* wake points attached WAKE_ON_TICKS of */
        unsigned wake_tick;             /* every WAKE_PERIOD_TICKS session ticks */
        bool expect_exec;               /* record -- CMD: the child execs once after attach */
        enum session_state state;
        char end_reason[128];
        uint64_t started_ms, deadline_ms; /* deadline 0 = until detached */
        uint64_t ended_ms;              /* when recording stopped (0: still recording) */
        int64_t started_unix_ms;        /* wall clock at attach, for list */

        char *maps;                     /* last /proc/PID/maps seen: symbols after exit */
        struct open_sleeps *open_sleeps; /* its threads asleep as it stops (open_sleep.h) */
        struct unwind_maps *unw_maps;   /* the attach's map with its files, for
                                         * the unwinder once translate runs */
        char *mapped_exe;               /* the executable's path as the maps spell it */
        struct probe_plan *plan;        /* freed when the recording ends */
        bool had_plan;                  /* ... so status still says whether there was one */
        /* Recording before its plan was built (session_late.c): the plan
         * job, then the job attaching its uprobes, while one is in flight. */
        struct session_late *late;
        bool plan_pending;              /* ring records held in hold until the plan lands */
        bool replaying;                 /* the plan landed: held records go in, a part a turn */
        bool in_replay;                 /* ... this one is being translated */
        struct record_hold hold;
        int64_t plan_ms;                /* the plan landed this long after the attach; -1: not yet */
        int64_t uprobes_ms;             /* ... and its uprobes attached; -1: not (yet) */
        char plan_error[256];           /* why it has no plan or uprobes, "" */
        char end_deferred[128];         /* session_end's reason while uprobes attach */
        /* Full detail after a stall (session_window.c). */
        uint64_t full_on_stall_ms;      /* 0: off */
        struct session_win *win_job;    /* a window opening or closing on the BPF thread */
        struct session_wakes *wake_job; /* the wake points attaching or going, there too */
        struct session_sweep *sweep_job; /* the default set's threads swept again, there too */
        uint64_t win_opened_ms, win_next_ms, win_stalls_seen;
        uint64_t windows;               /* windows opened */
        char win_error[160];
        struct d9_bpf_target *bpf;
        json_t *plan_json;              /* what attached, what is missing and why */
        struct segment_writer seg;
        struct translate tr;

        /* Counters for status. */
        uint64_t events, bytes_sealed, drops, drops_reported;
        struct d9_offcpu_short offcpu_short, offcpu_short_reported;
        struct d9_worker_search worker_search;  /* the default set's, as last read */
        bool worker_resweep_done;               /* its threads swept again (session.c) */
        uint64_t drops_logged_ms;       /* drop warnings: at most one per 10 s */
        uint64_t drops_logged;          /* the count the last warning said */
        struct ring_drains {            /* how the ring was drained, for status: a full ring says why */
                uint64_t woken, timer;  /* drains by BPF's wakeup, by the tick */
                uint64_t fill_max;      /* most bytes pending when a drain began */
                uint64_t gap_max_ns;    /* longest time between the starts of two drains */
                uint64_t last_ns;
                uint64_t ring_bytes;
        } drains;
        uint64_t rate_events, rate_ms;  /* events at the last rate sample */
        uint64_t seg_first_event;       /* tr.events when the open segment began */
        double events_per_s;
        unsigned segments_sealed, segments_pending;
        json_t *sealed_paths;           /* array of sealed segment paths */
        bool stopping;                  /* session_end under way on the BPF thread */
        void (*on_ended)(void *ctx, struct session *s); /* once, when session_end is through */
        void *on_ended_ctx;
};

struct session_request {
        pid_t pid;
        const char *exe;                /* plan from this file (root peers only) */
        int exe_fd;                     /* or from this fd of the target (>= 0; d9ctl record) */
        int probes;
        uint64_t duration_ms;
        int64_t offcpu_min_us;          /* < 0: d9d's configured default */
        int64_t resources_every_ms;     /* < 0: d9d's configured default; 0: none */
        bool accept_queues;             /* sample the target's listeners' accept queues */
        bool wakes_exact;               /* wake points attached all the time */
        bool wait_plan;                 /* start recording only once the plan's probes attached */
        int64_t full_on_stall_ms;       /* < 0: d9d's configured default; 0: off */
        uid_t peer_uid;
        const char *rule;               /* auto-attach: the rule that matched (NULL = a client) */
        uint64_t exec_ns;               /* auto-attach: CLOCK_MONOTONIC of its exec, 0 = was running */
        uint64_t noticed_ns;            /* auto-attach: when d9d read that exec's record */
};

struct session_start;

/* Start tracing: the target is checked at once (pidfd first, owner), its
 * probe plan is built in the planner thread (or copied from the plan
 * cache), its BPF side installed in the BPF thread, and the loop then
 * drains its ring. Returns 0 when under way: done(ctx, s, why) then runs once on
 * the loop, with the session, or with NULL and a one-line reason. Refused
 * at once: a negative errno and a malloc'd one-line reason in *why. */
int session_start(struct d9d *d, const struct session_request *req,
                  void (*done)(void *ctx, struct session *s, const char *why), void *ctx,
                  struct session_start **out, char **why);
/* Nobody waits for it any more: its plan is dropped if it has not started,
 * and it never attaches. done still runs. */
void session_start_cancel(struct session_start *st);
/* Stop recording: drain, detach, close the open segment and queue it. The
 * BPF side stops on the BPF thread while the loop keeps draining, so this
 * may return before the end is through (session_ending; on_ended runs when
 * it is); while d9d is stopping it is through on return. */
void session_end(struct session *s, const char *reason);
bool session_ending(const struct session *s);
/* Once a second: rotation, deadline, drop accounting, rates. */
void session_tick(struct session *s, uint64_t now_ms);
struct session *session_find(struct d9d *d, pid_t pid, bool live_only);
json_t *session_status_json(const struct session *s);
struct sample;
/* session_samples.c: register with / leave the sampler (at attach, at end),
 * and the "samples" object of status. */
int session_samples_start(struct session *s);
void session_samples_stop(struct session *s);
/* A new segment: say again which kinds of samples stopped, and why. */
int session_samples_restate(struct session *s, uint64_t ts);
json_t *session_samples_json(const struct session *s);
/* Whether a sample of the target may go into its trace now: not once it
 * gained privileges (the credential check a non-root starter's records pass). */
bool session_sample_allowed(struct session *s);
/* A resource or accept-queue sample from the sampler (on the main loop). */
void session_on_sample(struct d9d *d, struct sample *smp);
#define MAPS_EVERY_MS 2000              /* the sampler's reads of a target's memory map */
/* Keep maps (malloc'd text of /proc/PID/maps, or NULL: kept as it was) as
 * the target's last memory map. */
void session_take_maps(struct session *s, char *maps);
/* Hand translate where the executable is mapped (s->maps, placed by the
 * plan): at every map read, and when translate starts or the plan lands. */
void session_exe_map_update(struct session *s);
/* A sealing job finished (called on the main loop). */
void session_on_sealed(struct d9d *d, struct seal_job *job);
/* Drop finished sessions older than finished_keep, and beyond the most recent few. */
void sessions_prune(struct d9d *d);
void sessions_free_all(struct d9d *d);
/* Detached targets whose BPF links are still being destroyed. */
size_t session_bpf_teardowns_pending(void);
/* Reap the finished teardowns (the last one takes the system-wide BPF
 * programs off: d9d with no target costs nothing per switch); main tick. */
void session_bpf_reap(void);
/* The system-wide BPF programs are attached (some target is, or was until
 * its teardown ends). */
bool session_bpf_armed(void);
/* Load the BPF programs now (at start, before any attach: the first
 * attach then does not wait for the verifier). On failure the next attach
 * tries again, on the BPF thread. */
int session_bpf_load(struct d9d *d);
/* The shared BPF objects, opened on first attach; waits for the pending
 * teardowns. */
void session_bpf_close(void);
