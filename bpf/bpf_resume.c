/* bpf_resume.c: choose how d9_sched reads an off-CPU stack on resume.
 *
 * A task_work (Linux 6.18) runs in the thread on its way to user space;
 * where the verifier lets a tracepoint program schedule one, that is the
 * way (no cost to any thread but the one that slept). A kernel that
 * refuses it (seen: 6.18.44, "sleepable callback in a program that is not
 * sleepable") but has the sched_exit_tp tracepoint (Linux 6.16) gets a
 * program there instead: it runs at every return from __schedule on the
 * machine, in the thread that resumes, before it leaves the kernel. */
#include "bpf_resume.h"

#include <bpf/btf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "d9_resume_probe.skel.h"

static enum d9_resume_way resume_way;
static char resume_why[256];

static bool kernel_has_tracepoint(const char *btf_typedef)
{
        struct btf *btf = btf__load_vmlinux_btf();
        bool found;

        if (libbpf_get_error(btf))
                return false;
        found = btf__find_by_name_kind(btf, btf_typedef, BTF_KIND_TYPEDEF) > 0;
        btf__free(btf);
        return found;
}

static int quiet(enum libbpf_print_level level, const char *fmt, va_list ap)
{
        return 0;
}

/* The verifier's refusal is the answer, not a problem to print. */
static int resume_probe_load(void)
{
        libbpf_print_fn_t was = libbpf_set_print(quiet);
        struct d9_resume_probe *probe = d9_resume_probe__open();
        int err = probe ? d9_resume_probe__load(probe) : -errno;

        d9_resume_probe__destroy(probe);
        libbpf_set_print(was);
        return err;
}

static void resume_probe(void)
{
        int err = resume_probe_load();

        if (err == 0) {
                resume_way = D9_RESUME_TASK_WORK;
                snprintf(resume_why, sizeof(resume_why),
                         "read by a bpf_task_work as the thread returns to user space");
                return;
        }
        if (kernel_has_tracepoint("btf_trace_sched_exit_tp")) {
                resume_way = D9_RESUME_SCHED_EXIT;
                snprintf(resume_why, sizeof(resume_why),
                         "read at the thread's return from the scheduler (tracepoint sched_exit_tp): a tracepoint "
                         "program may not schedule a bpf_task_work here (%s)",
                         strerror(-err));
                return;
        }
        resume_way = D9_RESUME_NONE;
        snprintf(resume_why, sizeof(resume_why),
                 "not read: no bpf_task_work from a tracepoint program (%s) and no sched_exit_tp tracepoint",
                 strerror(-err));
}

static pthread_once_t resume_once = PTHREAD_ONCE_INIT;

enum d9_resume_way d9_bpf_resume_way(void)
{
        pthread_once(&resume_once, resume_probe);
        return resume_way;
}

const char *d9_bpf_resume_why(void)
{
        pthread_once(&resume_once, resume_probe);
        return resume_why;
}
