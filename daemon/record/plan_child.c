/* plan_child.c: spawn d9d as the plan child, read its answer, reap it.
 *
 * The answer on the pipe: a header (result, bytes of message, bytes of
 * plan), the message, the plan (uprobes' probe_plan_serialize). The parent
 * reads it with a deadline and bounds, then reaps the child; a child that
 * died or sent less is a failure with the reason, never a partial plan. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/record/plan_child.h"
#include "proto/d9proto.h"
#include "uprobes/uprobes.h"

#define CHILD_FD_FILE 3
#define CHILD_FD_ANSWER 4
#define MAX_MESSAGE 4096u
#define MAX_PLAN (64u << 20)

extern char **environ;

struct answer_header {
        int64_t result;
        uint64_t message_len, plan_len;
};

int planner_child_main(int argc, char **argv)
{
        struct probe_plan *plan = NULL;
        struct answer_header h = { 0 };
        char *err = NULL;
        void *bytes = NULL;
        size_t len = 0;
        int r;

        if (argc != 4) {
                fprintf(stderr, "d9d: %s is d9d's own: DISPLAY ROOT, the file on fd 3\n", PLAN_CHILD_ARG);
                return 2;
        }
        d9_target_files_read_in_place();        /* a fault ends this process, not d9d */
        r = probe_plan_for_fd_in_root(CHILD_FD_FILE, argv[2], argv[3], &plan, &err);
        if (r == 0)
                r = probe_plan_serialize(plan, &bytes, &len);
        h.result = r;
        h.message_len = err ? strnlen(err, MAX_MESSAGE) : 0;
        h.plan_len = r == 0 ? len : 0;
        r = d9_write_all(CHILD_FD_ANSWER, &h, sizeof(h));
        if (r == 0 && h.message_len)
                r = d9_write_all(CHILD_FD_ANSWER, err, h.message_len);
        if (r == 0 && h.plan_len)
                r = d9_write_all(CHILD_FD_ANSWER, bytes, h.plan_len);
        free(bytes);
        free(err);
        probe_plan_free(plan);
        return r == 0 ? 0 : 1;
}

/* Everything the child writes until it closes the pipe, within the deadline
 * and MAX_PLAN. 0, -ETIMEDOUT, -ECANCELED (abort_fd became readable) or
 * -EFBIG: the child is then still running. */
static int read_answer(int fd, int abort_fd, uint64_t timeout_ms, struct d9_buf *b)
{
        uint64_t deadline = d9_now_ms() + timeout_ms;

        for (;;) {
                uint64_t now = d9_now_ms();
                struct pollfd p[2] = { { .fd = fd, .events = POLLIN }, { .fd = abort_fd, .events = POLLIN } };
                int n;

                if (now >= deadline)
                        return -ETIMEDOUT;
                n = poll(p, 2, (int)(deadline - now));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (p[1].revents)
                        return -ECANCELED;
                if (!p[0].revents)
                        continue;
                if (b->len >= MAX_PLAN + MAX_MESSAGE + sizeof(struct answer_header))
                        return -EFBIG;
                if (d9_buf_reserve(b, 64 << 10) < 0)
                        return -ENOMEM;
                ssize_t got = read(fd, b->data + b->len, 64 << 10);
                if (got < 0 && (errno == EINTR || errno == EAGAIN))
                        continue;
                if (got < 0)
                        return -errno;
                if (got == 0)
                        return 0;
                b->len += (size_t)got;
        }
}

