/* control_cmds.c: what each control request does. Authorization happens
 * here, per request, from the peer's SO_PEERCRED uid: root may trace any
 * process; anyone else only processes running under their own uid. A
 * session belongs to the peer that started it: only that uid (and root)
 * lists, queries or detaches it, so a session root started on a user's
 * process is neither visible to nor detachable by that user. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/core/d9d.h"
#include "daemon/ship/ship.h"
#include "daemon/core/log.h"
#include "daemon/record/autoattach.h"
#include "daemon/record/planner.h"
#include "proto/d9control.h"
#include "daemon/seal/sealer.h"
#include "daemon/record/session.h"

struct peer {
        uid_t uid;
        pid_t pid;
        struct control_client *client; /* for a reply sent later */
};

static bool peer_may_see(const struct peer *p, const struct session *s)
{
        return p->uid == 0 || p->uid == s->starter_uid;
}

static int req_pid(json_t *req, pid_t *pid)
{
        json_t *v = json_object_get(req, "pid");

        if (!json_is_integer(v) || json_integer_value(v) <= 0 || json_integer_value(v) > 0x3fffffff)
                return -EINVAL;
        *pid = (pid_t)json_integer_value(v);
        return 0;
}

static json_t *cmd_ping(struct d9d *d, const struct peer *p, json_t *req)
{
        json_t *r = d9c_ok();
        json_object_set_new(r, "version", json_string(D9_VERSION));
        return r;
}

static json_t *d9ctl_cmd_list(struct d9d *d, const struct peer *p, json_t *req)
{
        json_t *r = d9c_ok(), *arr = json_array();

        /* status's counters without the plans and path lists, which list
         * does not show. */
        for (struct session *s = d->sessions; s; s = s->next) {
                if (!peer_may_see(p, s))
                        continue;
                json_t *t = session_status_json(s);
                json_object_del(t, "probe_plan");
                json_object_del(t, "sealed");
                json_array_append_new(arr, t);
        }
        json_object_set_new(r, "targets", arr);
        /* The rules are root's configuration, their sessions root's. */
        if (p->uid == 0 && d->autoattach)
                json_object_set_new(r, "auto_attach", autoattach_status_json(d->autoattach));
        return r;
}

static json_t *d9ctl_cmd_status(struct d9d *d, const struct peer *p, json_t *req)
{
        json_t *r = d9c_ok(), *arr = json_array();
        struct sealer_stats st;
        struct planner_stats ps, bs;
        uint64_t stall_max, stall_recent;
        pid_t pid = 0;
        json_int_t only = json_integer_value(json_object_get(req, "session"));

        if (json_object_get(req, "pid") && req_pid(req, &pid) < 0) {
                json_decref(r);
                json_decref(arr);
                return d9c_error("\"pid\" must be a positive integer");
        }
        for (struct session *s = d->sessions; s; s = s->next)
                if (peer_may_see(p, s) && (!pid || s->pid == pid) && (!only || (json_int_t)s->id == only))
                        json_array_append_new(arr, session_status_json(s));
        if ((pid || only) && !json_array_size(arr)) {
                json_decref(r);
                json_decref(arr);
                /* Hidden sessions of other users read the same as none. */
                if (pid)
                        return d9c_error("pid %d is not traced by d9d (see d9ctl list --all)", pid);
                return d9c_error("no session %lld", (long long)only);
        }
        sealer_get_stats(d->sealer, &st);
        planner_get_stats(d->planner, &ps);
        planner_get_stats(d->bpf_worker, &bs);
        d9d_loop_stall(&stall_max, &stall_recent);
        json_object_set_new(r, "targets", arr);
        if (p->uid == 0 && d->autoattach)
                json_object_set_new(r, "auto_attach", autoattach_status_json(d->autoattach));
        if (d->shipper) {
                struct ship_stats ss;
                shipper_stats(d->shipper, &ss);
                json_object_set_new(r, "s3", json_pack("{s:I,s:I,s:I,s:I,s:I,s:b,s:s,s:s}",
                        "queue", (json_int_t)ss.queue_len, "uploads_ok", (json_int_t)ss.uploads_ok,
                        "uploads_failed", (json_int_t)ss.uploads_failed, "bytes", (json_int_t)ss.bytes_shipped,
                        "lost", (json_int_t)ss.segments_lost, "breaker_open", ss.breaker_open,
                        "last_error", ss.last_error, "last_key", ss.last_key));
        }
        json_object_set_new(r, "daemon", json_pack("{s:s,s:s,s:I,s:I,s:I,s:I,s:I,s:I}", "version", D9_VERSION,
                            "traces_dir", d->traces_dir, "sealed", (json_int_t)st.sealed,
                            "seal_failed", (json_int_t)st.failed, "seal_queue", (json_int_t)st.queued,
                            "evicted", (json_int_t)st.evicted, "evicted_bytes", (json_int_t)st.evicted_bytes,
                            /* detached targets whose uprobe links are still going away */
                            "bpf_teardowns_pending", (json_int_t)session_bpf_teardowns_pending()));
        json_t *dj = json_object_get(r, "daemon");
        /* sched_switch, wakeup, exit/exec and the CPU sampler: on every
         * CPU of the machine from the first target to the end of the last */
        json_object_set_new(dj, "bpf_system_wide_attached", json_boolean(session_bpf_armed()));
        json_object_set_new(dj, "plans_queued", json_integer(ps.queued));
        json_object_set_new(dj, "plans_running", json_integer(ps.running));
        json_object_set_new(dj, "plans_built", json_integer((json_int_t)ps.built));
        json_object_set_new(dj, "plan_longest_ms", json_integer((json_int_t)ps.longest_ms));
        /* The BPF thread: program loads, target installs and stops. */
        json_object_set_new(dj, "bpf_jobs_queued", json_integer(bs.queued + bs.running));
        json_object_set_new(dj, "bpf_job_longest_ms", json_integer((json_int_t)bs.longest_ms));
        /* The drain loop's longest turn: what ring buffers had to absorb. */
        json_object_set_new(dj, "loop_max_stall_ms", json_integer((json_int_t)stall_max));
        json_object_set_new(dj, "loop_recent_max_stall_ms", json_integer((json_int_t)stall_recent));
        return r;
}

