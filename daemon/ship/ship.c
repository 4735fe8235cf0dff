/* The shipper thread: a bounded in-memory queue in front of durable .job
 * files, retries with exponential backoff + jitter, and a circuit breaker.
 * See ship.h for the guarantees. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/core/log.h"
#include "daemon/ship/ship.h"
#include "daemon/ship/ship_job.h"
#include "proto/d9proto.h"

struct shipper {
        struct ship_config cfg;
        char instance[256];
        struct s3_client *client;
        pthread_t thread;
        pthread_mutex_t lock;
        pthread_cond_t wake;            /* new job or stop */
        pthread_cond_t idle;            /* queue drained (shipper_flush) */
        struct ship_job **queue;        /* FIFO ring of queue_max */
        size_t head, len;
        bool overflow;                  /* jobs exist on disk beyond the queue */
        volatile bool stopping;
        unsigned consecutive_failures;
        uint64_t breaker_until_ms;
        struct ship_stats stats;
};

/* Waits up to ms or until stop; lock held. */
static void wait_ms(struct shipper *s, uint64_t ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_sec += (time_t)(ms / 1000);
        ts.tv_nsec += (long)(ms % 1000) * 1000000;
        if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
        }
        if (!s->stopping)
                pthread_cond_timedwait(&s->wake, &s->lock, &ts);
}

static bool queued(const struct shipper *s, const char *job_path)
{
        for (size_t i = 0; i < s->len; i++)
                if (!strcmp(s->queue[(s->head + i) % s->cfg.queue_max]->job_path, job_path))
                        return true;
        return false;
}

/* Lock held. Takes ownership of job. */
static void push(struct shipper *s, struct ship_job *job)
{
        if (s->len == s->cfg.queue_max) {
                s->overflow = true; /* its .job file keeps it pending */
                ship_job_free(job);
                return;
        }
        s->queue[(s->head + s->len++) % s->cfg.queue_max] = job;
        s->stats.queue_len = s->len;
        pthread_cond_signal(&s->wake);
}

static struct ship_job *pop(struct shipper *s)
{
        struct ship_job *job = s->queue[s->head];
        s->head = (s->head + 1) % s->cfg.queue_max;
        s->stats.queue_len = --s->len;
        return job;
}

/* Lock held. Loads every .job file not already queued. */
static void rescan(struct shipper *s)
{
        DIR *d = opendir(s->cfg.state_dir);
        struct dirent *e;
        char path[PATH_MAX];
        s->overflow = false;
        if (!d)
                return;
        while ((e = readdir(d)) && !s->overflow) {
                size_t n = strlen(e->d_name);
                if (n < 5 || strcmp(e->d_name + n - 4, ".job"))
                        continue;
                snprintf(path, sizeof path, "%s/%s", s->cfg.state_dir, e->d_name);
                struct ship_job *job;
                if (queued(s, path))
                        continue;
                if (ship_job_load(path, &job) < 0) {
                        log_warn("shipper: ignoring unreadable job file %s", path);
                        continue;
                }
                push(s, job);
        }
        closedir(d);
}

/* Unlocked: the network part. Returns 0, -ENOENT when the segment is gone,
 * or the client's error. */
static int upload_one(struct shipper *s, const struct ship_job *job, uint64_t *size)
{
        struct stat st;
        if (stat(job->path, &st) < 0)
                return -errno;
        struct s3_put_opts opts = { .content_type = job->content_type, .meta = job->meta,
                                    .n_meta = job->n_meta };
        int err = s3_put_file(s->client, job->key, job->path, &opts);
        if (err < 0)
                return err == -ENOENT && access(job->path, F_OK) == 0 ? -EIO : err;
        *size = (uint64_t)st.st_size;
        /* Confirmed: only now may the local copy go. */
        if (s->cfg.delete_after_upload && unlink(job->path) < 0 && errno != ENOENT)
                log_warn("shipper: uploaded %s but could not delete it: %m", job->path);
        ship_job_forget(job);
        return 0;
}

