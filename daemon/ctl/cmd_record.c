/* d9ctl record: attach for a while, wait until every segment is sealed,
 * then print the sealed paths (copied into --out if given), one per line.
 *
 * `record -- CMD ARGS` traces a command from its first instruction without
 * ptrace: the child is forked and blocks on a pipe; d9d plans the probes
 * from CMD's executable file and attaches them with the child's pid as
 * filter (uprobes follow the pid through exec); only then is the child
 * released to exec CMD. CMD's stdout is sent to stderr so that stdout holds
 * only the segment paths. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdbool.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "client.h"
#include "d9ctl.h"
#include "proto/d9control.h"

static volatile sig_atomic_t interrupted;

static void on_interrupt(int sig)
{
        interrupted = 1;
}

/* Resolve CMD like execvp would, to an absolute path d9d can open. */
static int resolve_command(const char *cmd, char *out)
{
        const char *path = getenv("PATH");
        char buf[PATH_MAX];

        if (strchr(cmd, '/'))
                return realpath(cmd, out) && access(out, X_OK) == 0 ? 0 : -ENOENT;
        for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
                size_t n = strcspn(p, ":");
                snprintf(buf, sizeof(buf), "%.*s/%s", (int)n, p, cmd);
                if (access(buf, X_OK) == 0 && realpath(buf, out))
                        return 0;
                p += n + (p[n] == ':');
        }
        return -ENOENT;
}

/* Child: wait for the go byte, then become CMD. */
static pid_t spawn_held(char **cmd, int *go_fd)
{
        int fds[2];
        pid_t pid;

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                char go = 0;
                close(fds[1]);
                if (read(fds[0], &go, 1) != 1 || go != 'g')
                        _exit(127);
                /* d9ctl's stdout carries only segment paths: the command's
                 * own output goes to stderr. */
                dup2(STDERR_FILENO, STDOUT_FILENO);
                execvp(cmd[0], cmd);
                fprintf(stderr, "d9ctl record: cannot run %s: %s\n", cmd[0], strerror(errno));
                _exit(127);
        }
        close(fds[0]);
        *go_fd = fds[1];
        return pid;
}

/* Copies src to name inside the directory open on dir_fd. Whatever is at
 * name (a symlink someone planted there, to /etc/... say) is removed, never
 * followed: the new file is created O_EXCL|O_NOFOLLOW. */
