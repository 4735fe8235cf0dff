/* Process-level events a tracer samples from outside the target: dial9's
 * ProcessResourceUsageEvent and SocketAcceptQueueEvent (the schemas are in
 * enc_tokio.c with the rest of dial9's vocabulary) and d9d's
 * D9ProcessResourcesEvent, and D9SamplingStoppedEvent when a kind stops
 * (the target's /proc unreadable, say). A few per 100 ms: the generic path is enough. */
#include <string.h>

#include "enc_int.h"

#define V_U(x) { .u = (x) }

int d9_enc_process_usage(struct d9_enc *e, uint64_t ts, const struct d9_process_usage *u)
{
        const struct d9_enc_value usage[] = {
                V_U(u->user_cpu_ns), V_U(u->system_cpu_ns), V_U(u->max_rss_bytes),
                V_U(u->minor_faults), V_U(u->major_faults), V_U(u->block_input_ops),
                V_U(u->block_output_ops), V_U(u->voluntary_context_switches),
                V_U(u->involuntary_context_switches),
        };
        const struct d9_enc_value rest[] = {
                V_U(u->rss_bytes), V_U(u->threads), V_U(u->open_fds), V_U(u->read_bytes),
                V_U(u->write_bytes), V_U(u->rchar), V_U(u->wchar),
        };
        int r = d9_enc_event(e, D9_S_PROCESS_RESOURCE_USAGE, ts, usage);

        return r < 0 ? r : d9_enc_event(e, D9_S_PROCESS_RESOURCES, ts, rest);
}

int d9_enc_accept_queue(struct d9_enc *e, uint64_t ts, const struct d9_accept_queue *q)
{
        const struct d9_enc_value v[] = {
                V_U(q->socket_cookie), V_U(q->socket_inode), V_U(q->ip_version), V_U(q->protocol),
                { .bytes = { q->local_addr, (uint32_t)strnlen(q->local_addr, sizeof(q->local_addr)) } },
                V_U(q->local_port), V_U(q->pending_connections), V_U(q->backlog_limit),
        };

        return d9_enc_event(e, D9_S_SOCKET_ACCEPT_QUEUE, ts, v);
}

int d9_enc_sampling_stopped(struct d9_enc *e, uint64_t ts, const char *kind, int errnum, const char *reason)
{
        const struct d9_enc_value v[] = {
                { .bytes = { kind, (uint32_t)strlen(kind) } },
                V_U((uint64_t)(errnum < 0 ? -errnum : errnum)),
                { .bytes = { reason, (uint32_t)strlen(reason) } },
        };

        return d9_enc_event(e, D9_S_SAMPLING_STOPPED, ts, v);
}
