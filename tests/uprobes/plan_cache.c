/* The plan cache (uprobes/plan_cache.c) on real Tokio processes: a second
 * process of a planned file gets a copy of the plan, point for point,
 * through its own descriptor; after a write to the file (its ctime moves)
 * nothing is found; a plan that used a separate debug file is never kept,
 * nor one of a file written while it was planned. TAP.
 * usage: plan-cache TOKIO_BINARY */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../tap.h"
#include "uprobes.h"

struct target {
        pid_t pid;
        int pidfd;
};

static int copy_file(const char *from, const char *to)
{
        char cmd[8192];

        snprintf(cmd, sizeof(cmd), "cp '%s' '%s' && chmod 755 '%s'", from, to, to);
        return system(cmd);
}

/* The copy running (an idle-ish Tokio program), with a pidfd. */
static struct target run(const char *path)
{
        struct target t = { fork(), -1 };

        if (t.pid == 0) {
                execl(path, path, "mixed", "--duration", "30", (char *)NULL);
                _exit(127);
        }
        /* Until it has exec'd (the cache matches /proc/PID/exe): a fixed
         * 300 ms wait lost that race once in a fresh root, cold cache. */
        char link[64], exe[4096];
        snprintf(link, sizeof(link), "/proc/%d/exe", (int)t.pid);
        for (int i = 0; i < 1000; i++) {
                ssize_t n = readlink(link, exe, sizeof(exe) - 1);
                if (n > 0 && (exe[n] = 0, !strcmp(exe, path)))
                        break;
                usleep(10 * 1000);
        }
        t.pidfd = (int)syscall(SYS_pidfd_open, t.pid, 0);
        return t;
}

static void stop(struct target *t)
{
        kill(t->pid, SIGKILL);
        waitpid(t->pid, NULL, 0);
        close(t->pidfd);
}

static int same_points(const struct probe_plan *a, const struct probe_plan *b)
{
        if (a->n_points != b->n_points || a->n_missing != b->n_missing ||
            a->vtable_id_off != b->vtable_id_off || strcmp(a->build_id ? a->build_id : "", b->build_id ? b->build_id : ""))
                return 0;
        for (size_t i = 0; i < a->n_points; i++) {
                const struct probe_point *x = &a->points[i], *y = &b->points[i];
                if (x->file_offset != y->file_offset || x->kind != y->kind || x->cookie != y->cookie ||
                    x->skipped != y->skipped || strcmp(x->label ? x->label : "", y->label ? y->label : ""))
                        return 0;
        }
        for (size_t i = 0; i < a->n_missing; i++)
                if (strcmp(a->missing[i].reason, b->missing[i].reason))
                        return 0;
        /* The segments and boxed-future names translate labels by. */
        return a->n_dyn_fns && a->n_segments && a->n_segments == b->n_segments &&
               !memcmp(a->segments, b->segments, a->n_segments * sizeof(*a->segments)) &&
               a->n_dyn_fns == b->n_dyn_fns && !memcmp(a->dyn_fns, b->dyn_fns, a->n_dyn_fns * sizeof(*a->dyn_fns)) &&
               a->dyn_fn_text_len == b->dyn_fn_text_len &&
               !memcmp(a->dyn_fn_text, b->dyn_fn_text, a->dyn_fn_text_len);
}

int main(int argc, char **argv)
{
        char dir[] = "/tmp/d9-plan-cache.XXXXXX", path[256];
        struct probe_plan *p1 = NULL, *p2 = NULL, *p3 = NULL, *p4 = NULL;
        struct probe_plan_cache *c = probe_plan_cache_new(4);
        struct target t1, t2;
        char *err = NULL, ch;
        int fd;

        if (argc != 2 || !mkdtemp(dir) || !c)
                bail("usage: plan-cache TOKIO_BINARY");
        snprintf(path, sizeof(path), "%s/target", dir);
        if (copy_file(argv[1], path) != 0)
                bail("cannot copy %s", argv[1]);
        t1 = run(path);
        if (t1.pidfd < 0)
                bail("cannot start %s", path);
        ok(probe_plan_for_pidfd(t1.pidfd, t1.pid, &p1, &err) == 0 && p1 && p1->n_points > 0, "planned the first process");
        ok(probe_plan_cache_get(c, t1.pidfd, t1.pid, &p2) == -ENOENT, "nothing cached before a put");

        /* Rules first: neither of these plans is kept. */
        p1->debug_file = strdup("/usr/lib/debug/.build-id/xx/yy.debug");
        probe_plan_cache_put(c, p1);
        ok(probe_plan_cache_get(c, t1.pidfd, t1.pid, &p2) == -ENOENT,
           "a plan that used a separate debug file is not kept");
        free(p1->debug_file);
        p1->debug_file = NULL;
        p1->planned_ctime.tv_nsec ^= 1;
        probe_plan_cache_put(c, p1);
        ok(probe_plan_cache_get(c, t1.pidfd, t1.pid, &p2) == -ENOENT,
           "a plan of a file written while it was planned is not kept");
        p1->planned_ctime.tv_nsec ^= 1;

        probe_plan_cache_put(c, p1);
        t2 = run(path);
        ok(probe_plan_cache_get(c, t2.pidfd, t2.pid, &p2) == 0 && p2, "a second process of the file gets a copy");
        ok(p1 && p2 && same_points(p1, p2), "point for point the same plan (offsets, kinds, cookies, labels, missing, segments, boxed-future names)");
        ok(p2 && p2->exe_fd >= 0 && p2->exe_fd != p1->exe_fd && p2->attach_path &&
           strcmp(p2->attach_path, p1->attach_path) != 0, "the copy attaches through its own descriptor of the file");
        stop(&t1);
        stop(&t2);

        /* The same byte written back: contents equal, ctime moved. */
        fd = open(path, O_RDWR);
        ok(fd >= 0 && pread(fd, &ch, 1, 0) == 1 && pwrite(fd, &ch, 1, 0) == 1, "rewrote the file's first byte");
        if (fd >= 0)
                close(fd);
        t1 = run(path);
        ok(probe_plan_cache_get(c, t1.pidfd, t1.pid, &p3) == -ENOENT, "after a write the file's plan is not found");
        ok(probe_plan_for_pidfd(t1.pidfd, t1.pid, &p4, &err) == 0 && p1 && p4 && same_points(p1, p4),
           "planned again, it gives the same plan");
        stop(&t1);
        probe_plan_free(p1);
        if (p2)
                probe_plan_free(p2);
        if (p4)
                probe_plan_free(p4);
        probe_plan_cache_free(c);
        free(err);
        unlink(path);
        rmdir(dir);
        return tap_done();
}
