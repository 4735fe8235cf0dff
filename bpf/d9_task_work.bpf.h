/* bpf_task_work (Linux 6.18) for programs built from an older kernel's BTF.
 *
 * vmlinux.h comes from the build machine's kernel. Where that kernel has no
 * bpf_task_work, the type and the kfunc are declared here: the kernel knows
 * the special map-value field by its BTF name, so an object built this way
 * still gets task_work where it runs on 6.18, and the weak kfunc (checked
 * with bpf_ksym_exists) leaves the off-CPU path writing stack-less records
 * where it does not. d9_vmlinux_features.h is written at build time from
 * vmlinux.h (bpf/meson.build). */
#pragma once
#include "d9_vmlinux_features.h"

#ifndef D9_VMLINUX_HAS_TASK_WORK
struct bpf_task_work {
        __u64 __opaque;
} __attribute__((aligned(8)));

extern int bpf_task_work_schedule_resume_impl(struct task_struct *task, struct bpf_task_work *tw,
                                              void *map__map,
                                              int (*callback)(struct bpf_map *, void *, void *),
                                              void *aux__prog) __weak __ksym;
#endif
