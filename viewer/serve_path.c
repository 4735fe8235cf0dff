/* Path confinement for d9ctl serve: a client-supplied relative path may only
 * name a regular file beneath the served root. The syntax is checked first
 * (so ".." and absolute paths get a clear 400), then the kernel resolves the
 * path with RESOLVE_BENEATH (symlinks may not leave the root), and finally
 * the opened file's canonical path is compared with the root's, so a bug in
 * any one layer does not open a hole. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "serve_int.h"

int serve_path_syntax_ok(const char *rel, size_t len)
{
        if (len == 0 || len >= PATH_MAX || memchr(rel, '\0', len) || strlen(rel) != len)
                return 0;
        if (rel[0] == '/')
                return 0;
        /* Every component must be a plain name: no "", ".", "..", and no
         * backslash, which some clients treat as a separator. */
        for (const char *p = rel; *p;) {
                const char *end = strchrnul(p, '/');
                size_t n = (size_t)(end - p);

                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return 0;
                if (memchr(p, '\\', n))
                        return 0;
                p = *end ? end + 1 : end;
                if (*end && !*p)
                        return 0; /* trailing slash */
        }
        return 1;
}

static int fd_is_beneath(int fd, const char *root_real)
{
        char link[64], real[PATH_MAX];
        size_t rlen = strlen(root_real);

        snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
        ssize_t n = readlink(link, real, sizeof(real) - 1);
        if (n < 0)
                return -errno;
        real[n] = '\0';
        if (strncmp(real, root_real, rlen) != 0)
                return 0;
        /* root "/srv" must not admit "/srv2/x"; a root of "/" admits all */
        return real[rlen] == '/' || (rlen == 1 && root_real[0] == '/');
}

int serve_path_open(int rootfd, const char *root_real, const char *rel, size_t rel_len)
{
        struct open_how how = {
                .flags = O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK,
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        struct stat st;
        int fd, r;

        if (!serve_path_syntax_ok(rel, rel_len))
                return -EINVAL;
        fd = (int)syscall(SYS_openat2, rootfd, rel, &how, sizeof(how));
        if (fd < 0)
                return errno == EXDEV ? -EACCES : -errno;
        r = fd_is_beneath(fd, root_real);
        if (r <= 0) {
                close(fd);
                return r < 0 ? r : -EACCES;
        }
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        if (!S_ISREG(st.st_mode)) {
                close(fd);
                return S_ISDIR(st.st_mode) ? -EISDIR : -EACCES;
        }
        /* O_NONBLOCK only guarded against FIFOs during open */
        fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
        return fd;
}
