/* rewrite.c: copy a trace with some pooled strings replaced (d9ctl
 * symbolize names what the sealer could not). String pool frames are
 * rebuilt entry by entry; every other frame is passed through untouched, so
 * an id that events refer to keeps meaning the same entry. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bytes.h"
#include "d9proto.h"

struct rewrite {
        const uint8_t *buf;
        d9_string_replace_fn replace;
        void *rctx;
        d9_enc_flush_fn out;
        void *octx;
        struct d9_buf tmp; /* the frame being rebuilt (len unused: offsets are the frame's) */
};

/* Room for an n-byte frame. */
static int reserve(struct rewrite *rw, size_t n)
{
        return d9_buf_reserve(&rw->tmp, n);
}

/* The decoder has checked the frame is whole, so lengths are in bounds. */
static int rewrite_pool(struct rewrite *rw, const uint8_t *f, size_t len)
{
        const uint8_t *p = f + 5, *end = f + len;
        uint32_t count = get_u32(f + 1);
        size_t used = 5;
        bool changed = false;
        int r;

        if ((r = reserve(rw, len)) < 0)
                return r;
        memcpy(rw->tmp.data, f, 5);
        for (uint32_t i = 0; i < count && p + 8 <= end; i++) {
                uint32_t id = get_u32(p), n = get_u32(p + 4);
                const char *text = rw->replace((const char *)p + 8, n, rw->rctx);
                uint32_t tn = text ? (uint32_t)strlen(text) : n;

                if ((r = reserve(rw, used + 8 + tn + (size_t)(end - p))) < 0)
                        return r;
                put_u32(rw->tmp.data + used, id);
                put_u32(rw->tmp.data + used + 4, tn);
                memcpy(rw->tmp.data + used + 8, text ? (const uint8_t *)text : p + 8, tn);
                used += 8 + tn;
                changed |= text != NULL;
                p += 8 + n;
        }
        return changed ? rw->out(rw->octx, rw->tmp.data, used) : rw->out(rw->octx, f, len);
}

static int on_frame(uint8_t tag, size_t offset, size_t len, void *ctx)
{
        struct rewrite *rw = ctx;
        const uint8_t *f = rw->buf + offset;

        if (tag == D9_TAG_STRING_POOL)
                return rewrite_pool(rw, f, len);
        return rw->out(rw->octx, f, len);
}

int d9_rewrite_strings(const uint8_t *buf, size_t len, d9_string_replace_fn replace, void *rctx,
                       d9_enc_flush_fn out, void *octx, struct d9_dec_result *res)
{
        struct rewrite rw = { .buf = buf, .replace = replace, .rctx = rctx, .out = out, .octx = octx };
        struct d9_dec_opts opts = { .strict = false, .on_frame = on_frame, .ctx = &rw };
        int r = d9_decode(buf, len, &opts, res);

        d9_buf_free(&rw.tmp);
        return r;
}