static uint64_t backoff_ms(const struct shipper *s)
{
        unsigned shift = s->consecutive_failures > 20 ? 20 : s->consecutive_failures - 1;
        uint64_t delay = (uint64_t)s->cfg.retry_base_ms << shift;
        if (delay > s->cfg.retry_max_ms)
                delay = s->cfg.retry_max_ms;
        /* Full jitter in the upper half: d9d instances that lost the same
         * store do not come back in lock step. */
        return delay / 2 + (uint64_t)rand() % (delay / 2 + 1);
}

/* Lock held. */
static void record_failure(struct shipper *s, struct ship_job *job, int err)
{
        s->stats.uploads_failed++;
        s->consecutive_failures++;
        job->attempts++;
        snprintf(s->stats.last_error, sizeof s->stats.last_error, "%s",
                 *s3_client_last_error(s->client) ? s3_client_last_error(s->client) : strerror(-err));
        push(s, job); /* to the back: one bad segment does not block the rest */
        if (s->consecutive_failures >= s->cfg.breaker_threshold) {
                s->breaker_until_ms = d9_now_ms() + s->cfg.breaker_cooldown_ms;
                if (!s->stats.breaker_open)
                        log_error("shipper: %u uploads failed in a row, pausing uploads for %u ms: %s",
                                  s->consecutive_failures, s->cfg.breaker_cooldown_ms, s->stats.last_error);
                s->stats.breaker_open = true;
                return;
        }
        uint64_t delay = backoff_ms(s);
        log_warn("shipper: upload of %s failed (attempt %u), retrying in %llu ms: %s", job->path,
                 job->attempts, (unsigned long long)delay, s->stats.last_error);
        wait_ms(s, delay);
}

/* Lock held; job popped. */
static void finish(struct shipper *s, struct ship_job *job, int err, uint64_t size)
{
        if (err == 0) {
                s->stats.uploads_ok++;
                s->stats.bytes_shipped += size;
                snprintf(s->stats.last_key, sizeof s->stats.last_key, "%s", job->key);
                s->stats.last_error[0] = 0;
                s->stats.breaker_open = false;
                s->consecutive_failures = 0;
                ship_job_free(job);
        } else if (err == -ENOENT) {
                s->stats.segments_lost++;
                log_error("shipper: %s vanished before upload (evicted by the disk budget?); "
                          "it is not in s3://%s/%s", job->path, s->cfg.s3.bucket, job->key);
                ship_job_forget(job);
                ship_job_free(job);
        } else if (s->stopping) {
                ship_job_free(job); /* cancelled: its .job file resumes it next start */
        } else {
                record_failure(s, job, err);
        }
}

static void *ship_thread(void *arg)
{
        struct shipper *s = arg;
        pthread_mutex_lock(&s->lock);
        while (!s->stopping) {
                if (s->len == 0 && s->overflow) {
                        rescan(s);
                        continue;
                }
                if (s->len == 0) {
                        pthread_cond_broadcast(&s->idle);
                        pthread_cond_wait(&s->wake, &s->lock);
                        continue;
                }
                uint64_t now = d9_now_ms();
                if (now < s->breaker_until_ms) {
                        wait_ms(s, s->breaker_until_ms - now);
                        continue;
                }
                struct ship_job *job = pop(s);
                s->stats.queue_len = s->len + 1; /* in flight still counts as waiting */
                pthread_mutex_unlock(&s->lock);
                uint64_t size = 0;
                int err = upload_one(s, job, &size);
                pthread_mutex_lock(&s->lock);
                s->stats.queue_len = s->len;
                finish(s, job, err, size);
        }
        pthread_cond_broadcast(&s->idle);
        pthread_mutex_unlock(&s->lock);
        return NULL;
}

static void free_shipper(struct shipper *s)
{
        while (s->len)
                ship_job_free(pop(s));
        free(s->queue);
        s3_client_free(s->client);
        d9d_ship_config_free(&s->cfg);
        pthread_mutex_destroy(&s->lock);
        pthread_cond_destroy(&s->wake);
        pthread_cond_destroy(&s->idle);
        free(s);
}

