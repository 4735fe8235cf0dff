/* d9_exec.bpf.c: every exec on the machine, for auto-attach
 * (daemon/exec_watch.c, daemon/autoattach.c).
 *
 * tp_btf/sched_process_exec fires in the new image, after the old mm is
 * gone and before the process runs one instruction of it, so a process
 * d9d attaches to from this notice loses only the time d9d takes to plan
 * and attach. The record names the process only: which rule it matches
 * is decided in d9d from /proc through a pidfd (a copy of the file name
 * here could be a symlink or a path in another mount namespace).
 *
 * Cost: one ring record per exec anywhere (execs are rare next to the
 * sched_switch events d9_sched.bpf.c sees). A full ring is counted in
 * d9_exec_lost; d9d then rescans /proc, so no match is missed for it. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "d9_events.h"

char LICENSE[] SEC("license") = "GPL";

/* d9d's own pid namespace: its inode number (st_ino of /proc/self/ns/pid). */
const volatile __u32 d9_pidns_ino;

#define D9_PIDNS_LEVEL_MAX 32   /* the kernel's MAX_PID_NS_LEVEL */

struct {
        __uint(type, BPF_MAP_TYPE_RINGBUF);
        __uint(max_entries, 256 * 1024);
} d9_exec_ring SEC(".maps");

struct {
        __uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, __u64);
} d9_exec_lost SEC(".maps");

/* p's number in d9d's pid namespace, 0 when it is not in it or a namespace
 * below it. Not bpf_get_ns_current_pid_tgid(): that answers only for
 * tasks whose own namespace is the one asked about, and a container's
 * processes live in namespaces below d9d's. The levels are searched for
 * d9d's namespace because d9d cannot tell its own depth (NSpid in a /proc
 * mounted inside a container starts at that container's level). After
 * exec the caller is the thread group leader: its struct pid is the tgid's. */
static __always_inline __u32 d9_pid_in_own_ns(struct task_struct *p)
{
        struct pid *pid = BPF_CORE_READ(p, thread_pid);
        __u32 level = BPF_CORE_READ(pid, level);

        for (__u32 i = 0; i < D9_PIDNS_LEVEL_MAX; i++) {
                struct upid up = {};

                if (i > level)
                        break;
                if (bpf_core_read(&up, sizeof(up), &pid->numbers[i]) < 0)
                        return 0;
                if (BPF_CORE_READ(up.ns, ns.inum) == d9_pidns_ino)
                        return (__u32)up.nr;
        }
        return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(d9_exec_seen, struct task_struct *p)
{
        struct d9_exec_rec *r = bpf_ringbuf_reserve(&d9_exec_ring, sizeof(*r), 0);

        if (!r) {
                __u32 zero = 0;
                __u64 *lost = bpf_map_lookup_elem(&d9_exec_lost, &zero);

                if (lost)
                        (*lost)++;
                return 0;
        }
        r->ts = bpf_ktime_get_ns();
        r->kernel_tgid = p->tgid;
        r->pid = d9_pid_in_own_ns(p);
        bpf_ringbuf_submit(r, 0);
        return 0;
}
