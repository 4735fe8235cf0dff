/* d9_resume_probe.bpf.c: loaded, never attached, to learn whether this
 * kernel lets a tracepoint program schedule a bpf_task_work (bpf_resume.c).
 * Linux 6.18 has the kfunc; a later kernel seen here refuses it from any
 * program that is not sleepable ("sleepable callback in a program that is
 * not sleepable"), and d9_sched's switch-in is a tracepoint. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include "d9_task_work.bpf.h"

char LICENSE[] SEC("license") = "GPL";

struct d9_resume_probe_entry {
        struct bpf_task_work tw;
};

struct {
        __uint(type, BPF_MAP_TYPE_HASH);
        __uint(max_entries, 1);
        __type(key, __u32);
        __type(value, struct d9_resume_probe_entry);
} d9_resume_probe_map SEC(".maps");

static int d9_resume_probe_cb(struct bpf_map *map, void *key, void *value)
{
        return 0;
}

SEC("tp_btf/sched_switch")
int BPF_PROG(d9_resume_probe, bool preempt, struct task_struct *prev, struct task_struct *next)
{
        struct d9_resume_probe_entry *e;
        __u32 key = 0;

        e = bpf_map_lookup_elem(&d9_resume_probe_map, &key);
        if (e)
                bpf_task_work_schedule_resume_impl(next, &e->tw, &d9_resume_probe_map, d9_resume_probe_cb,
                                                   NULL);
        return 0;
}
