/* planner.c: one planning thread, a bounded queue served by turns per uid,
 * and an eventfd that hands finished jobs back to the main loop. One thread
 * on purpose: a plan's child process maps and scans the whole executable
 * (up to 1 GiB), so plans in parallel would multiply the memory it takes. */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "daemon/core/d9d.h"
#include "daemon/record/planner.h"

#define PLANS_PER_UID 2         /* queued or running, for a uid other than root */
#define PLANS_MAX 64            /* queued or running, all uids */
#define STR_(x) #x
#define STR(x) STR_(x)

struct planner {
        struct d9_watch w;      /* eventfd: jobs finished */
        int abort_fd;           /* eventfd: set at stop; the running job gives up */
        struct d9d *d;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t cond;
        struct plan_job *queue; /* in submission order */
        struct plan_job *running;
        struct plan_job *done;  /* newest first */
        uint64_t seq;
        bool stop;
        int nice_above;
        uint64_t built, longest_ms;
};

/* Jobs of uid waiting or running; caller holds the lock. */
static unsigned uid_jobs(const struct planner *p, uid_t uid)
{
        unsigned n = p->running && p->running->uid == uid;

        for (const struct plan_job *j = p->queue; j; j = j->next)
                n += j->uid == uid;
        return n;
}

static unsigned all_jobs(const struct planner *p)
{
        unsigned n = p->running != NULL;

        for (const struct plan_job *j = p->queue; j; j = j->next)
                n++;
        return n;
}

/* The next job: the lowest turn, first come first served within a turn. */
static struct plan_job *take_next(struct planner *p)
{
        struct plan_job **best = NULL;

        for (struct plan_job **pp = &p->queue; *pp; pp = &(*pp)->next)
                if (!best || (*pp)->turn < (*best)->turn)
                        best = pp;
        if (!best)
                return NULL;
        struct plan_job *j = *best;
        *best = j->next;
        j->next = NULL;
        return j;
}

static void push_done(struct planner *p, struct plan_job *j)
{
        uint64_t one = 1;

        j->next = p->done;
        p->done = j;
        (void)!write(p->w.fd, &one, sizeof(one));
}

static void *planner_main(void *arg)
{
        struct planner *p = arg;

        /* A plan keeps a core busy for seconds. Where cores are few and
         * loaded, it must not take the drain loop's share: a nice of its
         * own (Linux threads have one each), relative to d9d's (the unit's
         * Nice=). The BPF thread's jobs are short (an install of the test
         * target: 2-3 ms of CPU) and an auto-attach waits for them: niced
         * by 10 as the planner was, an install under two CPU hogs waited
         * 200-1200 ms for a CPU (bench/exec_attach, docs/performance.md). */
        if (p->nice_above) {
                errno = 0;
                int base = getpriority(PRIO_PROCESS, 0);
                if (errno == 0)
                        setpriority(PRIO_PROCESS, (id_t)syscall(SYS_gettid), base + p->nice_above);
        }
        pthread_mutex_lock(&p->lock);
        for (;;) {
                while (!p->queue && !p->stop)
                        pthread_cond_wait(&p->cond, &p->lock);
                struct plan_job *j = take_next(p);
                if (!j)
                        break;
                p->running = j;
                pthread_mutex_unlock(&p->lock);
                uint64_t t0 = d9_now_ms();
                j->run(j);
                uint64_t ms = d9_now_ms() - t0;
                pthread_mutex_lock(&p->lock);
                p->running = NULL;
                p->built++;
                if (ms > p->longest_ms)
                        p->longest_ms = ms;
                push_done(p, j);
        }
        pthread_mutex_unlock(&p->lock);
        return NULL;
}

static struct plan_job *jobs_reverse(struct plan_job *list)
{
        struct plan_job *rev = NULL;

        while (list) {
                struct plan_job *next = list->next;
                list->next = rev;
                rev = list;
                list = next;
        }
        return rev;
}

/* Hands finished jobs to their owners, in the order they finished. */
static void planner_collect(struct planner *p)
{
        struct plan_job *done;

        pthread_mutex_lock(&p->lock);
        done = jobs_reverse(p->done);
        p->done = NULL;
        pthread_mutex_unlock(&p->lock);
        while (done) {
                struct plan_job *next = done->next;
                done->next = NULL;
                done->done(p->d, done);
                done = next;
        }
}

