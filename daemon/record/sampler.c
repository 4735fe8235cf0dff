/* sampler.c: one thread, a list of targets each with its next due times,
 * a condition variable on CLOCK_MONOTONIC to sleep until the earliest. A
 * target being sampled is marked busy; sampler_remove only flags it and the
 * thread frees it when done, so the loop never waits for a read. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "daemon/record/accept_queue.h"
#include "daemon/core/d9d.h"
#include "daemon/record/proc_usage.h"
#include "daemon/record/sampler.h"
#include "daemon/record/unwind.h"
#include "daemon/symbolize/symbolize.h"
#include "uprobes/uprobes.h"

#define SAMPLES_PENDING_MAX 1024        /* undelivered samples, all targets */

struct target {
        struct sampler_target o;
        int diag_fd;                    /* sock_diag socket in the target's netns, -1: not yet */
        uint64_t next_res_ns, next_acc_ns, next_maps_ns; /* 0: that kind is off */
        struct proc_usage_threads threads;
        struct accept_queue_counts counts;
        uint64_t dropped;
        bool removed;
        struct target *next;
};

/* A map read asked for by the loop (a segment closed), answered in order. */
struct maps_req {
        int proc_fd, pidfd;
        void (*done)(struct d9d *d, void *ctx, char *maps);
        void *ctx;
        char *maps;
        struct maps_req *next;
};

struct sampler {
        struct d9_watch w;              /* eventfd: samples ready */
        struct d9d *d;
        void (*deliver)(struct d9d *d, struct sample *s);
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct target *targets, *busy;
        struct sample *ready;           /* newest first */
        unsigned n_ready;
        struct maps_req *reqs, *reqs_done; /* oldest first, both */
        int own_netns_fd;
        bool stop;
};

static void sample_free(struct sample *s)
{
        free(s->maps);
        unwind_maps_free(s->unw_maps);
        free(s);
}

static void target_free(struct target *t)
{
        close(t->o.proc_fd);
        close(t->o.pidfd);
        if (t->diag_fd >= 0)
                close(t->diag_fd);
        proc_usage_threads_free(&t->threads);
        free(t);
}

/* Caller holds the lock. */
static void push_ready(struct sampler *sm, struct target *t, struct sample *s)
{
        uint64_t one = 1;

        if (t->removed || sm->n_ready >= SAMPLES_PENDING_MAX) {
                t->dropped += !t->removed;
                sample_free(s);
                return;
        }
        s->dropped = t->dropped;
        t->dropped = 0;
        s->next = sm->ready;
        sm->ready = s;
        sm->n_ready++;
        (void)!write(sm->w.fd, &one, sizeof(one));
}

static void sample_resources(struct target *t, struct sample *s)
{
        s->kind = SAMPLE_RESOURCES;
        s->error = proc_usage_read(t->o.proc_fd, &t->threads, &s->usage);
}

char *sampler_read_maps(int proc_fd, int pidfd)
{
        char path[64];
        char *maps;

        if (proc_fd < 0 || pidfd < 0)
                return NULL;
        snprintf(path, sizeof(path), "/proc/self/fd/%d/maps", proc_fd);
        maps = symbolizer_read_proc_text(path);
        if (maps && (!*maps || d9_pidfd_alive(pidfd) < 0)) {
                free(maps);
                maps = NULL;
        }
        return maps;
}

static void sample_maps(struct target *t, struct sample *s)
{
        s->kind = SAMPLE_MAPS;
        s->maps = sampler_read_maps(t->o.proc_fd, t->o.pidfd);
        if (!s->maps)
                s->error = d9_pidfd_alive(t->o.pidfd) < 0 ? -ESRCH : -EIO;
        else
                s->unw_maps = unwind_maps_open(t->o.proc_fd, s->maps);
}

static void sample_accept_queues(struct sampler *sm, struct target *t, struct sample *s)
{
        struct accept_queue_counts before = t->counts;
        size_t n = 0;

        s->kind = SAMPLE_ACCEPT_QUEUES;
        if (t->diag_fd < 0)
                t->diag_fd = accept_queue_socket(t->o.pidfd, sm->own_netns_fd);
        s->error = t->diag_fd < 0 ? t->diag_fd
                 : accept_queue_read(t->diag_fd, t->o.proc_fd, s->queues, SAMPLE_QUEUES_MAX, &n, &t->counts);
        s->n_queues = (uint32_t)n;
        s->listeners_unlisted = t->counts.listeners_over - before.listeners_over;
}

