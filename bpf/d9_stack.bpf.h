/* d9_stack.bpf.h: user and kernel stacks for CPU samples and off-CPU
 * intervals, included by d9_sched.bpf.c.
 *
 * Release Rust has no frame pointers, so the kernel's own user-stack walk
 * stops after a frame or two. Like `perf --call-graph dwarf`, we copy what
 * an .eh_frame unwinder needs: the user registers (task_pt_regs: for a
 * thread in a syscall or interrupted by the perf timer these are the user
 * registers at kernel entry) and the top of the user stack; d9d unwinds it
 * (daemon/record/unwind.c). Kernel frames come from the kernel's walker.
 *
 * Cost bounds (all in d9_stack_cfg, set per target by user space):
 * - user_bytes: the copy per stack;
 * - off-CPU: only worth a stack when the interval was long, which is
 *   known at switch-in; but switch-in runs in the previous thread's
 *   address space, where the sleeping thread's user memory can't be read.
 *   Copying at every switch-out instead cost a busy server ~6 % of its
 *   CPU. So switch-in (d9_stack_offcpu_begin) takes a token and the
 *   kernel stack, and the user part is read by a task_work callback in the
 *   thread itself on its way back to user space (d9_sched.bpf.c; where a
 *   tracepoint program may not schedule one, at its return from
 *   __schedule), before any of its user code runs: the same stack it
 *   blocked with.
 * Records are written with bpf_ringbuf_output: a ring reservation must
 * have a constant size and the copied length is only known afterwards. */
#pragma once

#include "d9_maps.bpf.h"

#define D9_STACK_CHUNK 512

/* Where a stack is taken, for the per-CPU scratch below: a run tick's
 * softirq may interrupt an off-CPU stack being taken at a return from
 * __schedule, and a CPU sample's hardirq either; each needs its own. */
enum d9_stack_ctx {
        D9_CTX_TASK,            /* d9_offcpu_resumed */
        D9_CTX_SOFTIRQ,         /* a run tick (d9_run_timer_fired) */
        D9_CTX_HARDIRQ,         /* a 99 Hz CPU sample */
        D9_CTX_LEVELS,
};

/* A CPU sample's or a run tick's stack is built here, one per d9_stack_ctx
 * (the task-context one unused): too big for the BPF stack. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, D9_CTX_LEVELS);
        __type(key, __u32);
        __type(value, struct d9_rec_stack);
} d9_stack_scratch SEC(".maps");

/* Per-CPU sequence for stack ids (the CPU number is in the low bits). */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u64);
} d9_stack_seq SEC(".maps");

/* Per target thread: the off-CPU stack being assembled (kernel part at
 * switch-in, user part on resume), and the GCRA state (theoretical arrival
 * time) of its off-CPU stack token bucket. */
struct d9_stack_thread {
        __u64 tat;
        struct d9_rec_stack rec;
};

struct {
        __uint(type, BPF_MAP_TYPE_TASK_STORAGE);
        __uint(map_flags, BPF_F_NO_PREALLOC);
        __type(key, int);
        __type(value, struct d9_stack_thread);
} d9_stack_threads SEC(".maps");

static __always_inline __u64 d9_stack_next_id(void)
{
        __u32 zero = 0;
        __u64 *seq = bpf_map_lookup_elem(&d9_stack_seq, &zero);

        if (!seq)
                return 0;
        /* One add: a sample's hardirq may come between a load and a store
         * of a tick's softirq on this CPU, in the same thread. */
        return ((__sync_fetch_and_add(seq, 1) + 1) << 10) | (bpf_get_smp_processor_id() & 1023);
}

/* The rec was built but the ring had no room: count it like any drop. */
static __always_inline void d9_stack_count_drop(const struct d9_target_cfg *cfg)
{
        __u32 slot = cfg->slot;
        __u64 *drops = bpf_map_lookup_elem(&d9_drops, &slot);

        if (drops)
                (*drops)++;
}

/* x86-64 DWARF register numbers. A macro, not a function: for the perf
 * context the fields must be loaded at constant offsets from ctx (the
 * verifier rejects a derived ctx pointer). */
#define D9_STACK_REGS(s, r)                                                   \
        do {                                                                  \
                (s)->regs[0] = (r).ax;                                        \
                (s)->regs[1] = (r).dx;                                        \
                (s)->regs[2] = (r).cx;                                        \
                (s)->regs[3] = (r).bx;                                        \
                (s)->regs[4] = (r).si;                                        \
                (s)->regs[5] = (r).di;                                        \
                (s)->regs[6] = (r).bp;                                        \
                (s)->regs[7] = (r).sp;                                        \
                (s)->regs[8] = (r).r8;                                        \
                (s)->regs[9] = (r).r9;                                        \
                (s)->regs[10] = (r).r10;                                      \
                (s)->regs[11] = (r).r11;                                      \
                (s)->regs[12] = (r).r12;                                      \
                (s)->regs[13] = (r).r13;                                      \
                (s)->regs[14] = (r).r14;                                      \
                (s)->regs[15] = (r).r15;                                      \
                (s)->regs[16] = (r).ip;                                       \
        } while (0)

/* D9_STACK_FP_TAIL: the frame-pointer chain from the sampled rbp, past
 * the end of the copy (got bytes from sp), as d9_fp_frame entries after
 * it. Up to D9_STACK_FP_MAX reads of 16 bytes: a few us at most, and only
 * for targets whose executable has no CFI (d9d sets the flag). A
 * bpf_loop callback, verified once, not unrolled into every program. */
struct d9_fp_walk {
        struct d9_rec_stack *s;
        __u64 sp, bp;
        __u32 got, off, n;
};

static long d9_fp_step(__u64 i, void *arg)
{
        struct d9_fp_walk *w = arg;
        struct d9_rec_stack *s = w->s;
        struct d9_fp_frame *f;
        __u64 o, bp = w->bp;
        __u32 off = w->off;

        if (bp < w->sp || bp - w->sp > (8ull << 20) || (bp & 7))
                return 1;
        o = bp - w->sp;
        if (o + 16 <= w->got) {
                /* In the copy: the unwinder reads it there. */
                if (o > D9_STACK_USER_MAX - 8)
                        return 1;
                w->bp = *(__u64 *)(s->data + o);
                return 0;
        }
        if (off > D9_STACK_USER_MAX - sizeof(*f))
                return 1;
        f = (struct d9_fp_frame *)(s->data + off);
        f->addr = bp;
        if (bpf_probe_read_user(&f->bp, 16, (void *)bp))
                return 1;
        w->bp = f->bp;
        w->off = off + sizeof(*f);
        w->n++;
        return 0;
}

