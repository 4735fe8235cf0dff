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
        __u32 parked;           /* unpark_at_resume: in a park, no UNPARK yet */
        __u64 off_cpu_ns;       /* se.sum_exec_runtime at that switch-out */
        __u64 off_run_delay;    /* sched_info.run_delay at that switch-out */
        __u64 on_run_delay;     /* at the switch-in: with the wait just ended */
        __u64 run_nvcsw;        /* run ticks: task->nvcsw at the switch-in, */
        __u64 run_since;        /* tick or preemption that started this
                                 * stretch without a voluntary switch */
        __u32 run_ticks;        /* ticks in it since */
        __u32 tid;              /* the thread's, set at its switch-out: the
                                 * loader reads this storage by pidfd */
        __u64 off_bp;           /* its user rbp then: the one register of a
                                 * sleeping thread /proc does not give, which
                                 * an unwind through a frame-pointer frame
                                 * needs (daemon/record/open_sleep.h) */
        __u64 off_since;        /* the stretch a preempted switch-out was in */
        __u64 run_kept_ts;      /* the stretch's last tick that kept a stack */
        __u32 off_syscall;      /* d9_rec_offcpu.syscall of that switch-out */
        __u32 tokio_lost;       /* this thread's Tokio-probe records dropped
                                 * (ring full) since its last one written */
        __u64 vt;               /* d9_tokio: the last task vtable read on this */
        __u64 vt_id_off;        /* thread, and the id and scheduler offsets */
        __u64 vt_sched_off;     /* it holds (0: none) */
        /* d9_tokio: the multi-thread worker whose loop this thread runs
         * (d9_worker_find), learned at a task poll, forgotten when the
         * thread starts a blocking-pool poll (a new loop, or a job). */
        __u64 wk_rt;            /* its runtime Handle's Arc */
        __u64 wk_ts;            /* since when wk_* are this loop's */
        __u32 wk_index;         /* 1 + Tokio's worker index, 0: not known */
        __u32 wk_tries;         /* stack scans that found none since wk_ts */
        /* d9_stack_worker (the default set, no poll probes): the loop's
         * Arc<Worker>, to tell the same loop from a new one. */
        __u64 wk_key;
        /* When the attach's sweep read wk_* (d9_wk_sweep_found), leaving
         * wk_ts alone: the thread's own first stack starts its loop's
         * wk_ts as before; the stop reads this for a thread never seen
         * since (daemon/record/open_sleep.h). */
        __u64 wk_swept_ts;
        __u64 in_ts;            /* last switch-in d9_switch_in handled */
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

/* The target's ring. A program that writes several records looks it up
 * once and passes it to d9_ring_reserve/d9_ring_submit: each lookup is a
 * hash walk (bench/hitcost), paid on the traced thread. */
static __always_inline void *d9_ring_of(__u32 tgid)
{
        return bpf_map_lookup_elem(&d9_rings, &tgid);
}

/* Reserve a record of `size` in `ring`, or count a drop (also when the
 * target has no ring). */
static __always_inline void *d9_ring_reserve(void *ring, const struct d9_target_cfg *cfg,
                                             __u64 size)
{
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

/* Submit without waking the consumer for every record: a wakeup costs the
 * traced thread an irq_work (a self-interrupt), measured ≈ 0.5–1 µs per
 * record, more than the record itself (bench/hitcost). The
 * consumer drains on a timer (d9_bpf_target_poll) and is woken when 64 KiB
 * are pending, but only by the records that end just past a 64 KiB
 * boundary of the producer position, not by every record after the
 * threshold: a consumer that lags (a saturated machine) would otherwise
 * cost one wakeup per record until it catches up. Between two boundaries
 * the pending data grows by 64 KiB, so a sleeping consumer is woken with
 * at most 128 KiB pending. The window must be at least the largest record
 * submitted here; records written with bpf_ringbuf_output (the stacks, up
 * to 8 KiB and most of the bytes) ask d9_ring_output_flags instead. */
#define D9_WAKEUP_BYTES (64 * 1024)
#define D9_WAKEUP_WINDOW 128

/* Flags for a bpf_ringbuf_output of size bytes: wake the consumer if the
 * record will cross a 64 KiB boundary with that much pending. Stacks cross
 * most boundaries, so the small records after them seldom land in the
 * window above: the consumer slept until its 250 ms timer while a busy
 * target wrote 7 MB/s of off-CPU stacks, and the 2 MiB ring overflowed
 * (a mid-run attach to the mixed target dropped 60-80 records in 2 s). */
static __always_inline __u64 d9_ring_output_flags(void *ring, __u64 size)
{
        /* 8-byte record header, length rounded up to 8 (BPF_RINGBUF_HDR_SZ). */
        __u64 len = (size + 8 + 7) & ~7ull;
        __u64 pos = bpf_ringbuf_query(ring, BPF_RB_PROD_POS);

        if ((pos & (D9_WAKEUP_BYTES - 1)) + len >= D9_WAKEUP_BYTES &&
            bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) + len >= D9_WAKEUP_BYTES)
                return BPF_RB_FORCE_WAKEUP;
        return BPF_RB_NO_WAKEUP;
}

static __always_inline void d9_ring_submit(void *ring, void *rec)
{
        __u64 flags = BPF_RB_NO_WAKEUP;

        if (ring && (bpf_ringbuf_query(ring, BPF_RB_PROD_POS) & (D9_WAKEUP_BYTES - 1)) <
                            D9_WAKEUP_WINDOW &&
            bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) >= D9_WAKEUP_BYTES)
                flags = BPF_RB_FORCE_WAKEUP;
        bpf_ringbuf_submit(rec, flags);
}

/* The same for a program that writes one record. */
static __always_inline void *d9_reserve(const struct d9_target_cfg *cfg, __u32 tgid, __u64 size)
{
        return d9_ring_reserve(d9_ring_of(tgid), cfg, size);
}

static __always_inline void d9_submit(__u32 tgid, void *rec)
{
        d9_ring_submit(d9_ring_of(tgid), rec);
}

static __always_inline void d9_fill_hdr_ts(struct d9_rec_hdr *h, __u16 type, __u32 tid,
                                           __u32 tgid, __u64 ts)
{
        h->type = type;
        h->cpu = bpf_get_smp_processor_id();
        h->tid = tid;
        h->tgid = tgid;
        h->lost = 0;
        h->ts = ts;
}

static __always_inline void d9_fill_hdr(struct d9_rec_hdr *h, __u16 type,
                                        __u32 tid, __u32 tgid)
{
        d9_fill_hdr_ts(h, type, tid, tgid, bpf_ktime_get_ns());
}

/* Reserve + zero + header (time ts) in `ring`, for the current thread. */
#define D9_RING_RESERVE_CUR(ring, cfg, tgid, tid, type, T, ts)                \
        ({                                                                    \
                T *__r = d9_ring_reserve(ring, cfg, sizeof(T));               \
                if (__r) {                                                    \
                        __builtin_memset(__r, 0, sizeof(T));                  \
                        d9_fill_hdr_ts(&__r->hdr, type, tid, tgid, ts);       \
                }                                                             \
                __r;                                                          \
        })
