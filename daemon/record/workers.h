/* workers: the worker ids of one target's trace and the runtimes they
 * belong to (docs/probe-plan.md, "Worker identity").
 *
 * An id names one worker of one runtime, known by what the runtime itself
 * says: Tokio's own index of a multi-thread worker (BPF finds its
 * Arc<Worker> on the loop's stack), else its core's park key (park
 * probes), else, where neither is known (a current-thread runtime, a
 * Tokio whose Worker has another shape), the thread that drives it. An id
 * known by less is told more as soon as it shows: it becomes the worker it
 * was all along, or, if that worker already has an id, it is given back.
 * translate.c decides which thread drives which id; this file only keeps
 * the table, so it holds no per-thread state. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Runtimes told apart per process; polls of more are listed under "main". */
#define TR_MAX_RUNTIMES 48
#define TR_RT_UNKNOWN 0xff
/* Ids above 253 would collide with dial9's sentinels (254, 255). */
#define TR_MAX_WORKERS 254

struct tr_worker {
        uint64_t park_key;      /* its core's park key, 0 if none seen */
        uint32_t index;         /* 1 + Tokio's index of it, 0 if not known */
        uint32_t thread;        /* the tid it names while nothing else is
                                 * known of it, else 0 */
        uint8_t rt;             /* its runtime (rt_keys), TR_RT_UNKNOWN */
        bool used;              /* handed out and not given back */
};

struct tr_workers {
        struct tr_worker w[TR_MAX_WORKERS];
        uint32_t n;             /* ids handed out so far, free ones included */
        uint64_t rt_keys[TR_MAX_RUNTIMES]; /* a runtime's Handle (or current-
                                 * thread core, workers_rt_core_key) */
        uint32_t n_runtimes;
        uint64_t rt_overflow;   /* workers of runtimes past TR_MAX_RUNTIMES */
        bool changed;           /* the runtime.<name> lists changed */
};

void workers_init(struct tr_workers *ws);

/* The id of worker `index` (1-based, as BPF writes it) of the runtime
 * whose Handle is rt. `cur` is the id the asking thread held (or
 * D9_WORKER_NONE): if it named that thread or a park key only, it is this
 * worker (and takes the index) unless the worker has an id already, in
 * which case cur is given back. D9_WORKER_NONE when the table is full. */
uint32_t workers_by_index(struct tr_workers *ws, uint64_t rt, uint32_t index, uint32_t cur);

/* The id of the core that parks with key; `cur` as above (the id of a
 * thread that polled before its first park becomes its core's). */
uint32_t workers_by_park_key(struct tr_workers *ws, uint64_t key, uint32_t cur);

/* Id w's core parks with key (learnt where both were seen at once): an id
 * that knew only that key is the same worker, and is given back. */
void workers_set_park_key(struct tr_workers *ws, uint32_t w, uint64_t key);

/* A new id for thread tid, of which nothing else is known yet. */
uint32_t workers_for_thread(struct tr_workers *ws, uint32_t tid);

/* Id w names nothing any more: it is not listed and is handed out again. */
void workers_give_back(struct tr_workers *ws, uint32_t w);

/* Worker w polled a task whose scheduler is sched (see workers.c). */
void workers_runtime_seen(struct tr_workers *ws, uint32_t w, uint64_t sched);

/* A runtime known only by the Box<Core> its current-thread driver parks
 * with (never a Handle: user addresses are below 2^47). */
uint64_t workers_rt_core_key(uint64_t core);

/* w names a worker: handed out and not given back. */
bool workers_in_use(const struct tr_workers *ws, uint32_t w);

/* "0,1,2": every id in use. */
void workers_list(const struct tr_workers *ws, char *buf, size_t len);

/* SegmentMetadataEvent entries "runtime.<name>" = "0,1": the ids of each
 * runtime, runtime.main first (always there, with the workers whose
 * runtime is not known too), then rt1, rt2, ... in the order their first
 * tasks were polled. */
struct tr_runtimes {
        uint32_t n;
        const char *key[TR_MAX_RUNTIMES], *val[TR_MAX_RUNTIMES];
        char text[4096];
};
void workers_runtimes(const struct tr_workers *ws, struct tr_runtimes *out);