/* The target due first and when; caller holds the lock. */
static uint64_t earlier(uint64_t a, uint64_t b)
{
        return a && (!b || a <= b) ? a : b;
}

static struct target *next_due(struct sampler *sm, uint64_t *when)
{
        struct target *best = NULL;

        *when = UINT64_MAX;
        for (struct target *t = sm->targets; t; t = t->next) {
                uint64_t due = earlier(earlier(t->next_res_ns, t->next_acc_ns), t->next_maps_ns);
                if (due && due < *when) {
                        *when = due;
                        best = t;
                }
        }
        return best;
}

static void free_removed(struct sampler *sm)
{
        for (struct target **pp = &sm->targets; *pp;) {
                struct target *t = *pp;
                if (t->removed && t != sm->busy) {
                        *pp = t->next;
                        target_free(t);
                        continue;
                }
                pp = &t->next;
        }
}

/* Samples what is due on t, with the lock dropped; caller holds it. */
static void sample_due(struct sampler *sm, struct target *t, uint64_t now)
{
        bool res = t->next_res_ns && t->next_res_ns <= now, acc = t->next_acc_ns && t->next_acc_ns <= now;
        bool maps = t->next_maps_ns && t->next_maps_ns <= now;
        struct sample *sr = res ? calloc(1, sizeof(*sr)) : NULL, *sa = acc ? calloc(1, sizeof(*sa)) : NULL;
        struct sample *sm_ = maps ? calloc(1, sizeof(*sm_)) : NULL;

        /* Next due times from the schedule, not from now: no drift; after a
         * stall longer than an interval, one sample, not a burst. */
        if (res)
                while ((t->next_res_ns += t->o.resources_every_ms * 1000000ull) <= now) {}
        if (acc)
                while ((t->next_acc_ns += t->o.accept_queues_every_ms * 1000000ull) <= now) {}
        if (maps)
                while ((t->next_maps_ns += t->o.maps_every_ms * 1000000ull) <= now) {}
        sm->busy = t;
        pthread_mutex_unlock(&sm->lock);
        if (sr) {
                sr->session_id = t->o.session_id;
                sr->ts = d9_now_ns();
                sample_resources(t, sr);
        }
        if (sa) {
                sa->session_id = t->o.session_id;
                sa->ts = d9_now_ns();
                sample_accept_queues(sm, t, sa);
        }
        if (sm_) {
                sm_->session_id = t->o.session_id;
                sm_->ts = d9_now_ns();
                sample_maps(t, sm_);
        }
        pthread_mutex_lock(&sm->lock);
        sm->busy = NULL;
        /* A kind that failed once is off: the session says why, once. */
        if (sr && sr->error)
                t->next_res_ns = 0;
        if (sa && sa->error)
                t->next_acc_ns = 0;
        /* A map that could not be read is not a sample: the session keeps
         * the last one, and the pidfd tells it of the exit. */
        if (sm_ && sm_->error) {
                sample_free(sm_);
                sm_ = NULL;
                maps = false;
        }
        if (sr)
                push_ready(sm, t, sr);
        if (sa)
                push_ready(sm, t, sa);
        if (sm_)
                push_ready(sm, t, sm_);
        if ((res && !sr) || (acc && !sa) || (maps && !sm_))
                t->dropped++;   /* out of memory */
}

static void append_req(struct maps_req **list, struct maps_req *q)
{
        while (*list)
                list = &(*list)->next;
        q->next = NULL;
        *list = q;
}

/* The oldest map request, read with the lock dropped; caller holds it. */
static void serve_req(struct sampler *sm)
{
        struct maps_req *q = sm->reqs;
        uint64_t one = 1;

        sm->reqs = q->next;
        pthread_mutex_unlock(&sm->lock);
        q->maps = sampler_read_maps(q->proc_fd, q->pidfd);
        pthread_mutex_lock(&sm->lock);
        append_req(&sm->reqs_done, q);
        (void)!write(sm->w.fd, &one, sizeof(one));
}

