/* dial9's Tokio event vocabulary (trace-format.md section 8): the schemas,
 * with dial9's exact names, field order and type codes, and one typed helper
 * per event. Each helper writes the frame directly when the schema and pool
 * entries are already in the stream (the common case) and otherwise goes
 * through d9_enc_event(), which declares what is missing. */
#include <errno.h>

#include "enc_int.h"

#define F(n, t) { .name = (n), .type = (t) }
#define OPT(t) ((uint8_t)((t) | D9_T_OPTIONAL))

static const struct d9_field_def poll_start[] = {
        F("worker_id", D9_T_VARINT), F("local_queue", D9_T_U8),
        F("task_id", D9_T_VARINT), F("spawn_loc", D9_T_POOLED_STRING),
};
static const struct d9_field_def poll_end[] = { F("worker_id", D9_T_VARINT) };
static const struct d9_field_def worker_park[] = {
        F("worker_id", D9_T_VARINT), F("local_queue", D9_T_U8),
        F("cpu_time_ns", D9_T_VARINT), F("tid", D9_T_U32),
};
static const struct d9_field_def worker_unpark[] = {
        F("worker_id", D9_T_VARINT), F("local_queue", D9_T_U8),
        F("cpu_time_ns", D9_T_VARINT), F("sched_wait_ns", D9_T_VARINT),
        F("tid", D9_T_U32),
};
static const struct d9_field_def queue_sample[] = { F("global_queue", D9_T_U8) };
static const struct d9_field_def task_spawn[] = {
        F("task_id", D9_T_VARINT), F("spawn_loc", D9_T_POOLED_STRING),
        F("instrumented", D9_T_BOOL),
};
static const struct d9_field_def task_terminate[] = { F("task_id", D9_T_VARINT) };
static const struct d9_field_def wake[] = {
        F("waker_task_id", D9_T_VARINT), F("woken_task_id", D9_T_VARINT),
        F("target_worker", D9_T_U8),
};
static const struct d9_field_def cpu_sample[] = {
        F("worker_id", D9_T_VARINT), F("tid", D9_T_U32), F("source", D9_T_U8),
        F("thread_name", OPT(D9_T_POOLED_STRING)), F("callchain", D9_T_POOLED_STACK),
        F("cpu", OPT(D9_T_VARINT)),
};
static const struct d9_field_def task_dump[] = {
        F("task_id", D9_T_VARINT), F("callchain", D9_T_POOLED_STACK),
};
static const struct d9_field_def clock_sync[] = { F("realtime_ns", D9_T_VARINT) };
static const struct d9_field_def segment_metadata[] = { F("entries", D9_T_STRING_MAP) };
static const struct d9_field_def symbol_entry[] = {
        F("addr", D9_T_VARINT), F("size", D9_T_VARINT),
        F("symbol_name", D9_T_POOLED_STRING), F("inline_depth", D9_T_VARINT),
        F("source_file", D9_T_POOLED_STRING), F("source_line", D9_T_VARINT),
};

/* Later dial9 revisions (trace-format.md 8.14). dial9 follows the first
 * schema with a unit annotation frame; the viewer revision d9 targets
 * cannot parse those (§3.6), so none is written: the names say the unit. */
