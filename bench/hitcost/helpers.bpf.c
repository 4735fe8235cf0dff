/* helpers.bpf.c: what the pieces of a d9 uprobe program cost, one piece per
 * program (bench/hitcost). Each program repeats its piece D9HC_REPS times so
 * the kernel's per-program run time (bpf_stats), minus the empty program's,
 * divided by D9HC_REPS is the cost of one piece. The pieces are the ones
 * d9_tokio.bpf.c is made of: map lookups, task storage, ring reserve/submit,
 * ktime, user-memory reads, the attach cookie. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "d9_events.h"
#include "hitcost.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* Shaped like d9_targets / d9_rings / d9_threads (bpf/d9_maps.bpf.h). */
struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, 256);
        __type(key, __u32);
        __type(value, __u64[8]);
} hc_hash SEC(".maps");

struct hc_ring_tmpl {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 1 << 22);
};

struct {
        __uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
        __uint(max_entries, 256);
        __type(key, __u32);
        __array(values, struct hc_ring_tmpl);
} hc_rings SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 1 << 22);
} hc_ring SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __type(key, int);
        __type(value, __u64[7]);
} hc_tstore SEC(".maps");

/* The fake task header the bench calls its functions with. */
const volatile __u64 hc_addr;
__u64 hc_sink;

#define REPEAT(body)                                    \
        do {                                            \
                _Pragma("unroll")                       \
                for (int __i = 0; __i < D9HC_REPS; __i++) { body; } \
        } while (0)

SEC("uprobe.multi")
int hc_empty(struct pt_regs *ctx)
{
        return 0;
}

/* The same, for classic (perf-event) uprobes: a different attach type. */
SEC("uprobe")
int hc_empty_classic(struct pt_regs *ctx)
{
        return 0;
}

SEC("uprobe.multi")
int hc_ktime(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_ktime_get_ns());
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_pid_tgid(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_get_current_pid_tgid());
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_cookie(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_get_attach_cookie(ctx));
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_cpu(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_get_smp_processor_id());
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_hash_lookup(struct pt_regs *ctx)
{
        __u32 key = bpf_get_current_pid_tgid() >> 32;
        __u64 s = 0;

        REPEAT(s += bpf_map_lookup_elem(&hc_hash, &key) != NULL);
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_hom_lookup(struct pt_regs *ctx)
{
        __u32 key = bpf_get_current_pid_tgid() >> 32;
        __u64 s = 0;

        REPEAT(s += bpf_map_lookup_elem(&hc_rings, &key) != NULL);
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_task_storage(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_task_storage_get(&hc_tstore, bpf_get_current_task_btf(), 0,
                                         BPF_LOCAL_STORAGE_GET_F_CREATE) != NULL);
        hc_sink = s;
        return 0;
}

SEC("uprobe.multi")
int hc_read_user(struct pt_regs *ctx)
{
        __u64 v = 0, s = 0;

        REPEAT(bpf_probe_read_user(&v, sizeof(v), (void *)(hc_addr + 8 * __i)); s += v);
        hc_sink = s;
        return 0;
}

/* Reserve + submit of a poll-record-sized sample, without wakeup. */
SEC("uprobe.multi")
int hc_ringbuf(struct pt_regs *ctx)
{
        REPEAT({
                __u64 *r = bpf_ringbuf_reserve(&hc_ring, sizeof(struct d9_rec_task), 0);
                if (r) {
                        r[0] = __i;
                        bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
                }
        });
        return 0;
}

SEC("uprobe.multi")
int hc_ringbuf_query(struct pt_regs *ctx)
{
        __u64 s = 0;

        REPEAT(s += bpf_ringbuf_query(&hc_ring, BPF_RB_AVAIL_DATA));
        hc_sink = s;
        return 0;
}

/* task_struct fields as d9_park_event reads them: BPF_CORE_READ is a
 * bpf_probe_read_kernel call per field ... */
SEC("uprobe.multi")
int hc_core_read(struct pt_regs *ctx)
{
        struct task_struct *task = bpf_get_current_task_btf();
        __u64 s = 0;

        REPEAT(s += BPF_CORE_READ(task, se.sum_exec_runtime));
        hc_sink = s;
        return 0;
}

/* ... while a trusted BTF pointer can be read directly (a plain load). */
SEC("uprobe.multi")
int hc_btf_load(struct pt_regs *ctx)
{
        struct task_struct *task = bpf_get_current_task_btf();
        __u64 s = 0;

        REPEAT(s += task->se.sum_exec_runtime; barrier_var(task));
        hc_sink = s;
        return 0;
}
