/* sampler: the thread that samples every target's process resources and
 * accept queues on their intervals, away from the drain loop (reads of
 * /proc wait on the target's locks, sock_diag dumps on the kernel, and
 * entering a target's network namespace needs a thread of its own). Samples
 * come back to the loop through an eventfd, in a bounded queue; those that
 * do not fit are counted and the count rides on the target's next sample. */
#pragma once

#include <stdint.h>
#include <sys/types.h>

#include "proto/d9proto.h"

struct d9d;
struct sampler;
struct unwind_maps;

enum sample_kind {
        SAMPLE_RESOURCES,
        SAMPLE_ACCEPT_QUEUES,
        SAMPLE_MAPS,                    /* /proc/PID/maps, for the sealer */
};

#define SAMPLE_QUEUES_MAX 64            /* listeners of one target per sample */

struct sample {
        struct sample *next;
        uint64_t session_id;
        uint64_t ts;                    /* CLOCK_MONOTONIC ns, when read */
        enum sample_kind kind;
        int error;                      /* -errno: this kind is not sampled any more */
        uint64_t dropped;               /* samples of this target lost before this one */
        uint64_t listeners_unlisted;    /* listeners over the per-sample or per-dump cap */
        struct d9_process_usage usage;
        uint32_t n_queues;
        struct d9_accept_queue queues[SAMPLE_QUEUES_MAX];
        char *maps;                     /* SAMPLE_MAPS: malloc'd text; deliver may take it (NULL it) */
        struct unwind_maps *unw_maps;   /* SAMPLE_MAPS: its files opened; the same */
};

struct sampler_target {
        uint64_t session_id;
        int proc_fd;                    /* /proc/PID dir, checked with the pidfd: duplicated */
        int pidfd;                      /* duplicated */
        uint64_t resources_every_ms;    /* 0: none */
        uint64_t accept_queues_every_ms; /* 0: none */
        uint64_t maps_every_ms;         /* 0: none */
};

/* deliver runs on the loop, once per sample; the sample is freed after. */
int sampler_start(struct d9d *d, void (*deliver)(struct d9d *d, struct sample *s),
                  struct sampler **out);
/* The target's memory map as text, read below proc_fd and kept only if
 * pidfd shows the process alive after the read (a recycled PID's map would
 * name another program's code), or NULL. Off the loop only: the read
 * waits on the target's mmap lock. */
char *sampler_read_maps(int proc_fd, int pidfd);
/* Read the target's map now, off the loop: done(d, ctx, maps) runs on the
 * loop, in the order asked, with the malloc'd text or NULL (exited, or
 * d9d stopping: nothing is read then). proc_fd and pidfd are duplicated. */
void sampler_read_maps_then(struct sampler *sm, int proc_fd, int pidfd,
                            void (*done)(struct d9d *d, void *ctx, char *maps), void *ctx);
/* The session's next periodic map read at once (its target exec'd). */
void sampler_maps_soon(struct sampler *sm, uint64_t session_id);
int sampler_add(struct sampler *sm, const struct sampler_target *t);
/* No sample of the session is delivered after this returns. */
void sampler_remove(struct sampler *sm, uint64_t session_id);
void sampler_stop(struct sampler *sm);