static const struct d9_field_def process_resource_usage[] = {
        F("user_cpu_ns", D9_T_VARINT), F("system_cpu_ns", D9_T_VARINT),
        F("max_rss_bytes", D9_T_VARINT), F("minor_faults", D9_T_VARINT),
        F("major_faults", D9_T_VARINT), F("block_input_ops", D9_T_VARINT),
        F("block_output_ops", D9_T_VARINT), F("voluntary_context_switches", D9_T_VARINT),
        F("involuntary_context_switches", D9_T_VARINT),
};
static const struct d9_field_def socket_accept_queue[] = {
        F("socket_cookie", D9_T_VARINT), F("socket_inode", D9_T_VARINT),
        F("ip_version", D9_T_U8), F("protocol", D9_T_U8),
        F("local_addr", D9_T_STRING), F("local_port", D9_T_U16),
        F("pending_connections", D9_T_U32), F("backlog_limit", D9_T_U32),
};
/* d9d's own: the rest of what a tracer outside the process reads in /proc. */
static const struct d9_field_def process_resources[] = {
        F("rss_bytes", D9_T_VARINT), F("threads", D9_T_VARINT), F("open_fds", D9_T_VARINT),
        F("read_bytes", D9_T_VARINT), F("write_bytes", D9_T_VARINT),
        F("rchar", D9_T_VARINT), F("wchar", D9_T_VARINT),
};
/* d9d's own: why a series above ends before the recording does. */
static const struct d9_field_def sampling_stopped[] = {
        F("kind", D9_T_STRING), F("errno", D9_T_VARINT), F("reason", D9_T_STRING),
};

#define S(n, f) { .name = (n), .nfields = sizeof(f) / sizeof(f[0]), .fields = (f) }

/* Indexed by enum d9_tokio_schema. */
static const struct d9_schema_def tokio_schemas[D9_S_TOKIO_COUNT] = {
        [D9_S_POLL_START] = S("PollStartEvent", poll_start),
        [D9_S_POLL_END] = S("PollEndEvent", poll_end),
        [D9_S_WORKER_PARK] = S("WorkerParkEvent", worker_park),
        [D9_S_WORKER_UNPARK] = S("WorkerUnparkEvent", worker_unpark),
        [D9_S_QUEUE_SAMPLE] = S("QueueSampleEvent", queue_sample),
        [D9_S_TASK_SPAWN] = S("TaskSpawnEvent", task_spawn),
        [D9_S_TASK_TERMINATE] = S("TaskTerminateEvent", task_terminate),
        [D9_S_WAKE] = S("WakeEventEvent", wake),
        [D9_S_CPU_SAMPLE] = S("CpuSampleEvent", cpu_sample),
        [D9_S_TASK_DUMP] = S("TaskDumpEvent", task_dump),
        [D9_S_CLOCK_SYNC] = S("ClockSyncEvent", clock_sync),
        [D9_S_SEGMENT_METADATA] = S("SegmentMetadataEvent", segment_metadata),
        [D9_S_SYMBOL_TABLE_ENTRY] = S("SymbolTableEntry", symbol_entry),
        [D9_S_PROCESS_RESOURCE_USAGE] = S("ProcessResourceUsageEvent", process_resource_usage),
        [D9_S_SOCKET_ACCEPT_QUEUE] = S("SocketAcceptQueueEvent", socket_accept_queue),
        [D9_S_PROCESS_RESOURCES] = S("D9ProcessResourcesEvent", process_resources),
        [D9_S_SAMPLING_STOPPED] = S("D9SamplingStoppedEvent", sampling_stopped),
};

int d9_enc_declare_tokio(struct d9_enc *e)
{
        for (int i = 0; i < D9_S_TOKIO_COUNT; i++) {
                int r = d9_enc_declare(e, &tokio_schemas[i]);

                if (r < 0)
                        return r;
        }
        return 0;
}

#define V_U(x) { .u = (x) }
#define V_ATOM(x) { .atom = (x) }

int d9_enc_poll_start(struct d9_enc *e, uint64_t ts, uint64_t worker_id,
                      uint8_t local_queue, uint64_t task_id, uint32_t spawn_loc)
{
        uint8_t *p;

        if (d9_likely(enc_atom_live(e, spawn_loc)) &&
            d9_likely((p = enc_fast_begin(e, D9_S_POLL_START, ts)) != NULL)) {
                p = put_uleb(p, worker_id);
                *p++ = local_queue;
                p = put_uleb(p, task_id);
                p = put_u32(p, e->atoms[spawn_loc].pool_id);
                return enc_fast_end(e, p);
        }
        const struct d9_enc_value v[] = { V_U(worker_id), V_U(local_queue), V_U(task_id),
                                          V_ATOM(spawn_loc) };
        return d9_enc_event(e, D9_S_POLL_START, ts, v);
}

