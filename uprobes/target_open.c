/* target_open: from a pidfd to the executable file the process runs.
 *
 * The pidfd is taken before anything else is looked at; /proc/PID/exe is
 * opened (the kernel follows that link to the very inode being run, even
 * from another mount namespace, even deleted or replaced on disk), and only
 * then is the pidfd checked: if the process behind it is still alive, the
 * PID was not recycled in between and the file is its executable. No path a
 * user can write is opened here. The name reported in the plan prefers
 * /proc/PID/root/<exe> when that is the same inode, because it keeps the
 * executable's real name and directory for humans and for finding debug
 * files next to it (those are opened with d9_target_file_open). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uprobes_int.h"

int d9_pidfd_alive(int pidfd)
{
        /* A pidfd reads as ready once the whole process has exited, zombie
         * included: a zombie has no executable or maps left to trace, and
         * signal 0 would still call it alive. */
        struct pollfd p = { .fd = pidfd, .events = POLLIN };
        int n = poll(&p, 1, 0);

        if (n < 0)
                return -errno;
        return n > 0 ? -ESRCH : 0;
}

static int explain_errno(pid_t pid, int r, char **err_msg)
{
        if (!err_msg)
                return r;
        if (r == -ENOENT || r == -ESRCH)
                asprintf(err_msg, "no process with PID %d", pid);
        else if (r == -EACCES || r == -EPERM)
                asprintf(err_msg, "permission denied reading /proc/%d/exe "
                         "(run as root or with CAP_SYS_PTRACE)", pid);
        else if (r == -EBADFD)
                asprintf(err_msg, "PID %d's executable is not a regular file", pid);
        else if (r == -EFBIG)
                asprintf(err_msg, "PID %d's executable is larger than d9d reads (1 GiB)", pid);
        else
                asprintf(err_msg, "cannot read /proc/%d/exe: %s", pid, strerror(-r));
        return r;
}

static char *display_name(pid_t pid, int fd)
{
        char link[64], exe[4096], *rooted = NULL;
        struct stat a, b;
        ssize_t n;
        int other;

        snprintf(link, sizeof(link), "/proc/%d/exe", pid);
        n = readlink(link, exe, sizeof(exe) - 1);
        if (n > 0 && exe[0] == '/') {
                exe[n] = 0;
                if (asprintf(&rooted, "/proc/%d/root%s", pid, exe) < 0)
                        rooted = NULL;
                other = rooted ? d9_target_file_open(rooted) : -1;
                if (other >= 0 && fstat(other, &a) == 0 && fstat(fd, &b) == 0 &&
                    a.st_dev == b.st_dev && a.st_ino == b.st_ino) {
                        close(other);
                        return rooted;
                }
                if (other >= 0)
                        close(other);
                free(rooted);
        }
        return strdup(link);
}

int uprobes_target_exe_open(int pidfd, pid_t pid, char **display, char **err_msg)
{
        char link[64];
        struct stat st;
        int own = -1, fd, r;

        if (pid <= 0) {
                if (err_msg)
                        asprintf(err_msg, "invalid PID %d", pid);
                return -EINVAL;
        }
        if (pidfd < 0) {
                own = pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
                if (pidfd < 0)
                        return explain_errno(pid, -errno, err_msg);
        }
        snprintf(link, sizeof(link), "/proc/%d/exe", pid);
        fd = open(link, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        r = fd < 0 ? -errno : 0;
        if (r == -ENOENT && d9_pidfd_alive(pidfd) == 0) {
                if (err_msg)
                        asprintf(err_msg, "PID %d has no executable (kernel thread or zombie)", pid);
                r = -ENOEXEC;
                goto out;
        }
        if (r == 0 && d9_pidfd_alive(pidfd) < 0)
                r = -ESRCH;     /* exited: the file may be a newer process's */
        if (r == 0 && fstat(fd, &st) < 0)
                r = -errno;
        if (r == 0 && !S_ISREG(st.st_mode))
                r = -EBADFD;
        if (r == 0 && (uint64_t)st.st_size > D9_TARGET_FILE_MAX)
                r = -EFBIG;
        if (r == 0)
                *display = display_name(pid, fd);
        if (r == 0 && !*display)
                r = -ENOMEM;
        if (r < 0)
                explain_errno(pid, r, err_msg);
out:
        if (r < 0 && fd >= 0)
                close(fd);
        if (own >= 0)
                close(own);
        return r < 0 ? r : fd;
}
