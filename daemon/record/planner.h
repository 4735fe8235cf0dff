/* planner: the thread that builds probe plans (ELF parsing, vtable scans,
 * symbol reads) away from the loop that drains every session's ring. A
 * plan of a 300 MB binary takes a second or more; on the loop, every
 * session would drop events meanwhile.
 *
 * Jobs wait in a bounded queue and are served by turns per uid: a job
 * queued by a uid that already has jobs waiting or running goes behind
 * those of uids that have none, so one user's stream of plans delays
 * root's (or another user's) by at most one plan each. */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

struct d9d;
struct planner;

struct plan_job {
        uid_t uid;                                      /* who asked: caps and turns */
        void (*run)(struct plan_job *job);              /* on the planner thread */
        void (*done)(struct d9d *d, struct plan_job *job); /* on the main loop, exactly once */
        /* Owned by the planner (read them in done only): */
        bool cancelled;         /* planner_cancel()ed: run was skipped if it had not started */
        unsigned turn;
        uint64_t seq;
        struct plan_job *next;
};

struct planner_stats {
        unsigned queued, running;
        uint64_t built;         /* jobs run */
        uint64_t longest_ms;    /* the longest run, wall clock */
};

/* name: the thread's (d9d-planner for plans, d9d-bpf for BPF installs and
 * stops: a second queue, so a detach never waits behind a long plan);
 * nice_above: how much nicer than d9d's loop it runs (planner.c says why). */
int planner_start(struct d9d *d, const char *name, int nice_above, struct planner **out);
/* Why uid may not queue one more job now (its cap, or the queue is full),
 * or NULL. The submit that follows on the main loop then cannot fail. */
const char *planner_refuses(struct planner *p, uid_t uid);
void planner_submit(struct planner *p, struct plan_job *job);
/* Nobody waits for job any more: skip it if it has not started. Its done
 * still comes, with job->cancelled set. */
void planner_cancel(struct planner *p, struct plan_job *job);
/* planner_cancel() for a job still queued (true); one already running is
 * left to finish, its done run as usual (false). */
bool planner_cancel_queued(struct planner *p, struct plan_job *job);
void planner_get_stats(struct planner *p, struct planner_stats *st);
/* Readable once planner_stop began: a running job that waits on something
 * (its plan child) polls it too and gives up. */
int planner_abort_fd(const struct planner *p);
/* Cancel what waits, tell the running job to give up (planner_abort_fd),
 * call every done, join. */
void planner_stop(struct planner *p);
