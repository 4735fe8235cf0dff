/* io.c: reading and writing whole buffers (d9proto.h), the one place that
 * retries EINTR and short transfers for every component. */
#include <errno.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "d9proto.h"

int d9_write_all(int fd, const void *data, size_t len)
{
        const uint8_t *p = data;
        bool socket = true;

        while (len) {
                /* send: a peer that went away is -EPIPE, never SIGPIPE (d9ctl
                 * does not ignore it). Not a socket: plain write from then on. */
                ssize_t n = socket ? send(fd, p, len, MSG_NOSIGNAL) : write(fd, p, len);

                if (n < 0 && socket && errno == ENOTSOCK) {
                        socket = false;
                        continue;
                }
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

ssize_t d9_read_full(int fd, void *buf, size_t len, off_t offset)
{
        uint8_t *p = buf;
        size_t got = 0;

        while (got < len) {
                ssize_t n = offset < 0 ? read(fd, p + got, len - got)
                                       : pread(fd, p + got, len - got, offset + (off_t)got);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        return (ssize_t)got;
}

int d9_read_all(int fd, struct d9_buf *b, size_t limit)
{
        size_t start = b->len;
        struct stat st;

        /* A regular file says how much is coming: one allocation. */
        if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 && (uint64_t)st.st_size <= limit &&
            d9_buf_reserve(b, (size_t)st.st_size) < 0)
                return -ENOMEM;
        for (;;) {
                if (d9_buf_reserve(b, 1 << 16) < 0)
                        return -ENOMEM;
                /* At most one byte past the limit: enough to know it is passed. */
                size_t room = b->cap - b->len - 1, left = limit + 1 - (b->len - start);
                ssize_t n = read(fd, b->data + b->len, room < left ? room : left);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                b->len += (size_t)n;
                if (b->len - start > limit)
                        return -EFBIG;
        }
        b->data[b->len] = 0;
        return 0;
}