int d9_enc_poll_end(struct d9_enc *e, uint64_t ts, uint64_t worker_id)
{
        uint8_t *p = enc_fast_begin(e, D9_S_POLL_END, ts);

        if (d9_likely(p != NULL))
                return enc_fast_end(e, put_uleb(p, worker_id));
        const struct d9_enc_value v[] = { V_U(worker_id) };
        return d9_enc_event(e, D9_S_POLL_END, ts, v);
}

int d9_enc_worker_park(struct d9_enc *e, uint64_t ts, uint64_t worker_id,
                       uint8_t local_queue, uint64_t cpu_time_ns, uint32_t tid)
{
        uint8_t *p = enc_fast_begin(e, D9_S_WORKER_PARK, ts);

        if (d9_likely(p != NULL)) {
                p = put_uleb(p, worker_id);
                *p++ = local_queue;
                p = put_uleb(p, cpu_time_ns);
                return enc_fast_end(e, put_u32(p, tid));
        }
        const struct d9_enc_value v[] = { V_U(worker_id), V_U(local_queue), V_U(cpu_time_ns),
                                          V_U(tid) };
        return d9_enc_event(e, D9_S_WORKER_PARK, ts, v);
}

int d9_enc_worker_unpark(struct d9_enc *e, uint64_t ts, uint64_t worker_id,
                         uint8_t local_queue, uint64_t cpu_time_ns,
                         uint64_t sched_wait_ns, uint32_t tid)
{
        uint8_t *p = enc_fast_begin(e, D9_S_WORKER_UNPARK, ts);

        if (d9_likely(p != NULL)) {
                p = put_uleb(p, worker_id);
                *p++ = local_queue;
                p = put_uleb(p, cpu_time_ns);
                p = put_uleb(p, sched_wait_ns);
                return enc_fast_end(e, put_u32(p, tid));
        }
        const struct d9_enc_value v[] = { V_U(worker_id), V_U(local_queue), V_U(cpu_time_ns),
                                          V_U(sched_wait_ns), V_U(tid) };
        return d9_enc_event(e, D9_S_WORKER_UNPARK, ts, v);
}

int d9_enc_queue_sample(struct d9_enc *e, uint64_t ts, uint8_t global_queue)
{
        uint8_t *p = enc_fast_begin(e, D9_S_QUEUE_SAMPLE, ts);

        if (d9_likely(p != NULL)) {
                *p++ = global_queue;
                return enc_fast_end(e, p);
        }
        const struct d9_enc_value v[] = { V_U(global_queue) };
        return d9_enc_event(e, D9_S_QUEUE_SAMPLE, ts, v);
}

int d9_enc_task_spawn(struct d9_enc *e, uint64_t ts, uint64_t task_id,
                      uint32_t spawn_loc, bool instrumented)
{
        uint8_t *p;

        if (d9_likely(enc_atom_live(e, spawn_loc)) &&
            d9_likely((p = enc_fast_begin(e, D9_S_TASK_SPAWN, ts)) != NULL)) {
                p = put_uleb(p, task_id);
                p = put_u32(p, e->atoms[spawn_loc].pool_id);
                *p++ = instrumented ? 1 : 0;
                return enc_fast_end(e, p);
        }
        const struct d9_enc_value v[] = { V_U(task_id), V_ATOM(spawn_loc), { .b = instrumented } };
        return d9_enc_event(e, D9_S_TASK_SPAWN, ts, v);
}

int d9_enc_task_terminate(struct d9_enc *e, uint64_t ts, uint64_t task_id)
{
        uint8_t *p = enc_fast_begin(e, D9_S_TASK_TERMINATE, ts);

        if (d9_likely(p != NULL))
                return enc_fast_end(e, put_uleb(p, task_id));
        const struct d9_enc_value v[] = { V_U(task_id) };
        return d9_enc_event(e, D9_S_TASK_TERMINATE, ts, v);
}

