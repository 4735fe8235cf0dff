/* Streaming decompression of one segment for d9ctl serve: raw, gzip (every
 * member) or zstd (every frame), read in SERVE_STREAM_CHUNK pieces from a
 * file descriptor or from an object already in memory (bucket mode). Memory
 * stays at two chunks and the decoder state whatever the segment expands
 * to; the output is cut at a cap (d9_decompress_cap of the compressed size,
 * so a "bomb" stops after tens of MiB). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/d9proto.h"
#include "serve_int.h"

static ssize_t input_fill(struct serve_stream *s)
{
        if (s->in_pos < s->in_len || s->in_eof)
                return (ssize_t)(s->in_len - s->in_pos);
        if (s->fd < 0) {
                s->in_eof = true;
                return 0;
        }
        for (;;) {
                ssize_t n = read(s->fd, s->in, SERVE_STREAM_CHUNK);

                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                s->in_pos = 0;
                s->in_len = (size_t)n;
                s->in_total += (size_t)n;
                s->in_eof = n == 0;
                return n;
        }
}

/* The next input bytes: the memory object, or the chunk read from fd. */
static const uint8_t *input_at(const struct serve_stream *s)
{
        return s->fd < 0 ? s->mem + s->in_pos : s->in + s->in_pos;
}

int serve_stream_open(struct serve_stream *s, int fd, const uint8_t *mem, size_t mem_len,
                      uint64_t compressed_size)
{
        memset(s, 0, sizeof(*s));
        s->fd = fd;
        if (fd < 0) {
                s->mem = mem;
                s->in_len = mem_len;
                s->in_total = mem_len;
        } else if (!(s->in = malloc(SERVE_STREAM_CHUNK))) {
                return -ENOMEM;
        }
        ssize_t r = input_fill(s);
        if (r < 0)
                return (int)r;
        s->kind = d9_compress_detect(input_at(s), s->in_len - s->in_pos);
        s->cap = s->kind == D9_COMPRESS_NONE ? UINT64_MAX : d9_decompress_cap(compressed_size);
        if (s->kind == D9_COMPRESS_GZIP) {
                if (inflateInit2(&s->zs, 15 + 16) != Z_OK)
                        return -ENOMEM;
                s->zs_live = true;
        } else if (s->kind == D9_COMPRESS_ZSTD && !(s->zd = ZSTD_createDCtx())) {
                return -ENOMEM;
        }
        return 0;
}

void serve_stream_close(struct serve_stream *s)
{
        if (s->zs_live)
                inflateEnd(&s->zs);
        ZSTD_freeDCtx(s->zd);
        if (s->fd >= 0)
                close(s->fd);
        free(s->in);
        memset(s, 0, sizeof(*s));
        s->fd = -1;
}

static ssize_t read_raw(struct serve_stream *s, uint8_t *out, size_t n)
{
        ssize_t avail = input_fill(s);

        if (avail <= 0)
                return avail;
        size_t k = (size_t)avail < n ? (size_t)avail : n;
        memcpy(out, input_at(s), k);
        s->in_pos += k;
        return (ssize_t)k;
}

static ssize_t read_gzip(struct serve_stream *s, uint8_t *out, size_t n)
{
        for (;;) {
                ssize_t avail = input_fill(s);

                if (avail < 0)
                        return avail;
                if (avail == 0 && !s->member_open)
                        return 0;
                s->zs.next_in = (Bytef *)input_at(s);
                s->zs.avail_in = (uInt)avail;
                s->zs.next_out = out;
                s->zs.avail_out = (uInt)n;
                s->member_open = true;
                int zr = inflate(&s->zs, Z_NO_FLUSH);
                size_t got = n - s->zs.avail_out;

                s->in_pos += (size_t)avail - s->zs.avail_in;
                if (zr == Z_STREAM_END) {
                        inflateReset(&s->zs); /* the next member, if any */
                        s->member_open = false;
                } else if (zr != Z_OK && zr != Z_BUF_ERROR) {
                        return -EBADMSG;
                }
                if (got)
                        return (ssize_t)got;
                if (avail == 0)
                        return -EBADMSG; /* no input left inside a member: truncated */
        }
}

static ssize_t read_zstd(struct serve_stream *s, uint8_t *out, size_t n)
{
        for (;;) {
                ssize_t avail = input_fill(s);

                if (avail < 0)
                        return avail;
                if (avail == 0 && !s->frame_open)
                        return 0;
                ZSTD_inBuffer ib = { input_at(s), (size_t)avail, 0 };
                ZSTD_outBuffer ob = { out, n, 0 };
                size_t zr = ZSTD_decompressStream(s->zd, &ob, &ib);

                if (ZSTD_isError(zr))
                        return -EBADMSG;
                s->in_pos += ib.pos;
                s->frame_open = zr != 0;
                if (ob.pos)
                        return (ssize_t)ob.pos;
                if (avail == 0)
                        return -EBADMSG; /* no input left inside a frame: truncated */
        }
}

ssize_t serve_stream_read(struct serve_stream *s, uint8_t *out, size_t n)
{
        ssize_t r;

        if (s->produced >= s->cap)
                n = 1; /* one byte more than the cap tells a bomb from a segment that fits */
        switch (s->kind) {
        case D9_COMPRESS_GZIP: r = read_gzip(s, out, n); break;
        case D9_COMPRESS_ZSTD: r = read_zstd(s, out, n); break;
        default: r = read_raw(s, out, n); break;
        }
        if (r > 0 && (s->produced += (uint64_t)r) > s->cap)
                return -EFBIG;
        return r;
}
