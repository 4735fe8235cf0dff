/* d9_events.h: the records BPF programs write into a target's ring buffer,
 * and the small config structs user space writes into BPF maps.
 *
 * This is the ONLY place these layouts live: the BPF programs (via
 * vmlinux.h types) and user space (via <stdint.h>) both include it. Every
 * record is a fixed-size struct starting with struct d9_rec_hdr; the
 * consumer switches on hdr.type and may check the size it got. Fields are
 * ordered so that no implicit padding exists (the same layout on both
 * sides). Change a layout only together with every consumer. */
#pragma once

#ifdef __D9_BPF__
/* vmlinux.h already defined __u8.. types. */
typedef __u8 d9_u8;
typedef __u16 d9_u16;
typedef __u32 d9_u32;
typedef __u64 d9_u64;
#else
#include <stdint.h>
typedef uint8_t d9_u8;
typedef uint16_t d9_u16;
typedef uint32_t d9_u32;
typedef uint64_t d9_u64;
#endif

/* Targets traced at once; also the size of the per-target drop counters. */
#define D9_MAX_TARGETS 256

enum d9_rec_type {
        D9_REC_POLL_START = 1,  /* uprobe on raw::poll<T,S> entry */
        D9_REC_POLL_END,        /* poll return, or (entry-only) closed by a park */
        D9_REC_SPAWN,           /* OwnedTasks::bind returned a new task */
        D9_REC_TERMINATE,       /* Harness::complete entered */
        D9_REC_WAKE,            /* waker::wake_by_val: a task was woken */
        D9_REC_PARK,            /* a worker entered its park function */
        D9_REC_UNPARK,          /* ... and returned from it */
        D9_REC_OFFCPU,          /* a target thread was off CPU (sched_switch) */
        D9_REC_CPU_SAMPLE,      /* perf CPU-clock sample of a target thread */
        D9_REC_EXIT,            /* the target's leader thread exited */
        D9_REC_EXEC,            /* the target exec'd: its probes are gone */
        D9_REC_STACK,           /* raw stack of the next SAMPLE/OFFCPU (d9_stack.bpf.h) */
        D9_REC_RUN_SAMPLE,      /* fast sample of a thread that has not slept
                                 * since the previous one (D9_PROBE_RUNS) */
        D9_REC_TYPE_MAX,
};

/* Probe sets, as chosen per target by the caller (d9_bpf_attach_target). */
enum d9_probe_bits {
        D9_PROBE_SCHED = 1u << 0,       /* off-CPU records, wakeups, exit */
        D9_PROBE_CPU = 1u << 1,         /* perf CPU-clock samples */
        D9_PROBE_PARK = 1u << 2,        /* worker park/unpark */
        D9_PROBE_POLL = 1u << 3,        /* poll start/end */
        D9_PROBE_SPAWN = 1u << 4,
        D9_PROBE_WAKE = 1u << 5,
        D9_PROBE_TERMINATE = 1u << 6,
        D9_PROBE_ALL = (1u << 7) - 1,
        /* 1u << 7 was sched_wakeup records (no dial9 event came from
         * them; the program is gone, see d9_sched.bpf.c). */
        /* Long runs: the run ticks (d9_run_timer_fired, every 500 us while
         * such a thread runs) on a thread that has not switched out
         * voluntarily since its previous tick write a RUN_SAMPLE with a
         * stack (long polls without poll probes). */
        D9_PROBE_RUNS = 1u << 8,
        /* What attach/record do without --probes: no uprobe at all
         * ("longpoll" on the command line is RUNS). */
        D9_PROBE_DEFAULT = D9_PROBE_SCHED | D9_PROBE_CPU | D9_PROBE_RUNS,
};

/* d9_sched's d9_tgid_bits: one bit per tgid mod 64 * this many words. */
#define D9_TGID_BITS_WORDS 1024

