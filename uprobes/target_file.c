/* target_file: open and copy files a target process or a local user can
 * touch, without trusting them. d9d reads them with more privileges than
 * their owner has, so:
 *  - looked up O_PATH|O_NOFOLLOW through openat2(RESOLVE_NO_MAGICLINKS),
 *    inside the target's root when given one, and fstat'ed: regular files
 *    of at most D9_TARGET_FILE_MAX bytes only;
 *  - only then opened O_RDONLY|O_NONBLOCK|O_CLOEXEC (through /proc/self/fd):
 *    a FIFO or a device planted where an executable was is never opened,
 *    so it can neither block the caller nor see an open() from it;
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

/* The file behind an O_PATH descriptor (taken over), opened for reading only
 * once it is known to be a regular file: opening a device can have side
 * effects, and opening a FIFO can block. */
int d9_target_file_reopen(int opath_fd)
{
        struct stat st;
        char self[64];
        int fd, r = regular_within_limit(opath_fd, &st);

        if (r < 0) {
                close(opath_fd);
                return r;
        }
        snprintf(self, sizeof(self), "/proc/self/fd/%d", opath_fd);
        fd = open(self, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
        r = fd < 0 ? -errno : 0;
        close(opath_fd);
        return r < 0 ? r : fd;
}

int d9_target_file_openat(int dirfd, const char *path, bool in_root)
{
        struct open_how how = {
                .flags = O_PATH | O_NOFOLLOW | O_CLOEXEC,
                .resolve = RESOLVE_NO_MAGICLINKS | (in_root ? RESOLVE_IN_ROOT : 0),
        };
        int fd;

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
        return d9_target_file_reopen(fd);
}

/* "/proc/PID/root/REST" is looked up as REST inside that root (symlinks in
 * the target's tree cannot leave it), and so is "/proc/self/fd/N/REST"
 * inside the directory open as N (a target's root kept past its exit);
 * anything else from our root. */
int d9_target_file_open(const char *path)
{
        unsigned pid, dirfd;
        int n = 0, root, fd;
        char rootp[64];

        if (sscanf(path, "/proc/self/fd/%u%n", &dirfd, &n) == 1 && n > 0 && path[n] == '/')
                return d9_target_file_openat((int)dirfd, path + n, true);
        n = 0;
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

static bool read_in_place;

void d9_target_files_read_in_place(void)
{
        read_in_place = true;
}

/* The write seal fails with EBUSY while the kernel still holds references
 * to pages just written (a CI run under load: "cannot read
 * d9-target-1.43-release: Device or resource busy"): tried again a few
 * times, then left out. Nobody else holds such a memfd, so the size seals
 * are what keeps a mapping of it whole; the write seal was only a second
 * lock. */
int d9_memfd_seal_copy(int mfd)
{
        const int size_seals = F_SEAL_SHRINK | F_SEAL_GROW;

        for (int tries = 0; tries < 5; tries++) {
                if (fcntl(mfd, F_ADD_SEALS, size_seals | F_SEAL_WRITE | F_SEAL_SEAL) == 0)
                        return 0;
                if (errno != EBUSY)
                        return -errno;
                usleep(1000);
        }
        return fcntl(mfd, F_ADD_SEALS, size_seals | F_SEAL_SEAL) < 0 ? -errno : 0;
}

int d9_target_file_copy(int fd)
{
        struct stat st;
        off_t off = 0;
        int mfd, r;

        r = regular_within_limit(fd, &st);
        if (r < 0)
                return r;
        if (read_in_place) {
                mfd = fcntl(fd, F_DUPFD_CLOEXEC, 3);
                return mfd < 0 ? -errno : mfd;
        }
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
        r = d9_memfd_seal_copy(mfd);
        if (r < 0) {
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