/* The thread's pending uretprobes (utask: task->utask, a kernel address
 * read with CO-RE): a uretprobed function's return address on the stack
 * is the trampoline, and the unwinder puts the real one back. Reads the
 * kernel's chain, at most D9_STACK_URET_MAX entries. */
static __always_inline void d9_stack_urets(struct d9_rec_stack *s, __u64 utask)
{
        struct return_instance *ri = NULL;
        __u32 n = 0;

        s->n_uret = 0;
        if (!utask)
                return;
        ri = BPF_CORE_READ((struct uprobe_task *)utask, return_instances);
        for (int i = 0; i < D9_STACK_URET_MAX && ri; i++) {
                s->uret[n].stack = BPF_CORE_READ(ri, stack);
                s->uret[n].orig_ret = BPF_CORE_READ(ri, orig_ret_vaddr);
                n++;
                ri = BPF_CORE_READ(ri, next);
        }
        s->n_uret = n;
}

/* A global function: verified once on its own, so the programs that call
 * it do not verify the walk for every state the copy loop leaves. */
__noinline __u32 d9_stack_fp_tail(struct d9_rec_stack *s, __u32 flags, __u64 utask)
{
        struct d9_fp_walk w = {};

        if (!s)
                return 0;
        d9_stack_urets(s, utask);
        if (!(flags & D9_STACK_FP_TAIL) || s->user_len > D9_STACK_USER_MAX)
                return 0;
        w.s = s;
        w.sp = s->regs[D9_DW_RSP];
        w.bp = s->regs[D9_DW_RBP];
        w.got = s->user_len;
        w.off = (s->user_len + 7) & ~7u;
        bpf_loop(D9_STACK_FP_MAX, d9_fp_step, &w, 0);
        return w.n;
}

/* Deep copies (D9_STACK_DEEP, docs/stacks.md "Deep stacks"). A real
 * server's request poll is 26-122 KiB deep, past any fixed copy worth
 * paying for every sample. But what a whole stack needs is known: the
 * bytes from sp to the top of the thread's stack mapping (a thread's
 * mapping ends with its TLS and pthread block, the main thread's with its
 * environment). So a stack of a thread in d9_stack_deep_tids (d9d got
 * one of its stacks cut) whose mapping goes on past user_bytes is
 * copied to that end, up to deep_bytes, straight into the ring (a
 * reservation of the exact size, bpf_probe_read_user_dynptr: no scratch
 * buffer, so the size is bounded by the ring, not by a per-CPU value),
 * as long as the target's byte bucket has room for the bytes beyond
 * user_bytes. The bucket (GCRA, deep_per_sec bytes/s, burst deep_burst)
 * bounds the cost whatever the stacks: CPU samples (99 Hz per thread)
 * may empty it, off-CPU stacks (up to 500/s per thread) only its upper
 * half, so they never starve the CPU samples. A stack it refuses gets the
 * user_bytes copy with D9_SREC_CAPPED, and d9d counts it when it ends cut.
 * The ring comes before depth: a deep copy that would leave the ring over
 * half full gets the user_bytes copy with D9_SREC_ROOM. While d9d keeps up
 * the ring is nearly empty; when it is starved of CPU (npm sideseat on a
 * loaded machine: 552 ms between drains) copies of 25 KiB at the cap's
 * 16 MiB/s filled the 2 MiB ring in an eighth of a second and every record
 * after them was lost, parks and switches with the stacks.
 * Per target slot: the bucket's theoretical arrival time (ns). */
struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, __u64);
} d9_stack_deep_tat SEC(".maps");

/* The threads that get deep copies: those of which d9d got a stack cut at
 * the end of the user_bytes copy (d9_bpf_target_stack_deep). Other
 * threads' stacks end within user_bytes, and copying them to the top of
 * their mapping (TLS, the environment) would only cost. */
struct {
        __uint(type, BPF_MAP_TYPE_LRU_HASH);
        __uint(max_entries, 16384);
        __type(key, __u32);
        __type(value, __u32);
} d9_stack_deep_tids SEC(".maps");

/* Per target slot, set by user space from the executable's PT_TLS (its
 * probe plan, once there is one): glibc and musl put a thread's static TLS
 * block between its stack and its thread pointer, and the Worker search
 * starts below it. npm restate-server's is 19 KiB (musl static), all of
 * the 16 KiB window, which then never saw a stack. D9_WK_TLS_UNKNOWN
 * while the plan is built: the search starts at the thread pointer (most
 * builds' TLS is small) but no thread is told "no worker" until then. */
struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, __u64);
} d9_wk_tls SEC(".maps");

extern int bpf_probe_read_user_dynptr(struct bpf_dynptr *dptr, __u32 off, __u32 size,
                                      const void *unsafe_ptr__ign) __weak __ksym;

static long d9_vma_end(struct task_struct *task, struct vm_area_struct *vma, void *ctx)
{
        *(__u64 *)ctx = vma->vm_end;
        return 0;
}

/* Take `bytes` from the target's bucket: may it copy them? One
 * compare-and-swap; a lost race refuses (never more than the cap). */
static __always_inline bool d9_stack_deep_take(const struct d9_target_cfg *cfg, __u64 bytes,
                                               bool offcpu)
{
        __u32 slot = cfg->slot;
        __u64 *tatp = bpf_map_lookup_elem(&d9_stack_deep_tat, &slot);
        __u64 now = bpf_ktime_get_ns(), tat, cost, burst, base;

        if (!tatp || !cfg->stack.deep_per_sec)
                return false;
        cost = bytes * 1000000000ull / cfg->stack.deep_per_sec;
        burst = (__u64)cfg->stack.deep_burst * 1000000000ull / cfg->stack.deep_per_sec;
        if (offcpu)
                burst /= 2;
        tat = *tatp;
        base = tat > now ? tat : now;
        if (base + cost > now + burst)
                return false;
        return __sync_val_compare_and_swap(tatp, tat, base + cost) == tat;
}

/* Stack pages not in memory. A sample taken in a page fault on the stack
 * itself has sp in a page the fault is bringing in (a frame's first
 * store into a page the thread never touched, or one it gave back), and
 * bpf_probe_read_user cannot fault it in: the copy stopped there, the
 * stack ended at the faulting function, unmarked, since a short copy
 * reads as the top of the stack (npm codex-acp: 2-9 stacks per 6 s). The
 * pages above it, with the callers' frames, are in memory. So a copy goes
 * on past one run of unreadable pages inside the stack's mapping, and the
 * record says where it is (unread_at, unread_len): the unwinder reads the
 * callers' frames above it, and says the stack is cut only if a step
 * needs a word inside it. Unreadable pages at the end of the copy are no
 * hole: the copy ends before them, as before. */