/* An attach answered once it records: with its probes attached, or (a plan
 * not in the cache) with the plan still being built (session_late.c). */
struct attach_call {
        struct control_reply *reply;
        struct session_start *start;
        pid_t pid;
        uid_t uid;
};

static void attach_done(void *ctx, struct session *s, const char *why)
{
        struct attach_call *a = ctx;
        json_t *resp;

        if (s) {
                resp = d9c_ok();
                json_object_set_new(resp, "target", session_status_json(s));
        } else {
                log_warn("attach to pid %d not done (peer uid %u): %s", a->pid, (unsigned)a->uid, why);
                resp = d9c_error("%s", why);
        }
        if (a->reply)
                control_reply_finish(a->reply, resp);
        else
                json_decref(resp);
        free(a);
}

/* The client went away: nobody would learn of the session. attach_done
 * still comes, and finishing the reply then only frees it. */
static void attach_gone(void *ctx)
{
        struct attach_call *a = ctx;

        session_start_cancel(a->start);
}

static json_t *d9ctl_cmd_attach(struct d9d *d, const struct peer *p, json_t *req)
{
        struct session_request sr = { .peer_uid = p->uid };
        struct attach_call *a;
        json_t *dur = json_object_get(req, "duration_ms"), *probes = json_object_get(req, "probes");
        json_t *exe = json_object_get(req, "exe"), *offcpu = json_object_get(req, "offcpu_min_us");
        json_t *exe_fd = json_object_get(req, "exe_fd"), *wakes = json_object_get(req, "wakes");
        json_t *acc = json_object_get(req, "accept_queues"), *res = json_object_get(req, "resources_interval_ms");
        json_t *wait_plan = json_object_get(req, "wait_plan"), *fos = json_object_get(req, "full_on_stall_ms");
        const char *bad = NULL;
        char *why = NULL;
        int r;

        if (req_pid(req, &sr.pid) < 0)
                return d9c_error("attach needs \"pid\": a positive integer");
        if (dur && (!json_is_integer(dur) || json_integer_value(dur) < 0))
                return d9c_error("\"duration_ms\" must be a non-negative integer");
        sr.duration_ms = dur ? (uint64_t)json_integer_value(dur) : 0;
        if (offcpu && (!json_is_integer(offcpu) || json_integer_value(offcpu) < 0 ||
                       (uint64_t)json_integer_value(offcpu) > D9_OFFCPU_MIN_US_MAX))
                return d9c_error("\"offcpu_min_us\" must be an integer from 0 to %llu",
                                 (unsigned long long)D9_OFFCPU_MIN_US_MAX);
        sr.offcpu_min_us = offcpu ? json_integer_value(offcpu) : -1;
        if (acc && !json_is_boolean(acc))
                return d9c_error("\"accept_queues\" must be true or false");
        sr.accept_queues = acc && json_is_true(acc);
        if (wait_plan && !json_is_boolean(wait_plan))
                return d9c_error("\"wait_plan\" must be true or false");
        sr.wait_plan = wait_plan && json_is_true(wait_plan);
        if (fos && (!json_is_integer(fos) || json_integer_value(fos) < 0 || json_integer_value(fos) > 10000))
                return d9c_error("\"full_on_stall_ms\" must be an integer from 0 (off) to 10000");
        sr.full_on_stall_ms = fos ? json_integer_value(fos) : -1;
        if (res && (!json_is_integer(res) || json_integer_value(res) < 0 || json_integer_value(res) > 60000 ||
                    (json_integer_value(res) > 0 && json_integer_value(res) < 10)))
                return d9c_error("\"resources_interval_ms\" must be 0 (off) or from 10 to 60000");
        sr.resources_every_ms = res ? json_integer_value(res) : -1;
        if (probes && !json_is_string(probes))
                return d9c_error("\"probes\" must be a string");
        sr.probes = d9c_parse_probes(probes ? json_string_value(probes) : NULL, &bad);
        if (sr.probes < 0)
                return d9c_error("unknown probe group in \"%s\" (use sched,cpu,park,poll,spawn,wake,terminate,longpoll, default or all)",
                                 json_string_value(probes));
        if (wakes && (!json_is_string(wakes) || (strcmp(json_string_value(wakes), "exact") &&
                                                 strcmp(json_string_value(wakes), "sampled"))))
                return d9c_error("\"wakes\" must be \"exact\" or \"sampled\"");
        sr.wakes_exact = wakes && !strcmp(json_string_value(wakes), "exact");
        if (exe && (!json_is_string(exe) || json_string_value(exe)[0] != '/'))
                return d9c_error("\"exe\" must be an absolute path");
        /* d9d never opens a path a client names with its own rights: only root
         * may name one. Others pass "exe_fd", a descriptor their target
         * process opened itself (d9ctl record), reopened via /proc/PID/fd. */
        if (exe && p->uid != 0)
                return d9c_error("permission denied: \"exe\" paths are taken from root only (send \"exe_fd\")");
        if (exe_fd && (!json_is_integer(exe_fd) || json_integer_value(exe_fd) < 0 ||
                       json_integer_value(exe_fd) > 0x7fffffff))
                return d9c_error("\"exe_fd\" must be a non-negative integer");
        if (exe && exe_fd)
                return d9c_error("give \"exe\" or \"exe_fd\", not both");
        sr.exe = exe ? json_string_value(exe) : NULL;
        sr.exe_fd = exe_fd ? (int)json_integer_value(exe_fd) : -1;
        if (d->stopping)
                return d9c_error("d9d is shutting down");
        if (!(a = calloc(1, sizeof(*a))))
                return d9c_error("out of memory");
        a->pid = sr.pid;
        a->uid = p->uid;
        r = session_start(d, &sr, attach_done, a, &a->start, &why);
        if (r < 0) {
                json_t *e = d9c_error("%s", why ? why : strerror(-r));
                log_warn("attach to pid %d refused (peer uid %u): %s", sr.pid, (unsigned)p->uid, why ? why : strerror(-r));
                free(why);
                free(a);
                return e;
        }
        /* attach_done runs from a later loop turn, never before this. */
        a->reply = control_reply_defer(p->client, attach_gone, a);
        if (!a->reply) {
                session_start_cancel(a->start);
                return d9c_error("out of memory");
        }
        return NULL;
}