/* A uprobe's BPF cookie: the plan point's cookie in the low 32 bits; for a
 * poll of a `Pin<Box<dyn Future>>` task, the offset from the Header* of the
 * boxed future's dyn vtable pointer in bits 32..47 (0: not boxed); what the
 * point is (enum d9_point) in bits 48..55; where the program finds the
 * value it is about (enum d9_arg: a task Header*, a park key) in the top 8.
 * Records carry the low 32 bits only. */
#define D9_COOKIE_DYN_SHIFT 32
#define D9_COOKIE_KIND_SHIFT 48
#define D9_COOKIE_ARG_SHIFT 56
#define D9_COOKIE_MASK ((1ull << D9_COOKIE_DYN_SHIFT) - 1)
enum d9_point {
        D9_POINT_POLL = 1,      /* raw::poll entry */
        D9_POINT_POLL_END,      /* its return (uretprobe or return site) */
        D9_POINT_SPAWN,
        D9_POINT_TERMINATE,
        D9_POINT_WAKE,
        D9_POINT_PARK,
        D9_POINT_UNPARK,
        D9_POINT_POLL_BLOCKING, /* raw::poll entry of a blocking-pool task */
};
enum d9_arg {
        D9_ARG_NONE = 0,
        D9_ARG_RET,             /* rax at a uretprobe */
        D9_ARG_0,               /* rdi */
        D9_ARG_1,               /* rsi */
        D9_ARG_0_DEREF,         /* *(u64 *)rdi */
};

/* Why a D9_REC_POLL_END was written. */
enum d9_poll_end_why {
        D9_END_RETURN = 0,      /* uretprobe or return-site uprobe */
        D9_END_NEXT_POLL = 1,   /* entry-only: the thread started another poll
                                 * (not written: that POLL_START closes it) */
        D9_END_PARK = 2,        /* entry-only: the thread parked */
};

struct d9_rec_hdr {
        d9_u16 type;            /* enum d9_rec_type */
        d9_u16 cpu;
        d9_u32 tid;
        d9_u32 tgid;
        d9_u32 lost;            /* Tokio-probe records: this thread's records
                                 * dropped (ring full) right before this one,
                                 * so its own sequence has a hole here; 0 in
                                 * other records */
        d9_u64 ts;              /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
};

/* POLL_START, POLL_END, SPAWN, TERMINATE. */
struct d9_rec_task {
        struct d9_rec_hdr hdr;
        d9_u64 task_id;         /* Tokio task id (0 if unreadable) */
        d9_u64 cookie;          /* probe plan cookie: which poll<T,S> instance */
        d9_u64 header;          /* task Header* (pointer, for correlation) */
        union {
                d9_u64 start_ts;        /* POLL_END: the matching POLL_START's ts */
                d9_u64 exe_code;        /* POLL_START of a boxed dyn future, and
                                         * SPAWN: where the executable's code
                                         * begins (mm->start_code: its lowest PF_X
                                         * PT_LOAD's vaddr + the load bias), so
                                         * future_poll and vtable can be named
                                         * before any read of the target's map;
                                         * else 0 */
        };
        d9_u32 why;             /* POLL_END: enum d9_poll_end_why */
        d9_u32 worker;          /* POLL_START of a runtime task: 1 + Tokio's
                                 * index of the multi-thread worker whose
                                 * loop polls it (d9_worker_find in
                                 * d9_tokio.bpf.c); 0 if not known */
        union {
                d9_u64 future_poll;     /* POLL_START of a boxed dyn future: the
                                         * concrete future's poll fn (runtime
                                         * address, to symbolize); else 0 */
                d9_u64 vtable;          /* SPAWN: the task's vtable (runtime address,
                                         * read with its id; 0: unread), which the
                                         * plan's vtable scan ties to its poll<T,S> */
        };
        d9_u64 sched;           /* POLL_START: the task's scheduler S (for a
                                 * runtime task the Arc of its runtime's
                                 * Handle: one value per runtime); else 0 */
        d9_u64 worker_rt;       /* POLL_START with a worker: that worker's
                                 * runtime (its Handle's Arc, as sched) */
};