static int spawn_child(int fd, int answer_fd, const char *display, const char *root, pid_t *pid)
{
        char *argv[] = { "d9d", PLAN_CHILD_ARG, (char *)display, (char *)root, NULL };
        _cleanup_close_ int file = fcntl(fd, F_DUPFD_CLOEXEC, CHILD_FD_ANSWER + 1);
        _cleanup_close_ int answer = fcntl(answer_fd, F_DUPFD_CLOEXEC, CHILD_FD_ANSWER + 1);
        posix_spawn_file_actions_t fa;
        posix_spawnattr_t at;
        sigset_t none, dfl;
        int r;

        if (file < 0 || answer < 0)
                return -errno;
        /* Both are above 4 now, so neither dup2 overwrites the other's source. */
        posix_spawn_file_actions_init(&fa);
        posix_spawn_file_actions_adddup2(&fa, file, CHILD_FD_FILE);
        posix_spawn_file_actions_adddup2(&fa, answer, CHILD_FD_ANSWER);
        /* d9d's loop blocks the signals it reads from a signalfd; the child takes the defaults. */
        posix_spawnattr_init(&at);
        sigemptyset(&none);
        sigfillset(&dfl);
        posix_spawnattr_setsigmask(&at, &none);
        posix_spawnattr_setsigdefault(&at, &dfl);
        posix_spawnattr_setflags(&at, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
        r = -posix_spawn(pid, "/proc/self/exe", &fa, &at, argv, environ);
        posix_spawnattr_destroy(&at);
        posix_spawn_file_actions_destroy(&fa);
        return r;
}

static int reap(pid_t pid, int *status)
{
        while (waitpid(pid, status, 0) < 0)
                if (errno != EINTR)
                        return -errno;
        return 0;
}

/* The child's answer as a plan, or the reason there is none. */
static int take_answer(const struct d9_buf *b, const char *display, struct probe_plan **out, char **why)
{
        struct answer_header h;
        int r;

        if (b->len < sizeof(h)) {
                *why = d9_strdupf("the probe planner for %s sent no answer", display);
                return -EPROTO;
        }
        memcpy(&h, b->data, sizeof(h));
        if (h.message_len > MAX_MESSAGE || h.plan_len > MAX_PLAN || h.result > 0 || h.result < -4095 ||
            b->len != sizeof(h) + h.message_len + h.plan_len) {
                *why = d9_strdupf("the probe planner for %s sent a malformed answer", display);
                return -EPROTO;
        }
        if (h.result < 0) {
                *why = h.message_len ? strndup((const char *)b->data + sizeof(h), h.message_len) : NULL;
                return (int)h.result;
        }
        r = probe_plan_parse(b->data + sizeof(h) + h.message_len, h.plan_len, out);
        if (r < 0)
                *why = d9_strdupf("the probe planner for %s sent a plan d9d cannot read: %s", display, strerror(-r));
        return r;
}

int planner_child_build(int fd, const char *display, const char *root, uint64_t timeout_ms, int abort_fd,
                     struct probe_plan **out, char **why)
{
        struct d9_buf answer = { 0 };
        struct probe_plan *plan = NULL;
        int pipefd[2], status = 0, r, rd;
        struct stat planned;
        bool stat_ok;
        pid_t pid;

        *out = NULL;
        *why = NULL;
        /* The file's ctime before the child reads it: a write meanwhile
         * keeps the plan out of the plan cache (uprobes/plan_cache.c). */
        stat_ok = fstat(fd, &planned) == 0;
        if (pipe2(pipefd, O_CLOEXEC) < 0)
                return -errno;
        r = spawn_child(fd, pipefd[1], display, root, &pid);
        close(pipefd[1]);
        if (r < 0) {
                close(pipefd[0]);
                *why = d9_strdupf("cannot start the probe planner for %s: %s", display, strerror(-r));
                return r;
        }
        rd = read_answer(pipefd[0], abort_fd, timeout_ms, &answer);
        close(pipefd[0]);
        if (rd < 0)
                kill(pid, SIGKILL);
        r = reap(pid, &status);
        if (r < 0)
                *why = d9_strdupf("cannot reap the probe planner for %s: %s", display, strerror(-r));
        else if (rd == -ETIMEDOUT)
                *why = d9_strdupf("planning %s took longer than plan_timeout (%llu ms); the planner was stopped",
                                  display, (unsigned long long)timeout_ms);
        else if (rd == -ECANCELED)
                *why = d9_strdupf("d9d is shutting down");
        else if (rd < 0)
                *why = d9_strdupf("reading the probe planner's answer for %s: %s", display, strerror(-rd));
        else if (WIFSIGNALED(status))
                *why = d9_strdupf("the probe planner for %s died of signal %d (%s)%s", display, WTERMSIG(status),
                            strsignal(WTERMSIG(status)),
                            WTERMSIG(status) == SIGBUS ? ": the file changed while it was read" : "");
        r = r < 0 ? r : rd < 0 ? rd : WIFSIGNALED(status) ? -EIO : take_answer(&answer, display, &plan, why);
        d9_buf_free(&answer);
        if (r < 0)
                return r;
        if (stat_ok)
                plan->planned_ctime = planned.st_ctim;
        /* The attach goes to the inode that was planned, through d9d's own fd of it. */
        plan->exe_fd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
        if (plan->exe_fd < 0 || asprintf(&plan->attach_path, "/proc/self/fd/%d", plan->exe_fd) < 0) {
                probe_plan_free(plan);
                return -ENOMEM;
        }
        *out = plan;
        return 0;
}
