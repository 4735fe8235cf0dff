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
        uint64_t fed;         /* input bytes so far */
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

enum feed_mode { FEED_CONTINUE, FEED_FLUSH, FEED_END };

/* Feeds in[0..len); FEED_FLUSH makes everything fed so far decodable from
 * the output so far, FEED_END ends the stream. Calls sink for produced
 * bytes. */
static int comp_feed_mode(struct compressor *c, const uint8_t *in, size_t len, enum feed_mode mode,
                          int (*sink)(void *ctx, const uint8_t *p, size_t n), void *ctx)
{
        uint8_t *out = c->out;
        int r;

        if (c->kind == D9_COMPRESS_GZIP) {
                int flush = mode == FEED_END ? Z_FINISH : mode == FEED_FLUSH ? Z_SYNC_FLUSH : Z_NO_FLUSH;
                c->zs.next_in = (uint8_t *)in;
                c->zs.avail_in = (uInt)len;
                int zr;

                do {
                        c->zs.next_out = out;
                        c->zs.avail_out = CHUNK;
                        zr = deflate(&c->zs, flush);
                        if (zr == Z_STREAM_ERROR)
                                return -EIO;
                        if ((r = sink(ctx, out, CHUNK - c->zs.avail_out)) < 0)
                                return r;
                } while (c->zs.avail_out == 0 || (mode == FEED_END && zr != Z_STREAM_END));
                return 0;
        }
        ZSTD_inBuffer ib = { in, len, 0 };
        ZSTD_EndDirective end = mode == FEED_END ? ZSTD_e_end : mode == FEED_FLUSH ? ZSTD_e_flush : ZSTD_e_continue;
        size_t left;

        do {
                ZSTD_outBuffer ob = { out, CHUNK, 0 };

                left = ZSTD_compressStream2(c->zc, &ob, &ib, end);
                if (ZSTD_isError(left))
                        return -EIO;
                if ((r = sink(ctx, out, ob.pos)) < 0)
                        return r;
        } while (mode != FEED_CONTINUE ? left != 0 : ib.pos < ib.size);
        return 0;
}

/* Feeds in[0..len) (last = no more input). The first D9_SPAN_HEAD_BYTES
 * of the input are flushed on their own (a sync flush in one gzip member,
 * a block of their own in zstd), so a reader can decompress a segment's
 * first streams, and the span in them (segment_span.c), from the first
 * few KiB of the file. */
static int comp_feed(struct compressor *c, const uint8_t *in, size_t len, bool last,
                     int (*sink)(void *ctx, const uint8_t *p, size_t n), void *ctx)
{
        if (c->fed < D9_SPAN_HEAD_BYTES && len) {
                size_t n = D9_SPAN_HEAD_BYTES - c->fed < len ? D9_SPAN_HEAD_BYTES - c->fed : len;
                bool head_done = c->fed + n == D9_SPAN_HEAD_BYTES || (last && n == len);
                int r = comp_feed_mode(c, in, n, last && n == len ? FEED_END : head_done ? FEED_FLUSH : FEED_CONTINUE,
                                       sink, ctx);

                c->fed += n;
                if (r < 0 || (last && n == len))
                        return r;
                in += n;
                len -= n;
        }
        c->fed += len;
        return comp_feed_mode(c, in, len, last ? FEED_END : FEED_CONTINUE, sink, ctx);
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