struct d9_hole {
        __u32 at, len;
        bool open;              /* inside it now */
        bool closed;            /* readable bytes came after it */
};

/* A read at offset `got` failed or succeeded: keeps the hole. Returns
 * whether the copy goes on. */
static __always_inline bool d9_hole_step(struct d9_hole *h, __u32 got, bool failed)
{
        if (!failed) {
                if (h->open) {
                        h->len = got - h->at;
                        h->open = false;
                        h->closed = true;
                }
                return true;
        }
        if (h->closed)
                return false;   /* one hole at most */
        if (!h->open) {
                h->open = true;
                h->at = got;
        }
        return true;
}

struct d9_deep_read {
        struct bpf_dynptr *dp;
        __u64 sp;
        __u32 len, got, end;    /* end: just past the last readable page */
        struct d9_hole hole;
};

/* One page of a deep copy whose one-piece read failed (a page not
 * present): the pages up to the end, past one hole (its bytes in the ring
 * not written; the unwinder does not read them). */
static long d9_deep_page(__u64 i, void *arg)
{
        struct d9_deep_read *r = arg;
        __u64 at = r->sp + r->got;
        __u32 piece = 4096 - (__u32)(at & 4095);
        bool failed;

        if (r->got >= r->len)
                return 1;
        if (piece > r->len - r->got)
                piece = r->len - r->got;
        failed = bpf_probe_read_user_dynptr(r->dp, D9_REC_STACK_FIXED + r->got, piece, (void *)at) != 0;
        if (!d9_hole_step(&r->hole, r->got, failed))
                return 1;
        r->got += piece;
        if (!failed)
                r->end = r->got;
        return 0;
}

/* The plain copy, one read at a time (bpf_probe_read_user is all or
 * nothing): up to the next 512-byte boundary, so no read spans two pages. */
struct d9_plain_read {
        struct d9_rec_stack *s;
        __u64 sp;
        __u32 want, got, end;   /* end: just past the last readable read */
        bool stopped;           /* at an unreadable read, no hole open */
        struct d9_hole hole;
};

static long d9_plain_piece(__u64 i, void *arg)
{
        struct d9_plain_read *r = arg;
        struct d9_rec_stack *s = r->s;
        __u32 got = r->got, rest = r->want - got;
        __u64 at = r->sp + got;
        __u32 piece = D9_STACK_CHUNK - (__u32)(at & (D9_STACK_CHUNK - 1));
        bool failed;

        if (!s || got >= r->want || got > D9_STACK_USER_MAX - D9_STACK_CHUNK)
                return 1;
        if (rest < piece)
                piece = rest & (D9_STACK_CHUNK - 1);    /* < 512: the mask tells the verifier */
        /* A failed read zeroes its bytes: a hole holds zeros, not another
         * stack's bytes from this scratch. */
        failed = bpf_probe_read_user(s->data + got, piece, (void *)at) != 0;
        if (failed && !r->hole.open) {
                r->stopped = true;      /* the caller asks whether it is a hole */
                return 1;
        }
        if (!d9_hole_step(&r->hole, got, failed))
                return 1;
        r->got = got + piece;
        if (!failed)
                r->end = r->got;
        return 0;
}

/* The top of task's stack as its thread pointer gives it, for a stack at
 * sp: glibc and musl put a thread's static TLS block (less the
 * executable's, d9_wk_tls, when known) and its descriptor right above its
 * stack, the thread pointer between them. 0 where the thread pointer
 * bounds no stack at sp (the main thread's lies elsewhere, and a stack
 * of a thread that switched stacks may lie anywhere). */
static __always_inline __u64 d9_stack_tp_top(const struct d9_target_cfg *cfg, struct task_struct *task, __u64 sp)
{
        __u64 tp = task->thread.fsbase, *tls_of = bpf_map_lookup_elem(&d9_wk_tls, &cfg->slot);

        if (tls_of && *tls_of != D9_WK_TLS_UNKNOWN && tp > *tls_of)
                tp -= *tls_of;
        if (tp <= sp || tp - sp > (64 << 20))
                return 0;
        return tp;
}

/* Copy up to `want` bytes of task's stack from sp up into s->data, past
 * one hole inside the mapping sp lies in (above). Sets user_len and the
 * hole; the window may run past the top of that mapping, where the copy
 * ends (the next mapping up may be another thread's guard page).
 * bpf_find_vma only at an unreadable read: most copies have none.
 * The window stops at the thread pointer's top (d9_stack_tp_top), with
 * D9_SREC_TOP: past it lie the thread's TLS and descriptor, and above
 * them whatever the kernel mapped there. A readable mapping right above
 * (musl's heap: npm pagefind 1.6.0, 5 of 14 threads) made the copy of a
 * thread a few KiB deep all it asked for, and every stack of it that
 * reached musl's start() (no FDE: the scan for a caller reads on up to
 * 16 KiB) was said cut at the copy's end. */
static __always_inline void d9_stack_copy_user(struct d9_rec_stack *s, const struct d9_target_cfg *cfg,
                                               struct task_struct *task, __u32 want)
{
        struct d9_plain_read r = { .s = s, .sp = s->regs[D9_DW_RSP] };
        __u64 vend = 0, top = d9_stack_tp_top(cfg, task, r.sp);

        if (top && top - r.sp <= want) {
                want = (__u32)(top - r.sp) & ~7u;
                s->flags |= D9_SREC_TOP;
        }
        r.want = want;
        /* Most stacks are readable all the way: one read. */
        if (want <= D9_STACK_USER_MAX && bpf_probe_read_user(s->data, want, (void *)r.sp) == 0) {
                s->user_len = want;
                return;
        }
        bpf_loop(D9_STACK_USER_MAX / D9_STACK_CHUNK + 2, d9_plain_piece, &r, 0);
        if (r.stopped && !bpf_find_vma(task, r.sp, d9_vma_end, &vend, 0) && vend > r.sp + r.got) {
                if (vend - r.sp < r.want)
                        r.want = vend - r.sp;
                r.stopped = false;
                r.hole.open = true;
                r.hole.at = r.got;
                bpf_loop(D9_STACK_USER_MAX / D9_STACK_CHUNK + 2, d9_plain_piece, &r, 0);
        }
        s->user_len = r.end;
        if (r.hole.closed) {
                s->unread_at = r.hole.at;
                s->unread_len = r.hole.len;
        }
}

/* The deep copy of s's stack (regs and kernel frames in s already) for
 * `task`, written as its STACK record. Returns the stack id; 0: not
 * deep (the caller copies user_bytes; s->flags may say D9_SREC_CAPPED or
 * D9_SREC_ROOM);
 * ~0: deep, but the ring had no room (counted). A global function:
 * verified once, not for each state of its callers. */