static json_t *detach_reply(struct session *s)
{
        json_t *ok = d9c_ok();

        json_object_set_new(ok, "target", session_status_json(s));
        return ok;
}

/* A detach is answered once its session's end is through (its BPF side
 * stops on the BPF thread), with the segment closed and queued. */
static void detach_done(void *ctx, struct session *s)
{
        control_reply_finish(ctx, detach_reply(s));
}

/* The client went away: the reply is still finished (and only freed). */
static void detach_gone(void *ctx)
{
}

static json_t *d9ctl_cmd_detach(struct d9d *d, const struct peer *p, json_t *req)
{
        struct session *s;
        pid_t pid;

        if (req_pid(req, &pid) < 0)
                return d9c_error("detach needs \"pid\": a positive integer");
        s = session_find(d, pid, true);
        /* Another uid's session gets the same answer as none at all. */
        if (!s || !peer_may_see(p, s))
                return d9c_error("pid %d is not being traced by you", pid);
        session_end(s, "detached");
        if (!session_ending(s))
                return detach_reply(s);
        s->on_ended_ctx = control_reply_defer(p->client, detach_gone, NULL);
        if (!s->on_ended_ctx)
                return detach_reply(s);  /* out of memory: answered now, the end goes on */
        s->on_ended = detach_done;
        return NULL;
}

static const struct {
        const char *name;
        json_t *(*fn)(struct d9d *d, const struct peer *p, json_t *req);
} commands[] = {
        { "ping", cmd_ping },
        { "list", d9ctl_cmd_list },
        { "status", d9ctl_cmd_status },
        { "attach", d9ctl_cmd_attach },
        { "detach", d9ctl_cmd_detach },
};

json_t *control_dispatch(struct d9d *d, struct control_client *c, uid_t peer_uid, pid_t peer_pid, json_t *req)
{
        const char *cmd = json_string_value(json_object_get(req, "cmd"));
        struct peer p = { peer_uid, peer_pid, c };

        for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
                if (!strcmp(commands[i].name, cmd))
                        return commands[i].fn(d, &p, req);
        return d9c_error("unknown command \"%s\"", cmd);
}