int d9_enc_wake(struct d9_enc *e, uint64_t ts, uint64_t waker_task_id,
                uint64_t woken_task_id, uint8_t target_worker)
{
        uint8_t *p = enc_fast_begin(e, D9_S_WAKE, ts);

        if (d9_likely(p != NULL)) {
                p = put_uleb(p, waker_task_id);
                p = put_uleb(p, woken_task_id);
                *p++ = target_worker;
                return enc_fast_end(e, p);
        }
        const struct d9_enc_value v[] = { V_U(waker_task_id), V_U(woken_task_id),
                                          V_U(target_worker) };
        return d9_enc_event(e, D9_S_WAKE, ts, v);
}

int d9_enc_cpu_sample(struct d9_enc *e, uint64_t ts, uint64_t worker_id,
                      uint32_t tid, uint8_t source, uint32_t thread_name,
                      uint32_t callchain, uint32_t cpu)
{
        bool has_name = thread_name != D9_NO_ATOM, has_cpu = cpu != D9_NO_CPU;
        uint8_t *p;

        if ((!has_name || enc_atom_live(e, thread_name)) && enc_atom_live(e, callchain) &&
            (p = enc_fast_begin(e, D9_S_CPU_SAMPLE, ts)) != NULL) {
                p = put_uleb(p, worker_id);
                p = put_u32(p, tid);
                *p++ = source;
                *p++ = has_name;
                if (has_name)
                        p = put_u32(p, e->atoms[thread_name].pool_id);
                p = put_u32(p, e->atoms[callchain].pool_id);
                *p++ = has_cpu;
                if (has_cpu)
                        p = put_uleb(p, cpu);
                return enc_fast_end(e, p);
        }
        const struct d9_enc_value v[] = {
                V_U(worker_id), V_U(tid), V_U(source),
                { .present = has_name, .atom = thread_name },
                V_ATOM(callchain),
                { .present = has_cpu, .u = cpu },
        };
        return d9_enc_event(e, D9_S_CPU_SAMPLE, ts, v);
}

int d9_enc_task_dump(struct d9_enc *e, uint64_t ts, uint64_t task_id, uint32_t callchain)
{
        uint8_t *p;

        if (enc_atom_live(e, callchain) && (p = enc_fast_begin(e, D9_S_TASK_DUMP, ts)) != NULL) {
                p = put_uleb(p, task_id);
                return enc_fast_end(e, put_u32(p, e->atoms[callchain].pool_id));
        }
        const struct d9_enc_value v[] = { V_U(task_id), V_ATOM(callchain) };
        return d9_enc_event(e, D9_S_TASK_DUMP, ts, v);
}

int d9_enc_clock_sync(struct d9_enc *e, uint64_t ts, uint64_t realtime_ns)
{
        const struct d9_enc_value v[] = { V_U(realtime_ns) };

        return d9_enc_event(e, D9_S_CLOCK_SYNC, ts, v);
}

int d9_enc_segment_metadata(struct d9_enc *e, uint64_t ts, const struct d9_kv *entries, uint32_t n)
{
        const struct d9_enc_value v[] = { { .map = { .kv = entries, .n = n } } };

        return d9_enc_event(e, D9_S_SEGMENT_METADATA, ts, v);
}

int d9_enc_symbol_entry(struct d9_enc *e, uint64_t ts, uint64_t addr, uint64_t size,
                        uint32_t symbol_name, uint64_t inline_depth,
                        uint32_t source_file, uint64_t source_line)
{
        const struct d9_enc_value v[] = { V_U(addr), V_U(size), V_ATOM(symbol_name),
                                          V_U(inline_depth), V_ATOM(source_file),
                                          V_U(source_line) };

        return d9_enc_event(e, D9_S_SYMBOL_TABLE_ENTRY, ts, v);
}
