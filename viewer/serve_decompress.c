/* Segment decompression for d9ctl serve: sealed segments are zstd (d9d's
 * default) or gzip (dial9-compatible); the browser gets raw trace bytes.
 * Kept behind serve_decompress_append() so it can move onto proto/'s helpers
 * once those exist. Multi-member gzip and multi-frame zstd are accepted. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

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

static int gunzip_append(const struct serve_buf *in, struct serve_buf *out, size_t limit)
{
        z_stream zs = { 0 };
        int zr = Z_OK, r = 0;

        if (inflateInit2(&zs, 15 + 16) != Z_OK)
                return -ENOMEM;
        zs.next_in = in->data;
        zs.avail_in = (uInt)in->len; /* read_all caps input below 4 GiB via limit */
        while (zs.avail_in > 0) {
                if (out->len >= limit) {
                        r = -EFBIG;
                        break;
                }
                if (serve_buf_reserve(out, 1 << 18) < 0) {
                        r = -ENOMEM;
                        break;
                }
                zs.next_out = out->data + out->len;
                zs.avail_out = (uInt)(out->cap - out->len);
                zr = inflate(&zs, Z_NO_FLUSH);
                out->len = out->cap - zs.avail_out;
                if (zr == Z_STREAM_END) {
                        inflateReset(&zs); /* next gzip member, if any */
                        continue;
                }
                if (zr != Z_OK) {
                        r = -EBADMSG;
                        break;
                }
        }
        if (r == 0 && zr != Z_STREAM_END)
                r = -EBADMSG; /* truncated member */
        inflateEnd(&zs);
        return r;
}

static int unzstd_append(const struct serve_buf *in, struct serve_buf *out, size_t limit)
{
        ZSTD_DStream *ds = ZSTD_createDStream();
        ZSTD_inBuffer zin = { in->data, in->len, 0 };
        size_t zr = 1;
        int r = 0;

        if (!ds)
                return -ENOMEM;
        while (zin.pos < zin.size) {
                if (out->len >= limit) {
                        r = -EFBIG;
                        break;
                }
                if (serve_buf_reserve(out, 1 << 18) < 0) {
                        r = -ENOMEM;
                        break;
                }
                ZSTD_outBuffer zout = { out->data + out->len, out->cap - out->len, 0 };
                zr = ZSTD_decompressStream(ds, &zout, &zin);
                out->len += zout.pos;
                if (ZSTD_isError(zr)) {
                        r = -EBADMSG;
                        break;
                }
        }
        if (r == 0 && zr != 0)
                r = -EBADMSG; /* input ended inside a frame */
        ZSTD_freeDStream(ds);
        return r;
}

int serve_decompress_bytes(const uint8_t *data, size_t len, struct serve_buf *out, size_t limit)
{
        const struct serve_buf in = { (uint8_t *)data, len, len };

        if (len > limit)
                return -EFBIG;
        if (len >= 2 && data[0] == 0x1f && data[1] == 0x8b)
                return gunzip_append(&in, out, limit);
        if (len >= 4 && memcmp(data, "\x28\xb5\x2f\xfd", 4) == 0)
                return unzstd_append(&in, out, limit);
        if (out->len + len > limit)
                return -EFBIG;
        if (serve_buf_reserve(out, len) < 0)
                return -ENOMEM;
        memcpy(out->data + out->len, data, len);
        out->len += len;
        return 0;
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