__noinline __u64 d9_stack_deep(struct d9_rec_stack *s, const struct d9_target_cfg *cfg,
                               struct task_struct *task __arg_trusted, __u64 tgid_tid,
                               __u32 offcpu)
{
        struct d9_deep_read rd = {};
        struct bpf_dynptr dp;
        __u64 sp, end = 0, tp, want, size, id;
        __u32 tgid, tid;
        void *ring;

        if (!s || !cfg || !task || !(cfg->stack.flags & D9_STACK_DEEP) ||
            !bpf_ksym_exists(bpf_probe_read_user_dynptr))
                return 0;
        tgid = tgid_tid >> 32;
        tid = (__u32)tgid_tid;
        if (!bpf_map_lookup_elem(&d9_stack_deep_tids, &tid))
                return 0;
        d9_stack_urets(s, (__u64)BPF_CORE_READ(task, utask));
        sp = s->regs[D9_DW_RSP];
        /* A thread's stack ends below its static TLS and thread pointer,
         * in the same mapping, and musl's thread stacks are plain mappings
         * the kernel merges with their neighbours: worker 0's ran 741 KiB
         * past its thread pointer (npm sandbox-agent), so its copies took
         * the 128 KiB cap and 42 % of its samples were cut by the byte cap,
         * worker 1's 2 %. (The main thread's pointer lies elsewhere.) */
        tp = d9_stack_tp_top(cfg, task, sp);
        /* find_vma gives up while the mmap lock is taken (-EBUSY): then
         * the thread pointer alone bounds a thread's stack. Without either,
         * the plain copy stands, its cut counted (npm nulljs: 5 of 279
         * worker samples, no byte cap involved). */
        if (bpf_find_vma(task, sp, d9_vma_end, &end, 0) || end <= sp)
                end = tp;
        else if (tp && tp < end)
                end = tp;
        if (!end)
                return 0;
        want = end - sp;
        if (want <= cfg->stack.user_bytes)
                return 0;
        if (want > cfg->stack.deep_bytes)
                want = cfg->stack.deep_bytes;
        if (want > D9_STACK_DEEP_MAX)
                want = D9_STACK_DEEP_MAX;
        want &= ~7ull;
        if (want <= cfg->stack.user_bytes)
                return 0;
        ring = bpf_map_lookup_elem(&d9_rings, &tgid);
        if (!ring)
                return 0;
        size = D9_REC_STACK_FIXED + want;
        if (bpf_ringbuf_query(ring, BPF_RB_AVAIL_DATA) + size > bpf_ringbuf_query(ring, BPF_RB_RING_SIZE) / 2) {
                s->flags |= D9_SREC_ROOM;
                return 0;
        }
        if (!d9_stack_deep_take(cfg, want - cfg->stack.user_bytes, offcpu)) {
                s->flags |= D9_SREC_CAPPED;
                return 0;
        }
        id = d9_stack_next_id();
        if (!id)
                return 0;
        if (bpf_ringbuf_reserve_dynptr(ring, size, 0, &dp)) {
                bpf_ringbuf_discard_dynptr(&dp, 0);
                d9_stack_count_drop(cfg);
                return ~0ull;
        }
        rd.dp = &dp;
        rd.sp = sp;
        rd.len = (__u32)want;
        if (bpf_probe_read_user_dynptr(&dp, D9_REC_STACK_FIXED, rd.len, (void *)sp) == 0)
                rd.end = rd.len;
        else
                bpf_loop(D9_STACK_DEEP_MAX / 4096 + 1, d9_deep_page, &rd, 0);
        s->flags |= D9_SREC_DEEP;
        if (rd.end == end - sp)
                s->flags |= D9_SREC_TOP;
        s->user_len = rd.end;
        if (rd.hole.closed) {
                s->unread_at = rd.hole.at;
                s->unread_len = rd.hole.len;
        }
        s->n_fp = 0;
        s->stack_id = id;
        d9_fill_hdr(&s->hdr, D9_REC_STACK, tid, tgid);
        bpf_dynptr_write(&dp, 0, s, D9_REC_STACK_FIXED, 0);
        bpf_ringbuf_submit_dynptr(&dp, d9_ring_output_flags(ring, size));
        return id;
}

/* Which multi-thread worker's loop the thread runs, for the default set,
 * which has no poll probes (with them the Tokio program finds it at each
 * task poll, d9_worker_find in d9_tokio.bpf.c; docs/probe-plan.md "Worker
 * identity"). Tokio runs a worker as `run(worker: Arc<Worker>)`, a
 * blocking-pool task, so the loop's frame, holding the Arc, sits at a
 * fixed distance below the thread pointer under the pool's thread start
 * (2,784 bytes in the 1.43 test build, 1,376 in npm deltachat-rpc-server
 * 2.62, gdb), however deep the thread is now. Worker is { handle:
 * Arc<Handle>, index: usize, core: AtomicCell<Core> } behind the
 * ArcInner's { strong, weak }, in declaration order in every build looked
 * at (1.24, 1.43, 1.53): a stack word w with small counts at *w, then a
 * user pointer to another Arc with a count of at least 2 and a weak count
 * of at least 1 (the runtime's Handle, shared by every worker and task;
 * d9_wk_handle_is_arc), a small integer (Tokio's index) and null or a user
 * pointer (the core) has that shape. Until the distance is confirmed
 * (d9_wk_depth below) threads are scanned from the top down, the first
 * such words with a null core taken as finds (d9_wk_find_runs: a running
 * loop took the core out of its Worker); from then on each stack
 * looks at that distance only. */
#define D9_WK_TOP_WORDS 2048    /* 16 KiB below the stack top */
#define D9_WK_TOP_READS 256     /* words dereferenced per scan, at most (46
                                 * before the Worker in the 1.43 test build,
                                 * whose glibc keeps its TLS at the top; 112
                                 * in npm's biome 2.6.9, 7,040 bytes down,
                                 * which 96 never reached) */
#define D9_WK_TOP_TRIES 4       /* scans per thread per 100 ms while searching */

#include "d9_wk_search.h"

/* How long stacks say "still learning" (D9_SREC_WK_SEARCH) while no depth
 * is confirmed: a runtime without Workers (current-thread) shows itself by
 * scans that find nothing while none has found anything (d9_wk_any_cand),
 * a multi-thread one confirms within its first stacks; a single-worker
 * runtime never confirms. */
#define D9_WK_SEARCH_NS (1000 * 1000000ull)
#define D9_WK_SEARCH_MISSES 32

struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, D9_MAX_TARGETS);
        __type(key, __u32);
        __type(value, struct d9_wk_depth);
} d9_wk_depths SEC(".maps");

