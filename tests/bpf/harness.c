/* harness.c: TAP, child processes and ring draining for the bpf tests. */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <dirent.h>

#include <bpf/bpf.h>

static int tap_n, tap_failed;

void tap_plan(int n)
{
        printf("1..%d\n", n);
        fflush(stdout);
}

bool tap_ok(bool cond, const char *fmt, ...)
{
        va_list ap;

        printf("%sok %d - ", cond ? "" : "not ", ++tap_n);
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
        tap_failed += !cond;
        return cond;
}

void tap_diag(const char *fmt, ...)
{
        va_list ap;

        printf("# ");
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        printf("\n");
        fflush(stdout);
}

void tap_done_plan(void)
{
        printf("1..%d\n", tap_n);
        fflush(stdout);
}

int tap_done(void)
{
        return tap_failed ? 1 : 0;
}

int child_start(struct child *c, char *const argv[], bool capture)
{
        int p[2] = { -1, -1 };

        memset(c, 0, sizeof(*c));
        c->out_fd = -1;
        if (capture && pipe2(p, O_CLOEXEC) < 0)
                return -errno;
        c->pid = fork();
        if (c->pid < 0)
                return -errno;
        if (c->pid == 0) {
                if (capture)
                        dup2(p[1], STDOUT_FILENO);
                execv(argv[0], argv);
                fprintf(stderr, "cannot run %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        if (capture) {
                close(p[1]);
                c->out_fd = p[0];
        }
        return 0;
}

bool child_exited(struct child *c)
{
        if (c->reaped)
                return true;
        if (waitpid(c->pid, &c->status, WNOHANG) == c->pid)
                c->reaped = true;
        return c->reaped;
}

char *child_read_all(struct child *c)
{
        size_t len = 0, cap = 4096;
        char *buf = malloc(cap);
        ssize_t n;

        if (!buf || c->out_fd < 0)
                return buf;
        while ((n = read(c->out_fd, buf + len, cap - len - 1)) > 0) {
                len += (size_t)n;
                if (cap - len < 2) {
                        char *nb = realloc(buf, cap *= 2);

                        if (!nb)
                                break;
                        buf = nb;
                }
        }
        buf[len] = 0;
        return buf;
}

void child_kill(struct child *c)
{
        if (c->pid <= 0 || c->reaped)
                return;
        kill(c->pid, SIGKILL);
        waitpid(c->pid, &c->status, 0);
        c->reaped = true;
}

int drain_until_exit(struct d9_bpf_target *t, struct child *c)
{
        int r;

        while (!child_exited(c)) {
                r = d9_bpf_target_poll(t, 50);
                if (r < 0 && r != -EINTR)
                        return r;
        }
        return d9_bpf_target_consume(t);
}

/* Every BPF object this process holds an fd to, from /proc/self/fdinfo
 * (prog_id / map_id / link_id lines). */
int bpf_snapshot_self(struct bpf_ids *ids)
{
        static const char *const keys[3] = { "prog_id:", "map_id:", "link_id:" };
        struct dirent *de;
        char path[300], line[256];
        DIR *d = opendir("/proc/self/fdinfo");

        memset(ids, 0, sizeof(*ids));
        if (!d)
                return -errno;
        while ((de = readdir(d))) {
                FILE *f;

                if (de->d_name[0] == '.')
                        continue;
                snprintf(path, sizeof(path), "/proc/self/fdinfo/%s", de->d_name);
                f = fopen(path, "r");
                if (!f)
                        continue;
                while (fgets(line, sizeof(line), f))
                        for (int k = 0; k < 3; k++)
                                if (!strncmp(line, keys[k], strlen(keys[k])) &&
                                    ids->n < BPF_IDS_MAX) {
                                        ids->kind[ids->n] = k;
                                        ids->id[ids->n++] =
                                                (uint32_t)strtoul(line + strlen(keys[k]), NULL, 10);
                                }
                fclose(f);
        }
        closedir(d);
        return (int)ids->n;
}

static int count_alive_once(const struct bpf_ids *ids, bool report)
{
        int n = 0;

        for (size_t i = 0; i < ids->n; i++) {
                int fd = ids->kind[i] == 0 ? bpf_prog_get_fd_by_id(ids->id[i])
                       : ids->kind[i] == 1 ? bpf_map_get_fd_by_id(ids->id[i])
                                           : bpf_link_get_fd_by_id(ids->id[i]);

                if (fd >= 0) {
                        close(fd);
                        if (report)
                                tap_diag("still alive: %s id %u", ids->kind[i] == 0 ? "prog"
                                         : ids->kind[i] == 1 ? "map" : "link",
                                         ids->id[i]);
                        n++;
                }
        }
        return n;
}

/* How many of the snapshot's objects still exist anywhere in the kernel.
 * The kernel frees programs and links after an RCU grace period, so give
 * it up to 3 s before calling anything a leak. */
int bpf_count_alive(const struct bpf_ids *ids)
{
        for (int tries = 0; tries < 30; tries++) {
                if (count_alive_once(ids, false) == 0)
                        return 0;
                usleep(100 * 1000);
        }
        return count_alive_once(ids, true);
}

unsigned long long bpf_recursion_misses(const struct bpf_ids *ids)
{
        unsigned long long sum = 0;

        for (size_t i = 0; i < ids->n; i++) {
                struct bpf_prog_info info = {};
                __u32 len = sizeof(info);
                int fd;

                if (ids->kind[i] != 0 || (fd = bpf_prog_get_fd_by_id(ids->id[i])) < 0)
                        continue;
                if (!bpf_prog_get_info_by_fd(fd, &info, &len) && info.recursion_misses) {
                        tap_diag("program %s missed %llu runs", info.name,
                                 (unsigned long long)info.recursion_misses);
                        sum += info.recursion_misses;
                }
                close(fd);
        }
        return sum;
}
