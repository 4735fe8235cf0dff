/* report_process.c: see report_process.h. CPU in cores is the growth of
 * user + system time between two consecutive samples over their distance;
 * a queue sample counts as full at its backlog (the kernel then drops
 * handshakes). */
#include <stdio.h>
#include <string.h>

#include "report_process.h"
#include "trace_read.h"

static void on_usage(struct report_process *p, const struct d9_dec_event *ev)
{
        uint64_t cpu = d9ctl_trace_field_u(ev, "user_cpu_ns") + d9ctl_trace_field_u(ev, "system_cpu_ns");
        uint64_t invol = d9ctl_trace_field_u(ev, "involuntary_context_switches");

        if (p->samples && ev->ts > p->last_ts && cpu >= p->last_cpu_ns) {
                double s = (double)(ev->ts - p->last_ts) / 1e9;
                double cores = (double)(cpu - p->last_cpu_ns) / 1e9 / s;
                double inv = invol >= p->last_invol ? (double)(invol - p->last_invol) / s : 0;

                if (cores > p->max_cores)
                        p->max_cores = cores;
                if (inv > p->max_invol_per_s)
                        p->max_invol_per_s = inv;
        }
        p->samples++;
        p->last_ts = ev->ts;
        p->last_cpu_ns = cpu;
        p->last_invol = invol;
}

static void keep_max(uint64_t *m, uint64_t v)
{
        if (v > *m)
                *m = v;
}

static struct report_listener *listener_of(struct report_process *p, const struct d9_dec_event *ev)
{
        uint64_t cookie = d9ctl_trace_field_u(ev, "socket_cookie"), inode = d9ctl_trace_field_u(ev, "socket_inode");
        const struct d9_value *addr = d9ctl_trace_field(ev, "local_addr");
        struct report_listener *l;

        for (unsigned i = 0; i < p->nl; i++)
                if (p->l[i].cookie == cookie && p->l[i].inode == inode)
                        return &p->l[i];
        if (p->nl == REPORT_LISTENERS_MAX) {
                p->listeners_over++;
                return NULL;
        }
        l = &p->l[p->nl++];
        memset(l, 0, sizeof(*l));
        l->cookie = cookie;
        l->inode = inode;
        l->port = (unsigned)d9ctl_trace_field_u(ev, "local_port");
        if (addr && addr->str.len < sizeof(l->addr))
                memcpy(l->addr, addr->str.p, addr->str.len);
        return l;
}

static void on_stopped(struct report_process *p, const struct d9_dec_event *ev)
{
        const struct d9_value *kind = d9ctl_trace_field(ev, "kind"), *why = d9ctl_trace_field(ev, "reason");
        char *to;

        if (!kind || !why)
                return;
        if (kind->str.len == 17 && !memcmp(kind->str.p, "process_resources", 17))
                to = p->resources_stopped;
        else if (kind->str.len == 13 && !memcmp(kind->str.p, "accept_queues", 13))
                to = p->accept_queues_stopped;
        else
                return;
        snprintf(to, sizeof(p->resources_stopped), "%.*s", (int)why->str.len, why->str.p);
}

bool d9ctl_report_process_event(struct report_process *p, const struct d9_dec_event *ev)
{
        const char *name = ev->schema->name;
        struct report_listener *l;

        if (!strcmp(name, "ProcessResourceUsageEvent")) {
                on_usage(p, ev);
                keep_max(&p->max_rss, d9ctl_trace_field_u(ev, "max_rss_bytes"));
        } else if (!strcmp(name, "D9ProcessResourcesEvent")) {
                keep_max(&p->max_threads, d9ctl_trace_field_u(ev, "threads"));
                keep_max(&p->max_fds, d9ctl_trace_field_u(ev, "open_fds"));
        } else if (!strcmp(name, "SocketAcceptQueueEvent")) {
                if (!(l = listener_of(p, ev)))
                        return true;
                uint64_t pending = d9ctl_trace_field_u(ev, "pending_connections");
                l->backlog = d9ctl_trace_field_u(ev, "backlog_limit");
                keep_max(&l->max_pending, pending);
                l->samples++;
                l->samples_full += pending >= l->backlog;
        } else if (!strcmp(name, "D9SamplingStoppedEvent")) {
                on_stopped(p, ev);
        } else {
                return false;
        }
        return true;
}

json_t *d9ctl_report_process_json(const struct report_process *p)
{
        json_t *queues = json_array();

        for (unsigned i = 0; i < p->nl; i++) {
                const struct report_listener *l = &p->l[i];
                json_array_append_new(queues, json_pack("{s:s, s:i, s:I, s:I, s:I, s:I}", "local_addr", l->addr,
                        "local_port", (int)l->port, "backlog_limit", (json_int_t)l->backlog,
                        "max_pending", (json_int_t)l->max_pending, "samples", (json_int_t)l->samples,
                        "samples_full", (json_int_t)l->samples_full));
        }
        json_t *j = json_pack("{s:I, s:f, s:I, s:I, s:I, s:f, s:o, s:I}", "resource_samples", (json_int_t)p->samples,
                              "max_cores", p->max_cores, "max_rss_bytes", (json_int_t)p->max_rss,
                              "max_threads", (json_int_t)p->max_threads, "max_open_fds", (json_int_t)p->max_fds,
                              "max_involuntary_switches_per_s", p->max_invol_per_s, "accept_queues", queues,
                              "listeners_not_kept", (json_int_t)p->listeners_over);

        if (j && p->resources_stopped[0])
                json_object_set_new(j, "resources_stopped", json_string(p->resources_stopped));
        if (j && p->accept_queues_stopped[0])
                json_object_set_new(j, "accept_queues_stopped", json_string(p->accept_queues_stopped));
        return j;
}