/* WAKE: woken task and, if the waking thread was polling, the waker. */
struct d9_rec_wake {
        struct d9_rec_hdr hdr;
        d9_u64 woken_task_id;
        d9_u64 waker_task_id;   /* 0: not woken from inside a poll */
        d9_u64 cookie;
};

/* PARK, UNPARK: the worker's thread CPU time and scheduler wait so far,
 * read from task_struct so user space can take deltas across a park. */
struct d9_rec_park {
        struct d9_rec_hdr hdr;
        d9_u64 park_key;        /* *(u64*)arg0 of park: identifies the worker
                                 * (its core), not the thread */
        d9_u64 cpu_ns;          /* task_struct se.sum_exec_runtime */
        d9_u64 run_delay_ns;    /* task_struct sched_info.run_delay */
        d9_u64 cookie;
        d9_u64 worker_rt;       /* as in d9_rec_task: the worker the parking */
        d9_u32 worker;          /* thread's loop runs, if its polls showed it */
        d9_u32 _pad;
};

/* Both ends of an off-CPU interval and what the scheduler says of it. */
struct d9_offcpu_span {
        d9_u64 off_ts, on_ts, cpu_ns, wait_ns, run_since;
        d9_u32 state;
        d9_u32 syscall;         /* as d9_rec_offcpu's */
};

/* A d9_offcpu_pending entry (bpf/d9_sched.bpf.c, which checks the layout)
 * as user space sees it: the loader forgets a detached target's entries,
 * tests/bpf/offcpu_pending_entry.c seeds some. */
struct d9_offcpu_pending_entry {
        d9_u64 task_work;       /* struct bpf_task_work: the kernel's */
        struct d9_offcpu_span span;
        d9_u32 tgid;
        d9_u32 running;         /* its callback has begun with span */
};

/* How BPF reads a long off-CPU interval's user stack in the thread itself,
 * before any of its user code runs again (the loader chooses, probing the
 * kernel: bpf/bpf_resume.h). */
enum d9_resume_way {
        D9_RESUME_NONE,         /* it does not: such intervals have no stack */
        D9_RESUME_TASK_WORK,    /* a bpf_task_work as it returns to user space */
        D9_RESUME_SCHED_EXIT,   /* at its return from __schedule (sched_exit_tp) */
};

/* Why an OFFCPU record has no stack (stack_id 0). */
enum d9_no_stack {
        D9_NOSTACK_NONE,        /* it has one */
        D9_NOSTACK_OFF,         /* off-CPU stacks are not enabled */
        D9_NOSTACK_SHORT,       /* shorter than d9_stack_cfg.offcpu_min_us */
        D9_NOSTACK_RATE,        /* the thread's token bucket was empty */
        D9_NOSTACK_PENDING,     /* no way to read it as the thread resumes
                                 * (D9_RESUME_NONE), one was still pending for
                                 * the thread, or scheduling it failed */
        D9_NOSTACK_RING,        /* the STACK record did not fit in the ring */
        D9_NOSTACK_GONE,        /* the thread never resumed in user space */
        D9_NOSTACK_MAX
};

/* OFFCPU: the thread went off CPU at off_ts and is back now (hdr.ts). */
/* d9_rec_offcpu.prev_state: the thread had not switched out since the
 * recording began, and a sched_wakeup of it came since: it slept from
 * before the attach, and off_ts is the recording's start. */
#define D9_OFFCPU_BEGAN_BEFORE (1u << 31)
#define D9_OFFCPU_NO_SYSCALL 0xffffffffu

