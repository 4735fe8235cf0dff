/* session_samples.c: a session's side of the sampler: what it asks to be
 * sampled, the samples written into its open segment as
 * ProcessResourceUsageEvent + D9ProcessResourcesEvent and
 * SocketAcceptQueueEvent, and their counts for status. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "daemon/core/log.h"
#include "daemon/record/sampler.h"
#include "daemon/record/unwind.h"
#include "daemon/record/session.h"

int session_samples_start(struct session *s)
{
        struct sampler_target t = {
                .session_id = s->id,
                .proc_fd = s->proc_fd,
                .pidfd = s->pidfd_w.fd,
                .resources_every_ms = s->resources_every_ms,
                .accept_queues_every_ms = s->accept_queues ? s->d->cfg.accept_queues_every_ms : 0,
                .maps_every_ms = MAPS_EVERY_MS,
        };

        if (!s->d->sampler)
                return 0;
        if (s->proc_fd < 0)
                return -EBADF;
        return sampler_add(s->d->sampler, &t);
}

void session_samples_stop(struct session *s)
{
        if (s->d->sampler)
                sampler_remove(s->d->sampler, s->id);
}

static const char *const kind_name[] = {
        [SAMPLE_RESOURCES] = "process_resources", [SAMPLE_ACCEPT_QUEUES] = "accept_queues",
};

/* Written where the kind stopped and again at the start of every later
 * segment: a reader of one segment learns why its series is missing. */
static int stopped_write(struct session *s, enum sample_kind kind, uint64_t ts)
{
        bool res = kind == SAMPLE_RESOURCES;
        int errnum = res ? s->samples.resources_errno : s->samples.accept_queues_errno;

        if (!errnum || !s->tr.enc)
                return 0;
        return d9_enc_sampling_stopped(s->tr.enc, ts, kind_name[kind], errnum,
                                       res ? s->samples.resources_error : s->samples.accept_queues_error);
}

int session_samples_restate(struct session *s, uint64_t ts)
{
        int r = stopped_write(s, SAMPLE_RESOURCES, ts);

        return r < 0 ? r : stopped_write(s, SAMPLE_ACCEPT_QUEUES, ts);
}

static int sample_failed(struct session *s, const struct sample *smp)
{
        bool res = smp->kind == SAMPLE_RESOURCES;
        char *why = res ? s->samples.resources_error : s->samples.accept_queues_error;

        snprintf(why, sizeof(s->samples.resources_error), "%s", strerror(-smp->error));
        /* The target exiting is the usual end; the pidfd ends the session
         * and the trace says so already. */
        if (smp->error == -ESRCH || smp->error == -ENOENT)
                return 0;
        *(res ? &s->samples.resources_errno : &s->samples.accept_queues_errno) = smp->error;
        log_warn("pid %d: %s not sampled any more: %s", s->pid, res ? "process resources" : "accept queues", why);
        return stopped_write(s, smp->kind, smp->ts);
}

static int sample_write(struct session *s, const struct sample *smp)
{
        int r = 0;

        if (smp->kind == SAMPLE_RESOURCES) {
                r = d9_enc_process_usage(s->tr.enc, smp->ts, &smp->usage);
                s->samples.resources += r == 0;
                return r;
        }
        for (uint32_t i = 0; r == 0 && i < smp->n_queues; i++)
                r = d9_enc_accept_queue(s->tr.enc, smp->ts, &smp->queues[i]);
        s->samples.accept_queues += r == 0 ? smp->n_queues : 0;
        return r;
}

void session_on_sample(struct d9d *d, struct sample *smp)
{
        struct session *s;
        int r;

        for (s = d->sessions; s && s->id != smp->session_id; s = s->next) {}
        if (!s || s->state != SESSION_RECORDING || !s->tr.enc)
                return;
        /* A setuid exec since the last check: the trace's reader may not
         * see this process any more (the next tick ends the session). */
        if (!session_sample_allowed(s)) {
                s->discarded += smp->kind != SAMPLE_MAPS;      /* a map is no event of the trace */
                return;
        }
        s->samples.lost += smp->dropped;
        s->samples.listeners_unlisted += smp->listeners_unlisted;
        if (smp->dropped)
                translate_lost(&s->tr, smp->ts, smp->dropped, "sampler");
        if (smp->kind == SAMPLE_MAPS) {
                session_take_maps(s, smp->maps);
                smp->maps = NULL;
                translate_take_unwind_maps(&s->tr, smp->unw_maps);
                smp->unw_maps = NULL;
                return;
        }
        r = smp->error ? sample_failed(s, smp) : sample_write(s, smp);
        if (r < 0) {
                s->tr.error = s->tr.error ? s->tr.error : r;
                log_error("pid %d: writing a sample failed: %s", s->pid, strerror(-r));
        }
}

json_t *session_samples_json(const struct session *s)
{
        const struct session_samples *n = &s->samples;
        json_t *j = json_pack("{s:I,s:I,s:b,s:I,s:I,s:I}",
                "resources_interval_ms", (json_int_t)s->resources_every_ms,
                "resources", (json_int_t)n->resources,
                "accept_queues_enabled", s->accept_queues,
                "accept_queues_interval_ms", (json_int_t)(s->accept_queues ? s->d->cfg.accept_queues_every_ms : 0),
                "accept_queues", (json_int_t)n->accept_queues,
                "lost", (json_int_t)n->lost);

        if (j && n->listeners_unlisted)
                json_object_set_new(j, "listeners_unlisted", json_integer((json_int_t)n->listeners_unlisted));
        if (j && n->resources_error[0])
                json_object_set_new(j, "resources_error", json_string(n->resources_error));
        if (j && n->accept_queues_error[0])
                json_object_set_new(j, "accept_queues_error", json_string(n->accept_queues_error));
        return j;
}