static void req_finish(struct d9d *d, struct maps_req *q)
{
        close(q->proc_fd);
        close(q->pidfd);
        q->done(d, q->ctx, q->maps);
        free(q);
}

static void *sampler_main(void *arg)
{
        struct sampler *sm = arg;

        pthread_mutex_lock(&sm->lock);
        while (!sm->stop) {
                uint64_t when, now = d9_now_ns();
                struct target *t;

                if (sm->reqs) {
                        serve_req(sm);
                        continue;
                }
                free_removed(sm);
                t = next_due(sm, &when);
                if (t && when <= now) {
                        sample_due(sm, t, now);
                        continue;
                }
                if (!t) {
                        pthread_cond_wait(&sm->cond, &sm->lock);
                        continue;
                }
                struct timespec ts = { .tv_sec = (time_t)(when / 1000000000ull),
                                       .tv_nsec = (long)(when % 1000000000ull) };
                pthread_cond_timedwait(&sm->cond, &sm->lock, &ts);
        }
        pthread_mutex_unlock(&sm->lock);
        return NULL;
}

static void sampler_on_ready(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct sampler *sm = (struct sampler *)w;
        struct sample *list, *rev = NULL;
        struct maps_req *reqs;
        uint64_t n;

        (void)events;
        (void)!read(w->fd, &n, sizeof(n));
        pthread_mutex_lock(&sm->lock);
        list = sm->ready;
        sm->ready = NULL;
        sm->n_ready = 0;
        reqs = sm->reqs_done;
        sm->reqs_done = NULL;
        pthread_mutex_unlock(&sm->lock);
        while (reqs) {
                struct maps_req *next = reqs->next;
                req_finish(d, reqs);
                reqs = next;
        }
        while (list) {
                struct sample *next = list->next;
                list->next = rev;
                rev = list;
                list = next;
        }
        while (rev) {
                struct sample *next = rev->next;
                sm->deliver(d, rev);
                sample_free(rev);
                rev = next;
        }
}

int sampler_start(struct d9d *d, void (*deliver)(struct d9d *d, struct sample *s), struct sampler **out)
{
        struct sampler *sm = calloc(1, sizeof(*sm));
        pthread_condattr_t ca;
        int r;

        if (!sm)
                return -ENOMEM;
        sm->d = d;
        sm->deliver = deliver;
        sm->w.fn = sampler_on_ready;
        sm->w.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        /* d9d's own namespace, to come back to after entering a target's. */
        sm->own_netns_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        if (sm->w.fd < 0 || sm->own_netns_fd < 0) {
                r = -errno;
                goto fail;
        }
        pthread_mutex_init(&sm->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&sm->cond, &ca);
        pthread_condattr_destroy(&ca);
        r = d9d_watch_add(d, &sm->w, EPOLLIN);
        if (r == 0 && (r = -pthread_create(&sm->thread, NULL, sampler_main, sm)) < 0)
                d9d_watch_del(d, &sm->w);
        if (r == 0) {
                pthread_setname_np(sm->thread, "d9d-sampler");
                *out = sm;
                return 0;
        }
fail:
        if (sm->w.fd >= 0)
                close(sm->w.fd);
        if (sm->own_netns_fd >= 0)
                close(sm->own_netns_fd);
        free(sm);
        return r;
}

