/* Compressing whole segments: gzip as a single member (dial9's viewer reads
 * only that) or zstd. Shared by d9d's sealer, the tests and bench/encode. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>
#include <zstd.h>

#include "d9proto.h"

#define DEFAULT_GZIP_LEVEL 6
#define DEFAULT_ZSTD_LEVEL 9
#define CHUNK (1 << 17)

/* One compressor behind a small interface so file and buffer paths share it. */
struct compressor {
        enum d9_compress kind;
        z_stream zs;
        ZSTD_CCtx *zc;
        bool ready;
        uint8_t *out; /* CHUNK bytes; per compressor so sealer threads can run in parallel */
};

static int comp_init(struct compressor *c, enum d9_compress kind, int level)
{
        c->kind = kind;
        if (kind != D9_COMPRESS_GZIP && kind != D9_COMPRESS_ZSTD)
                return -EINVAL;
        c->out = malloc(CHUNK);
        if (!c->out)
                return -ENOMEM;
        if (kind == D9_COMPRESS_GZIP) {
                if (deflateInit2(&c->zs, level ? level : DEFAULT_GZIP_LEVEL, Z_DEFLATED, 15 + 16, 9,
                                 Z_DEFAULT_STRATEGY) != Z_OK)
                        return -ENOMEM;
                c->ready = true;
                return 0;
        }
        c->zc = ZSTD_createCCtx();
        if (!c->zc)
                return -ENOMEM;
        c->ready = true;
        ZSTD_CCtx_setParameter(c->zc, ZSTD_c_compressionLevel, level ? level : DEFAULT_ZSTD_LEVEL);
        ZSTD_CCtx_setParameter(c->zc, ZSTD_c_checksumFlag, 1);
        if (!level) {
                /* Level 9's own tables (4 MiB window, 8 + 4 MiB match
                 * tables) cost d9d's sealer ~17 MiB while it seals; trace
                 * segments repeat within far less than 1 MiB, and these
                 * give the same size or 0.1-0.8 % smaller on recorded
                 * segments (docs/performance.md) in ~3 MiB. */
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_windowLog, 20);
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_hashLog, 18);
                ZSTD_CCtx_setParameter(c->zc, ZSTD_c_chainLog, 18);
        }
        return 0;
}

static void comp_end(struct compressor *c)
{
        if (c->ready && c->kind == D9_COMPRESS_GZIP)
                deflateEnd(&c->zs);
        else if (c->ready)
                ZSTD_freeCCtx(c->zc);
        free(c->out);
        c->ready = false;
        c->out = NULL;
}

/* Feeds in[0..len) (last = no more input); calls sink for produced bytes. */
static int comp_feed(struct compressor *c, const uint8_t *in, size_t len, bool last,
                     int (*sink)(void *ctx, const uint8_t *p, size_t n), void *ctx)
{
        uint8_t *out = c->out;
        int r;

        if (c->kind == D9_COMPRESS_GZIP) {
                c->zs.next_in = (uint8_t *)in;
                c->zs.avail_in = (uInt)len;
                int zr;

                do {
                        c->zs.next_out = out;
                        c->zs.avail_out = CHUNK;
                        zr = deflate(&c->zs, last ? Z_FINISH : Z_NO_FLUSH);
                        if (zr == Z_STREAM_ERROR)
                                return -EIO;
                        if ((r = sink(ctx, out, CHUNK - c->zs.avail_out)) < 0)
                                return r;
                } while (c->zs.avail_out == 0 || (last && zr != Z_STREAM_END));
                return 0;
        }
        ZSTD_inBuffer ib = { in, len, 0 };
        size_t left;

        do {
                ZSTD_outBuffer ob = { out, CHUNK, 0 };

                left = ZSTD_compressStream2(c->zc, &ob, &ib, last ? ZSTD_e_end : ZSTD_e_continue);
                if (ZSTD_isError(left))
                        return -EIO;
                if ((r = sink(ctx, out, ob.pos)) < 0)
                        return r;
        } while (last ? left != 0 : ib.pos < ib.size);
        return 0;
}

struct membuf {
        uint8_t *p;
        size_t len, cap;
};

static int membuf_sink(void *ctx, const uint8_t *p, size_t n)
{
        struct membuf *m = ctx;

        if (m->len + n > m->cap) {
                size_t cap = m->cap ? m->cap : 4096;

                while (cap < m->len + n)
                        cap *= 2;
                uint8_t *q = realloc(m->p, cap);

                if (!q)
                        return -ENOMEM;
                m->p = q;
                m->cap = cap;
        }
        memcpy(m->p + m->len, p, n);
        m->len += n;
        return 0;
}

int d9_compress_buf(const uint8_t *in, size_t len, enum d9_compress kind, int level,
                    uint8_t **out, size_t *out_len)
{
        struct compressor c = { 0 };
        struct membuf m = { 0 };
        int r = comp_init(&c, kind, level);

        if (r < 0)
                return r;
        /* zlib takes at most 4 GiB per call: feed in slices. */
        do {
                size_t n = len > (1u << 30) ? (1u << 30) : len;

                r = comp_feed(&c, in, n, n == len, membuf_sink, &m);
                in += n;
                len -= n;
        } while (r == 0 && len > 0);
        comp_end(&c);
        if (r < 0) {
                free(m.p);
                return r;
        }
        *out = m.p;
        *out_len = m.len;
        return 0;
}

static int fd_sink(void *ctx, const uint8_t *p, size_t n)
{
        return d9_write_all(*(int *)ctx, p, n);
}

int d9_compress_file(const char *in_path, const char *out_path, enum d9_compress kind, int level)
{
        struct compressor c = { 0 };
        int in_fd, out_fd, r;
        uint8_t *in = malloc(CHUNK);

        if (!in)
                return -ENOMEM;
        in_fd = open(in_path, O_RDONLY | O_CLOEXEC);
        if (in_fd < 0) {
                r = -errno;
                free(in);
                return r;
        }
        /* Never through a symlink or into an existing file someone planted. */
        out_fd = open(out_path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (out_fd < 0) {
                r = -errno;
                close(in_fd);
                free(in);
                return r;
        }
        r = comp_init(&c, kind, level);
        while (r == 0) {
                ssize_t n = d9_read_full(in_fd, in, CHUNK, -1);

                if (n < 0) {
                        r = (int)n;
                        break;
                }
                r = comp_feed(&c, in, (size_t)n, n == 0, fd_sink, &out_fd);
                if (n == 0)
                        break;
        }
        comp_end(&c);
        free(in);
        if (r == 0 && fsync(out_fd) < 0)
                r = -errno;
        if (close(out_fd) < 0 && r == 0)
                r = -errno;
        close(in_fd);
        return r;
}
