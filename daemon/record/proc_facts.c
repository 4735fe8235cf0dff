/* proc_facts.c: exe, cgroup and namespace pids of a process. Everything is
 * read relative to an fd of its /proc/PID directory (tied to that process:
 * once it exits the reads fail instead of landing on a recycled PID) and
 * confirmed with the pidfd afterwards. Nothing is opened through a path
 * the process controls: exe is only read as a link, never followed. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/core/cleanup.h"
#include "daemon/record/proc_facts.h"
#include "uprobes/uprobes.h"

static ssize_t read_small(int dirfd, const char *name, char *buf, size_t size)
{
        _cleanup_close_ int fd = openat(dirfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        ssize_t n;

        if (fd < 0)
                return -errno;
        n = read(fd, buf, size - 1);
        if (n < 0)
                return -errno;
        buf[n] = 0;
        return n;
}

/* The "0::PATH" line (cgroup v2); "" on a v1-only host. */
static void parse_cgroup(char *text, struct proc_facts *f)
{
        for (char *save, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save))
                if (!strncmp(line, "0::", 3)) {
                        snprintf(f->cgroup, sizeof(f->cgroup), "%s", line + 3);
                        return;
                }
}

static void parse_nspid(char *text, pid_t pid, struct proc_facts *f)
{
        char *line = strstr(text, "\nNSpid:");
        size_t off = 0;

        f->ns_pid = pid;
        if (!line)
                return;
        line += 7;
        line[strcspn(line, "\n")] = 0;
        for (char *save, *tok = strtok_r(line, " \t", &save); tok; tok = strtok_r(NULL, " \t", &save)) {
                off += (size_t)snprintf(f->nspid + off, sizeof(f->nspid) - off, "%s%s", off ? " " : "", tok);
                f->ns_pid = (pid_t)atoi(tok);
                if (off >= sizeof(f->nspid))
                        break;
        }
}

int proc_facts_read(pid_t pid, int pidfd, struct proc_facts *f)
{
        char path[32], buf[8192];
        struct stat st;
        ssize_t n;

        memset(f, 0, sizeof(*f));
        snprintf(path, sizeof(path), "/proc/%d", pid);
        _cleanup_close_ int dirfd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (dirfd < 0 || fstat(dirfd, &st) < 0)
                return -ESRCH;
        f->uid = st.st_uid;
        n = readlinkat(dirfd, "exe", buf, sizeof(f->exe) - 1);
        if (n > 0)
                memcpy(f->exe, buf, (size_t)n);
        /* Replaced on disk since it started: still the program it runs. */
        size_t len = strlen(f->exe);
        if (len > 10 && !strcmp(f->exe + len - 10, " (deleted)"))
                f->exe[len - 10] = 0;
        if (read_small(dirfd, "cgroup", buf, sizeof(buf)) > 0)
                parse_cgroup(buf, f);
        buf[0] = '\n';
        if (read_small(dirfd, "status", buf + 1, sizeof(buf) - 1) < 0)
                return -ESRCH;
        parse_nspid(buf, pid, f);
        /* A zombie has no exe or cgroup left to match: as good as gone. */
        const char *state = strstr(buf, "\nState:");
        if (state && strspn(state + 7, " \t") < 8 && strchr("ZX", state[7 + strspn(state + 7, " \t")]))
                return -ESRCH;
        return d9_pidfd_alive(pidfd) < 0 ? -ESRCH : 0;
}