static void planner_on_event(struct d9d *d, struct d9_watch *w, uint32_t events)
{
        struct planner *p = (struct planner *)w;
        uint64_t n;

        (void)!read(w->fd, &n, sizeof(n));
        planner_collect(p);
}

int planner_start(struct d9d *d, const char *name, int nice_above, struct planner **out)
{
        struct planner *p = calloc(1, sizeof(*p));
        int r;

        if (!p)
                return -ENOMEM;
        p->d = d;
        p->nice_above = nice_above;
        p->w.fn = planner_on_event;
        pthread_mutex_init(&p->lock, NULL);
        pthread_cond_init(&p->cond, NULL);
        p->abort_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        p->w.fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        r = p->w.fd < 0 || p->abort_fd < 0 ? -errno : d9d_watch_add(d, &p->w, EPOLLIN);
        if (r == 0)
                r = -pthread_create(&p->thread, NULL, planner_main, p);
        if (r < 0) {
                if (p->w.fd >= 0) {
                        d9d_watch_del(d, &p->w);
                        close(p->w.fd);
                }
                if (p->abort_fd >= 0)
                        close(p->abort_fd);
                free(p);
                return r;
        }
        pthread_setname_np(p->thread, name);
        *out = p;
        return 0;
}

int planner_abort_fd(const struct planner *p)
{
        return p->abort_fd;
}

const char *planner_refuses(struct planner *p, uid_t uid)
{
        const char *why = NULL;

        pthread_mutex_lock(&p->lock);
        if (p->stop)
                why = "d9d is shutting down";
        else if (uid != 0 && uid_jobs(p, uid) >= PLANS_PER_UID)
                why = "too many probe plans queued for this uid (at most " STR(PLANS_PER_UID)
                      "); try again when they finish";
        else if (all_jobs(p) >= PLANS_MAX)
                why = "too many probe plans queued; try again later";
        pthread_mutex_unlock(&p->lock);
        return why;
}

void planner_submit(struct planner *p, struct plan_job *job)
{
        struct plan_job **tail;

        pthread_mutex_lock(&p->lock);
        job->cancelled = false;
        job->turn = uid_jobs(p, job->uid);
        job->seq = ++p->seq;
        job->next = NULL;
        for (tail = &p->queue; *tail; tail = &(*tail)->next)
                ;
        *tail = job;
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
}

/* Under the lock: a queued job is taken out, cancelled and handed to the
 * loop's done (true); a running one is marked cancelled only if asked. */
static bool cancel_locked(struct planner *p, struct plan_job *job, bool running_too)
{
        for (struct plan_job **pp = &p->queue; *pp; pp = &(*pp)->next) {
                if (*pp == job) {
                        *pp = job->next;
                        job->cancelled = true;
                        push_done(p, job);      /* done runs from the loop, not from here */
                        return true;
                }
        }
        if (running_too)
                job->cancelled = true;
        return false;
}

void planner_cancel(struct planner *p, struct plan_job *job)
{
        pthread_mutex_lock(&p->lock);
        cancel_locked(p, job, true);
        pthread_mutex_unlock(&p->lock);
}

bool planner_cancel_queued(struct planner *p, struct plan_job *job)
{
        pthread_mutex_lock(&p->lock);
        bool queued = cancel_locked(p, job, false);
        pthread_mutex_unlock(&p->lock);
        return queued;
}

void planner_get_stats(struct planner *p, struct planner_stats *st)
{
        pthread_mutex_lock(&p->lock);
        st->running = p->running != NULL;
        st->queued = all_jobs(p) - st->running;
        st->built = p->built;
        st->longest_ms = p->longest_ms;
        pthread_mutex_unlock(&p->lock);
}

void planner_stop(struct planner *p)
{
        if (!p)
                return;
        pthread_mutex_lock(&p->lock);
        p->stop = true;
        while (p->queue) {
                struct plan_job *j = p->queue;
                p->queue = j->next;
                j->cancelled = true;
                push_done(p, j);
        }
        pthread_cond_signal(&p->cond);
        pthread_mutex_unlock(&p->lock);
        (void)!write(p->abort_fd, &(uint64_t){ 1 }, sizeof(uint64_t));
        pthread_join(p->thread, NULL);
        planner_collect(p);
        d9d_watch_del(p->d, &p->w);
        close(p->w.fd);
        close(p->abort_fd);
        pthread_mutex_destroy(&p->lock);
        pthread_cond_destroy(&p->cond);
        free(p);
}
