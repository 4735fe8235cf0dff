/* Segment decompression for d9ctl serve: sealed segments are zstd (d9d's
 * default) or gzip (dial9-compatible); the browser gets raw trace bytes,
 * several segments appended into one body. Decoding is proto's
 * d9_decompress(); this file only reads and appends. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "proto/d9proto.h"
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

static int read_all(int fd, struct serve_buf *in, size_t limit)
{
        struct stat st;

        if (fstat(fd, &st) == 0 && st.st_size > 0 && serve_buf_reserve(in, (size_t)st.st_size + 1) < 0)
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

int serve_decompress_bytes(const uint8_t *data, size_t len, struct serve_buf *out, size_t limit)
{
        uint8_t *raw = NULL;
        size_t raw_len = 0;
        int r;

        if (out->len >= limit)
                return -EFBIG;
        r = d9_decompress(data, len, limit - out->len, &raw, &raw_len);
        if (r == -EPIPE)
                r = -EBADMSG; /* truncated member or frame: corrupt for the browser too */
        if (r < 0)
                return r;
        r = serve_buf_reserve(out, raw_len);
        if (r == 0) {
                memcpy(out->data + out->len, raw, raw_len);
                out->len += raw_len;
        }
        free(raw);
        return r;
}

int serve_decompress_append(int fd, struct serve_buf *out, size_t limit)
{
        struct serve_buf in = { 0 };
        int r = read_all(fd, &in, limit);

        if (r == 0)
                r = serve_decompress_bytes(in.data, in.len, out, limit);
        serve_buf_free(&in);
        return r;
}