struct d9_wk_top {
        __u64 w[D9_WK_TOP_WORDS];
        __u64 base;             /* user address of w[0] */
        __u64 sp;               /* the sampled stack pointer */
        __u32 n, reads;
        __u64 key, pos, rt;
        __u64 core;             /* the found Worker's third word */
        __u32 index;            /* 1 + Tokio's index; 0: none found */
        __u32 n_finds;          /* of a full scan, from the top down */
        __u32 tid;              /* the thread scanned */
        __u64 main_top;         /* the process's main stack's top (mm->start_stack), or 0 */
        struct d9_wk_find finds[D9_WK_FINDS];
        __u32 n_held;           /* finds holding a core, apart */
        struct d9_wk_find held[D9_WK_FINDS];
};

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, D9_CTX_LEVELS);     /* one per d9_stack_ctx */
        __type(key, __u32);
        __type(value, struct d9_wk_top);
} d9_wk_top_scratch SEC(".maps");

static __always_inline bool d9_user_ptr(__u64 v)
{
        return v >= 0x10000 && v < (1ull << 47) && !(v & 7);
}

/* bpf_loop's context must be on the BPF stack: it points to the scratch,
 * and to the task scanned from outside it (the sweep; NULL: current). */
struct d9_wk_top_ctx {
        struct d9_wk_top *t;
        struct task_struct *task;
};

/* A read of the scanned thread's memory: current's, or (a sleepable
 * iterator's sweep) another task's. Callers pass task as a constant NULL
 * or a task: the compiler keeps one branch, and a program that may not
 * sleep never holds the sleepable call. */
static __always_inline long d9_wk_read(void *dst, __u32 size, __u64 addr, struct task_struct *task)
{
        if (task)
                return bpf_copy_from_user_task(dst, size, (const void *)addr, task, 0);
        return bpf_probe_read_user(dst, size, (const void *)addr);
}

/* Whether stack word w (at pos, in a stack ending at end) is a worker's
 * Arc: if so, t gets it. */
static __always_inline bool d9_wk_is_worker(struct d9_wk_top *t, __u64 w, __u64 pos, __u64 sp, __u64 end,
                                            struct task_struct *task)
{
        __u64 v[5], handle_counts[2] = {};

        /* A heap pointer: not into the stack itself (the scanned part, from
         * the sampled sp up to the thread pointer). musl's heap can lie
         * just below a thread's stack mapping: a wider margin hid Workers.
         * Nor into the main thread's stack (the kernel keeps its mmap
         * area 128 MiB or more below the stack's top, so no heap lies
         * there): an Arc is never on a stack, and a word pointing
         * there, above the loop's frame in both idle workers of npm
         * ast-grep (1,952 bytes down, the Worker at 2,816), held the
         * search back in 3 of 10 recordings. */
        if (!d9_user_ptr(w) || (w >= sp && w < end) ||
            (t->main_top && w < t->main_top + (1 << 20) && w + (64 << 20) > t->main_top))
                return false;
        t->reads++;
        if (d9_wk_read(v, sizeof(v), w, task) || v[0] - 1 >= (1 << 20) || v[1] - 1 >= (1 << 20) ||
            !d9_user_ptr(v[2]) || v[3] >= 4096 || (v[4] && !d9_user_ptr(v[4])))
                return false;
        if (d9_wk_read(handle_counts, sizeof(handle_counts), v[2], task) ||
            !d9_wk_handle_is_arc(handle_counts[0], handle_counts[1]))
                return false;
        t->key = w;
        t->pos = pos;
        t->rt = v[2];
        t->core = v[4];
        t->index = (__u32)v[3] + 1;
        return true;
}

/* Keeps the find t just read in list (n of at most D9_WK_FINDS), once per
 * object: the loop's Arc is copied into frames below it (3 more copies in
 * the frame-pointer build), so the outermost is kept. */
static __always_inline void d9_wk_keep(struct d9_wk_find *list, __u32 *n, const struct d9_wk_top *t, __u64 end)
{
        struct d9_wk_find *f;

        for (int k = 0; k < D9_WK_FINDS; k++)
                if (k < *n && list[k].key == t->key)
                        return;
        if (*n >= D9_WK_FINDS)
                return;
        f = &list[*n & (D9_WK_FINDS - 1)];
        f->depth = end - t->pos;
        f->key = t->key;
        f->rt = t->rt;
        f->index = t->index;
        f->tid = t->tid;
        f->core = t->core;
        (*n)++;
}

static __always_inline long d9_wk_top_word_of(__u64 i, struct d9_wk_top *t, struct task_struct *task)
{
        __u64 j, end;

        if (!t || i >= t->n || t->reads >= D9_WK_TOP_READS || t->n_finds >= D9_WK_FINDS)
                return 1;
        j = t->n - 1 - i;
        if (j >= D9_WK_TOP_WORDS)
                return 1;
        end = t->base + (__u64)t->n * 8;
        if (!d9_wk_is_worker(t, t->w[j], t->base + j * 8, t->sp, end, task))
                return 0;
        /* Its core in it: no loop runs with it (d9_wk_find_runs); kept
         * apart (d9_wk_weigh_held), it takes none of the scan's finds. */
        d9_wk_keep(t->core ? t->held : t->finds, t->core ? &t->n_held : &t->n_finds, t, end);
        return 0;
}

static long d9_wk_top_word(__u64 i, void *ctx)
{
        return d9_wk_top_word_of(i, ((struct d9_wk_top_ctx *)ctx)->t, NULL);
}

static long d9_wk_top_word_task(__u64 i, void *ctx)
{
        struct d9_wk_top_ctx *lc = ctx;

        return lc->task ? d9_wk_top_word_of(i, lc->t, lc->task) : 1;
}

/* The top of task's process's main stack, which d9_wk_is_worker keeps
 * clear of, for a scan of task's stack into t. */
static __always_inline void d9_wk_main_top(struct d9_wk_top *t, struct task_struct *task)
{
        struct mm_struct *mm = task->mm;

        t->main_top = mm ? mm->start_stack : 0;
}

/* A scan's window: the words from sp up to the stack's top (end), at
 * most the scratch's, the outermost kept. Returns its length in bytes. */
static __always_inline __u64 d9_wk_top_window(struct d9_wk_top *t, __u64 sp, __u64 end, struct task_struct *task)
{
        __u64 len = end - sp;

        d9_wk_main_top(t, task);
        t->reads = 0;
        t->index = 0;
        t->n_finds = 0;
        t->n_held = 0;
        t->tid = task->pid;
        t->sp = sp;
        if (len > sizeof(t->w))
                len = sizeof(t->w);
        len &= ~7ull;
        t->base = end - len;
        t->n = (__u32)(len / 8);
        return len;
}

