/* attach_errors: the ways an attach must fail cleanly.
 *
 * Not a Tokio process, no such PID, and no permission (BPF as an
 * unprivileged user) each give one line saying what failed for which
 * PID, a negative errno, and leave nothing attached: the set of BPF
 * objects this process holds is the same before and after the failure.
 *
 * A second attach to a pid already traced is refused (EEXIST) and leaves
 * the first target recording: its map entries are not the failed one's to
 * remove.
 *
 * usage: attach_errors */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"
#include "uprobes/uprobes.h"

static int ignore_record(void *ctx, const void *rec, size_t size)
{
        return 0;
}

static bool one_line(const char *msg)
{
        return msg && *msg && !strchr(msg, '\n');
}

/* Same object ids held as before the failed attempt. */
static bool nothing_new(const struct bpf_ids *before)
{
        static struct bpf_ids after;

        bpf_snapshot_self(&after);
        if (after.n != before->n)
                return false;
        for (size_t i = 0; i < after.n; i++)
                if (after.id[i] != before->id[i] || after.kind[i] != before->kind[i])
                        return false;
        return true;
}

static void expect_failure_with(struct d9_bpf *bpf, pid_t pid, const struct probe_plan *plan, unsigned probes,
                                int want, const char *what)
{
        static struct bpf_ids before;
        struct d9_bpf_target_opts to = { .probes = probes, .on_record = ignore_record };
        struct d9_bpf_target *t = NULL;
        char *err = NULL;
        int r;

        bpf_snapshot_self(&before);
        r = d9_bpf_attach_target(bpf, pid, plan, &to, &t, &err);
        tap_ok(r == want && t == NULL && one_line(err), "%s: %s (%s)", what,
               err ? err : "(no message)", strerror(-r));
        tap_ok(nothing_new(&before), "%s: nothing left attached", what);
        free(err);
}

static void expect_failure(struct d9_bpf *bpf, pid_t pid, const struct probe_plan *plan, int want, const char *what)
{
        expect_failure_with(bpf, pid, plan, D9_PROBE_ALL, want, what);
}

/* A failure after the ring and config are in place (the uprobe attach
 * itself fails) must undo them too. */
static void half_attached(struct d9_bpf *bpf, pid_t pid)
{
        struct probe_point pt = { .file_offset = 0x1000, .kind = PROBE_POLL, .cookie = 1 };
        struct probe_plan plan = { .exe_path = "/nonexistent/d9-target", .points = &pt,
                                   .n_points = 1, .hdr_vtable_off = 16, .vtable_id_off = 72 };

        expect_failure(bpf, pid, &plan, -ENOENT, "uprobe attach fails midway");
}

/* Not Tokio: the plan route says so in one line, and the loader refuses
 * uprobes without a plan in one line too. */
static void not_tokio(struct d9_bpf *bpf)
{
        char *argv[] = { "/bin/sleep", "10", NULL };
        struct probe_plan *plan = NULL;
        struct child c;
        char *err = NULL;
        int r;

        if (child_start(&c, argv, false) < 0)
                return (void)tap_ok(false, "start /bin/sleep");
        usleep(100 * 1000);
        r = probe_plan_for_pid(c.pid, &plan, &err);
        tap_ok(r < 0 && one_line(err), "plan for /bin/sleep fails: %s", err ? err : "?");
        expect_failure(bpf, c.pid, plan, -ENOENT, "not a Tokio process");
        half_attached(bpf, c.pid);
        probe_plan_free(plan);
        free(err);
        child_kill(&c);
}

static int count_record(void *ctx, const void *rec, size_t size)
{
        (*(unsigned long *)ctx)++;
        return 0;
}

static void second_attach(struct d9_bpf *bpf)
{
        char *argv[] = { "/bin/sh", "-c", "while :; do :; done", NULL };
        unsigned long records = 0;
        struct d9_bpf_target_opts to = { .probes = D9_PROBE_SCHED | D9_PROBE_CPU, .on_record = count_record,
                                         .ctx = &records };
        struct d9_bpf_target *first = NULL;
        struct child c;
        char *err = NULL;

        if (child_start(&c, argv, false) < 0)
                return (void)tap_ok(false, "start a busy shell");
        int r = d9_bpf_attach_target(bpf, c.pid, NULL, &to, &first, &err);
        tap_ok(r == 0, "first attach to the busy shell (%s)", err ? err : "ok");
        free(err);
        err = NULL;
        expect_failure_with(bpf, c.pid, NULL, to.probes, -EEXIST, "second attach to a traced pid");
        /* A spinning thread in 400 ms: ~40 CPU samples at 99 Hz plus its
         * switches (hundreds here); with its entries deleted, a straggler or two. */
        records = 0;
        for (int i = 0; i < 40 && first; i++) {
                usleep(10 * 1000);
                d9_bpf_target_consume(first);
        }
        tap_ok(first && records >= 10, "the first target still records after the refused second attach (%lu records)",
               records);
        d9_bpf_detach_target(first);
        child_kill(&c);
}

/* As nobody, without capabilities, loading must fail with one message. */
static void no_permission(void)
{
        int p[2], status = 0;
        char msg[512] = "";
        ssize_t n;
        pid_t pid;

        if (pipe(p) < 0)
                return (void)tap_ok(false, "pipe");
        pid = fork();
        if (pid == 0) {
                struct d9_bpf *bpf = NULL;
                int r;

                close(p[0]);
                if (setgid(65534) < 0 || setuid(65534) < 0)
                        _exit(3);
                r = d9_bpf_open(NULL, &bpf);
                dprintf(p[1], "cannot load d9 BPF programs: %s", strerror(-r));
                _exit(r == -EPERM || r == -EACCES ? 0 : 1);
        }
        close(p[1]);
        n = read(p[0], msg, sizeof(msg) - 1);
        msg[n > 0 ? n : 0] = 0;
        close(p[0]);
        waitpid(pid, &status, 0);
        tap_ok(WIFEXITED(status) && WEXITSTATUS(status) == 0 && one_line(msg),
               "unprivileged user: %s", msg);
}

int main(void)
{
        struct d9_bpf *bpf = NULL;
        static struct bpf_ids all;
        int r;

        r = d9_bpf_open(NULL, &bpf);
        if (!tap_ok(r == 0, "BPF loads (%s)", strerror(-r)))
                return tap_done();
        not_tokio(bpf);
        expect_failure(bpf, 0x3ffffff0, NULL, -ESRCH, "no such PID");
        second_attach(bpf);
        no_permission();
        bpf_snapshot_self(&all);
        d9_bpf_close(bpf);
        tap_ok(all.n > 0 && bpf_count_alive(&all) == 0, "nothing left after close");
        tap_done_plan();
        return tap_done();
}