struct d9_rec_offcpu {
        struct d9_rec_hdr hdr;
        d9_u64 off_ts;
        d9_u64 stack_id;        /* its D9_REC_STACK (0 = none) */
        d9_u32 prev_state;      /* task state at switch-out (0 = preempted) */
        d9_u32 no_stack;        /* enum d9_no_stack: why stack_id is 0 */
        d9_u64 cpu_ns;          /* se.sum_exec_runtime at switch-out (and so at switch-in) */
        d9_u64 sched_wait_ns;   /* from its sched_wakeup to switch-in (0: none seen) */
        d9_u64 run_since;       /* preempted, with run ticks on: the stretch without a
                                 * voluntary switch-out it was in, as RUN_SAMPLE's
                                 * since_ts (0: none) */
        d9_u32 syscall;         /* the system call it switched out in, + 1 (x86-64
                                 * numbers); D9_OFFCPU_NO_SYSCALL: in none (a page
                                 * fault); 0: not known */
        d9_u32 _pad;
        char comm[16];          /* the thread's name at switch-in (task->comm; empty:
                                 * not read) */
};

/* CPU_SAMPLE: a perf CPU-clock sample landed on a target thread. */
struct d9_rec_sample {
        struct d9_rec_hdr hdr;
        d9_u64 ip;              /* user IP if the sample hit user mode, else 0 */
        d9_u64 stack_id;        /* its D9_REC_STACK (0 = none) */
        char comm[16];          /* the thread's name then (task->comm) */
};

/* RUN_SAMPLE: a fast tick found the thread running, with no voluntary
 * switch-out (task->nvcsw unchanged) since since_ts, the first tick of this
 * stretch: it has been busy (on CPU or preempted) for at least ts - since_ts. */
struct d9_rec_run {
        struct d9_rec_hdr hdr;
        d9_u64 ip;              /* user IP if the tick hit user mode, else 0 */
        d9_u64 stack_id;        /* its D9_REC_STACK (0 = none) */
        d9_u64 since_ts;
};

/* EXIT, EXEC: just the header (plus the exit code for EXIT). */
struct d9_rec_proc {
        struct d9_rec_hdr hdr;
        d9_u32 exit_code;
        d9_u32 exec_dev;        /* EXEC: the new image's file, as the kernel */
        d9_u64 exec_ino;        /* numbers it (s_dev: major << 20 | minor) */
};

/* Stack capture (bpf/d9_stack.bpf.h, daemon/record/unwind.c, docs/stacks.md).
 * A STACK record carries what user space needs to unwind without frame
 * pointers: the thread's user registers, the top of its user stack
 * (variable length, from regs[D9_DW_RSP] up) and the kernel frames. It is
 * written right before the SAMPLE or OFFCPU record of the same thread that
 * names it by stack_id. */
#define D9_STACK_USER_MAX 16384 /* bytes of user stack a record may carry */
#define D9_STACK_USER_BYTES 8192 /* ... what d9d asks for (user_bytes): its sleeps
                                  * read at a recording's end copy as many */
#define D9_STACK_DEEP_MAX (256 * 1024) /* ... a deep copy (D9_SREC_DEEP) may carry */
#define D9_STACK_KERN_MAX 32    /* kernel frames */
#define D9_STACK_NREGS 17       /* x86-64 DWARF regs 0..16 (16 = rip) */
#define D9_DW_RBP 6
#define D9_DW_RSP 7
#define D9_DW_RIP 16

enum d9_stack_bits {
        D9_STACK_CPU = 1u << 0,         /* stacks for CPU samples */
        D9_STACK_OFFCPU = 1u << 1,      /* stacks for off-CPU intervals */
        D9_STACK_FP = 1u << 2,          /* binary has frame pointers: walk
                                         * them in BPF, copy no stack */
        D9_STACK_FP_TAIL = 1u << 3,     /* also follow rbp past the copy's
                                         * end (struct d9_fp_frame) */
        D9_STACK_DEEP = 1u << 4,        /* copy a deeper stack whole, up to
                                         * d9_stack_cfg.deep_bytes */
};