/* The target's search state, reset for a new target in the slot. */
static __always_inline void d9_wk_depth_fresh(struct d9_wk_depth *d, const struct d9_target_cfg *cfg, __u64 tls,
                                              __u64 now)
{
        if (d->since == cfg->since_ts && d->tls == tls)
                return;
        /* The TLS size came with a late plan, after a depth was confirmed
         * from the thread pointer: the same word, tls bytes nearer the new
         * top. Searched again, it was confirmed twice and the log and status
         * gave two (npm routing-local-proxy: 3,848 and 2,872). Unconfirmed,
         * the search begins again below the TLS. */
        if (d->since == cfg->since_ts && d->tls == D9_WK_TLS_UNKNOWN && d->depth > tls) {
                d->tls = tls;
                d->depth -= tls;
                return;
        }
        /* A new target in the slot, or a new top: depths below the old top
         * mean nothing now. */
        d->since = cfg->since_ts;
        d->tls = tls;
        d->depth = 0;
        for (int i = 0; i < D9_WK_CANDS; i++)
                d->cand[i].depth = 0;
        d->misses = 0;
        d->first_ts = now;
        d->confirmed_ts = 0;
}

/* The finds of a full scan weighed, in a global function of their own:
 * verified once, apart from the scan (inline in d9_stack_worker, the two
 * made the verifier give up, E2BIG). */
__noinline __u32 d9_wk_weigh_scan(struct d9_wk_depth *d, const struct d9_wk_top *t, __u64 now)
{
        if (!d || !t)
                return 0;
        d9_wk_pending(d, t->finds, t->n_finds);
        if (!d->depth)
                d9_wk_pending_held(d, t->held, t->n_held);
        if (!d->depth && d->first_ts && now - d->first_ts >= D9_WK_SOLO_NS)
                d->depth = d9_wk_solo(d);
        return 0;
}

/* A scan's finds weighed against the target's candidates; false when it
 * found none. */
static __always_inline bool d9_wk_weigh_finds(struct d9_wk_depth *d, struct d9_wk_top *t, __u64 now)
{
        if (!t->n_finds && !t->n_held)
                return false;
        d9_wk_weigh_scan(d, t, now);
        if (d->depth && !d->confirmed_ts)
                d->confirmed_ts = now;
        return t->n_finds != 0;
}

/* A global function: verified once, not in every caller's state. Fills
 * s's worker fields: the worker whose loop the thread runs, looked for at
 * the target's confirmed depth, or (until there is one) searched for. */
__noinline __u32 d9_stack_worker(struct d9_rec_stack *s, const struct d9_target_cfg *cfg,
                                 struct task_struct *task __arg_trusted, __u32 ctx_level)
{
        __u32 slot;
        __u64 end, len, now, tls = 0, *tls_of;
        bool tls_known = true;
        struct d9_wk_depth *d;
        struct d9_thread *th;
        struct d9_wk_top *t;
        struct d9_wk_top_ctx lc;

        if (!s || !cfg || !task)
                return 0;
        s->worker = 0;
        s->worker_rt = 0;
        s->worker_found_ts = 0;
        if (!(cfg->probes & D9_PROBE_RUNS) || (cfg->probes & D9_PROBE_POLL))
                return 0;
        slot = cfg->slot;
        th = bpf_task_storage_get(&d9_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        d = bpf_map_lookup_elem(&d9_wk_depths, &slot);
        t = bpf_map_lookup_elem(&d9_wk_top_scratch, &ctx_level);
        tls_of = bpf_map_lookup_elem(&d9_wk_tls, &slot);
        if (tls_of)
                tls = *tls_of;
        if (tls == D9_WK_TLS_UNKNOWN)
                tls_known = false;
        if (!th || !d || !t)
                return 0;
        now = bpf_ktime_get_ns();
        /* Left by an earlier recording: the thread may have changed loops. */
        if (th->wk_ts < cfg->since_ts) {
                th->wk_index = 0;
                th->wk_tries = 0;
                th->wk_ts = now;
        }
        /* The top is the thread pointer less the executable's static TLS:
         * glibc and musl put the thread's TLS and descriptor right above
         * its stack, so a word's distance
         * from it is the same in every pool thread of a build. (Not the
         * stack mapping's end: musl's thread stacks are plain mappings the
         * kernel merges with their neighbours, measured 805 KiB above one
         * in deltachat.) The main thread's lies elsewhere: never a worker. */
        /* Below the executable's static TLS block (d9_wk_tls). */
        end = task->thread.fsbase - (tls_known ? tls : 0);
        if (end <= s->regs[D9_DW_RSP] || end - s->regs[D9_DW_RSP] > (64 << 20))
                return 0;
        len = d9_wk_top_window(t, s->regs[D9_DW_RSP], end, task);
        d9_wk_depth_fresh(d, cfg, tls, now);
        if (d->depth) {
                __u64 at = end - d->depth, w = 0;

                /* The loop's frame must be live: at or above sp. */
                if (at < t->sp || bpf_probe_read_user(&w, sizeof(w), (void *)at) ||
                    !d9_wk_is_worker(t, w, at, t->sp, end, NULL)) {
                        th->wk_index = 0;       /* not in a loop (any more) */
                        return 0;
                }
                /* A new loop (or the first look at this one) since when. */
                if (!th->wk_index || th->wk_key != t->key || th->wk_index != t->index)
                        th->wk_ts = now;
                th->wk_index = t->index;
                th->wk_rt = t->rt;
                th->wk_key = t->key;
                s->worker = th->wk_index;
                s->worker_rt = th->wk_rt;
                s->worker_found_ts = th->wk_ts;
                return 0;
        }
        if (!tls_known || (now - d->first_ts < D9_WK_SEARCH_NS && d->misses < D9_WK_SEARCH_MISSES))
                s->flags |= D9_SREC_WK_SEARCH;
        /* Searching: a thread scans a few times, and again every 100 ms. */
        if (th->wk_tries >= D9_WK_TOP_TRIES && now - th->wk_ts > 100 * 1000000ull) {
                th->wk_tries = 0;
                th->wk_ts = now;
        }
        if (th->wk_tries >= D9_WK_TOP_TRIES)
                return 0;
        th->wk_tries++;
        lc.t = t;
        lc.task = NULL;
        if (len && !bpf_probe_read_user(t->w, len, (void *)t->base))
                bpf_loop(D9_WK_TOP_WORDS, d9_wk_top_word, &lc, 0);
        if (!d9_wk_weigh_finds(d, t, now) && !d9_wk_any_cand(d))
                d->misses++;
        return 0;
}

/* The sweep's scratch: its own, as a sleepable iterator may sleep in a
 * read while a sample or a resumed thread's program runs on its CPU and
 * takes the stacks' ones. d9d runs one sweep at a time. */
struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct d9_wk_top);
} d9_wk_sweep_scratch SEC(".maps");

