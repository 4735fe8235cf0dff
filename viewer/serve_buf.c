/* Growable byte buffers for d9ctl serve, and reading a small file whole
 * (viewer assets). Segments are not read this way: serve_stream.c
 * decompresses them as they are sent. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "serve_int.h"

int serve_buf_reserve(struct serve_buf *b, size_t extra)
{
        if (b->len + extra <= b->cap)
                return 0;
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap < b->len + extra)
                cap *= 2;
        uint8_t *p = realloc(b->data, cap);
        if (!p)
                return -ENOMEM;
        b->data = p;
        b->cap = cap;
        return 0;
}

void serve_buf_free(struct serve_buf *b)
{
        free(b->data);
        *b = (struct serve_buf){ 0 };
}

int serve_read_all(int fd, struct serve_buf *in, size_t limit)
{
        struct stat st;

        if (fstat(fd, &st) == 0 && st.st_size > 0 && (size_t)st.st_size <= limit &&
            serve_buf_reserve(in, (size_t)st.st_size + 1) < 0)
                return -ENOMEM;
        for (;;) {
                if (in->len >= limit)
                        return -EFBIG;
                if (serve_buf_reserve(in, 1 << 16) < 0)
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