int sampler_add(struct sampler *sm, const struct sampler_target *o)
{
        struct target *t = calloc(1, sizeof(*t));
        uint64_t now = d9_now_ns();

        if (!t)
                return -ENOMEM;
        t->o = *o;
        t->diag_fd = -1;
        t->o.proc_fd = fcntl(o->proc_fd, F_DUPFD_CLOEXEC, 3);
        t->o.pidfd = fcntl(o->pidfd, F_DUPFD_CLOEXEC, 3);
        if (t->o.proc_fd < 0 || t->o.pidfd < 0) {
                int r = -errno;
                if (t->o.proc_fd >= 0)
                        close(t->o.proc_fd);
                if (t->o.pidfd >= 0)
                        close(t->o.pidfd);
                free(t);
                return r;
        }
        /* The first samples at once: the trace starts with a baseline. */
        t->next_res_ns = o->resources_every_ms ? now : 0;
        t->next_acc_ns = o->accept_queues_every_ms ? now : 0;
        /* The map was read by the attach: the next one an interval later. */
        t->next_maps_ns = o->maps_every_ms ? now + o->maps_every_ms * 1000000ull : 0;
        pthread_mutex_lock(&sm->lock);
        t->next = sm->targets;
        sm->targets = t;
        pthread_cond_signal(&sm->cond);
        pthread_mutex_unlock(&sm->lock);
        return 0;
}

void sampler_remove(struct sampler *sm, uint64_t session_id)
{
        struct sample **pp;

        pthread_mutex_lock(&sm->lock);
        for (struct target *t = sm->targets; t; t = t->next)
                if (t->o.session_id == session_id)
                        t->removed = true;
        /* Its samples not yet delivered go too. */
        for (pp = &sm->ready; *pp;) {
                struct sample *s = *pp;
                if (s->session_id == session_id) {
                        *pp = s->next;
                        sm->n_ready--;
                        sample_free(s);
                        continue;
                }
                pp = &s->next;
        }
        pthread_cond_signal(&sm->cond);
        pthread_mutex_unlock(&sm->lock);
}

void sampler_read_maps_then(struct sampler *sm, int proc_fd, int pidfd,
                            void (*done)(struct d9d *d, void *ctx, char *maps), void *ctx)
{
        struct maps_req *q = calloc(1, sizeof(*q));

        if (q) {
                q->proc_fd = proc_fd >= 0 ? fcntl(proc_fd, F_DUPFD_CLOEXEC, 3) : -1;
                q->pidfd = pidfd >= 0 ? fcntl(pidfd, F_DUPFD_CLOEXEC, 3) : -1;
        }
        if (!q || q->proc_fd < 0 || q->pidfd < 0) {
                if (q && q->proc_fd >= 0)
                        close(q->proc_fd);
                if (q && q->pidfd >= 0)
                        close(q->pidfd);
                free(q);
                done(sm->d, ctx, NULL);
                return;
        }
        q->done = done;
        q->ctx = ctx;
        pthread_mutex_lock(&sm->lock);
        append_req(&sm->reqs, q);
        pthread_cond_signal(&sm->cond);
        pthread_mutex_unlock(&sm->lock);
}

void sampler_maps_soon(struct sampler *sm, uint64_t session_id)
{
        pthread_mutex_lock(&sm->lock);
        for (struct target *t = sm->targets; t; t = t->next)
                if (t->o.session_id == session_id && t->next_maps_ns)
                        t->next_maps_ns = d9_now_ns();
        pthread_cond_signal(&sm->cond);
        pthread_mutex_unlock(&sm->lock);
}

void sampler_stop(struct sampler *sm)
{
        if (!sm)
                return;
        pthread_mutex_lock(&sm->lock);
        sm->stop = true;
        pthread_cond_signal(&sm->cond);
        pthread_mutex_unlock(&sm->lock);
        pthread_join(sm->thread, NULL);
        /* Answered in order: what was read, then what was not (no read
         * now: d9d is stopping, the kept map serves). */
        while (sm->reqs_done) {
                struct maps_req *q = sm->reqs_done;
                sm->reqs_done = q->next;
                req_finish(sm->d, q);
        }
        while (sm->reqs) {
                struct maps_req *q = sm->reqs;
                sm->reqs = q->next;
                req_finish(sm->d, q);
        }
        d9d_watch_del(sm->d, &sm->w);
        while (sm->targets) {
                struct target *t = sm->targets;
                sm->targets = t->next;
                target_free(t);
        }
        while (sm->ready) {
                struct sample *s = sm->ready;
                sm->ready = s->next;
                sample_free(s);
        }
        close(sm->w.fd);
        close(sm->own_netns_fd);
        pthread_mutex_destroy(&sm->lock);
        pthread_cond_destroy(&sm->cond);
        free(sm);
}