/* A swept thread once the depth is known: its loop's Worker, if it runs
 * one, into its storage as its own stacks would put it there, so the open
 * sleep read at the stop names the worker of a thread idle for the whole
 * recording (npm ast-grep's two workers, parked from before the attach to
 * after the stop, were on no worker and the Workers table empty). */
static __always_inline void d9_wk_sweep_found(const struct d9_target_cfg *cfg, struct task_struct *task,
                                              struct d9_wk_top *t, __u64 sp, __u64 end, __u64 depth, __u64 now)
{
        __u64 at = end - depth, w = 0;
        struct d9_thread *th;

        d9_wk_main_top(t, task);
        if (at < sp || d9_wk_read(&w, sizeof(w), at, task) || !d9_wk_is_worker(t, w, at, sp, end, task))
                return;
        th = bpf_task_storage_get(&d9_threads, task, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        /* Its own stacks looked in this recording: theirs is the answer
         * (and the since-when of it). */
        if (!th || th->wk_ts >= cfg->since_ts)
                return;
        th->wk_index = t->index;
        th->wk_rt = t->rt;
        th->wk_key = t->key;
        th->wk_swept_ts = now;
}

/* One scan of a thread of a default-set target from outside it, by a
 * sleepable task iterator (d9_wk_sweep): where its stacks would only be
 * scanned when it next runs or wakes, an idle worker is seen at the
 * attach. Weighed as any scan; a scan that finds nothing is no miss (most
 * threads of a process run no loop). */
static __always_inline void d9_wk_scan_task(const struct d9_target_cfg *cfg, struct task_struct *task)
{
        __u32 slot = cfg->slot, zero = 0;
        struct d9_wk_depth *d = bpf_map_lookup_elem(&d9_wk_depths, &slot);
        struct d9_wk_top *t = bpf_map_lookup_elem(&d9_wk_sweep_scratch, &zero);
        __u64 *tls_of = bpf_map_lookup_elem(&d9_wk_tls, &slot);
        __u64 now = bpf_ktime_get_ns(), tls, end, len;
        struct d9_wk_top_ctx lc;
        struct pt_regs *regs;

        if (!(cfg->probes & D9_PROBE_RUNS) || (cfg->probes & D9_PROBE_POLL) || !d || !t || !tls_of)
                return;
        tls = *tls_of;
        if (tls == D9_WK_TLS_UNKNOWN)
                return;
        d9_wk_depth_fresh(d, cfg, tls, now);
        regs = (struct pt_regs *)bpf_task_pt_regs(task);
        if (!regs)
                return;
        end = task->thread.fsbase - tls;
        if (end <= regs->sp || end - regs->sp > (64 << 20))
                return;
        if (d->depth) {
                d9_wk_sweep_found(cfg, task, t, regs->sp, end, d->depth, now);
                return;
        }
        len = d9_wk_top_window(t, regs->sp, end, task);
        lc.t = t;
        lc.task = task;
        if (len && !bpf_copy_from_user_task(t->w, len, (const void *)t->base, task, 0))
                bpf_loop(D9_WK_TOP_WORDS, d9_wk_top_word_task, &lc, 0);
        d9_wk_weigh_finds(d, t, now);
}

static __always_inline __u64 d9_stack_output(const struct d9_target_cfg *cfg, __u32 tgid,
                                             __u32 tid, struct d9_rec_stack *s)
{
        void *ring = bpf_map_lookup_elem(&d9_rings, &tgid);
        /* No branch on n_fp: each would double what the verifier walks. */
        __u64 size = D9_REC_STACK_FIXED + (((__u64)s->user_len + 7) & ~7ull) +
                     (__u64)s->n_fp * sizeof(struct d9_fp_frame);

        if (!ring)
                return 0;
        if (size > sizeof(*s))
                size = sizeof(*s);
        d9_fill_hdr(&s->hdr, D9_REC_STACK, tid, tgid);
        s->stack_id = d9_stack_next_id();
        if (!s->stack_id)
                return 0;
        if (bpf_ringbuf_output(ring, s, size, d9_ring_output_flags(ring, size))) {
                d9_stack_count_drop(cfg);
                return 0;
        }
        return s->stack_id;
}

#define D9_CAPTURE_HAVE_REGS 1u      /* d9_stack_capture's how: the caller put them in s */
#define D9_CAPTURE_OFFCPU 2u
#define D9_CAPTURE_LEVEL_SHIFT 8        /* then the enum d9_stack_ctx */

/* The STACK record of `task` (the current thread), kernel frames already
 * in s: its user registers (D9_CAPTURE_HAVE_REGS in how, else from
 * task_pt_regs) and stack, deep or user_bytes. Returns its id (0: none).
 * A global function: verified once for the three programs that take
 * stacks (a CPU sample, a run tick, an off-CPU interval), not once in each
 * (inline in the run tick too, d9d took 250 ms longer to start). */
__noinline __u64 d9_stack_capture(struct d9_rec_stack *s, const struct d9_target_cfg *cfg,
                                  struct task_struct *task __arg_trusted, __u64 tgid_tid, __u32 how)
{
        __u32 tgid = tgid_tid >> 32, tid = (__u32)tgid_tid, want;
        struct pt_regs *regs;
        __u64 id;
        long n;