/* Frame-pointer frames past the end of the stack copy (D9_STACK_FP_TAIL):
 * the two words at addr (the caller's rbp, the return address), so a
 * frame-pointer unwind reaches the outer frames of a deep stack (a poll
 * with a 12 KiB frame) without copying all of it. In data[] after the
 * copy, from the next multiple of 8. */
#define D9_STACK_FP_MAX 32
struct d9_fp_frame {
        d9_u64 addr;
        d9_u64 bp;              /* *(addr) */
        d9_u64 ra;              /* *(addr + 8) */
};

struct d9_stack_cfg {
        d9_u32 flags;           /* enum d9_stack_bits; 0 = no stacks */
        d9_u32 user_bytes;      /* user stack bytes copied (<= D9_STACK_USER_MAX) */
        d9_u32 offcpu_min_us;   /* off-CPU intervals shorter get no stack */
        d9_u32 offcpu_per_sec;  /* per-thread token bucket: rate ... */
        d9_u32 offcpu_burst;    /* ... and burst of off-CPU stacks */
        /* Deep copies (D9_STACK_DEEP): a stack deeper than user_bytes is
         * copied whole, up to deep_bytes, while the target's byte bucket
         * (deep_per_sec bytes/s beyond user_bytes, burst deep_burst) has
         * room; off-CPU stacks may use only its upper half. */
        d9_u32 deep_bytes;      /* <= D9_STACK_DEEP_MAX */
        d9_u32 deep_per_sec;
        d9_u32 deep_burst;
        d9_u32 _pad;
};

/* STACK record flags. */
enum d9_stack_rec_bits {
        D9_SREC_USER_FP = 1u << 0,      /* data[] holds user IPs from the
                                         * frame-pointer walk, not raw stack */
        D9_SREC_NO_REGS = 1u << 1,      /* no user registers (kernel thread) */
        D9_SREC_TOP = 1u << 2,          /* the copy ends at the top of the
                                         * thread's stack mapping: nothing
                                         * of the stack lies beyond it */
        D9_SREC_DEEP = 1u << 3,         /* a deep copy (D9_STACK_DEEP) */
        D9_SREC_CAPPED = 1u << 4,       /* deeper than the copy, and the
                                         * byte bucket had no room for more */
        D9_SREC_WK_SEARCH = 1u << 5,    /* worker 0 means "not known yet": BPF
                                         * is still learning where this build
                                         * keeps its Worker (d9_stack_worker) */
        D9_SREC_ROOM = 1u << 6,         /* deeper than the copy, and a deep
                                         * copy would have filled the ring
                                         * past half (d9_stack_deep) */
};

/* A pending uretprobe of the thread: the kernel replaced the return
 * address at `stack` with its trampoline ([uprobes] page) and keeps the
 * real one (task->utask->return_instances), innermost first. */
#define D9_STACK_URET_MAX 4
struct d9_uret {
        d9_u64 stack;           /* where the return address is on the stack */
        d9_u64 orig_ret;        /* what it was */
};

struct d9_rec_stack {
        struct d9_rec_hdr hdr;
        d9_u64 stack_id;        /* != 0; the SAMPLE/OFFCPU record's stack_id */
        d9_u64 regs[D9_STACK_NREGS];
        struct d9_uret uret[D9_STACK_URET_MAX];
        d9_u32 n_uret;
        /* data[unread_at, unread_at + unread_len): stack pages not in
         * memory, with readable stack above them (d9_hole in
         * bpf/d9_stack.bpf.h); not copied. 0, 0: none. */
        d9_u32 unread_at;
        d9_u32 flags;           /* enum d9_stack_rec_bits */
        d9_u32 n_kern;          /* valid entries in kern[] */
        d9_u32 user_len;        /* valid bytes of stack copy in data[] */
        d9_u32 n_fp;            /* struct d9_fp_frame after them */
        /* The default set (no poll probes): the multi-thread worker whose
         * loop the thread runs, found near the top of its stack
         * (d9_stack_worker): 1 + Tokio's index, 0 if none; its runtime
         * (the Handle's Arc); when it was found, the thread's first
         * stack in this loop (a worker found later than another thread of
         * the same worker entered its loop later: block_in_place). */
        d9_u32 worker;
        d9_u32 unread_len;
        d9_u64 worker_rt;
        d9_u64 worker_found_ts;
        d9_u64 kern[D9_STACK_KERN_MAX];
        d9_u8 data[D9_STACK_USER_MAX]; /* only user_len bytes are written */
};
#define D9_REC_STACK_FIXED __builtin_offsetof(struct d9_rec_stack, data)

