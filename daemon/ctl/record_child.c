/* record_child.c: start `record -- CMD` held before exec (so d9d can attach
 * first), pass on its exit status, and for --follow-children find the Tokio
 * process a launcher (shell, npm's node script) execs or starts. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "record_child.h"
#include "uprobes/uprobes.h"

int d9ctl_record_resolve_command(const char *cmd, char out[PATH_MAX])
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

char *d9ctl_record_not_elf(const char *path)
{
        char head[128] = "", *why = NULL;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        ssize_t n = fd >= 0 ? read(fd, head, sizeof(head) - 1) : -1;

        if (fd >= 0)
                close(fd);
        if (n >= 4 && !memcmp(head, "\177ELF", 4))
                return NULL;
        if (n >= 2 && head[0] == '#' && head[1] == '!') {
                head[n] = 0;
                head[strcspn(head, "\n")] = 0;
                if (asprintf(&why, "%s is a script (%s), not a Tokio executable; add --follow-children "
                             "to trace the Tokio process it starts", path, head) < 0)
                        why = NULL;
        } else if (asprintf(&why, "%s is not an ELF executable; add --follow-children if it starts one",
                            path) < 0) {
                why = NULL;
        }
        return why ? why : strdup("not an ELF executable");
}

int d9ctl_record_child_spawn(struct record_child *c, char **argv)
{
        int fds[2];

        if (pipe2(fds, O_CLOEXEC) < 0)
                return -errno;
        c->pid = fork();
        if (c->pid < 0) {
                int r = -errno;
                close(fds[0]);
                close(fds[1]);
                return r;
        }
        if (c->pid == 0) {
                char go = 0;
                close(fds[1]);
                if (read(fds[0], &go, 1) != 1 || go != 'g')
                        _exit(127);
                /* d9ctl's stdout carries only segment paths: the command's
                 * own output goes to stderr. */
                dup2(STDERR_FILENO, STDOUT_FILENO);
                execvp(argv[0], argv);
                fprintf(stderr, "d9ctl record: cannot run %s: %s\n", argv[0], strerror(errno));
                _exit(127);
        }
        close(fds[0]);
        c->go_fd = fds[1];
        return 0;
}

void d9ctl_record_child_release(struct record_child *c)
{
        if (c->go_fd < 0)
                return;
        (void)!write(c->go_fd, "g", 1);
        close(c->go_fd);
        c->go_fd = -1;
}

bool d9ctl_record_child_reap(struct record_child *c, bool block)
{
        if (!c->exited && c->pid > 0 && waitpid(c->pid, &c->status, block ? 0 : WNOHANG) == c->pid)
                c->exited = true;
        return c->exited;
}

int d9ctl_record_child_exit_code(const struct record_child *c)
{
        if (WIFEXITED(c->status))
                return WEXITSTATUS(c->status);
        if (WIFSIGNALED(c->status))
                return 128 + WTERMSIG(c->status);
        return 1;
}

/* Executables already judged (a launcher's node or sh is parsed once). */
struct judged {
        char exe[PATH_MAX];
        bool tokio;
};
static struct judged *judged;
static size_t njudged;

/* Every Tokio binary, stripped or not, holds "tokio" (panic source paths,
 * the default worker thread name); interpreters such as node do not. Scanning
 * for it takes milliseconds where a full probe plan of a 100 MB node takes
 * seconds, long enough to miss the child a launcher starts. */
static bool mentions_tokio(pid_t pid)
{
        char link[64];
        struct stat st;
        bool found = false;
        int fd;

        snprintf(link, sizeof(link), "/proc/%d/exe", pid);
        fd = open(link, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0) {
                void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
                if (p != MAP_FAILED) {
                        found = memmem(p, (size_t)st.st_size, "tokio", 5) != NULL;
                        munmap(p, (size_t)st.st_size);
                }
        }
        close(fd);
        return found;
}

static bool exe_is_tokio(pid_t pid, const char *exe)
{
        struct probe_plan *plan = NULL;
        struct judged *j;

        for (size_t i = 0; i < njudged; i++)
                if (!strcmp(judged[i].exe, exe))
                        return judged[i].tokio;
        j = realloc(judged, (njudged + 1) * sizeof(*j));
        if (!j)
                return false;
        judged = j;
        j = &judged[njudged];
        snprintf(j->exe, sizeof(j->exe), "%s", exe);
        j->tokio = mentions_tokio(pid) && probe_plan_for_pid(pid, &plan, NULL) == 0;
        if (plan)
                probe_plan_free(plan);
        /* A process caught mid-exec may not be readable yet: judge it again. */
        if (j->tokio || access(exe, R_OK) == 0)
                njudged++;
        return j->tokio;
}

static pid_t parent_of(pid_t pid)
{
        char path[64], buf[512], *p;
        int fd;
        ssize_t n;
        int ppid;

        snprintf(path, sizeof(path), "/proc/%d/stat", pid);
        fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return 0;
        n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return 0;
        buf[n] = 0;
        /* comm may hold spaces and parentheses: the state follows the last ')'. */
        p = strrchr(buf, ')');
        if (!p || sscanf(p + 1, " %*c %d", &ppid) != 1)
                return 0;
        return ppid;
}

static bool in_tree(pid_t root, pid_t pid)
{
        for (int depth = 0; pid > 1 && depth < 64; depth++) {
                if (pid == root)
                        return true;
                pid = parent_of(pid);
        }
        return false;
}

static bool judge(pid_t pid)
{
        char link[64], exe[PATH_MAX];
        ssize_t n;

        snprintf(link, sizeof(link), "/proc/%d/exe", pid);
        n = readlink(link, exe, sizeof(exe) - 1);
        if (n <= 0)
                return false;
        exe[n] = 0;
        return exe_is_tokio(pid, exe);
}

pid_t d9ctl_record_child_find_tokio(struct record_child *c)
{
        struct dirent *de;
        pid_t found = 0;
        DIR *proc;

        if (judge(c->pid))
                return c->pid;
        proc = opendir("/proc");
        if (!proc)
                return 0;
        while (!found && (de = readdir(proc))) {
                char *end;
                long pid = strtol(de->d_name, &end, 10);

                if (*end || pid <= 0 || pid == c->pid)
                        continue;
                if (in_tree(c->pid, (pid_t)pid) && judge((pid_t)pid))
                        found = (pid_t)pid;
        }
        closedir(proc);
        return found;
}
