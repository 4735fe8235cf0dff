/* Reading a small file whole (viewer assets) into a struct d9_buf.
 * Segments are not read this way: serve_stream.c decompresses them as they
 * are sent. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve_int.h"

int serve_read_all(int fd, struct d9_buf *in, size_t limit)
{
        struct stat st;

        if (fstat(fd, &st) == 0 && st.st_size > 0 && (size_t)st.st_size <= limit &&
            d9_buf_reserve(in, (size_t)st.st_size + 1) < 0)
                return -ENOMEM;
        for (;;) {
                if (in->len >= limit)
                        return -EFBIG;
                if (d9_buf_reserve(in, 1 << 16) < 0)
                        return -ENOMEM;
                ssize_t n = read(fd, in->data + in->len, in->cap - in->len);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return 0;
                in->len += (size_t)n;
        }
}
