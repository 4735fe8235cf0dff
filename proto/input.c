/* Reading trace files: raw, gzip (any number of members) or zstd (any
 * number of frames), told apart by their first bytes (trace-format.md 7.1). */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "d9proto.h"

enum d9_compress d9_compress_detect(const uint8_t *buf, size_t len)
{
        if (len >= 2 && buf[0] == 0x1f && buf[1] == 0x8b)
                return D9_COMPRESS_GZIP;
        if (len >= 4 && buf[0] == 0x28 && buf[1] == 0xb5 && buf[2] == 0x2f && buf[3] == 0xfd)
                return D9_COMPRESS_ZSTD;
        return D9_COMPRESS_NONE;
}

struct growbuf {
        uint8_t *p;
        size_t len, cap, max;
};

static int grow(struct growbuf *g)
{
        size_t cap = g->cap ? 2 * g->cap : 1 << 16;
        uint8_t *p;

        if (g->cap >= g->max)
                return -EFBIG;
        if (cap > g->max)
                cap = g->max;
        p = realloc(g->p, cap);
        if (!p)
                return -ENOMEM;
        g->p = p;
        g->cap = cap;
        return 0;
}

/* Multi-member gzip: after each member's end, restart on the remaining input
 * (dial9's viewer cannot read these, but gzip(1) and our tools can). */
static int gunzip_all(const uint8_t *in, size_t len, struct growbuf *g)
{
        z_stream zs = { 0 };
        int zr, r = 0;

        if (inflateInit2(&zs, 15 + 16) != Z_OK)
                return -ENOMEM;
        zs.next_in = (uint8_t *)in;
        zs.avail_in = 0;
        size_t in_left = len;

        for (;;) {
                if (g->len == g->cap && (r = grow(g)) < 0)
                        break;
                if (zs.avail_in == 0) {
                        zs.avail_in = in_left > UINT32_MAX ? UINT32_MAX : (uInt)in_left;
                        in_left -= zs.avail_in;
                }
                zs.next_out = g->p + g->len;
                zs.avail_out = (uInt)(g->cap - g->len > UINT32_MAX ? UINT32_MAX : g->cap - g->len);
                uInt before = zs.avail_out;

                zr = inflate(&zs, Z_NO_FLUSH);
                g->len += before - zs.avail_out;
                if (zr == Z_STREAM_END) {
                        if (zs.avail_in == 0 && in_left == 0)
                                break;
                        inflateReset(&zs);
                        continue;
                }
                if (zr == Z_BUF_ERROR && zs.avail_in == 0 && in_left == 0) {
                        r = -EPIPE; /* truncated gzip */
                        break;
                }
                if (zr != Z_OK && zr != Z_BUF_ERROR) {
                        r = -EBADMSG;
                        break;
                }
        }
        inflateEnd(&zs);
        return r;
}

static int unzstd_all(const uint8_t *in, size_t len, struct growbuf *g)
{
        ZSTD_DCtx *dc = ZSTD_createDCtx();
        ZSTD_inBuffer ib = { in, len, 0 };
        size_t zr = 1;
        int r = 0;

        if (!dc)
                return -ENOMEM;
        while (ib.pos < ib.size || zr != 0) {
                if (g->len == g->cap && (r = grow(g)) < 0)
                        break;
                ZSTD_outBuffer ob = { g->p, g->cap, g->len };
                size_t in_before = ib.pos;

                zr = ZSTD_decompressStream(dc, &ob, &ib);
                if (ZSTD_isError(zr)) {
                        r = -EBADMSG;
                        break;
                }
                bool progress = ob.pos != g->len || ib.pos != in_before;

                g->len = ob.pos;
                if (!progress && ib.pos == ib.size && zr != 0) {
                        r = -EPIPE; /* truncated zstd frame */
                        break;
                }
        }
        ZSTD_freeDCtx(dc);
        return r;
}

int d9_decompress(const uint8_t *in, size_t len, size_t max_out, uint8_t **out, size_t *out_len)
{
        struct growbuf g = { .max = max_out };
        int r;

        switch (d9_compress_detect(in, len)) {
        case D9_COMPRESS_GZIP:
                r = gunzip_all(in, len, &g);
                break;
        case D9_COMPRESS_ZSTD:
                r = unzstd_all(in, len, &g);
                break;
        default:
                if (len > max_out)
                        return -EFBIG;
                g.p = malloc(len ? len : 1);
                if (!g.p)
                        return -ENOMEM;
                memcpy(g.p, in, len);
                g.len = len;
                r = 0;
        }
        if (r < 0) {
                free(g.p);
                return r;
        }
        *out = g.p;
        *out_len = g.len;
        return 0;
}

size_t d9_decompress_cap(size_t in_len)
{
        if (in_len > SIZE_MAX / D9_DECOMPRESS_RATIO)
                return SIZE_MAX;
        return in_len * D9_DECOMPRESS_RATIO > D9_DECOMPRESS_MIN_CAP ? in_len * D9_DECOMPRESS_RATIO
                                                                    : D9_DECOMPRESS_MIN_CAP;
}

static int read_all(const char *path, uint8_t **out, size_t *len)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        uint8_t *buf;
        size_t got = 0;
        ssize_t n;
        int r = 0;

        if (fd < 0)
                return -errno;
        if (fstat(fd, &st) < 0) {
                r = -errno;
                close(fd);
                return r;
        }
        buf = malloc(st.st_size ? (size_t)st.st_size : 1);
        if (!buf) {
                close(fd);
                return -ENOMEM;
        }
        n = d9_read_full(fd, buf, (size_t)st.st_size, -1);
        close(fd);
        if (n < 0)
                r = (int)n;
        else
                got = (size_t)n;
        if (r < 0) {
                free(buf);
                return r;
        }
        *out = buf;
        *len = got;
        return 0;
}

int d9_read_trace_file(const char *path, uint8_t **out, size_t *out_len, enum d9_compress *kind)
{
        uint8_t *file = NULL;
        size_t len = 0;
        int r = read_all(path, &file, &len);

        if (r < 0)
                return r;
        if (kind)
                *kind = d9_compress_detect(file, len);
        if (d9_compress_detect(file, len) == D9_COMPRESS_NONE) {
                *out = file;
                *out_len = len;
                return 0;
        }
        r = d9_decompress(file, len, d9_decompress_cap(len), out, out_len);
        free(file);
        return r;
}