/* Per-target config, map d9_targets keyed by tgid (written by the loader).
 * The task-id read is *(u64*)(hdr + *(u64*)(*(u64*)(hdr + vtable_off)
 * + id_off_slot)): both offsets come from the probe plan, never from BPF. */
/* d9_wk_tls: the executable's TLS size is not known yet (its probe plan
 * is being built). */
#define D9_WK_TLS_UNKNOWN (~0ull)

struct d9_target_cfg {
        d9_u32 slot;            /* index into d9_drops */
        d9_u32 probes;          /* enum d9_probe_bits */
        d9_u64 header_vtable_off;
        d9_u64 vtable_id_off_slot;
        d9_u32 entry_only;      /* close polls at next poll/park */
        d9_u32 dyn_poll_slot;   /* Future::poll's slot in a Rust dyn vtable */
        struct d9_stack_cfg stack;
        d9_u64 offcpu_min_ns;   /* shorter off-CPU intervals are only
                                 * counted (d9_offcpu_short), not recorded */
        d9_u64 vtable_sched_off_slot; /* like vtable_id_off_slot, for the
                                 * scheduler field (0: not read) */
        /* Park probes without their uretprobe: the UNPARK is written when
         * the parked thread is switched back in after sleeping (sched
         * side), else by its next poll or park (tokio side). */
        d9_u32 unpark_at_resume;
        /* Non-zero: the uprobes write nothing (attached before they may
         * record, or going away): set and cleared by the loader, so a
         * probe class joins or leaves a live target at one instant. */
        d9_u32 uprobes_off;
        /* Non-zero: D9_PROBE_RUNS without its run ticks (the Worker search
         * stays): the plan knows no runtime task's poll body, so a tick's
         * stack could show no long poll (npm ast-grep 0.51: all its work in
         * block_on, whose busy thread took 1,800 ticked stacks per 8 s). */
        d9_u32 run_ticks_off;
        d9_u32 _pad;
        /* bpf_ktime_get_ns() when the target was installed: per-thread
         * state written before it (an earlier recording of the same
         * process) is not trusted (d9_thread.wk_ts). */
        d9_u64 since_ts;
};

/* Per target slot and CPU (map d9_offcpu_short): the off-CPU intervals
 * below offcpu_min_ns, which get no record of their own. */
struct d9_offcpu_short {
        d9_u64 count;
        d9_u64 ns;              /* their summed length */
        d9_u64 unseen;          /* switch-ins with no switch-out seen since the
                                 * thread's last switch-in of this recording:
                                 * an interval d9 missed (d9_switch_in) */
};

/* d9_exec.bpf.c -> daemon/exec_watch.c: some process called exec. Not a
 * target's record (its own ring, shared by every rule of auto-attach):
 * only who and when, since d9d reads the rest from /proc through a pidfd
 * and must not trust a copy taken here. */
struct d9_exec_rec {
        d9_u64 ts;              /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
        d9_u32 kernel_tgid;     /* task->tgid, the initial pid namespace's */
        d9_u32 pid;             /* in d9d's own pid namespace; 0: not visible there */
};
