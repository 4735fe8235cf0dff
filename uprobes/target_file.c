/* target_file: open and copy files a target process or a local user can
 * touch, without trusting them. d9d reads them with more privileges than
 * their owner has, so:
 *  - opened O_RDONLY|O_NONBLOCK|O_NOFOLLOW|O_CLOEXEC (a FIFO or a device
 *    planted where an executable was cannot block the caller), through
 *    openat2(RESOLVE_NO_MAGICLINKS), inside the target's root when given one;
 *  - fstat'ed: regular files only, at most D9_TARGET_FILE_MAX bytes;
 *  - read into a sealed memfd instead of being mapped: libelf and libdwfl
 *    map the copy, which nobody else can truncate, so a target file that
 *    shrinks under us gives a short copy (an error), never SIGBUS. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "uprobes.h"

static int regular_within_limit(int fd, struct stat *st)
{
        if (fstat(fd, st) < 0)
                return -errno;
        if (!S_ISREG(st->st_mode))
                return -EBADFD;
        if ((uint64_t)st->st_size > D9_TARGET_FILE_MAX)
                return -EFBIG;
        return 0;
}

int d9_target_file_openat(int dirfd, const char *path, bool in_root)
{
        struct open_how how = {
                .flags = O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY,
                .resolve = RESOLVE_NO_MAGICLINKS | (in_root ? RESOLVE_IN_ROOT : 0),
        };
        struct stat st;
        int fd, r;

        fd = (int)syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
        if (fd < 0 && (errno == ENOSYS || errno == EPERM)) {
                /* No openat2 (valgrind, old seccomp filters): the final
                 * component still is no symlink, and the checks below hold;
                 * only the confinement of symlinks to the root is lost. */
                while (in_root && *path == '/')
                        path++;
                fd = openat(dirfd, *path ? path : ".", (int)how.flags);
        }
        if (fd < 0)
                return -errno;
        r = regular_within_limit(fd, &st);
        if (r < 0) {
                close(fd);
                return r;
        }
        return fd;
}

/* "/proc/PID/root/REST" is looked up as REST inside that root (symlinks in
 * the target's tree cannot leave it); anything else from our root. */
int d9_target_file_open(const char *path)
{
        unsigned pid;
        int n = 0, root, fd;
        char rootp[64];

        if (sscanf(path, "/proc/%u/root%n", &pid, &n) == 1 && n > 0 && path[n] == '/') {
                snprintf(rootp, sizeof(rootp), "/proc/%u/root", pid);
                root = open(rootp, O_PATH | O_DIRECTORY | O_CLOEXEC);
                if (root < 0)
                        return -errno;
                fd = d9_target_file_openat(root, path + n, true);
                close(root);
                return fd;
        }
        return d9_target_file_openat(AT_FDCWD, path, false);
}

int d9_target_file_copy(int fd)
{
        struct stat st;
        off_t off = 0;
        int mfd, r;

        r = regular_within_limit(fd, &st);
        if (r < 0)
                return r;
        mfd = memfd_create("d9-target-copy", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (mfd < 0)
                return -errno;
        while (off < st.st_size) {
                off_t in = off; /* sendfile with an offset leaves fd's own alone */
                ssize_t n = sendfile(mfd, fd, &in, (size_t)(st.st_size - off));
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        /* Shrunk while being copied (or unreadable). */
                        r = n < 0 ? -errno : -ENODATA;
                        close(mfd);
                        return r;
                }
                off = in;
        }
        if (fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
                r = -errno;
                close(mfd);
                return r;
        }
        return mfd;
}

int d9_target_file_open_copy(const char *path)
{
        int fd = d9_target_file_open(path), mfd;

        if (fd < 0)
                return fd;
        mfd = d9_target_file_copy(fd);
        close(fd);
        return mfd;
}