        if (!s || !cfg || !task)
                return 0;
        want = cfg->stack.user_bytes;
        s->flags = 0;
        s->user_len = 0;
        s->n_fp = 0;
        s->n_uret = 0;
        s->unread_at = 0;
        s->unread_len = 0;
        s->worker = 0;
        s->worker_rt = 0;
        s->worker_found_ts = 0;
        if (!(how & D9_CAPTURE_HAVE_REGS)) {
                regs = (struct pt_regs *)bpf_task_pt_regs(task);
                if (!regs) {
                        s->flags = D9_SREC_NO_REGS;
                        return d9_stack_output(cfg, tgid, tid, s);
                }
                D9_STACK_REGS(s, *regs);
        }
        d9_stack_worker(s, cfg, task, how >> D9_CAPTURE_LEVEL_SHIFT);
        if (cfg->stack.flags & D9_STACK_FP) {
                /* Frame pointers: the kernel's walk is exact and cheap. */
                n = bpf_get_task_stack(task, s->data, D9_STACK_USER_MAX, BPF_F_USER_STACK);
                s->flags |= D9_SREC_USER_FP;
                s->user_len = n > 0 ? (__u32)n : 0;
                return d9_stack_output(cfg, tgid, tid, s);
        }
        id = d9_stack_deep(s, cfg, task, tgid_tid, !!(how & D9_CAPTURE_OFFCPU));
        if (id)
                return id == ~0ull ? 0 : id;
        if (want > D9_STACK_USER_MAX)
                want = D9_STACK_USER_MAX;
        d9_stack_copy_user(s, cfg, task, want);
        s->n_fp = d9_stack_fp_tail(s, cfg->stack.flags, (__u64)BPF_CORE_READ(task, utask));
        return d9_stack_output(cfg, tgid, tid, s);
}

/* perf CPU-clock sample of the current thread: write its STACK record and
 * return the id for the SAMPLE record (0: no stack). */
static __always_inline __u64 d9_stack_sample(struct bpf_perf_event_data *ctx,
                                             const struct d9_target_cfg *cfg,
                                             __u32 tgid, __u32 tid)
{
        __u32 level = D9_CTX_HARDIRQ;
        struct d9_rec_stack *s;
        long n;

        if (!(cfg->stack.flags & D9_STACK_CPU))
                return 0;
        s = bpf_map_lookup_elem(&d9_stack_scratch, &level);
        if (!s)
                return 0;
        /* Empty when the timer hit user mode. */
        n = bpf_get_stack(ctx, s->kern, sizeof(s->kern), 0);
        s->n_kern = n > 0 ? (__u32)n / 8 : 0;
        /* Timer in user mode: the sampled registers themselves (seen to
         * differ from task_pt_regs around uprobe single-steps); in the
         * kernel: the user registers saved at kernel entry. */
        if (ctx->regs.ip < (1ull << 47)) {
                D9_STACK_REGS(s, ctx->regs);
                return d9_stack_capture(s, cfg, bpf_get_current_task_btf(), (__u64)tgid << 32 | tid,
                                           D9_CAPTURE_HAVE_REGS | D9_CTX_HARDIRQ << D9_CAPTURE_LEVEL_SHIFT);
        }
        return d9_stack_capture(s, cfg, bpf_get_current_task_btf(), (__u64)tgid << 32 | tid,
                                   D9_CTX_HARDIRQ << D9_CAPTURE_LEVEL_SHIFT);
}

/* A run tick of the current thread, in the softirq of its timer: its
 * user registers from task_pt_regs, no kernel frames (the softirq's own,
 * not the thread's). Returns the stack id for the RUN_SAMPLE (0: none). */
static __always_inline __u64 d9_stack_tick(const struct d9_target_cfg *cfg, struct task_struct *task,
                                           __u32 tgid, __u32 tid)
{
        __u32 level = D9_CTX_SOFTIRQ;
        struct d9_rec_stack *s;

        if (!(cfg->stack.flags & D9_STACK_CPU))
                return 0;
        s = bpf_map_lookup_elem(&d9_stack_scratch, &level);
        if (!s)
                return 0;
        s->n_kern = 0;
        return d9_stack_capture(s, cfg, task, (__u64)tgid << 32 | tid, D9_CTX_SOFTIRQ << D9_CAPTURE_LEVEL_SHIFT);
}

/* GCRA bucket of `per_sec` with the configured burst: is a token there at
 * `now`? (per_sec 0: no limit.) */
static __always_inline bool d9_stack_token_ok(__u64 tat, __u32 per_sec,
                                              const struct d9_target_cfg *cfg, __u64 now, bool long_sleep)
{
        __u64 interval, burst;

        if (!per_sec)
                return true;
        interval = 1000000000ull / per_sec;
        burst = cfg->stack.offcpu_burst ? cfg->stack.offcpu_burst : 1;
        /* The burst's lower half is the long sleeps' alone: workers woken
         * by a 1 ms timer park for just over offcpu_min a thousand times a
         * second and used every token, so a 20 ms sleep inside a poll got
         * no stack and read as a park, not a blocked poll (a CI run: 723
         * of its workers' off-CPU samples capped, 1 of 4 such sleeps). */
        if (!long_sleep)
                burst -= burst / 2;
        return now + (burst - 1) * interval >= tat;
}

static __always_inline void d9_stack_token_take(__u64 *tat, __u32 per_sec, __u64 now)
{
        if (per_sec)
                *tat = (*tat > now ? *tat : now) + 1000000000ull / per_sec;
}

/* sched_switch, next (not running yet) after an off-CPU interval: if it
 * was long enough and the thread's bucket has a token, take the token and
 * keep the sleeping thread's kernel stack, which is intact until it runs.
 * D9_NOSTACK_NONE: the caller must have the user part read once the
 * thread resumes (d9_stack_offcpu_user); else why there is no stack. */
static __always_inline __u32 d9_stack_offcpu_begin(const struct d9_target_cfg *cfg,
                                                   struct task_struct *next, __u64 off_ns,
                                                   __u64 now)
{
        struct d9_stack_thread *st;
        long n;

        if (!(cfg->stack.flags & D9_STACK_OFFCPU))
                return D9_NOSTACK_OFF;
        if (off_ns < (__u64)cfg->stack.offcpu_min_us * 1000)
                return D9_NOSTACK_SHORT;
        st = bpf_task_storage_get(&d9_stack_threads, next, 0, BPF_LOCAL_STORAGE_GET_F_CREATE);
        if (!st)
                return D9_NOSTACK_PENDING;
        if (!d9_stack_token_ok(st->tat, cfg->stack.offcpu_per_sec, cfg, now,
                               off_ns >= 4ull * cfg->stack.offcpu_min_us * 1000))
                return D9_NOSTACK_RATE;
        d9_stack_token_take(&st->tat, cfg->stack.offcpu_per_sec, now);
        n = bpf_get_task_stack(next, st->rec.kern, sizeof(st->rec.kern), 0);
        st->rec.n_kern = n > 0 ? (__u32)n / 8 : 0;
        return D9_NOSTACK_NONE;
}

/* In the thread itself, on its way back to user space after such an
 * interval: its user registers and stack are still those of the moment it
 * blocked. Writes the STACK record; returns its id (0: none). */
static __always_inline __u64 d9_stack_offcpu_user(const struct d9_target_cfg *cfg,
                                                  struct task_struct *task,
                                                  __u32 tgid, __u32 tid)
{
        struct d9_stack_thread *st = bpf_task_storage_get(&d9_stack_threads, task, 0, 0);

        if (!st)
                return 0;
        return d9_stack_capture(&st->rec, cfg, task, (__u64)tgid << 32 | tid,
                                   D9_CAPTURE_OFFCPU | D9_CTX_TASK << D9_CAPTURE_LEVEL_SHIFT);
}