static int copy_file(const char *src, int dir_fd, const char *name)
{
        char buf[1 << 16];
        int in = open(src, O_RDONLY | O_NOFOLLOW | O_CLOEXEC), out, r = 0;
        ssize_t n;

        if (in < 0)
                return -errno;
        if (unlinkat(dir_fd, name, 0) < 0 && errno != ENOENT) {
                r = -errno;
                close(in);
                return r;
        }
        out = openat(dir_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
        if (out < 0) {
                r = -errno;
                close(in);
                return r;
        }
        while ((n = read(in, buf, sizeof(buf))) > 0)
                if (write(out, buf, (size_t)n) != n) {
                        r = -EIO;
                        break;
                }
        if (n < 0)
                r = -errno;
        if (!r && fsync(out) < 0)
                r = -errno;
        close(in);
        close(out);
        return r;
}

/* --out DIR: created or opened without following a symlink, and refused
 * unless owned by us (or root) and not writable by others. */
static int open_out_dir(const char *out_dir)
{
        struct stat st;
        int fd;

        if (mkdir(out_dir, 0755) < 0 && errno != EEXIST)
                return -errno;
        fd = open(out_dir, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0 || (st.st_uid != geteuid() && st.st_uid != 0) || (st.st_mode & 0022)) {
                close(fd);
                return -EPERM;
        }
        return fd;
}

static int emit_paths(const json_t *sealed, const char *out_dir)
{
        const json_t *p;
        size_t i;
        int rc = 0, dir_fd = -1;

        if (out_dir && (dir_fd = open_out_dir(out_dir)) < 0) {
                fprintf(stderr, "d9ctl record: cannot use %s as --out: %s\n", out_dir,
                        dir_fd == -EPERM ? "not a directory of yours that only you can write" : strerror(-dir_fd));
                return 1;
        }
        json_array_foreach(sealed, i, p) {
                const char *src = json_string_value(p), *base = strrchr(src, '/');
                char dst[PATH_MAX];

                if (!out_dir) {
                        printf("%s\n", src);
                        continue;
                }
                base = base ? base + 1 : src;
                snprintf(dst, sizeof(dst), "%s/%s", out_dir, base);
                int r = copy_file(src, dir_fd, base);
                if (r < 0) {
                        fprintf(stderr, "d9ctl record: copying %s to %s failed: %s\n", src, dst, strerror(-r));
                        rc = 1;
                        continue;
                }
                printf("%s\n", dst);
        }
        if (dir_fd >= 0)
                close(dir_fd);
        return rc;
}

static json_t *session_status(json_int_t session)
{
        json_t *req = d9c_request("status"), *resp, *t;

        json_object_set_new(req, "session", json_integer(session));
        resp = d9ctl_call(req);
        if (!resp)
                return NULL;
        t = json_incref(json_array_get(json_object_get(resp, "targets"), 0));
        json_decref(resp);
        return t;
}

static void detach(int pid)
{
        json_t *req = d9c_request("detach"), *resp;

        json_object_set_new(req, "pid", json_integer(pid));
        resp = d9ctl_call(req);
        json_decref(resp);
}

/* Poll until the session is sealed. Returns the final status or NULL. */
static json_t *wait_sealed(json_int_t session, int pid, pid_t child)
{
        uint64_t polls = 0;
        bool detached = false;

        for (;;) {
                json_t *t = session_status(session);
                const char *state;

                if (!t) {
                        fprintf(stderr, "d9ctl record: d9d lost the session for pid %d\n", pid);
                        return NULL;
                }
                state = json_string_value(json_object_get(t, "state"));
                if (state && !strcmp(state, "done"))
                        return t;
                if (++polls % 10 == 0)
                        fprintf(stderr, "d9ctl record: pid %d %s: %lld events, %lld drops, %lld segments sealed\n",
                                pid, state, (long long)json_integer_value(json_object_get(t, "events")),
                                (long long)json_integer_value(json_object_get(t, "drops")),
                                (long long)json_integer_value(json_object_get(t, "segments")));
                json_decref(t);
                if (interrupted && !detached) {
                        fprintf(stderr, "d9ctl record: interrupted, detaching from pid %d\n", pid);
                        detach(pid);
                        detached = true;
                }
                if (child > 0)
                        waitpid(child, NULL, WNOHANG); /* reap, so d9d sees it gone */
                poll(NULL, 0, 200);
        }
}

static int usage_error(const char *msg)
{
        fprintf(stderr, "d9ctl record: %s (usage: record --pid N --duration D [--out DIR] [--probes LIST] [--offcpu-min D], "
                "or record --duration D [--out DIR] -- CMD [ARGS])\n", msg);
        return 2;
}

int cmd_record(int argc, char **argv)
{
        static const struct option opts[] = {
                { "pid", required_argument, NULL, 'p' },
                { "duration", required_argument, NULL, 'd' },
                { "out", required_argument, NULL, 'o' },
                { "probes", required_argument, NULL, 'P' },
                { "offcpu-min", required_argument, NULL, 'O' },
                {},
        };
        const char *out_dir = NULL, *probes = "all";
        char exe[PATH_MAX];
        uint64_t ms = 0;
        int64_t offcpu_min_us = -1;     /* -1: d9d's own setting */
        int opt, pid = 0, go_fd = -1, exe_fd = -1, rc;
        pid_t child = 0;
        json_t *req, *resp, *final;

        while ((opt = getopt_long(argc, argv, "+p:d:o:P:O:", opts, NULL)) != -1) {
                switch (opt) {
                case 'p':
                        if ((pid = d9ctl_parse_pid("record", optarg)) < 0)
                                return 2;
                        break;
                case 'd':
                        if (d9_parse_duration_ms(optarg, &ms) < 0 || !ms)
                                return usage_error("bad --duration (e.g. 10s, 500ms, 5m)");
                        break;
                case 'o': out_dir = optarg; break;
                case 'P':
                        if (d9c_parse_probes(optarg, NULL) < 0)
                                return usage_error("bad --probes (any of sched,cpu,park,poll,spawn,wake,terminate or all)");
                        probes = optarg;
                        break;
                case 'O':
                        if ((offcpu_min_us = d9ctl_parse_offcpu_min("record", optarg)) < 0)
                                return 2;
                        break;
                default: return usage_error("unknown option");
                }
        }
        if (!ms)
                return usage_error("--duration is required");
        if ((pid != 0) == (optind < argc))
                return usage_error("give either --pid N or -- CMD [ARGS]");
        req = d9c_request("attach");
        if (optind < argc) {
                if (resolve_command(argv[optind], exe) < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: command not found: %s\n", argv[optind]);
                        return 127;
                }
                /* Opened here, with our own rights, and inherited by the held
                 * child (closed by its exec): d9d reads the executable through
                 * the child's descriptor, never by a path we name. */
                exe_fd = open(exe, O_RDONLY | O_CLOEXEC);
                if (exe_fd < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: cannot open %s: %s\n", exe, strerror(errno));
                        return 126;
                }
                child = spawn_held(argv + optind, &go_fd);
                close(exe_fd);
                if (child < 0) {
                        json_decref(req);
                        fprintf(stderr, "d9ctl record: cannot start %s: %s\n", exe, strerror((int)-child));
                        return 1;
                }
                pid = child;
                json_object_set_new(req, "exe_fd", json_integer(exe_fd));
        }
        json_object_set_new(req, "pid", json_integer(pid));
        json_object_set_new(req, "duration_ms", json_integer((json_int_t)ms));
        json_object_set_new(req, "probes", json_string(probes));
        if (offcpu_min_us >= 0)
                json_object_set_new(req, "offcpu_min_us", json_integer((json_int_t)offcpu_min_us));
        signal(SIGINT, on_interrupt);
        signal(SIGTERM, on_interrupt);
        resp = d9ctl_call(req);
        if (!resp) {
                if (child > 0) {
                        kill(child, SIGKILL);
                        waitpid(child, NULL, 0);
                }
                return 1;
        }
        json_int_t session = json_integer_value(json_object_get(json_object_get(resp, "target"), "session"));
        fprintf(stderr, "d9ctl record: recording pid %d for %llu ms into %s\n", pid, (unsigned long long)ms,
                json_string_value(json_object_get(json_object_get(resp, "target"), "dir")));
        json_decref(resp);
        if (go_fd >= 0) {
                (void)!write(go_fd, "g", 1);
                close(go_fd);
        }
        final = wait_sealed(session, pid, child);
        if (child > 0 && waitpid(child, NULL, WNOHANG) == 0) {
                fprintf(stderr, "d9ctl record: recording over; stopping %s (pid %d)\n", exe, child);
                kill(child, SIGTERM);
                waitpid(child, NULL, 0);
        }
        if (!final)
                return 1;
        fprintf(stderr, "d9ctl record: pid %d: %s; %lld events, %lld drops\n", pid,
                json_string_value(json_object_get(final, "end_reason")),
                (long long)json_integer_value(json_object_get(final, "events")),
                (long long)json_integer_value(json_object_get(final, "drops")));
        rc = emit_paths(json_object_get(final, "sealed"), out_dir);
        if (!json_array_size(json_object_get(final, "sealed"))) {
                fprintf(stderr, "d9ctl record: no segment was sealed for pid %d\n", pid);
                rc = 1;
        }
        json_decref(final);
        return rc;
}
