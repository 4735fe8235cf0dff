/* producer.bpf.c: a synthetic BPF producer for the drain benchmark. Each
 * run of `produce` (triggered from user space with BPF_PROG_RUN) writes
 * `batch` records of bpf/d9_events.h into one ring buffer, in the mix a
 * busy Tokio target produces (polls, wakes, off-CPU samples, spawns,
 * terminations, park/unpark), exactly as the real probes would: reserve,
 * fill, submit, and count a drop when the ring is full. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "d9_events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 8 << 20);
} bench_ring SEC(".maps");

__u64 seq;
__u64 produced;
__u64 dropped;
__u32 batch = 256;

static __always_inline void hdr_fill(struct d9_rec_hdr *h, __u16 type, __u64 n)
{
        h->type = type;
        h->cpu = 0;
        h->tid = 1000 + (__u32)((n >> 4) & 3);
        h->tgid = 1000;
        h->lost = 0;
        h->ts = bpf_ktime_get_ns();
}

static __always_inline int emit_task(__u16 type, __u64 n)
{
        struct d9_rec_task *r = bpf_ringbuf_reserve(&bench_ring, sizeof(*r), 0);

        if (!r)
                return -1;
        hdr_fill(&r->hdr, type, n);
        r->task_id = 1 + ((n >> 4) % 4096);
        r->cookie = (n >> 4) % 8;
        r->header = 0x10000 + r->task_id * 64;
        r->start_ts = 0;
        r->why = 0;
        /* Polls as BPF writes them inside a known worker's loop: each
         * worker's core moves between two threads (block_in_place). */
        r->worker = type == D9_REC_POLL_START ? 1 + ((n >> 4) & 1) : 0;
        r->future_poll = 0;
        r->sched = 0x7f0000001000;
        r->worker_rt = r->worker ? r->sched : 0;
        bpf_ringbuf_submit(r, 0);
        return 0;
}

static __always_inline int emit_wake(__u64 n)
{
        struct d9_rec_wake *r = bpf_ringbuf_reserve(&bench_ring, sizeof(*r), 0);

        if (!r)
                return -1;
        hdr_fill(&r->hdr, D9_REC_WAKE, n);
        r->woken_task_id = 1 + ((n >> 3) % 4096);
        r->waker_task_id = 1 + ((n >> 4) % 4096);
        r->cookie = 0;
        bpf_ringbuf_submit(r, 0);
        return 0;
}

static __always_inline int emit_park(__u16 type, __u64 n)
{
        struct d9_rec_park *r = bpf_ringbuf_reserve(&bench_ring, sizeof(*r), 0);

        if (!r)
                return -1;
        hdr_fill(&r->hdr, type, n);
        r->park_key = 0xabc000 + ((n >> 4) & 3);
        r->cpu_ns = n * 100;
        r->run_delay_ns = n * 10;
        r->cookie = 0;
        r->worker = 1 + ((n >> 4) & 1);
        r->worker_rt = 0x7f0000001000;
        r->_pad = 0;
        bpf_ringbuf_submit(r, 0);
        return 0;
}

static __always_inline int emit_offcpu(__u64 n)
{
        struct d9_rec_offcpu *r = bpf_ringbuf_reserve(&bench_ring, sizeof(*r), 0);

        if (!r)
                return -1;
        hdr_fill(&r->hdr, D9_REC_OFFCPU, n);
        r->off_ts = r->hdr.ts - 1000;
        r->stack_id = 0;
        r->prev_state = 1;
        r->no_stack = 0;
        r->cpu_ns = 0;
        r->sched_wait_ns = 0;
        bpf_ringbuf_submit(r, 0);
        return 0;
}

/* 16-record cycle: 4 polls (start+end), 3 wakes, 2 off-CPU samples,
 * spawn, terminate, park or unpark: close to what `mixed` produces. */
static long emit_one(__u64 i, void *ctx)
{
        __u64 n = seq++;
        __u32 slot = n & 15;
        int r;

        if (slot < 8)
                r = emit_task(slot & 1 ? D9_REC_POLL_END : D9_REC_POLL_START, n);
        else if (slot < 11)
                r = emit_wake(n);
        else if (slot < 13)
                r = emit_offcpu(n);
        else if (slot == 13)
                r = emit_task(D9_REC_SPAWN, n);
        else if (slot == 14)
                r = emit_task(D9_REC_TERMINATE, n);
        else
                r = emit_park((n >> 4) & 1 ? D9_REC_UNPARK : D9_REC_PARK, n);
        if (r)
                dropped++;
        else
                produced++;
        return 0;
}

SEC("syscall")
int produce(void *ctx)
{
        bpf_loop(batch, emit_one, NULL, 0);
        return 0;
}
