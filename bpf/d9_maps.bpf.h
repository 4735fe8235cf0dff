/* d9_maps.bpf.h: maps and helpers shared by every d9 BPF object.
 *
 * The sched object (d9_sched.bpf.c) creates these maps; the tokio object
 * (d9_tokio.bpf.c) reuses the same map fds (bpf_map__reuse_fd in the
 * loader), so both write into one ring buffer per target and one set of
 * drop counters. Map names start with d9_ so leak checks can grep for them. */
#pragma once

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#include "d9_events.h"

char LICENSE[] SEC("license") = "Dual BSD/GPL";

/* tgid -> config. A process not in here is never recorded. */
struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, struct d9_target_cfg);
} d9_targets SEC(".maps");

/* tgid -> that target's own ring buffer, created by user space per target
 * so one busy target cannot crowd out another's records. The inner
 * definition is only the template: its size is replaced at load time. */
struct d9_ring_tmpl {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 1 << 20);
};

struct {
        __uint(type, BPF_MAP_TYPE_HASH_OF_MAPS);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __array(values, struct d9_ring_tmpl);
} d9_rings SEC(".maps");

/* Records lost because the target's ring was full: per CPU, per target
 * slot. User space sums the CPUs. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, __u64);
} d9_drops SEC(".maps");

/* Per-thread state, freed by the kernel when the thread dies. */
struct d9_thread {
        __u64 task_id;          /* task being polled on this thread, 0 if none */
        __u64 header;
        __u64 cookie;
        __u64 poll_ts;          /* its POLL_START ts */
        __u64 off_ts;           /* last switch-out, 0 if on CPU */
        __u64 park_key;         /* key of the park in progress */
        __u32 off_state;        /* task state at that switch-out */
        __u32 _pad;
};

struct {
        __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __type(key, int);
        __type(value, struct d9_thread);
} d9_threads SEC(".maps");

static __always_inline struct d9_target_cfg *d9_target_of(__u32 tgid)
{
        return bpf_map_lookup_elem(&d9_targets, &tgid);
}

/* Reserve a record of `size` in the target's ring, or count a drop. */
static __always_inline void *d9_reserve(const struct d9_target_cfg *cfg,
                                        __u32 tgid, __u64 size)
{
        void *ring = bpf_map_lookup_elem(&d9_rings, &tgid);
        void *rec = NULL;
        __u32 slot = cfg->slot;
        __u64 *drops;

        if (ring)
                rec = bpf_ringbuf_reserve(ring, size, 0);
        if (rec)
                return rec;
        drops = bpf_map_lookup_elem(&d9_drops, &slot);
        if (drops)
                (*drops)++;
        return NULL;
}

/* Submit without waking the consumer for every record: a wakeup per
 * record costs the traced machine a context switch each (measured: it
 * dominates sched-only tracing). The consumer is woken once enough is
 * pending, and drains on a timer besides (d9_bpf_target_poll). */
#define D9_WAKEUP_BYTES (64 * 1024)

static __always_inline void d9_submit(__u32 tgid, void *rec)
{
        void *ring = bpf_map_lookup_elem(&d9_rings, &tgid);
        __u64 flags = BPF_RB_NO_WAKEUP;

        if (ring && bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= D9_WAKEUP_BYTES)
                flags = BPF_RB_FORCE_WAKEUP;
        bpf_ringbuf_submit(rec, flags);
}

static __always_inline void d9_fill_hdr(struct d9_rec_hdr *h, __u16 type,
                                        __u32 tid, __u32 tgid)
{
        h->type = type;
        h->cpu = bpf_get_smp_processor_id();
        h->tid = tid;
        h->tgid = tgid;
        h->_pad = 0;
        h->ts = bpf_ktime_get_ns();
}

/* Reserve + header for the current thread, in one go. */
#define D9_RESERVE_CUR(cfg, tgid, tid, type, T)                               \
        ({                                                                    \
                T *__r = d9_reserve(cfg, tgid, sizeof(T));                    \
                if (__r) {                                                    \
                        __builtin_memset(__r, 0, sizeof(T));                  \
                        d9_fill_hdr(&__r->hdr, type, tid, tgid);              \
                }                                                             \
                __r;                                                          \
        })