static int copy_config(struct ship_config *dst, const struct ship_config *src)
{
        *dst = *src;
        dst->s3 = (struct s3_config){ 0 }; /* the client keeps its own copy */
        dst->s3.bucket = src->s3.bucket ? strdup(src->s3.bucket) : NULL;
        dst->s3.prefix = src->s3.prefix ? strdup(src->s3.prefix) : NULL;
        dst->state_dir = src->state_dir ? strdup(src->state_dir) : NULL;
        if (!dst->queue_max)
                dst->queue_max = 1;
        if (!dst->breaker_threshold)
                dst->breaker_threshold = 1;
        return dst->state_dir && dst->s3.bucket ? 0 : -EINVAL;
}

int shipper_start(const struct ship_config *cfg, struct shipper **out)
{
        struct shipper *s = calloc(1, sizeof *s);
        if (!s)
                return -ENOMEM;
        pthread_mutex_init(&s->lock, NULL);
        pthread_cond_init(&s->wake, NULL);
        pthread_cond_init(&s->idle, NULL);
        int err = copy_config(&s->cfg, cfg);
        if (!err && mkdir(s->cfg.state_dir, 0750) < 0 && errno != EEXIST)
                err = -errno;
        if (!err && !(s->queue = calloc(s->cfg.queue_max, sizeof *s->queue)))
                err = -ENOMEM;
        if (!err)
                err = s3_client_new(&cfg->s3, &s->client);
        if (err) {
                free_shipper(s);
                return err;
        }
        if (cfg->s3.instance)
                snprintf(s->instance, sizeof s->instance, "%s", cfg->s3.instance);
        else if (gethostname(s->instance, sizeof s->instance) < 0 || !*s->instance)
                snprintf(s->instance, sizeof s->instance, "localhost");
        s3_client_set_cancel_flag(s->client, (const volatile bool *)&s->stopping);
        srand((unsigned)(d9_now_ms() ^ (uint64_t)getpid()));
        rescan(s); /* pending jobs from before a restart */
        if ((err = -pthread_create(&s->thread, NULL, ship_thread, s))) {
                free_shipper(s);
                return err;
        }
        *out = s;
        return 0;
}

int shipper_enqueue(struct shipper *s, const char *sealed_path, const struct segment_meta *m)
{
        struct ship_job *job;
        int err = ship_job_create(&s->cfg, s->instance, sealed_path, m, &job);
        if (err < 0)
                return err;
        pthread_mutex_lock(&s->lock);
        if (queued(s, job->job_path))
                ship_job_free(job);
        else
                push(s, job);
        pthread_mutex_unlock(&s->lock);
        return 0;
}

void shipper_stats(struct shipper *s, struct ship_stats *out)
{
        pthread_mutex_lock(&s->lock);
        *out = s->stats;
        pthread_mutex_unlock(&s->lock);
}

int shipper_flush(struct shipper *s, unsigned timeout_ms)
{
        uint64_t deadline = d9_now_ms() + timeout_ms;
        int err = 0;
        pthread_mutex_lock(&s->lock);
        while (s->stats.queue_len || s->overflow) {
                uint64_t now = d9_now_ms();
                if (now >= deadline) {
                        err = -ETIMEDOUT;
                        break;
                }
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                uint64_t left = deadline - now < 100 ? deadline - now : 100;
                ts.tv_nsec += (long)left * 1000000;
                ts.tv_sec += ts.tv_nsec / 1000000000;
                ts.tv_nsec %= 1000000000;
                pthread_cond_timedwait(&s->idle, &s->lock, &ts);
        }
        pthread_mutex_unlock(&s->lock);
        return err;
}

void shipper_stop(struct shipper *s)
{
        if (!s)
                return;
        pthread_mutex_lock(&s->lock);
        s->stopping = true;
        pthread_cond_broadcast(&s->wake);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        free_shipper(s);
}
